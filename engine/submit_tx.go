package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// SubmitToolResultTx is SubmitToolResult on the caller's transaction: the
// answer (an approval decision, a client tool's result) commits or rolls
// back with the app's own writes in tx, for example the audit row of an
// approval. tx must be on the engine's database; it may come from the
// engine's pool or from any pool of the app's (sqlc's WithTx and this
// take the same pgx.Tx).
//
// Guarantees:
//
//   - The answer is delivered exactly once, when tx commits: the waiting
//     run wakes then (DBOS's notification trigger fires at commit). When
//     tx rolls back nothing was answered; the call still waits, and a later
//     submission is taken as if this one never happened.
//   - helix's statements run in a savepoint of tx; SubmitToolResultTx never
//     begins, commits or rolls back tx itself. A refusal (a
//     *helix.SubmissionError) rolls back only the savepoint: tx stays
//     usable, and the app decides whether to commit its own writes.
//   - A call that is already answered is refused with code
//     helix.SubmissionAlreadyAnswered (where SubmitToolResult reports
//     AlreadyCompleted), so that the app rolls back the writes that went
//     with its answer. Two transactions answering the same call are
//     serialized: the second waits for the first to end; if the first
//     commits, the second is refused so; if it rolls back, the second's
//     answer is taken.
//
// It locks the conversation (the root session's row) until tx ends: every
// other submission to the conversation waits for it, and so do the
// engine's writes to the root session. Commit promptly, and run
// SubmitToolResultTx last in tx (after the app's own locks, so that the
// order is always the app's rows, then helix's). Under REPEATABLE READ or
// SERIALIZABLE, a conversation that changed after tx's snapshot fails with
// a serialization failure (SQLSTATE 40001): roll back and retry the whole
// transaction.
//
// On any other error tx may be aborted: roll it back, and do not retry on
// it. The engine must be launched, as for SubmitToolResult.
func (e *Engine) SubmitToolResultTx(ctx context.Context, tx pgx.Tx, rootSessionID string, sub helix.ToolSubmission) (helix.SubmitResult, error) {
	if err := e.requireLaunched(); err != nil {
		return helix.SubmitResult{}, err
	}
	return e.control().submitTx(ctx, tx, rootSessionID, sub)
}

// SessionTx returns a session's stored state as tx sees it (see Session):
// under REPEATABLE READ, in the same snapshot as the app's other reads of
// tx. tx must be on the engine's database.
func (e *Engine) SessionTx(ctx context.Context, tx pgx.Tx, sessionID string) (*store.SessionState, error) {
	return readTx(ctx, "SessionTx", e.store, tx, func(ctx context.Context, s *postgres.Store) (*store.SessionState, error) {
		return s.LoadState(ctx, sessionID)
	})
}

// PendingToolCallsTx returns the tool calls waiting in a session and its
// sub-agents as tx sees them (see PendingToolCalls): under REPEATABLE READ,
// in the same snapshot as the app's other reads of tx, so that the app
// decides what to show or answer from one consistent view. tx must be on
// the engine's database.
func (e *Engine) PendingToolCallsTx(ctx context.Context, tx pgx.Tx, sessionID string) ([]store.PendingClientToolCall, error) {
	return readTx(ctx, "PendingToolCallsTx", e.store, tx, func(ctx context.Context, s *postgres.Store) ([]store.PendingClientToolCall, error) {
		return s.ListPendingCalls(ctx, sessionID)
	})
}

// SubmitToolResultTx answers a tool call a run is suspended on, in the
// caller's transaction; see Engine.SubmitToolResultTx for the guarantees,
// the lock it holds until tx ends, and what to do with tx after an error.
// tx must be on the database of the client's engines.
func (c *Client) SubmitToolResultTx(ctx context.Context, tx pgx.Tx, rootSessionID string, sub helix.ToolSubmission) (helix.SubmitResult, error) {
	return c.c.submitTx(ctx, tx, rootSessionID, sub)
}

