package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"
)

// Transient reports errors of the connection or of the server's state,
// which a new attempt may not meet: a lost or refused connection, a
// timeout, a server shutting down or restarting (SQLSTATE class 08, 57P),
// a serialization failure or deadlock (40001, 40P01), too many
// connections (53300), or an error that says so itself (a method
// Transient() bool that returns true). Never the outcome of a statement (a
// constraint, a syntax or data error): retrying those answers the same.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	var says interface{ Transient() bool }
	if errors.As(err, &says) && says.Transient() {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		c := pe.Code
		return len(c) == 5 && (c[:2] == "08" || c[:3] == "57P" || c == "40001" || c == "40P01" || c == "53300")
	}
	var ne net.Error
	var ce *pgconn.ConnectError
	return pgconn.SafeToRetry(err) || errors.As(err, &ne) || errors.As(err, &ce) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || pgconn.Timeout(err)
}

// WaitOut runs fn until it succeeds or fails with an error that is not
// Transient, backing off from 100 ms to 2 s between attempts, for as long
// as ctx lives: what a workflow does when the database is restarting,
// failing over or unreachable, as DBOS's own writes do. onRetry (nil for
// none) hears of each transient failure before the wait; when ctx ends
// first, the error names its cause and the last failure.
//
// fn must be safe to run again after a failure whose outcome is unknown (a
// read, or a write that finds its own earlier effect).
func WaitOut(ctx context.Context, fn func() error, onRetry func(attempt int, err error)) error {
	wait := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || !Transient(err) {
			return err
		}
		if onRetry != nil {
			onRetry(attempt, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (the database was unreachable; last error: %w)", context.Cause(ctx), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// LogOutage is a WaitOut onRetry that logs each transient failure of what
// (a phrase after "could not"), done for workflow wfID, as a warning with
// the event workflow.outage_retry.
func LogOutage(log zerolog.Logger, wfID, what string) func(attempt int, err error) {
	return func(attempt int, err error) {
		log.Warn().Str("event", "workflow.outage_retry").Str("workflowId", wfID).Int("attempt", attempt).Err(err).
			Msgf("could not %s (the database is unreachable or restarting); retrying", what)
	}
}
