package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace/noop"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// PendingRun is a run that ExecuteTx recorded in the caller's transaction.
// Nothing of it runs, and nothing of it is visible to another connection,
// until that transaction commits; if it rolls back, the run, its session
// (when ExecuteTx created it) and its messages never existed. After the
// commit a launched engine that registers the agent starts it: at once
// (the commit announces it on postgres.RunRecordedChannel), or at its next
// sweep (Config.RecordedRunSweepInterval) when no engine heard the
// announcement.
type PendingRun struct {
	// SessionID is the session the run belongs to: opts.SessionID, or the
	// ID ExecuteTx generated.
	SessionID string
	// RunID is the run's ID.
	RunID string
	// WorkflowID is the run's deterministic DBOS workflow ID.
	WorkflowID string
}

// Handle returns the handle of the run on e, once the transaction that
// recorded it has committed (before, the run does not exist for e, and
// Handle returns an error matching helix.ErrNotFound). Waiting on the handle
// (Result, Await) then covers the time until an engine starts the run.
func (p *PendingRun) Handle(ctx context.Context, e *Engine) (*Handle, error) {
	return e.Run(ctx, p.SessionID, p.RunID)
}

// ExecuteTx is Execute in the caller's transaction: it writes the session
// (created, or a completed session's next turn), the run record and the
// input messages on tx, so that they commit or roll back with the caller's
// own rows (an app's ticket and the agent session that works on it), and
// starts nothing. The run starts after the commit, on a launched engine
// that registers agent (this one or any other, also when the calling
// process dies right after its commit); see PendingRun.
//
// ExecuteTx never begins, commits or rolls back tx and never retries on
// it. Its statements run in a savepoint of tx: a refusal
// (*helix.AgentAlreadyRunningError, *RefusedError) or another error rolls
// back only what ExecuteTx wrote, and tx stays usable. The validation,
// refusals and options are Execute's, read on tx (a row the caller wrote
// earlier in tx counts).
//
// Locks: continuing a session locks its row, and a new session ID holds
// its unique-index entry, until tx ends; keep tx short after ExecuteTx. Two
// transactions that create the same session ID serialize: the second
// waits until the first ends, then gets *helix.AgentAlreadyRunningError if
// the first committed (one session, one run) or creates the session if it
// rolled back. Under REPEATABLE READ or SERIALIZABLE the second gets a
// serialization failure (SQLSTATE 40001) instead: retry its transaction as
// a whole.
//
// tx must be on the engine's database. ExecuteTx needs a launched engine
// (like Execute) and registers agent.
func (e *Engine) ExecuteTx(ctx context.Context, tx pgx.Tx, agent *helix.Agent, in Input, opts *ExecuteOptions) (*PendingRun, error) {
	if err := e.requireLaunched(); err != nil {
		return nil, err
	}
	if err := e.Register(agent); err != nil {
		return nil, err
	}
	return executeTx(ctx, tx, e.store, e.recording(), agent, in, opts)
}

// executeTx records req in a savepoint of tx, with the announcement of the
// run that its commit sends.
func executeTx(ctx context.Context, tx pgx.Tx, st *postgres.Store, rec recording, agent *helix.Agent, in Input, opts *ExecuteOptions) (*PendingRun, error) {
	if tx == nil {
		return nil, errors.New("engine: ExecuteTx: tx is nil: pass the transaction the run is to be recorded in")
	}
	req, err := newExecRequest(agent, in, opts)
	if err != nil {
		return nil, err
	}
	sp, err := tx.Begin(ctx) // SAVEPOINT
	if err != nil {
		return nil, fmt.Errorf("engine: ExecuteTx: open a savepoint in the caller's transaction: %w (is the transaction still open and not aborted?)", err)
	}
	q := postgres.PgxQuerier(sp)
	p, _, err := req.record(ctx, st.WithQuerier(q), rec)
	if err == nil {
		err = postgres.NotifyRunRecorded(ctx, q, p.RunID)
	}
	if err != nil {
		// ROLLBACK TO SAVEPOINT: the caller's transaction goes on without
		// anything of this call. Not with ctx: a cancelled call must still
		// leave the transaction usable.
		err = onForeignTx(err)
		if rerr := sp.Rollback(context.WithoutCancel(ctx)); rerr != nil {
			return nil, errors.Join(err, fmt.Errorf("engine: ExecuteTx: roll back to the savepoint: %w (the transaction is no longer usable: roll it back)", rerr))
		}
		return nil, err
	}
	if err := sp.Commit(ctx); err != nil { // RELEASE SAVEPOINT
		return nil, fmt.Errorf("engine: ExecuteTx: release the savepoint: %w (roll the transaction back)", err)
	}
	return p, nil
}

// ExecuteTx is Engine.ExecuteTx for a process that runs no agents (a web
// handler): it records the run on tx with the client's store, and a
// launched engine that registers agent starts it after the commit. agent
// must be the definition the engines register (at least its name): the
// client validates it as Register does, with its sub-agents and
// companions, but does not run it. The run is admitted through
// ClientConfig.Queue unless opts.Direct, and directly when the client names
// no queue. The session's trace parent is the span in ctx (the client
// makes no span of its own).
func (c *Client) ExecuteTx(ctx context.Context, tx pgx.Tx, agent *helix.Agent, in Input, opts *ExecuteOptions) (*PendingRun, error) {
	if err := validateAgent(agent); err != nil {
		return nil, err
	}
	return executeTx(ctx, tx, c.c.store, recording{tracer: noop.NewTracerProvider().Tracer(""), queue: c.queue}, agent, in, opts)
}
