package postgres_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// The tests of a model call's record written as the step's assistant
// message row: the journal's statement
// (helix.record_model_message) called as the journal calls it, for the
// run of turn 1 of its session, whose workflow is "<session>-turn-1".

// modelRowSession creates session id with a user message and its first
// run, whose workflow is owned by owner "o".
func modelRowSession(t *testing.T, st *postgres.Store, id string) {
	t.Helper()
	ctx := t.Context()
	_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: id, AgentType: "a"})
	require.NoError(t, err)
	_, err = st.AppendMessages(ctx, id, []helix.Message{helix.UserMessage("go")})
	require.NoError(t, err)
	_, err = st.CreateRun(ctx, store.CreateRunParams{RunID: id + "-run", SessionID: id, WorkflowID: id + "-turn-1"})
	require.NoError(t, err)
	_, err = st.Pool().Exec(ctx, `INSERT INTO dbos.workflow_status (workflow_uuid, status, owner_xid, created_at)
		VALUES ($1, 'PENDING', 'o', 0)`, id+"-turn-1")
	require.NoError(t, err)
}

// assistant is the assistant message of the model records below.
var assistant = helix.AssistantMessage("", helix.ToolCall{ID: "c1", Name: "note", Arguments: json.RawMessage(`{"z":1,"a":2}`)})

// recordModelRow writes the model record of step id (1000000 + id) of
// session's turn-1 workflow at seq, as the journal does, and returns what
// the statement returned (the tool calls as stored, or nil: the record
// went to helix.step_journal).
func recordModelRow(ctx context.Context, t *testing.T, st *postgres.Store, session string, id, seq int) *string {
	t.Helper()
	msg, err := json.Marshal(assistant)
	require.NoError(t, err)
	var calls *string
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT helix.record_model_message($1, 'o', ARRAY[$2::int],
			ARRAY['helix.call_model'], ARRAY['{"<a":{}}'], ARRAY[NULL::text], ARRAY[1700000000000::bigint], ARRAY[1700000000300::bigint],
			$3, $4, $5::jsonb, json_build_array(1, 0, $2::int - 1000000, 1700000000000::bigint, 300, 290))`,
		session+"-turn-1", 1_000_000+id, session, seq, string(msg)).Scan(&calls))
	return calls
}

// journalModelRecords returns the IDs of the model records in
// session's turn-1 workflow's helix.step_journal rows.
func journalModelRecords(t *testing.T, st *postgres.Store, session string) []int {
	t.Helper()
	rows, err := st.Pool().Query(t.Context(), `SELECT id FROM helix.step_journal WHERE workflow_id = $1 AND name = 'helix.call_model' ORDER BY id`,
		session+"-turn-1")
	require.NoError(t, err)
	defer rows.Close()
	var ids []int
	for rows.Next() {
		var id int
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	return ids
}

// requireMessages checks what every reader of session's messages shows:
// want, and no pending row.
func requireMessages(t *testing.T, st *postgres.Store, session string, want int) {
	t.Helper()
	ctx := t.Context()
	n, err := st.GetMessageCount(ctx, session)
	require.NoError(t, err)
	require.Equal(t, want, n)
	for offset := 0; offset <= want+2; offset++ {
		page, err := st.GetMessages(ctx, session, &store.GetMessagesOptions{Offset: offset})
		require.NoError(t, err)
		require.Len(t, page.Messages, max(want-offset, 0), "offset %d", offset)
		require.Equal(t, want, page.Total)
		require.False(t, page.HasMore)
	}
}

// A model record written as an assistant row is pending until a commit
// counts it: no reader of messages shows it (GetMessages at every offset,
// GetMessageCount, a checkpoint's messages, a clone), the commit of its
// step keeps it (its meta stays, for its workflow's replay) and writes the
// step's other messages after it.
func TestPendingAssistantRowIsInvisible(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newClusterStore(t)
	modelRowSession(t, st, "p")

	calls := recordModelRow(ctx, t, st, "p", 0, 1)
	require.NotNil(t, calls, "written as the row")
	require.JSONEq(t, `[{"id":"c1","name":"note","arguments":{"a":2,"z":1}}]`, *calls)
	requireMessages(t, st, "p", 1)

	res, err := st.CommitStep(ctx, store.StepCommit{SessionID: "p", RunID: "p-run", Step: 1,
		Messages: []helix.Message{assistant, helix.ToolResultMessage("c1", "note", "ok")}})
	require.NoError(t, err)
	require.Equal(t, 3, res.MessageCount)
	requireMessages(t, st, "p", 3)
	var meta *string
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT meta::text FROM helix.messages m JOIN helix.sessions s ON s.key = m.session_key WHERE s.session_id = 'p' AND seq = 1`).Scan(&meta))
	require.NotNil(t, meta, "the commit kept the row its model record is")
	require.Empty(t, journalModelRecords(t, st, "p"), "nothing moved")

	// A second step's record, pending.
	require.NotNil(t, recordModelRow(ctx, t, st, "p", 3, 3))
	requireMessages(t, st, "p", 3)
	cpMsgs, err := st.GetCheckpointMessages(ctx, res.CheckpointID)
	require.NoError(t, err)
	require.Len(t, cpMsgs, 3)
	clone, err := st.CloneSession(ctx, store.CloneParams{FromSessionID: "p", ToSessionID: "p-clone"})
	require.NoError(t, err)
	require.Equal(t, 3, clone.MessageCount)
	requireMessages(t, st, "p-clone", 3)
	var metas int
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*) FROM helix.messages m JOIN helix.sessions s ON s.key = m.session_key WHERE s.session_id = 'p-clone' AND meta IS NOT NULL`).Scan(&metas))
	require.Zero(t, metas, "a clone copies messages, not records: its own runs must not find the source's")

	// A writer at the pending row's seq moves its record away first.
	n, err := st.AppendMessages(ctx, "p", []helix.Message{helix.UserMessage("more")})
	require.NoError(t, err)
	require.Equal(t, 4, n)
	requireMessages(t, st, "p", 4)
	page, err := st.GetMessages(ctx, "p", &store.GetMessagesOptions{Offset: 3})
	require.NoError(t, err)
	require.Equal(t, helix.RoleUser, page.Messages[0].Role)
	require.Equal(t, []int{1_000_003}, journalModelRecords(t, st, "p"), "the evicted row's record, for its workflow")
	var output string
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT output FROM helix.step_journal WHERE workflow_id = 'p-turn-1' AND id = 1000003`).Scan(&output))
	require.JSONEq(t, `{"result":{"type":"tool_calls","toolCalls":[{"id":"c1","name":"note","arguments":{"a":2,"z":1}}],
		"usage":{"inputTokens":0,"outputTokens":0,"cachedTokens":0,"cacheWriteTokens":0}},"durationMs":290,"messageCount":3}`, output,
		"the record rebuilt from the row (helix.message_record)")
}