// SessionTx returns a session's stored state as tx sees it; see
// Engine.SessionTx.
func (c *Client) SessionTx(ctx context.Context, tx pgx.Tx, sessionID string) (*store.SessionState, error) {
	return readTx(ctx, "SessionTx", c.c.store, tx, func(ctx context.Context, s *postgres.Store) (*store.SessionState, error) {
		return s.LoadState(ctx, sessionID)
	})
}

// PendingToolCallsTx returns the tool calls waiting in a session and its
// sub-agents as tx sees them; see Engine.PendingToolCallsTx.
func (c *Client) PendingToolCallsTx(ctx context.Context, tx pgx.Tx, sessionID string) ([]store.PendingClientToolCall, error) {
	return readTx(ctx, "PendingToolCallsTx", c.c.store, tx, func(ctx context.Context, s *postgres.Store) ([]store.PendingClientToolCall, error) {
		return s.ListPendingCalls(ctx, sessionID)
	})
}

// readTx runs read (call, for errors) with s on the caller's transaction.
func readTx[R any](ctx context.Context, call string, s *postgres.Store, tx pgx.Tx, read func(context.Context, *postgres.Store) (R, error)) (R, error) {
	if tx == nil {
		var zero R
		return zero, fmt.Errorf("engine: %s needs a transaction (begin one on the engine's database), got nil", call)
	}
	out, err := read(ctx, s.WithQuerier(postgres.PgxQuerier(tx)))
	return out, onForeignTx(err)
}

// onForeignTx adds foreignTxHint to err, an error of a call on the caller's
// transaction, when it has one.
func onForeignTx(err error) error {
	if hint := foreignTxHint(err); hint != "" {
		return fmt.Errorf("%w%s", err, hint)
	}
	return err
}

// submitTx is submit in a savepoint of the caller's transaction, so that a
// refusal leaves that transaction usable. Four round trips for a call of
// the root session: the savepoint; the lock and read of the conversation;
// the writes with the message to the waiting run, pipelined as in submit;
// the savepoint's release.
func (c control) submitTx(ctx context.Context, tx pgx.Tx, rootSessionID string, sub helix.ToolSubmission) (helix.SubmitResult, error) {
	if tx == nil {
		return helix.SubmitResult{}, errors.New("engine: SubmitToolResultTx needs a transaction (begin one on the engine's database), got nil")
	}
	var res helix.SubmitResult
	var wf string
	err := inSavepoint(ctx, tx, func(pq *postgres.Pipelined) (err error) {
		if res, wf, err = c.recordAnswer(ctx, pq, rootSessionID, sub, nil); err != nil || !res.AlreadyCompleted {
			return err
		}
		return &helix.SubmissionError{Code: helix.SubmissionAlreadyAnswered, SessionID: rootSessionID, ToolCallID: sub.ToolCallID,
			Reason: "the call was already answered (by an earlier submission, or a concurrent one that committed first), and that answer stands: " +
				"roll back what this transaction wrote with its answer"}
	})
	return c.submitted(rootSessionID, sub, res, wf, err, true)
}

// inSavepoint runs fn in a savepoint of tx (pgx's nested transaction),
// releases it when fn and the statements fn held succeed, and rolls back to
// it otherwise: tx itself is never committed or rolled back here.
func inSavepoint(ctx context.Context, tx pgx.Tx, fn func(*postgres.Pipelined) error) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	pq := postgres.NewPipelined(sp)
	err = fn(pq)
	if err == nil {
		err = pq.Flush(ctx)
	}
	if err == nil {
		return sp.Commit(ctx)
	}
	if rerr := sp.Rollback(context.WithoutCancel(ctx)); rerr != nil && !errors.Is(rerr, pgx.ErrTxClosed) {
		return errors.Join(err, fmt.Errorf("roll back to the savepoint (the transaction is aborted): %w", rerr))
	}
	return err
}

// foreignTxHint names the likely cause of an error that says helix's
// tables or functions are missing: a transaction on another database.
func foreignTxHint(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "3F000" || pe.Code == "42883") {
		return " (is the transaction on the engine's database? helix's tables are not there)"
	}
	return ""
}
