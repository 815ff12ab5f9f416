package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/helix-agents/helix-dbos/steps"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// JournalBase is the ID of a workflow's first journaled step. The records
// live in helix.step_journal (one index, narrow rows), not
// in dbos.operation_outputs, whose three indexes took a third of the
// journal's WAL; the IDs stay clear of DBOS's own step IDs (numbered from
// 0), which a message's consumer ID (consumed_by_function_id) shares. The
// records of one write share a row (unpack), and those a
// step's commit writes are in its checkpoint's row instead
// (checkpointRecords, unpackCheckpoint).
const JournalBase = 1_000_000

// A journal records the agent loop's steps (model calls, tools, hooks and
// the store transactions) for one workflow execution, in place of DBOS's
// RunAsStep and RunAsTransaction. It keeps their contract (a recorded step
// is never executed again; a step records its output, or its error, once;
// only the execution that owns the workflow records anything) at a fraction
// of their cost:
//
//   - Replay reads every record of the workflow in one query when the
//     execution starts (DBOS reads two rows per step, in a transaction of
//     its own, before each one). A step past the last record is new: only
//     the workflow's owner writes records, and it is this execution.
//   - A record is one statement (helix.record_steps), fenced like DBOS's
//     checkpoints by the workflow's owner token, and a transaction step
//     records itself inside its own transaction.
//   - A step whose record can wait (a tool of a step, a hook) is written
//     with the journal's next write: the step's commit records its tools in
//     the same transaction. A crash before that write runs them again, as
//     a crash between a DBOS step and its checkpoint would.
//
// DBOS operations the loop still uses (Recv, child workflows, events,
// messages, the run's first transaction) keep DBOS's step IDs: the journal
// numbers its records on its own, so both sequences stay deterministic.
type journal struct {
	st   *postgres.Store
	pool *pgxpool.Pool
	// db is pool as the store's statements take it.
	db    postgres.Querier
	log   zerolog.Logger
	wfID  string
	owner string
	// scope is where the workflow's commits carry their records.
	scope journalScope
	next  int
	// replay holds the records found at the start, by ID, until consumed.
	replay map[int]journalRecord
	// pending are records that wait for the next write, and appends the
	// stream appends that commit with them (in the next write, before
	// anything else it writes).
	pending []journalRecord
	appends []streamAppend
	// deferred are transaction steps whose bodies run, and records are
	// written, in the next transaction step's transaction, first.
	deferred []deferredTxn
	// call is a transactional tool's call that runs in the next
	// transaction step's transaction, after the deferred steps (joinCommit).
	call *txCall
	// ran reports that the last step ran in this execution (false: its
	// record was replayed).
	ran bool
	// executed counts the steps that ran in this execution (tracing ends
	// an agent step's span only when something of it ran here).
	executed int
	// span is the open span of the execution (its run's or step's) that
	// transaction bodies log under; nil when not tracing.
	span trace.Span
	// carriedBy are the checkpoints the attempts of the running
	// transaction step rendered its records for (checkpointRecords): a
	// retry looks there for a commit whose acknowledgement was lost.
	carriedBy []string
}

// journalScope is the run a journal's workflow executes, whose
// checkpoints carry the records of its commits: the
// run's session and ID, and the workflow's segment number (0: the run's
// own workflow; k: its k-th segment, a queued run's).
type journalScope struct {
	sessionID, runID string
	segment          int
	// turn is the run's helix.runs.turn, which its model records written
	// as message rows name.
	turn int
}

// traced returns ctx with the execution's open span (for log lines).
func (j *journal) traced(ctx context.Context) context.Context {
	if j.span == nil {
		return ctx
	}
	return trace.ContextWithSpan(ctx, j.span)
}

// journalRecord is one step's record.
type journalRecord struct {
	ID        int
	Name      string
	Output    *string
	Err       *string
	Started   int64
	Completed int64
}