// A model record whose seq is no longer the session's message count (a
// writer came first), or is taken by another execution's pending row, goes
// to helix.step_journal whole; the step's commit then moves the other
// row's record away and writes its own assistant message.
func TestModelRecordSeqTaken(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newClusterStore(t)
	modelRowSession(t, st, "s")

	require.Nil(t, recordModelRow(ctx, t, st, "s", 0, 0), "seq 0 is not the message count (1)")
	require.Equal(t, []int{1_000_000}, journalModelRecords(t, st, "s"))

	// Another execution's pending row at seq 1 (a different message).
	other, err := json.Marshal(helix.AssistantMessage("other"))
	require.NoError(t, err)
	_, err = st.Pool().Exec(ctx, `INSERT INTO helix.messages (session_key, seq, message, meta)
		SELECT key, 1, $1, '[1,0,7,1700000000000]' FROM helix.sessions WHERE session_id = 's'`,
		string(other))
	require.NoError(t, err)
	require.Nil(t, recordModelRow(ctx, t, st, "s", 1, 1), "the seq is taken")
	require.Equal(t, []int{1_000_000, 1_000_001}, journalModelRecords(t, st, "s"))
	requireMessages(t, st, "s", 1)

	_, err = st.CommitStep(ctx, store.StepCommit{SessionID: "s", RunID: "s-run", Step: 1, ExpectMessageCount: 1,
		Messages: []helix.Message{assistant, helix.ToolResultMessage("c1", "note", "ok")}})
	require.NoError(t, err)
	requireMessages(t, st, "s", 3)
	page, err := st.GetMessages(ctx, "s", nil)
	require.NoError(t, err)
	require.Equal(t, []helix.ToolCall{{ID: "c1", Name: "note", Arguments: json.RawMessage(`{"a": 2, "z": 1}`)}}, page.Messages[1].ToolCalls,
		"the commit's own assistant message, not the other row's")
	require.Equal(t, []int{1_000_000, 1_000_001, 1_000_007}, journalModelRecords(t, st, "s"), "the other row's record moved")
}

// TruncateMessages (a Retry's) racing a model record: a record written
// first is moved to helix.step_journal by the truncation, pending or
// committed; a record that waits for the truncation's lock (the session's
// row) finds the count moved and goes to helix.step_journal. A row is never
// left below the message count.
func TestModelRecordRacesTruncation(t *testing.T) {
	t.Parallel()
	t.Run("record first", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		st := newClusterStore(t)
		modelRowSession(t, st, "a")
		require.NotNil(t, recordModelRow(ctx, t, st, "a", 0, 1))
		_, err := st.CommitStep(ctx, store.StepCommit{SessionID: "a", RunID: "a-run", Step: 1,
			Messages: []helix.Message{assistant, helix.ToolResultMessage("c1", "note", "ok")}})
		require.NoError(t, err)
		require.NotNil(t, recordModelRow(ctx, t, st, "a", 3, 3), "step 2's, pending")
		require.NoError(t, st.TruncateMessages(ctx, "a", 1))
		requireMessages(t, st, "a", 1)
		require.Equal(t, []int{1_000_000, 1_000_003}, journalModelRecords(t, st, "a"),
			"the committed row's record and the pending one's moved: the workflow may replay")
	})
	t.Run("truncation first", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		st := newClusterStore(t)
		modelRowSession(t, st, "b")
		_, err := st.AppendMessages(ctx, "b", []helix.Message{helix.UserMessage("two")})
		require.NoError(t, err)

		tx, err := st.Pool().Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		require.NoError(t, st.WithQuerier(postgres.PgxQuerier(tx)).TruncateMessages(ctx, "b", 1))
		done := make(chan *string, 1)
		go func() { done <- recordModelRow(ctx, t, st, "b", 0, 2) }()
		require.Eventually(t, func() bool {
			var waiting int
			require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE wait_event_type = 'Lock' AND query LIKE '%record_model_message%'`).Scan(&waiting))
			return waiting == 1
		}, 10*time.Second, 5*time.Millisecond, "the record waits for the session's row")
		require.NoError(t, tx.Commit(ctx))
		require.Nil(t, <-done, "the count moved: the record went to helix.step_journal")
		requireMessages(t, st, "b", 1)
		var rows int
		require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*) FROM helix.messages m JOIN helix.sessions s ON s.key = m.session_key WHERE s.session_id = 'b'`).Scan(&rows))
		require.Equal(t, 1, rows, "no row written")
		require.Equal(t, []int{1_000_000}, journalModelRecords(t, st, "b"))
	})
}
