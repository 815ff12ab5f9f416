package steps

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TxRolledBackError comes with the result of a transactional tool's call
// that failed (an error, a panic, its timeout): its transaction must be
// rolled back, with the tool's writes and events (a timeout's cancelled
// statement may even have closed its connection), and Result, the error
// the model sees, is final: the journal records it alone.
type TxRolledBackError struct{ Result ToolResult }

func (e *TxRolledBackError) Error() string {
	return fmt.Sprintf("the call of transactional tool %q failed and its transaction is rolled back: %s", e.Result.ToolName, e.Result.Error)
}

// TxConnLostError is the failure of a transactional tool's call whose
// transaction lost its connection (a database restart, a failover, a
// proxy dropping it): nothing of it committed, and Err, what the tool
// returned, is the outage's doing. The journal waits the outage out and
// runs the call again on a fresh transaction (after looking for its
// record), as for a commit whose connection was lost.
type TxConnLostError struct {
	Tool string
	Err  error
}

func (e *TxConnLostError) Error() string {
	return fmt.Sprintf("the transaction of transactional tool %q lost its connection: %v", e.Tool, e.Err)
}

func (e *TxConnLostError) Unwrap() error { return e.Err }

// Transient reports true: the call runs again once the database answers
// (postgres.Transient).
func (e *TxConnLostError) Transient() bool { return true }

// RetriesTx reports whether err is a serialization failure (40001) or a
// deadlock (40P01): the transaction of a transactional tool's call that
// fails so is rolled back and run again.
func RetriesTx(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// toolTx is the transaction a transactional tool's function gets: its
// call's, whose end is the engine's (Commit and Rollback refuse; the
// function's nested transactions are its own).
type toolTx struct{ pgx.Tx }

var errToolTxEnd = errors.New("helix: a transactional tool does not commit or roll back its transaction: " +
	"return nil to commit its writes with the call's record, or an error to roll them back")

func (toolTx) Commit(context.Context) error   { return errToolTxEnd }
func (toolTx) Rollback(context.Context) error { return errToolTxEnd }
