package helix

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// TxToolFunc is the function of a transactional tool (NewTxTool): it
// receives, besides the decoded input, a transaction on the engine's
// database. Its writes commit together with the durable record of the
// call, once: see NewTxTool for the rules.
type TxToolFunc[In, Out any] func(ctx context.Context, tx pgx.Tx, in In, tc ToolContext) (Out, error)

// rawTxFunc is a transactional tool function over raw JSON.
type rawTxFunc func(ctx context.Context, tx pgx.Tx, args json.RawMessage, tc ToolContext) (json.RawMessage, error)

// ErrTxToolTimeout is matched (errors.Is) by the error of a transactional
// tool's call that ran past its TxTimeout: its writes were rolled back.
var ErrTxToolTimeout = errors.New("helix: the transactional tool ran longer than its timeout")

// DefaultTxToolTimeout is how long a transactional tool's function may
// run when the tool sets no TxTimeout.
const DefaultTxToolTimeout = 30 * time.Second

// NewTxTool defines a transactional tool: a server-executed tool whose
// function receives tx, a transaction on the engine's database (a real
// pgx.Tx: sqlc's Queries.WithTx(tx), CopyFrom, SendBatch and River's
// InsertTx take it). The tool's writes and the durable record that the
// tool ran (its result) commit in one transaction, so a crash at any
// instant leaves either neither (the tool runs again, on a fresh
// transaction; its writes were rolled back) or both (it never runs again;
// a replay returns the recorded result). A process taken over while the
// tool runs cannot commit it: the record's owner check fails and its
// writes roll back.
//
// The rules:
//   - Only database work inside: no network calls, no messages, nothing
//     that cannot be rolled back (a retried transaction runs the function
//     again). To act on the outside world exactly once, write an outbox row
//     (or a River job with InsertTx) in tx and act from there.
//   - Do not commit or roll back tx (Commit and Rollback return an error);
//     nested transactions (tx.Begin, savepoints) are yours. A failed
//     statement aborts tx: return its error, or roll back to a savepoint
//     of yours (a result returned from an aborted transaction becomes a
//     tool error).
//   - A returned error (or a panic) rolls the tool's writes back and
//     reaches the model as a tool error, recorded like any tool's.
//   - Serialization failures (40001) and deadlocks (40P01) run the
//     function again on a fresh transaction, up to TxToolAttempts times
//     with a short backoff; after that the model sees a tool error.
//   - Isolation: the database's default (READ COMMITTED) unless
//     TxIsolation says otherwise.
//   - Keep it short: the function runs under a deadline (TxTimeout,
//     default DefaultTxToolTimeout); past it its context is cancelled,
//     its statement is cancelled, its writes roll back and the model sees
//     a tool error.
//   - ToolContext.SetState and ToolContext.Emit join the transaction: the
//     state change is part of the recorded result, and an emitted event is
//     written in tx, visible (and streamed) when it commits, never for a
//     rolled-back attempt.
//   - Cost: when the tool's call is the only call of its step (no other
//     tool, sub-agent or approval in it), tx is the step's commit
//     transaction: the tool runs first, then the step's messages, state and
//     stream chunks are written and everything commits once, so the step
//     costs the commits of a step with a plain tool. The step's commit then
//     runs at the tool's isolation level too, and a serialization failure
//     or deadlock of either runs the tool again (within TxToolAttempts),
//     and the step's tool_start chunk is streamed with the commit. Calls
//     made in parallel with others each run in a transaction of their own,
//     committed before the step's (one commit more each), so they run in
//     parallel.
//
// Approval gates, parallel calls, sub-agents, queued runs, interrupts and
// takeover behave as for other tools.
func NewTxTool[In, Out any](name, description string, fn TxToolFunc[In, Out], opts ...ToolOption) (*Tool, error) {
	if fn == nil {
		return nil, toolDefError(name, "fn", "the tool function is nil")
	}
	exec := func(ctx context.Context, tx pgx.Tx, args json.RawMessage, tc ToolContext) (json.RawMessage, error) {
		return callTyped(name, args, func(in In) (Out, error) { return fn(ctx, tx, in, tc) })
	}
	t, err := newTyped[In, Out](name, description, nil, false, append(opts, func(o *toolOptions) { o.transactional = true }))
	if err != nil {
		return nil, err
	}
	t.txExec = exec
	return t, nil
}

// MustNewTxTool is NewTxTool that panics on a definition error, for
// package-level tool variables.
func MustNewTxTool[In, Out any](name, description string, fn TxToolFunc[In, Out], opts ...ToolOption) *Tool {
	return must(NewTxTool(name, description, fn, opts...))
}

// TxToolAttempts bounds the transactions a transactional tool's call runs
// when they fail on a serialization failure or a deadlock.
const TxToolAttempts = 5

// TxIsolation sets the isolation level of a transactional tool's
// transaction (pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable).
// Only valid on tools made with NewTxTool.
func TxIsolation(level pgx.TxIsoLevel) ToolOption {
	return func(o *toolOptions) { o.txIsolation, o.txOptionSet = level, true }
}

// TxTimeout bounds how long a transactional tool's function may run
// (default DefaultTxToolTimeout); d must be positive. Only valid on tools
// made with NewTxTool.
func TxTimeout(d time.Duration) ToolOption {
	return func(o *toolOptions) { o.txTimeout, o.txTimeoutSet, o.txOptionSet = d, true, true }
}

// IsTransactional reports whether the tool was made with NewTxTool: the
// engine runs each call in a transaction that commits its writes with its
// record (ExecuteTx): the step's commit transaction for a step's only
// call, one of its own otherwise.
func (t *Tool) IsTransactional() bool { return t.txExec != nil }

// TxIsolation returns the isolation level of a transactional tool's
// transaction ("" for the database's default).
func (t *Tool) TxIsolation() pgx.TxIsoLevel { return t.opts.txIsolation }

// TxTimeout returns how long a transactional tool's function may run.
func (t *Tool) TxTimeout() time.Duration {
	if t.opts.txTimeoutSet {
		return t.opts.txTimeout
	}
	return DefaultTxToolTimeout
}

// ExecuteTx validates args and runs a transactional tool's function on tx
// (the engine gives the call's transaction, whose end is its own), under the
// tool's timeout, and returns its JSON output. A panic is recovered and
// returned as a *ToolPanicError. Only for tools made with NewTxTool.
func (t *Tool) ExecuteTx(ctx context.Context, tx pgx.Tx, args json.RawMessage, tc ToolContext) (out json.RawMessage, err error) {
	if t.txExec == nil {
		return nil, fmt.Errorf("tool %q is not transactional: run it with Execute", t.name)
	}
	if tx == nil {
		return nil, fmt.Errorf("tool %q is transactional: it needs a transaction", t.name)
	}
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	if err := t.ValidateArguments(args); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, t.TxTimeout(),
		fmt.Errorf("%w: tool %q ran longer than its timeout of %s, and its writes were rolled back", ErrTxToolTimeout, t.name, t.TxTimeout()))
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, newPanicError(t.name, "tool", r)
		}
	}()
	if tc != nil {
		ctx = WithToolContext(ctx, tc)
	}
	out, err = t.txExec(ctx, tx, args, tc)
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("%w (%w)", context.Cause(ctx), err)
	}
	return out, err
}
