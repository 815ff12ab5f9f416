package engine

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
)

// lease is what this process knows of its own executor lease: until when
// no other engine may take its sessions over, and the epoch of its
// ownership. Every workflow execution takes the epoch when it starts
// (Acquire, through fence); every step body checks it before it acts
// (Check). Once the heartbeat finds that another engine took this executor
// over while this process was unresponsive (a zombie: SIGSTOP, a long
// pause, a network partition) and that engine re-enqueued its workflows,
// the executions of the old epoch are fenced: their steps fail with a
// fencing error instead of running again here, and DBOS parks them.
//
// While the lease is not known to be valid (the last heartbeat's deadline
// passed, or a rejoin is in progress) Acquire and Check wait: a step body
// runs only while no other engine can own its session.
type lease struct {
	length time.Duration

	mu      sync.Mutex
	epoch   uint64
	until   time.Time     // monotonic; zero while rejoining
	evicted error         // another process holds this executor ID
	changed chan struct{} // closed and replaced at every change
}

func newLease(length time.Duration) *lease {
	return &lease{length: length, epoch: 1, changed: make(chan struct{})}
}

// renewed records a heartbeat sent at sent: the lease holds until sent plus
// the lease length, less a tenth for clock drift between this process and
// Postgres (peers judge by the database's clock, from a later instant).
func (l *lease) renewed(sent time.Time) {
	l.update(func() {
		if u := sent.Add(l.length - l.length/10); u.After(l.until) {
			l.until = u
		}
	})
}

// deadline is when the lease runs out (zero while rejoining).
func (l *lease) deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// suspend makes Acquire and Check wait until rejoined: a rejoin is in
// progress.
func (l *lease) suspend() { l.update(func() { l.until = time.Time{} }) }

// rejoined starts a new epoch after a takeover: executions of older epochs
// are fenced from now on.
func (l *lease) rejoined(sent time.Time) {
	l.update(func() {
		l.epoch++
		l.until = sent.Add(l.length - l.length/10)
	})
}

// evict fences every execution for good: another process holds the ID.
// The error of every Acquire and Check from now on says why; it matches
// dbos.ErrConflictingWorkflowID, so DBOS records nothing for the step.
func (l *lease) evict(reason error) {
	l.update(func() { l.evicted = &TakenOverError{Reason: reason.Error()} })
}

func (l *lease) update(fn func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fn()
	close(l.changed)
	l.changed = make(chan struct{})
}

// Acquire returns the epoch a workflow execution starting now runs under,
// waiting while the lease is not known to be valid; waited reports that it
// had to.
func (l *lease) Acquire(ctx context.Context) (epoch uint64, waited bool, err error) {
	for {
		epoch, valid, changed, err := l.now()
		switch {
		case err != nil:
			return 0, waited, err
		case valid:
			return epoch, waited, nil
		}
		waited = true
		if err := l.wait(ctx, changed); err != nil {
			return 0, waited, err
		}
	}
}

// now reports the current epoch and whether the lease is known valid,
// without waiting, with the channel closed at its next change, or the
// eviction error.
func (l *lease) now() (epoch uint64, valid bool, changed <-chan struct{}, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.evicted != nil {
		return 0, false, nil, l.evicted
	}
	return l.epoch, time.Now().Before(l.until), l.changed, nil
}

// Check returns nil when an execution of epoch may act now, a fencing
// error (matching dbos.ErrConflictingWorkflowID) when its session was taken
// over, and waits while the lease is not known to be valid.
func (l *lease) Check(ctx context.Context, epoch uint64) error {
	for {
		l.mu.Lock()
		cur, valid, rejoining, evicted, changed := l.epoch, time.Now().Before(l.until), l.until.IsZero(), l.evicted, l.changed
		l.mu.Unlock()
		switch {
		case evicted != nil:
			return evicted
		case epoch != cur && !rejoining:
			return &TakenOverError{}
		case epoch == cur && valid:
			return nil
		}
		if err := l.wait(ctx, changed); err != nil {
			return err
		}
	}
}

// wait returns when the lease changes, at the latest when it would expire
// (polling a second at most, so a deadline passing is noticed), or with
// ctx's error.
func (l *lease) wait(ctx context.Context, changed <-chan struct{}) error {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("engine: waiting for this executor's lease: %w", context.Cause(ctx))
	case <-changed:
	case <-t.C:
	}
	return nil
}

// TakenOverError is the error of a step whose session another engine took
// over while this process was unresponsive (its executor lease expired):
// the step does not run here, and this process stops the session's loop.
// It matches dbos.ErrConflictingWorkflowID, DBOS's fencing error, with
// errors.Is.
type TakenOverError struct {
	// Reason replaces the default message (another process now holds the
	// executor ID).
	Reason string
}

func (e *TakenOverError) Error() string {
	if e.Reason != "" {
		return e.Reason
	}
	return "engine: this executor's lease expired and its sessions were taken over by another engine: the step is not run here"
}

// Unwrap makes the error match dbos.ErrConflictingWorkflowID, so DBOS
// records nothing for the execution and waits for the new owner's outcome.
func (e *TakenOverError) Unwrap() error { return dbos.ErrConflictingWorkflowID }