// openJournal reads the workflow's owner token and its journal
// (postgres.QueryJournal: its status row with its helix.step_journal rows,
// the journals its run's checkpoints carry for it, and the model records
// its session's message rows hold for it), waiting out a database outage.
// An execution that does not own its workflow (it was cancelled, or taken
// over) gets a conflicting-workflow error and records nothing. The owner
// token its writes are fenced by is mine, the one DBOS gave this execution
// (executionOwner), never the one the row holds when the journal is read.
func openJournal(ctx dbos.Context, st *postgres.Store, log zerolog.Logger, wfID, mine string, scope journalScope) (*journal, error) {
	j := &journal{st: st, pool: st.Pool(), db: postgres.PgxQuerier(st.Pool()), log: log, wfID: wfID, scope: scope, next: JournalBase,
		replay: map[int]journalRecord{}}
	var owner *string
	var status string
	err := j.retry(ctx, "read the step journal", func(c context.Context) error {
		clear(j.replay)
		owner = nil
		rows, err := postgres.QueryJournal(c, j.db, wfID, JournalBase, scope.sessionID, scope.runID, scope.segment)
		if err != nil {
			return err
		}
		defer rows.Close()
		found := false
		for rows.Next() {
			var rowOwner, rowStatus *string
			var id, n *int32
			var name, output, stepErr, checkpoint, meta *string
			if err := rows.Scan(&rowOwner, &rowStatus, &id, &n, &name, &output, &stepErr, &checkpoint, &meta); err != nil {
				return err
			}
			var recs []journalRecord
			switch {
			case meta != nil:
				rec, err := modelRowRecord(int(*id), *output, *meta)
				if err != nil {
					return fmt.Errorf("workflow %s: %w", wfID, err)
				}
				recs = []journalRecord{rec}
			case checkpoint != nil:
				if n == nil {
					return fmt.Errorf("workflow %s: checkpoint %s has no message count", wfID, *checkpoint)
				}
				if recs, err = unpackCheckpoint(*checkpoint, *output, int(*n)); err != nil {
					return fmt.Errorf("workflow %s: %w", wfID, err)
				}
			case rowStatus != nil:
				found, owner, status = true, rowOwner, *rowStatus
				if id == nil {
					continue
				}
				if recs, err = unpack(int(*id), int(*n), *name, output, stepErr); err != nil {
					return fmt.Errorf("workflow %s: %w", wfID, err)
				}
			}
			for _, r := range recs {
				// Rows never overlap (the journal writes a record once);
				// should a bug make them, the first record stands.
				if _, dup := j.replay[r.ID]; !dup {
					j.replay[r.ID] = r
				}
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("workflow %s has no status row", wfID)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// The workflow must still be this execution's: one that stalled after
	// DBOS started it may find it taken over (its journal is another
	// execution's, and so is the token its row holds now).
	if owner == nil || *owner != mine || status != "PENDING" {
		return nil, conflict(wfID)
	}
	j.owner = mine
	return j, nil
}

func conflict(wfID string) error {
	return &dbos.Error{Code: dbos.ErrorCodeConflictingID, WorkflowID: wfID,
		Message: fmt.Sprintf("workflow %s is no longer owned by this execution (cancelled, or taken over by another engine)", wfID)}
}

// has reports whether step id is recorded (and not yet replayed).
func (j *journal) has(id int) bool {
	_, ok := j.replay[id]
	return ok
}

// hasNamed reports whether step id is recorded (and not yet replayed) as
// a step named name.
func (j *journal) hasNamed(id int, name string) bool {
	r, ok := j.replay[id]
	return ok && r.Name == name
}

// replaysOnly reports whether every record left to replay is a step named
// name (true when none is left).
func (j *journal) replaysOnly(name string) bool {
	for _, r := range j.replay {
		if r.Name != name {
			return false
		}
	}
	return true
}

// reserve returns the next step's ID.
func (j *journal) reserve() int {
	id := j.next
	j.next++
	return id
}

// recorded returns the record of step id, if this workflow has one; a
// record of another step at the same place is a non-deterministic body.
func (j *journal) recorded(id int, name string) (journalRecord, bool, error) {
	r, ok := j.replay[id]
	j.ran = !ok
	if !ok {
		j.executed++
		return journalRecord{}, false, nil
	}
	delete(j.replay, id)
	if r.Name != name {
		return r, true, fmt.Errorf("workflow %s: step %d was recorded as %s but the workflow now runs %s there: "+
			"the workflow body is not deterministic (a code change between the run and its recovery?)", j.wfID, id, r.Name, name)
	}
	return r, true, nil
}

// decode returns a record's output and error.
func decode[R any](r journalRecord) (R, error) {
	var out R
	if r.Output != nil {
		if err := json.Unmarshal([]byte(expandOutput(*r.Output)), &out); err != nil {
			return out, fmt.Errorf("decode the recorded output of step %d (%s): %w", r.ID, r.Name, err)
		}
	}
	if r.Err != nil {
		return out, errors.New(*r.Err)
	}
	return out, nil
}

// encode makes the record of a step that ran.
func encode(id int, name string, out any, stepErr error, started time.Time) (journalRecord, error) {
	b, err := json.Marshal(out)
	if err != nil {
		return journalRecord{}, fmt.Errorf("encode the output of step %s: %w", name, err)
	}
	s := codeOutput(string(b))
	r := journalRecord{ID: id, Name: name, Output: &s, Started: started.UnixMilli(), Completed: time.Now().UnixMilli()}
	if stepErr != nil {
		e := stepErr.Error()
		r.Err = &e
	}
	return r, nil
}

// stepRecords are recs as postgres.RecordStepsStatement takes them. The
// records of a write are the journal's next steps, reserved one after
// another (the pending ones, the deferred ones, then the step being
// recorded), so they have consecutive IDs and become one row.
func stepRecords(recs []journalRecord) postgres.StepRecords {
	ids := make([]int32, len(recs))
	names := make([]string, len(recs))
	outs := make([]*string, len(recs))
	errs := make([]*string, len(recs))
	started := make([]int64, len(recs))
	completed := make([]int64, len(recs))
	for i, r := range recs {
		ids[i], names[i], outs[i], errs[i], started[i], completed[i] = int32(r.ID), r.Name, r.Output, r.Err, r.Started, r.Completed
	}
	return postgres.StepRecords{IDs: ids, Names: names, Outputs: outs, Errors: errs, Started: started, Completed: completed}
}

// write records recs after the pending ones, with the pending appends, in
// one round trip (one statement, or a batch in one implicit transaction).
func (j *journal) write(ctx context.Context, recs ...journalRecord) error {
	return j.writeRow(ctx, nil, recs...)
}

// writeRow is write whose last record, when row is not nil, is written as
// row (postgres.RecordModelMessageStatement); row reports what the write
// found.
func (j *journal) writeRow(ctx context.Context, row *modelRow, recs ...journalRecord) error {
	// A write before the step's commit means the step does not reach it
	// (it failed): its transactional call did not run, and is not recorded.
	j.call = nil
	all := append(j.pending, recs...)
	if len(all) == 0 && len(j.deferred) == 0 {
		return nil
	}
	if len(j.deferred) > 0 {
		if dctx, ok := ctx.(dbos.Context); ok {
			return j.writeDeferred(dctx, recs)
		}
		return fmt.Errorf("workflow %s: deferred steps need the workflow's context to run", j.wfID)
	}
	retried := false
	err := j.retry(ctx, "record steps", func(c context.Context) error {
		if retried {
			// The last attempt may have committed before its
			// acknowledgement was lost.
			if row != nil {
				if done, err := j.committedRow(c, row, all[len(all)-1].ID); done || err != nil {
					return err
				}
			} else if _, done, err := j.committed(c, j.db, all[len(all)-1].ID); done || err != nil {
				return err
			}
		}
		retried = true
		var sql string
		var args []any
		if row != nil {
			sql, args = postgres.RecordModelMessageStatement(j.wfID, j.owner, stepRecords(all), j.scope.sessionID, row.seq,
				row.message, row.meta)
		} else {
			sql, args = postgres.RecordStepsStatement(j.wfID, j.owner, stepRecords(all))
		}
		var calls *string
		scan := func(r pgx.Row) error { return r.Scan(&calls) }
		if len(j.appends) == 0 {
			if row != nil {
				if err := scan(j.pool.QueryRow(c, sql, args...)); err != nil {
					return err
				}
				return row.took(calls)
			}
			_, err := j.pool.Exec(c, sql, args...)
			return err
		}
		b := &pgx.Batch{}
		for _, a := range j.appends {
			if err := j.st.QueueAppend(b, a.stream, a.chunks); err != nil {
				return err
			}
		}
		q := b.Queue(sql, args...)
		if row != nil {
			q.QueryRow(scan)
		}
		if err := j.pool.SendBatch(c, b).Close(); err != nil {
			return err
		}
		if row != nil {
			return row.took(calls)
		}
		return nil
	})
	if err != nil {
		return j.recordError(err)
	}
	j.pending, j.appends = nil, nil
	return nil
}

// committedRow is committed for a model record written as row: it looks
// for the row, then (the record went to helix.step_journal, or was moved
// there since) in helix.step_journal, and sets row's stored tool calls
// from what it finds.
func (j *journal) committedRow(ctx context.Context, row *modelRow, id int) (done bool, err error) {
	calls, found, err := postgres.ReadModelRowToolCalls(ctx, j.db, j.scope.sessionID, row.seq, j.scope.turn, j.scope.segment, id-JournalBase)
	switch {
	case err != nil:
		return false, err
	case found:
		return true, row.took(calls)
	}
	rec, done, err := j.committed(ctx, j.db, id)
	if !done || err != nil {
		return done, err
	}
	out, err := decode[steps.ModelOutput](rec)
	if err != nil {
		return false, err
	}
	row.stored, row.found = out.Result.ToolCalls, true
	return true, nil
}

// took sets row's stored tool calls from what helix.record_model_message
// returned (nil: the record went to helix.step_journal as written).
func (row *modelRow) took(calls *string) error {
	if calls == nil {
		return nil
	}
	row.found = true
	if err := json.Unmarshal([]byte(*calls), &row.stored); err != nil {
		return fmt.Errorf("decode the tool calls of the message row at %d: %w", row.seq, err)
	}
	return nil
}

// committed reads step id's record, if a write committed it (done): what a
// retry after a lost acknowledgement looks at first. The checkpoints the
// step's attempts rendered its records for are looked at first.
func (j *journal) committed(ctx context.Context, q postgres.Querier, id int) (r journalRecord, done bool, err error) {
	if len(j.carriedBy) > 0 {
		checkpoint, text, messageCount, found, err := postgres.ReadCheckpointJournal(ctx, q, j.carriedBy, j.scope.sessionID)
		switch {
		case err != nil:
			return r, false, err
		case found:
			recs, err := unpackCheckpoint(checkpoint, text, messageCount)
			if err != nil {
				return r, false, fmt.Errorf("workflow %s: %w", j.wfID, err)
			}
			for _, rec := range recs {
				if rec.ID == id {
					return rec, true, nil
				}
			}
		}
	}
	row, found, err := postgres.ReadStepJournalRow(ctx, q, j.wfID, id)
	switch {
	case err != nil:
		return r, false, err
	case !found, row.ID+row.N <= id:
		return r, false, nil
	}
	recs, err := unpack(row.ID, row.N, row.Name, row.Output, row.Error)
	if err != nil {
		return r, false, fmt.Errorf("workflow %s: %w", j.wfID, err)
	}
	return recs[id-row.ID], true, nil
}

// unpack returns the records of a helix.step_journal row: the row's own
// columns when it holds one record (n = 1), else those its output packs:
// a JSON array of [name, started, completed, error,
// output] entries, output (JSON text, kept as is) left out when NULL.
// Replay needs neither time, which it leaves zero.
func unpack(id, n int, name string, output, stepErr *string) ([]journalRecord, error) {
	if n == 1 {
		return []journalRecord{{ID: id, Name: name, Output: output, Err: stepErr}}, nil
	}
	var entries [][]json.RawMessage
	if output == nil {
		return nil, fmt.Errorf("the step journal's row of steps %d to %d has no records", id, id+n-1)
	}
	if err := json.Unmarshal([]byte(*output), &entries); err != nil {
		return nil, fmt.Errorf("decode the step journal's row of steps %d to %d: %w", id, id+n-1, err)
	}
	if len(entries) != n {
		return nil, fmt.Errorf("the step journal's row of steps %d to %d holds %d records", id, id+n-1, len(entries))
	}
	return unpackEntries(id, entries)
}

// unpackEntries returns the records of packed entries (helix.step_journal's
// [name, started, completed, error, output]), the first one's ID id.
func unpackEntries(id int, entries [][]json.RawMessage) ([]journalRecord, error) {
	recs := make([]journalRecord, len(entries))
	for i, e := range entries {
		r := &recs[i]
		r.ID = id + i
		if len(e) != 4 && len(e) != 5 {
			return nil, fmt.Errorf("the step journal's record of step %d has %d fields", r.ID, len(e))
		}
		name, err := expandStepName(e[0])
		if err != nil {
			return nil, fmt.Errorf("decode the name of step %d: %w", r.ID, err)
		}
		if err := json.Unmarshal(name, &r.Name); err != nil {
			return nil, fmt.Errorf("decode the name of step %d: %w", r.ID, err)
		}
		if err := json.Unmarshal(e[3], &r.Err); err != nil {
			return nil, fmt.Errorf("decode the error of step %d: %w", r.ID, err)
		}
		if len(e) == 5 {
			out := string(e[4])
			r.Output = &out
		}
	}
	return recs, nil
}

// unpackCheckpoint returns the records checkpoint's journal text carries
// ([segment, first ID, base time, entries as unpack's]),
// the commit's record with its checkpoint ID, which it does not repeat,
// back in its output. An
// entry's name may be coded (journalStepNames) and the commit's record
// may be the short entry [started, completed], which stands for
// [helix.commit_step, started, completed, null, {"<o":messageCount}]:
// messageCount is the checkpoint's message_count column.
func unpackCheckpoint(checkpoint, text string, messageCount int) ([]journalRecord, error) {
	var parts []json.RawMessage
	if err := json.Unmarshal([]byte(text), &parts); err != nil {
		return nil, fmt.Errorf("decode the records checkpoint %s carries: %w", checkpoint, err)
	}
	var first int
	if len(parts) < 4 {
		return nil, fmt.Errorf("the records checkpoint %s carries have %d parts, want at least 4", checkpoint, len(parts))
	}
	if err := json.Unmarshal(parts[1], &first); err != nil {
		return nil, fmt.Errorf("decode the first step of the records checkpoint %s carries: %w", checkpoint, err)
	}
	entries := make([][]json.RawMessage, len(parts)-3)
	for i, p := range parts[3:] {
		e := &entries[i]
		if err := json.Unmarshal(p, e); err != nil {
			return nil, fmt.Errorf("decode the record of step %d checkpoint %s carries: %w", first+i, checkpoint, err)
		}
		if len(*e) == 2 {
			if i != len(entries)-1 {
				return nil, fmt.Errorf("the record of step %d checkpoint %s carries is a short commit entry but not the last", first+i, checkpoint)
			}
			var times [2]int64
			if json.Unmarshal((*e)[0], &times[0]) != nil || json.Unmarshal((*e)[1], &times[1]) != nil {
				return nil, fmt.Errorf("the short commit entry of step %d checkpoint %s carries has times that are not integers", first+i, checkpoint)
			}
			*e = []json.RawMessage{shortCommitName, (*e)[0], (*e)[1], jsonNull, json.RawMessage(shortCommitOutput(messageCount))}
			continue
		}
		if len(*e) > 0 {
			name, err := expandStepName((*e)[0])
			if err != nil {
				return nil, fmt.Errorf("decode the name of step %d checkpoint %s carries: %w", first+i, checkpoint, err)
			}
			(*e)[0] = name
		}
	}
	recs, err := unpackEntries(first, entries)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", checkpoint, err)
	}
	if last := &recs[len(recs)-1]; last.Name == steps.NameCommitStep && last.Output != nil {
		out := withCheckpointID(*last.Output, checkpoint)
		last.Output = &out
	}
	return recs, nil
}

// shortCommitName and jsonNull are what a short commit entry's name and
// error read as.
var (
	shortCommitName = json.RawMessage(`"` + steps.NameCommitStep + `"`)
	jsonNull        = json.RawMessage(`null`)
)

// checkpointIDKey is the commit output's checkpoint ID key, coded as the
// journal stores it.
var checkpointIDKey = codeOutput(`"checkpointId":`)

// withCheckpointID puts a checkpoint ID back in a commit's recorded output
// (a JSON object); helix.checkpoint_journal does the
// same in SQL.
func withCheckpointID(output, checkpoint string) string {
	if len(output) < 2 || output[0] != '{' {
		return output
	}
	id, _ := json.Marshal(checkpoint) // a string always encodes
	if output == "{}" {
		return "{" + checkpointIDKey + string(id) + "}"
	}
	return "{" + checkpointIDKey + string(id) + "," + output[1:]
}

// checkpointRecords renders recs (the pending records, the deferred ones
// and a commit's, whose output leaves its checkpoint ID out) as the
// checkpoint's journal. Records are keyed by ID, so they are sorted first
// (parallel tools are recorded as they end); the checkpoint carries the
// last run of consecutive IDs, which holds the commit's, and lead returns
// the records before it, for helix.step_journal.
//
// The journal is compact: the names of journalStepNames are coded as
// integers, and the commit's record is the short entry [started,
// completed] when it is the last, has no error and its output is the
// message count alone, messageCount, which the checkpoint's message_count
// column holds: readers rebuild it from there.
func (j *journal) checkpointRecords(recs []journalRecord, messageCount int) (text string, lead []journalRecord, err error) {
	recs = slices.Clone(recs)
	slices.SortFunc(recs, func(a, b journalRecord) int { return a.ID - b.ID })
	k := len(recs) - 1
	for k > 0 && recs[k-1].ID == recs[k].ID-1 {
		k--
	}
	lead, recs = recs[:k], recs[k:]
	base := recs[0].Started
	var b strings.Builder
	fmt.Fprintf(&b, "[%d,%d,%d", j.scope.segment, recs[0].ID, base)
	for i, r := range recs {
		if i == len(recs)-1 && r.Name == steps.NameCommitStep && r.Err == nil && r.Output != nil &&
			*r.Output == shortCommitOutput(messageCount) {
			fmt.Fprintf(&b, ",[%d,%d]", r.Started-base, r.Completed-base)
			continue
		}
		name, err := codeStepName(r.Name)
		if err != nil {
			return "", nil, fmt.Errorf("encode the name of step %d: %w", r.ID, err)
		}
		stepErr := []byte("null")
		if r.Err != nil {
			if stepErr, err = json.Marshal(*r.Err); err != nil {
				return "", nil, fmt.Errorf("encode the error of step %d: %w", r.ID, err)
			}
		}
		fmt.Fprintf(&b, ",[%s,%d,%d,%s", name, r.Started-base, r.Completed-base, stepErr)
		if r.Output != nil {
			b.WriteString(",")
			b.WriteString(*r.Output)
		}
		b.WriteString("]")
	}
	b.WriteString("]")
	return b.String(), lead, nil
}

// flush writes the pending records.
func (j *journal) flush(ctx context.Context) error { return j.write(ctx) }

func (j *journal) recordError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "HX409" {
		return conflict(j.wfID)
	}
	return fmt.Errorf("workflow %s: record its steps: %w", j.wfID, err)
}

// retry runs fn until it succeeds or fails with an error that is not an
// infrastructure one (postgres.WaitOut), for as long as ctx lives: a
// workflow waits out a database outage, as DBOS's own writes do. fn's
// context is not cancelled with ctx: a write in flight completes or fails.
func (j *journal) retry(ctx context.Context, what string, fn func(context.Context) error) error {
	db := context.WithoutCancel(ctx)
	err := postgres.WaitOut(ctx, func() error { return fn(db) }, func(attempt int, err error) {
		j.log.Warn().Str("event", "journal.retry").Str("workflowId", j.wfID).Int("attempt", attempt).Err(err).
			Msgf("could not %s; retrying", what)
	})
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("workflow %s: %s: %w", j.wfID, what, err)
	}
	return err
}

// stepContext is what a step body gets: the workflow's context (its
// values and cancellation) without DBOS's workflow methods, so a body
// cannot start DBOS operations that would shift the workflow's steps.
type stepContext struct{ context.Context }

// execute runs a step body with DBOS's step retry policy (InfraRetries
// retries, 100 ms doubling to 5 s): an error is an infrastructure failure,
// domain outcomes are outputs. A database outage (postgres.Transient) is
// waited out for as long as the workflow lives, as the journal's writes
// wait it out, backing off to 2 s: it counts against no retry, so a
// restart or a failover longer than the retries does not fail the run.
func execute[R any](ctx dbos.Context, name string, fn dbos.Step[R]) (R, error) {
	sc := stepContext{ctx}
	wait := 100 * time.Millisecond
	var errs []error
	for {
		out, err := fn(sc)
		if err == nil || ctx.Err() != nil || errors.Is(err, dbos.ErrConflictingWorkflowID) {
			return out, err
		}
		limit := 2 * time.Second
		if !postgres.Transient(err) {
			errs = append(errs, err)
			if len(errs) > steps.InfraRetries {
				return out, fmt.Errorf("step %s failed %d times: %w", name, len(errs), errors.Join(errs...))
			}
			limit = 5 * time.Second
		}
		select {
		case <-ctx.Done():
			return out, err
		case <-time.After(wait):
		}
		wait = min(2*wait, limit)
	}
}

// later records a step with the journal's next write: runStep's mode for
// steps whose record can wait (see journal).
type recordMode bool

const (
	recordNow   recordMode = false
	recordLater recordMode = true
)

// runStep runs fn as the journal's next step (or returns its record).
func runStep[R any](ctx dbos.Context, j *journal, name string, mode recordMode, fn dbos.Step[R]) (R, error) {
	return runStepWith(ctx, j, name, mode, fn, stepWrites[R]{})
}

// stepWrites are what runStepWith writes with a step's record, given the
// step's output, each nil for nothing.
type stepWrites[R any] struct {
	// with is a stream append that commits with the record.
	with func(R) streamAppend
	// later decides the mode from the step's output.
	later func(R) bool
	// row renders a record written at once as a message row (a model
	// call's; nil for a helix.step_journal record), and
	// gets what its write found.
	row func(R, journalRecord) (*modelRow, error)
}

// runStepWith is runStep with the writes w.
func runStepWith[R any](ctx dbos.Context, j *journal, name string, mode recordMode, fn dbos.Step[R], w stepWrites[R]) (R, error) {
	id := j.reserve()
	if r, ok, err := j.recorded(id, name); ok || err != nil {
		if err != nil {
			var zero R
			return zero, err
		}
		return decode[R](r)
	}
	started := time.Now()
	out, stepErr := execute(ctx, name, fn)
	var a *streamAppend
	if stepErr == nil && w.with != nil { // a failed step's writes are not its outcome
		if sa := w.with(out); len(sa.chunks) > 0 {
			a = &sa
		}
	}
	if stepErr == nil && w.later != nil && w.later(out) {
		mode = recordLater
	}
	var row func(journalRecord) (*modelRow, error)
	if stepErr == nil && w.row != nil {
		row = func(rec journalRecord) (*modelRow, error) { return w.row(out, rec) }
	}
	return out, j.recordWith(ctx, id, name, mode, out, stepErr, started, a, row)
}

// streamAppend is a stream append that commits with a step's record.
type streamAppend struct {
	stream string
	chunks []store.ChunkWrite
}

// record records a step that ran (nothing when the workflow was cancelled
// meanwhile: a resume runs the step again) and returns its error.
func (j *journal) record(ctx dbos.Context, id int, name string, mode recordMode, out any, stepErr error, started time.Time) error {
	return j.recordWith(ctx, id, name, mode, out, stepErr, started, nil, nil)
}

// recordWith is record with a stream append and, for a record written at
// once, its rendering as a message row (row nil, or returning nil: a
// helix.step_journal record).
func (j *journal) recordWith(ctx dbos.Context, id int, name string, mode recordMode, out any, stepErr error, started time.Time,
	with *streamAppend, row func(journalRecord) (*modelRow, error)) error {
	if ctx.Err() != nil {
		return errors.Join(stepErr, fmt.Errorf("workflow %s cancelled during step %s: %w", j.wfID, name, context.Cause(ctx)))
	}
	if errors.Is(stepErr, dbos.ErrConflictingWorkflowID) {
		return stepErr
	}
	rec, err := encode(id, name, out, stepErr, started)
	if err != nil {
		return err
	}
	if with != nil {
		j.appends = append(j.appends, *with)
	}
	if mode == recordLater {
		j.pending = append(j.pending, rec)
		return stepErr
	}
	var r *modelRow
	if row != nil && len(j.deferred) == 0 {
		if r, err = row(rec); err != nil {
			return err
		}
	}
	if err := j.writeRow(ctx, r, rec); err != nil {
		return err
	}
	return stepErr
}

// deferredTxn is a transaction step that runs in the next one's
// transaction (deferTxn).
type deferredTxn struct {
	id      int
	name    string
	body    func(ctx context.Context, tx dbos.Tx) (any, error)
	started time.Time
}

// deferTxn makes fn the journal's next step, run in the transaction of the
// next transaction step (runTxn), before that step's own body, and
// recorded with it: two steps in one transaction. The caller must make
// that transaction step its next write (a write in between would have to
// run the body without it), and must have a replay take the same path: a
// replay finds both records. If the body fails, its error is recorded as
// its outcome (with the records before it), the steps reserved after it
// are dropped, and the next transaction step fails with that error: the
// journal then continues as if the deferred step had run alone and
// failed.
func deferTxn[R any](j *journal, name string, fn dbos.Txn[R]) {
	j.deferred = append(j.deferred, deferredTxn{id: j.reserve(), name: name, started: time.Now(),
		body: func(ctx context.Context, tx dbos.Tx) (any, error) { return fn(ctx, tx) }})
}

// runDeferred runs the deferred steps' bodies in tx and returns their
// records; a failed body returns errDeferred.
func (j *journal) runDeferred(ctx dbos.Context, c context.Context, tx *jtx) ([]journalRecord, error) {
	var recs []journalRecord
	for _, d := range j.deferred {
		o, err := d.body(stepContext{j.traced(ctx)}, pgxTx{tx})
		if err != nil {
			if postgres.Transient(err) {
				return nil, err
			}
			return nil, &deferredError{d: d, out: o, err: err}
		}
		rec, err := encode(d.id, d.name, o, nil, d.started)
		if err != nil {
			return nil, err
		}
		recs = append(recs, rec)
	}
	return recs, nil
}

// writeDeferred runs the deferred steps in a transaction of their own that
// also writes the pending appends and records and recs.
func (j *journal) writeDeferred(ctx dbos.Context, recs []journalRecord) error {
	retried := false
	err := j.retry(ctx, "record steps", func(c context.Context) error {
		tx, err := j.begin(c)
		if err != nil {
			return err
		}
		defer tx.close(c)
		if retried {
			// The last attempt may have committed before its
			// acknowledgement was lost.
			if _, done, err := j.committed(c, postgres.PgxQuerier(tx), j.deferred[0].id); done || err != nil {
				return err
			}
		}
		retried = true
		if err := tx.holdAppends(j.st, j.appends); err != nil {
			return err
		}
		first, err := j.runDeferred(ctx, c, tx)
		if err != nil {
			return err
		}
		all := append(append(append([]journalRecord(nil), j.pending...), first...), recs...)
		sql, args := postgres.RecordStepsStatement(j.wfID, j.owner, stepRecords(all))
		return tx.commitWith(c, j.log, sql, args...)
	})
	if err != nil {
		var de *deferredError
		if errors.As(err, &de) {
			return j.failDeferred(ctx, de)
		}
		return j.recordError(err)
	}
	j.pending, j.appends, j.deferred = nil, nil, nil
	return nil
}

// deferredError is a deferred step's failure.
type deferredError struct {
	d   deferredTxn
	out any
	err error
}

func (e *deferredError) Error() string { return e.err.Error() }
func (e *deferredError) Unwrap() error { return e.err }

// failDeferred records a deferred step's failure as its outcome (with the
// records before it) and drops what was reserved after it.
func (j *journal) failDeferred(ctx dbos.Context, e *deferredError) error {
	var keep []journalRecord
	for _, r := range j.pending {
		if r.ID < e.d.id {
			keep = append(keep, r)
		}
	}
	j.pending, j.deferred, j.next = keep, nil, e.d.id+1
	if err := j.record(ctx, e.d.id, e.d.name, recordNow, e.out, e.err, e.d.started); !errors.Is(err, e.err) {
		return err
	}
	return e.err
}

// runTxn runs fn as the journal's next step, in a transaction that also
// records it (and the pending records): its writes and its record commit
// together, so a replay never applies them twice. An output that says its
// body wrote nothing (wroteNothing), with nothing else to write, ends the
// transaction without a commit and leaves the record for the journal's
// next write: a run's begin does not write a journal row of its own. An
// output whose writes imply it (impliedRecord) commits them without it.
func runTxn[R any](ctx dbos.Context, j *journal, name string, fn dbos.Txn[R]) (R, error) {
	var zero R
	id := j.reserve()
	if r, ok, err := j.recorded(id, name); ok || err != nil {
		if err != nil {
			return zero, err
		}
		return decode[R](r)
	}
	started := time.Now()
	var out R
	var stepErr error
	retried, locked := false, false
	j.carriedBy = nil
	defer func() { j.carriedBy, j.call = nil, nil }()
	once := func(c context.Context) error {
		tx, err := j.begin(c)
		if err != nil {
			return err
		}
		defer tx.close(c)
		if err := j.beginCall(c, tx); err != nil {
			return err
		}
		if retried {
			// The last attempt may have committed before its
			// acknowledgement was lost.
			r, done, err := j.committed(c, postgres.PgxQuerier(tx), id)
			if err != nil {
				return err
			}
			if done {
				j.pending, j.appends, j.deferred = nil, nil, nil
				out, stepErr = decode[R](r)
				return nil
			}
		}
		retried = true
		if err := tx.holdAppends(j.st, j.appends); err != nil {
			return err
		}
		first, err := j.runDeferred(ctx, c, tx)
		if err != nil {
			return err
		}
		if j.call != nil {
			rec, err := j.runCall(ctx, tx)
			if err != nil {
				return err
			}
			first = append(first, rec)
		}
		body := context.Context(ctx)
		if locked {
			body = postgres.LockedCommit(ctx)
		}
		// A commit's checkpoint carries the records: those that wait, the
		// deferred steps' and the commit's own.
		var lead []journalRecord
		carried := false
		body = steps.WithCommitRecord(body, func(co steps.CommitOutput) (string, error) {
			j.carriedBy = append(j.carriedBy, co.CheckpointID)
			co.CheckpointID = ""
			rec, err := encode(id, name, co, nil, started)
			if err != nil {
				return "", err
			}
			text, l, err := j.checkpointRecords(append(append(slices.Clone(j.pending), first...), rec), co.MessageCount)
			lead, carried = l, err == nil
			return text, err
		})
		o, ferr := fn(stepContext{j.traced(body)}, pgxTx{tx})
		if ferr != nil {
			if postgres.Transient(ferr) || postgres.CommitRefused(ferr) {
				return ferr
			}
			// The body's error is its outcome: recorded without its
			// writes (and without the call, whose writes they include:
			// a replay runs it again before the recorded failure).
			tx.close(c)
			out, stepErr = o, ferr
			return j.record(ctx, id, name, recordNow, o, ferr, started)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("workflow %s cancelled during step %s: %w", j.wfID, name, context.Cause(ctx))
		}
		if ro, ok := any(o).(wroteNothing); ok && ro.WroteNothing() && !tx.holdsWrites() && !carried &&
			len(j.pending) == 0 && len(first) == 0 && len(j.appends) == 0 {
			// The body wrote nothing (a run's begin, mostly): no commit;
			// its record waits for the journal's next write, as a step's
			// whose record can wait does. A crash before that write runs
			// it again, which changes nothing.
			rec, err := encode(id, name, o, nil, started)
			if err != nil {
				return err
			}
			tx.close(c)
			j.pending = append(j.pending, rec)
			out = o
			return nil
		}
		var last string
		var args []any
		switch {
		case carried && len(lead) == 0:
			last, args = postgres.CheckJournalOwnerStatement(j.wfID, j.owner)
		case carried:
			last, args = postgres.RecordStepsStatement(j.wfID, j.owner, stepRecords(lead))
		default:
			recs := append(j.pending, first...)
			if im, ok := any(o).(impliedRecord); !ok || !im.RecordImplied() {
				rec, err := encode(id, name, o, nil, started)
				if err != nil {
					return err
				}
				recs = append(recs, rec)
			}
			if len(recs) == 0 {
				last, args = postgres.CheckJournalOwnerStatement(j.wfID, j.owner)
			} else {
				last, args = postgres.RecordStepsStatement(j.wfID, j.owner, stepRecords(recs))
			}
		}
		err = tx.commitWith(c, j.log, last, args...)
		if err != nil {
			return err
		}
		j.pending, j.appends, j.deferred = nil, nil, nil
		out = o
		return nil
	}
	attempt := func(c context.Context) error {
		for {
			// A call that settled without its writes (it failed) is
			// recorded with the commit of a transaction of its own.
			if err := once(c); !j.callSettled(err) {
				return err
			}
		}
	}
	err := j.retry(ctx, "run step "+name, func(c context.Context) error {
		err := attempt(c)
		if postgres.CommitRefused(err) && !locked {
			// A step commit sent whole assumed what no longer holds
			// (an interrupt came, say): it wrote nothing. Again, deciding
			// under the locks.
			locked = true
			j.log.Debug().Str("event", "journal.commit_refused").Str("workflowId", j.wfID).Str("step", name).
				Msg("the step's commit assumed what no longer held; committing it again under the session's locks")
			err = attempt(c)
		}
		return err
	})
	if err != nil {
		if stepErr != nil && errors.Is(err, stepErr) {
			return out, stepErr
		}
		var de *deferredError
		if errors.As(err, &de) {
			return zero, j.failDeferred(ctx, de)
		}
		return zero, j.recordError(err)
	}
	return out, stepErr
}

// wroteNothing is a transaction step's output that reports whether its
// body wrote nothing (steps.RunInfo).
type wroteNothing interface{ WroteNothing() bool }

// impliedRecord is a transaction step's output that reports whether its
// writes imply its record (steps.HibernateOutput): its commit writes the
// other records but not its own, and a replay runs the step again, which
// finds its writes done and writes nothing.
type impliedRecord interface{ RecordImplied() bool }

// jtx is a journal transaction on a pooled connection of its own. BEGIN
// goes out with its first statement and COMMIT with its last (the
// records), in one round trip each: a transaction of n statements costs n
// round trips, not n+2.
type jtx struct {
	conn   *pgxpool.Conn
	begun  bool
	closed bool
	// held are writes whose results nobody reads, sent with the next
	// statement (postgres.Deferrer).
	held *pgx.Batch
	// appends are the journal's pending stream appends (holdAppends) and
	// appendSQL their statements, held before anything else the
	// transaction writes, unless its body takes them (takeAppends) before
	// its first statement.
	appends   []streamAppend
	appendSQL []heldStatement
	// call is the transaction as pgx began it for a transactional call
	// that runs in it (beginCall), nil otherwise.
	call pgx.Tx
}

// flush sends the held writes, if any, in a round trip of their own.
func (t *jtx) flush(ctx context.Context) error {
	if !t.pipelined() {
		return nil
	}
	return t.conn.SendBatch(ctx, t.batch()).Close()
}

// heldStatement is a statement held with its arguments.
type heldStatement struct {
	sql  string
	args []any
}

// holdAppends holds the journal's pending stream appends for the
// transaction's next statement (st renders them), first.
func (t *jtx) holdAppends(st *postgres.Store, appends []streamAppend) error {
	t.appends, t.appendSQL = nil, nil
	for _, a := range appends {
		sql, args, err := st.HeldAppendStatement(a.stream, a.chunks)
		if err != nil {
			return err
		}
		t.appendSQL = append(t.appendSQL, heldStatement{sql: sql, args: args})
	}
	t.appends = appends
	return nil
}

// takeAppends returns the chunks of the pending stream appends the
// transaction holds (holdAppends), when every one is for stream and none
// went out yet, and drops them from what the transaction sends: its body
// writes them itself, ahead of its own, in one append (their chunks then
// share rows). nil otherwise. The journal keeps them until the commit,
// for a body that fails.
func (t *jtx) takeAppends(stream string) []store.ChunkWrite {
	var out []store.ChunkWrite
	for _, a := range t.appends {
		if a.stream != stream {
			return nil
		}
		out = append(out, a.chunks...)
	}
	t.appends, t.appendSQL = nil, nil
	return out
}

// queueAppends moves the held appends' statements to the held writes.
func (t *jtx) queueAppends() {
	if len(t.appendSQL) == 0 {
		return
	}
	if t.held == nil {
		t.held = &pgx.Batch{}
	}
	for _, s := range t.appendSQL {
		t.held.Queue(s.sql, s.args...)
	}
	t.appends, t.appendSQL = nil, nil
}

// Defer holds a write for the next statement (postgres.Deferrer).
func (t *jtx) Defer(_ context.Context, sql string, args ...any) {
	t.queueAppends()
	if t.held == nil {
		t.held = &pgx.Batch{}
	}
	t.held.Queue(sql, args...)
}

// batch returns a batch that starts the transaction if needed and holds
// the held writes; more statements are queued on it by the caller.
func (t *jtx) batch() *pgx.Batch {
	t.queueAppends()
	b := &pgx.Batch{}
	if !t.begun {
		b.Queue(postgres.BeginSQL)
		// Its notifications go after its COMMIT (commitWith), so that the
		// commit does not wait for the notification lock.
		b.Queue(postgres.AnnounceAfterCommitSQL)
		t.begun = true
	}
	if t.held != nil {
		b.QueuedQueries = append(b.QueuedQueries, t.held.QueuedQueries...)
		t.held = nil
	}
	return b
}

// holdsWrites reports whether writes wait for the next statement.
func (t *jtx) holdsWrites() bool { return t.held != nil || len(t.appendSQL) > 0 }

// pipelined reports whether the next statement must go out in a batch.
func (t *jtx) pipelined() bool { return !t.begun || t.holdsWrites() }

func (j *journal) begin(ctx context.Context) (*jtx, error) {
	conn, err := j.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return &jtx{conn: conn}, nil
}

func (t *jtx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if !t.pipelined() {
		return t.conn.Exec(ctx, sql, args...)
	}
	var tag pgconn.CommandTag
	b := t.batch()
	b.Queue(sql, args...).Exec(func(ct pgconn.CommandTag) error { tag = ct; return nil })
	return tag, t.conn.SendBatch(ctx, b).Close()
}

func (t *jtx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if !t.pipelined() {
		return t.conn.Query(ctx, sql, args...)
	}
	return postgres.QueryAfter(ctx, t.conn, t.batch(), sql, args...)
}

func (t *jtx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if !t.pipelined() {
		return t.conn.QueryRow(ctx, sql, args...)
	}
	return postgres.QueryRowAfter(ctx, t.conn, t.batch(), sql, args...)
}

// commitWith runs a last statement (after the held writes) and commits,
// then sends the notifications the transaction left (AnnouncePendingSQL),
// in one round trip. A failed announcement is logged with log: the
// transaction committed.
func (t *jtx) commitWith(ctx context.Context, log zerolog.Logger, sql string, args ...any) error {
	b := t.batch()
	b.Queue(sql, args...)
	b.Queue(postgres.CommitSQL)
	b.Queue(postgres.AnnouncePendingSQL)
	afterErr, err := postgres.SendCommit(ctx, t.conn, b, 1)
	if err != nil {
		return err
	}
	t.begun = false // committed
	if afterErr != nil {
		log.Warn().Err(afterErr).Str("event", "journal.announce_failed").
			Msg("a committed step's notifications failed: readers and sweeps find what they announced at their next poll")
	}
	return nil
}

// close rolls back what is not committed and returns the connection.
func (t *jtx) close(ctx context.Context) {
	if t.closed {
		return
	}
	t.closed = true
	if t.begun {
		// A connection left inside a transaction is closed by the pool
		// when released, should the rollback fail.
		_, _ = t.conn.Exec(ctx, postgres.RollbackSQL)
	}
	t.conn.Release()
}

// pgxTx adapts a journal transaction to DBOS's transaction interface,
// which the store's transaction bodies take.
type pgxTx struct{ tx *jtx }

var _ dbos.Tx = pgxTx{}

func (t pgxTx) Exec(ctx context.Context, sql string, args ...any) (dbos.Result, error) {
	tag, err := t.tx.Exec(ctx, sql, args...)
	return rowsAffected(tag.RowsAffected()), err
}

func (t pgxTx) Query(ctx context.Context, sql string, args ...any) (dbos.Rows, error) {
	rows, err := t.tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgxRows{rows}, nil
}

func (t pgxTx) QueryRow(ctx context.Context, sql string, args ...any) dbos.Row {
	return t.tx.QueryRow(ctx, sql, args...)
}

// Defer holds a write for the transaction's next statement
// (postgres.Deferrer, through the steps' transaction adapter).
func (t pgxTx) Defer(ctx context.Context, sql string, args ...any) { t.tx.Defer(ctx, sql, args...) }

// TakeAppends hands the journal's pending stream appends to the body
// (jtx.takeAppends, through the steps' transaction adapter).
func (t pgxTx) TakeAppends(stream string) []store.ChunkWrite { return t.tx.takeAppends(stream) }

// Commit and Rollback are the journal's: a step body never ends its
// transaction.
func (t pgxTx) Commit(context.Context) error {
	return errors.New("workflows: a journal step's transaction is committed by the journal")
}

func (t pgxTx) Rollback(context.Context) error {
	return errors.New("workflows: a journal step's transaction is rolled back by the journal")
}

type rowsAffected int64

func (n rowsAffected) RowsAffected() (int64, error) { return int64(n), nil }

type pgxRows struct{ pgx.Rows }

func (r pgxRows) Close() error { r.Rows.Close(); return r.Rows.Err() }
