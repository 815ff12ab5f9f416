package postgres

import (
	"context"
)

// The statements of the step journal (workflows' journal: the agent
// loop's record of its steps, in place of DBOS's step checkpoints). The
// journal reads a workflow's records once when an execution starts
// (QueryJournal), and writes them with one statement per write, which it
// sends alone, in a batch after stream appends, or as the last statement
// of a step's transaction, with its COMMIT: hence the statements are
// returned (sql, args) for the journal to send, not run here. The
// encoding of the records (their outputs, the rows that pack several, the
// checkpoints' journals) is the journal's (workflows/journalcodec.go);
// the SQL functions that write them are the migrations'.

// QueryJournal queries the records of workflow workflowID's execution,
// from step firstStep on, in one round trip. Its rows, each with the
// columns (owner, status, id, n, name, output, error, checkpoint, meta):
//
//   - the workflow's DBOS status row (owner its owner token, status its
//     status, both non-NULL; checkpoint and meta NULL), once per
//     helix.step_journal row of the workflow (id, n, name, output, error
//     the row's), or once with those NULL when it has none; no such row
//     when DBOS has no such workflow;
//   - the journals the checkpoints of run runID carry for segment segment
//     of it (helix.run_journals: a walk of the run's own
//     checkpoints, not the session's history): n the checkpoint's message
//     count, which its short commit entry needs, output
//     the journal, checkpoint its ID;
//   - the model records the message rows of session sessionID hold for
//     that segment (helix.run_model_messages): id the
//     row's seq, output its message, meta its meta.
//
// Reads only.
func QueryJournal(ctx context.Context, q Querier, workflowID string, firstStep int, sessionID, runID string, segment int) (Rows, error) {
	return q.Query(ctx, openJournalSQL, workflowID, firstStep, sessionID, runID, segment)
}

const openJournalSQL = `SELECT w.owner_xid, w.status, o.id, o.n, o.name, o.output, o.error, NULL::text, NULL::text
FROM dbos.workflow_status w
LEFT JOIN helix.step_journal o ON o.workflow_id = w.workflow_uuid AND o.id >= $2
WHERE w.workflow_uuid = $1
UNION ALL
SELECT NULL, NULL, NULL, c.message_count, NULL, c.journal, NULL, c.checkpoint_id, NULL FROM helix.run_journals($3, $4, $5) c
UNION ALL
SELECT NULL, NULL, m.seq, NULL, NULL, m.message, NULL, NULL, m.meta FROM helix.run_model_messages($3, $4, $5) m`

// StepRecords are journal records, column by column (the i-th record is
// the i-th element of each): consecutive step IDs, names, JSON outputs
// (nil: none), errors (nil: none), and start and end times (Unix ms).
type StepRecords struct {
	IDs       []int32
	Names     []string
	Outputs   []*string
	Errors    []*string
	Started   []int64
	Completed []int64
}

// RecordStepsStatement returns the statement that writes records r of
// workflow workflowID (helix.record_steps; one row per
// call), fenced by owner, the workflow's owner token: it fails
// unless the workflow is pending and owned by that execution. The records
// of a call have consecutive IDs and become one row (the function would
// write a row per run of consecutive IDs otherwise); their outputs are
// JSON, which the row embeds as is. Idempotent per step ID: a record
// already written stands.
func RecordStepsStatement(workflowID, owner string, r StepRecords) (sql string, args []any) {
	return recordStepsSQL, []any{workflowID, owner, r.IDs, r.Names, r.Outputs, r.Errors, r.Started, r.Completed}
}

const recordStepsSQL = `SELECT helix.record_steps($1, $2, $3, $4, $5, $6, $7, $8)`

// RecordModelMessageStatement returns the statement that writes records r
// as RecordStepsStatement does, but the last one, a model call's, as the
// step's assistant message row of session sessionID at seq (message and
// meta its columns) when the session's message count is still seq
// (helix.record_model_message). Its one value is the
// row's tool calls as stored (JSON text), NULL when the record went to
// helix.step_journal instead.
func RecordModelMessageStatement(workflowID, owner string, r StepRecords, sessionID string, seq int, message, meta string) (sql string, args []any) {
	return recordModelMessageSQL, []any{workflowID, owner, r.IDs, r.Names, r.Outputs, r.Errors, r.Started, r.Completed,
		sessionID, seq, message, meta}
}

const recordModelMessageSQL = `SELECT helix.record_model_message($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`

// CheckJournalOwnerStatement returns the statement that ends a
// transaction step whose records its checkpoint carries: the owner check
// and lock of helix.record_steps alone (helix.check_journal_owner).
func CheckJournalOwnerStatement(workflowID, owner string) (sql string, args []any) {
	return `SELECT helix.check_journal_owner($1, $2)`, []any{workflowID, owner}
}

// ReadModelRowToolCalls reads the tool calls (JSON text, "null" when it
// has none) of the message row of session sessionID at seq that holds the
// model record of step step (counted from the journal's first) of segment
// segment of the run of turn turn (a primary-key look-up); found is false
// when no such row was written. Reads only.
func ReadModelRowToolCalls(ctx context.Context, q Querier, sessionID string, seq, turn, segment, step int) (calls *string, found bool, err error) {
	err = q.QueryRow(ctx, committedRowSQL, sessionID, seq, turn, segment, step).Scan(&calls)
	if isNoRows(err) {
		return nil, false, nil
	}
	return calls, err == nil, err
}

const committedRowSQL = `SELECT coalesce((m.message->'toolCalls')::text, 'null')
FROM helix.sessions s JOIN helix.messages m ON m.session_key = s.key AND m.seq = $2
WHERE s.session_id = $1 AND m.meta->>0 = $3::int::text AND m.meta->>1 = $4::int::text AND m.meta->>2 = $5::int::text`

// StepJournalRow is a row of helix.step_journal: N records from step ID,
// its own columns when N is 1, packed in Output otherwise.
type StepJournalRow struct {
	ID, N  int
	Name   string
	Output *string
	Error  *string
}

// ReadStepJournalRow reads the helix.step_journal row of workflowID that
// may cover step: the last row that starts at or before it (whether it
// reaches it is ID+N > step); found is false when there is none. Reads
// only.
func ReadStepJournalRow(ctx context.Context, q Querier, workflowID string, step int) (r StepJournalRow, found bool, err error) {
	var id, n int32
	err = q.QueryRow(ctx, `SELECT id, n, name, output, error FROM helix.step_journal
WHERE workflow_id = $1 AND id <= $2 ORDER BY id DESC LIMIT 1`, workflowID, step).Scan(&id, &n, &r.Name, &r.Output, &r.Error)
	if isNoRows(err) {
		return StepJournalRow{}, false, nil
	}
	r.ID, r.N = int(id), int(n)
	return r, err == nil, err
}

// ReadCheckpointJournal reads the journal of the first of checkpoints
// (IDs of session sessionID) that was written with one, with its ID and
// message count (CheckpointJournalSQL); found is false when none was.
// Reads only.
func ReadCheckpointJournal(ctx context.Context, q Querier, checkpoints []string, sessionID string) (checkpointID, journal string, messageCount int,
	found bool, err error) {
	err = q.QueryRow(ctx, CheckpointJournalSQL, checkpoints, sessionID).Scan(&checkpointID, &journal, &messageCount)
	if isNoRows(err) {
		return "", "", 0, false, nil
	}
	return checkpointID, journal, messageCount, err == nil, err
}
