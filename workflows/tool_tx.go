package workflows

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/steps"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// txTool returns the transactional tool the call names, nil for any other
// call (a plain tool, a sub-agent, a name the model made up).
func (t *turn) txTool(call helix.ToolCall) *helix.Tool {
	if t.def == nil {
		return nil
	}
	if tool, ok := t.def.Tools[call.Name]; ok && tool.IsTransactional() {
		return tool
	}
	return nil
}

// runToolStep runs a tool call as the journal's next step (or returns its
// record): a transactional tool's in a transaction of its own that
// commits the call's record (runTxTool), any other with mode.
func (t *turn) runToolStep(mode recordMode, in steps.ToolInput) (steps.ToolResult, error) {
	tool := t.txTool(in.Call)
	if tool == nil {
		return runStep(t.ctx, t.j, steps.NameRunTool, mode, fenced(t, t.env.RunTool(in)))
	}
	id := t.j.reserve()
	if r, ok, err := t.j.recorded(id, steps.NameRunTool); ok || err != nil {
		if err != nil {
			return steps.ToolResult{}, err
		}
		return decode[steps.ToolResult](r)
	}
	return t.runTxTool(id, tool, in)
}

// runTxTool runs transactional tool tool's call in (journal step id, not
// recorded) in a transaction on the engine's pool whose last statement
// records the call's result (helix.record_steps: it fails unless this
// execution still owns the workflow, and holds the workflow's status row
// until the commit, so a takeover either waits for the commit, and the new
// owner replays the record, or makes this transaction roll back), sent
// with the COMMIT in one round trip. So the tool's writes and its record
// commit together, once:
//
//   - a tool error (a panic, its timeout) rolls the transaction back, with
//     the tool's writes and events, and the error is recorded alone
//     (steps.TxRolledBackError);
//   - a serialization failure or a deadlock rolls the transaction back and
//     runs the call again, up to helix.TxToolAttempts times; then its error
//     is recorded alone;
//   - a connection lost at the commit runs a new transaction that first
//     looks for the record (a commit whose acknowledgement was lost), and
//     runs the call again only when it is not there;
//   - a database outage is waited out, as the journal's writes do.
//
// It touches none of the journal's mutable state (only its pool, workflow
// and owner), so calls of one step run in parallel goroutines; the caller
// does not record the result again.
func (t *turn) runTxTool(id int, tool *helix.Tool, in steps.ToolInput) (steps.ToolResult, error) {
	j := t.j
	started := time.Now()
	// The step's held start chunks go first, on a connection of their own:
	// inside the transaction an event could wait for a second connection
	// that a pool full of the step's tool transactions never gives.
	if err := in.Starts.Flush(t.ctx); err != nil {
		return steps.ToolResult{}, err
	}
	var out steps.ToolResult
	retried, alone := false, false
	var conflicts []error
	err := j.retry(t.ctx, "run transactional tool "+in.Call.Name, func(c context.Context) error {
		conn, err := j.pool.Acquire(c)
		if err != nil {
			return err
		}
		// Released idle after the COMMIT or the rollback below; a
		// connection left in a transaction is closed by the pool.
		defer conn.Release()
		tx, err := conn.BeginTx(c, pgx.TxOptions{IsoLevel: tool.TxIsolation()})
		if err != nil {
			return err
		}
		committed := false
		defer func() {
			if !committed {
				_ = tx.Rollback(context.WithoutCancel(c))
			}
		}()
		if retried {
			// The last attempt may have committed before its
			// acknowledgement was lost.
			r, done, err := j.committed(c, postgres.PgxQuerier(tx), id)
			if err != nil {
				return err
			}
			if done {
				out, err = decode[steps.ToolResult](r)
				return err
			}
		}
		retried = true
		run := in
		run.Tx = tx
		res, err := fenced(t, t.env.RunTool(run))(stepContext{t.ctx})
		if err == nil {
			var rec journalRecord
			if rec, err = encode(id, steps.NameRunTool, res, nil, started); err != nil {
				return err
			}
			// The record and the COMMIT in one round trip (the COMMIT is
			// skipped when the record fails: the rollback above ends it).
			sql, args := postgres.RecordStepsStatement(j.wfID, j.owner, stepRecords([]journalRecord{rec}))
			b := &pgx.Batch{}
			b.Queue(sql, args...)
			b.Queue(postgres.CommitSQL)
			if err = conn.SendBatch(c, b).Close(); err == nil || conn.Conn().PgConn().TxStatus() == 'I' {
				committed = true // or ended by the failed COMMIT
			}
			if postgres.IsAbortedTransaction(err) {
				err = abortedCall(in.Call, res)
			}
		}
		var rolledBack *steps.TxRolledBackError
		switch {
		case err == nil:
			out = res
			return nil
		case errors.As(err, &rolledBack):
			out, alone = rolledBack.Result, true
			return nil
		case steps.RetriesTx(err):
			conflicts = append(conflicts, err)
			if len(conflicts) < helix.TxToolAttempts {
				return err // transient: run again on a fresh transaction
			}
			out, alone = conflictedCall(in.Call, conflicts, started), true
			return nil // recorded below, without writes
		}
		return err
	})
	if err != nil {
		return steps.ToolResult{}, j.recordError(err)
	}
	if alone {
		if err := t.recordAlone(id, out, started); err != nil {
			return out, err
		}
	}
	return out, t.env.CallProbe(t.ctx, steps.ProbeInfo{Point: steps.ProbeAfterToolCommit, SessionID: t.run.SessionID,
		RunID: t.run.RunID, Step: in.Step, ToolCallID: in.Call.ID, ToolName: in.Call.Name})
}

