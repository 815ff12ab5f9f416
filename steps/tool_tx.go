package steps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	helix "github.com/helix-agents/helix-dbos"
)

// executeTx runs a transactional tool's function in a savepoint of its
// call's transaction (tc.tx): a returned error (or a panic, a timeout)
// rolls back to the savepoint, so the tool's writes are gone and the
// journal records the error as the call's result in the same
// transaction. A serialization failure or a deadlock comes back as it is
// (RetriesTx): the whole transaction runs again.
func (e *Env) executeTx(ctx context.Context, tool *helix.Tool, args json.RawMessage, tc *toolContext) (json.RawMessage, error) {
	call := tc.tx
	sp, err := call.Begin(ctx) // SAVEPOINT
	if err != nil {
		return nil, fmt.Errorf("tool %q: open its savepoint: %w", tool.Name(), err)
	}
	tc.tx = sp
	defer func() { tc.tx = call }()
	out, err := tool.ExecuteTx(ctx, toolTx{sp}, args, tc)
	if err == nil {
		if err = sp.Commit(ctx); err == nil { // RELEASE SAVEPOINT
			return out, nil
		}
	}
	// Not with ctx alone: a timed-out tool's writes must still go.
	if rerr := sp.Rollback(context.WithoutCancel(ctx)); rerr != nil && !RetriesTx(err) {
		return nil, fmt.Errorf("tool %q failed (%w) and its writes could not be rolled back: %w", tool.Name(), err, rerr)
	}
	return nil, err
}

// TxLostError comes with the result of a transactional tool's call whose
// transaction cannot record it: the tool ran past its timeout, and
// cancelling its statement may have closed the connection (its writes went
// with the transaction). Result (the timeout, as a tool error) is final:
// the journal records it alone.
type TxLostError struct{ Result ToolResult }

func (e *TxLostError) Error() string {
	return fmt.Sprintf("the transaction of tool %q is lost: %s", e.Result.ToolName, e.Result.Error)
}

// RetriesTx reports whether err is a serialization failure (40001) or a
// deadlock (40P01): the transaction of a transactional tool's call that
// fails so is rolled back and run again.
func RetriesTx(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// toolTx is the transaction a transactional tool's function gets: its
// savepoint, whose end is the engine's (Commit and Rollback refuse; the
// function's nested transactions are its own).
type toolTx struct{ pgx.Tx }

var errToolTxEnd = errors.New("helix: a transactional tool does not commit or roll back its transaction: " +
	"return nil to commit its writes with the call's record, or an error to roll them back")

func (toolTx) Commit(context.Context) error   { return errToolTxEnd }
func (toolTx) Rollback(context.Context) error { return errToolTxEnd }