// recordAlone records step id's result in a statement of its own (a
// transactional tool's call that could not commit its writes), waiting
// out an outage; a write retried after a lost acknowledgement finds the
// record.
func (t *turn) recordAlone(id int, res steps.ToolResult, started time.Time) error {
	j := t.j
	rec, err := encode(id, steps.NameRunTool, res, nil, started)
	if err != nil {
		return err
	}
	retried := false
	err = j.retry(t.ctx, "record transactional tool "+res.ToolName, func(c context.Context) error {
		if retried {
			if _, done, err := j.committed(c, j.db, id); done || err != nil {
				return err
			}
		}
		retried = true
		sql, args := postgres.RecordStepsStatement(j.wfID, j.owner, stepRecords([]journalRecord{rec}))
		_, err := j.pool.Exec(c, sql, args...)
		return err
	})
	if err != nil {
		return j.recordError(err)
	}
	return nil
}

// abortedCall is the result of a transactional tool's call that swallowed
// a failed statement and returned res: its transaction can commit nothing.
func abortedCall(call helix.ToolCall, res steps.ToolResult) *steps.TxRolledBackError {
	return &steps.TxRolledBackError{Result: steps.ToolResult{ToolCallID: call.ID, ToolName: call.Name,
		ErrorCode: steps.CodeToolError, DurationMS: res.DurationMS,
		Error: fmt.Sprintf("tool %q left its transaction aborted (a statement failed and was not rolled back to a savepoint): "+
			"its writes were rolled back", call.Name)}}
}

// conflictedCall is the result of a transactional tool's call whose
// transactions all failed on a serialization failure or a deadlock
// (conflicts, helix.TxToolAttempts of them).
func conflictedCall(call helix.ToolCall, conflicts []error, started time.Time) steps.ToolResult {
	return steps.ToolResult{ToolCallID: call.ID, ToolName: call.Name, ErrorCode: steps.CodeToolError,
		DurationMS: time.Since(started).Milliseconds(),
		Error: fmt.Sprintf("the transaction of tool %q failed %d times on a serialization failure or a deadlock; "+
			"its writes were rolled back each time (last: %v)", call.Name, len(conflicts), conflicts[len(conflicts)-1])}
}
