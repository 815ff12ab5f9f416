package postgres_test

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// answerMessage is a message of the tests' answers: its payload names the
// call, its key the submission.
func answerMessage(sub helix.ToolSubmission) func(int64) (postgres.Message, error) {
	return func(at int64) (postgres.Message, error) {
		return postgres.Message{Topic: "helix.tool_call:" + sub.ToolCallID,
			Payload: base64.StdEncoding.EncodeToString([]byte(sub.ToolCallID)), Key: "helix.submission:" + sub.ToolCallID}, nil
	}
}

// interrupted is the chunk a suspension appends when its step ends the
// run interrupted.
func interrupted(reason string) helix.Chunk {
	return &helix.TextDeltaChunk{Base: helix.Base{AgentID: "payer", AgentType: "payer", Step: 1}, Delta: "interrupted: " + reason}
}

// waitingSession records root session id, its run id-r (workflow id-wf,
// whose DBOS status is wfStatus) suspended on calls, each waiting in the
// session and routed to the run's workflow.
func waitingSession(t *testing.T, st *postgres.Store, id, wfStatus string, calls ...store.PendingClientToolCall) {
	t.Helper()
	ctx := t.Context()
	_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: id, AgentType: "payer"})
	require.NoError(t, err)
	_, err = st.CreateRun(ctx, store.CreateRunParams{RunID: id + "-r", SessionID: id, Turn: 1, WorkflowID: id + "-wf"})
	require.NoError(t, err)
	_, err = st.Pool().Exec(ctx, `INSERT INTO dbos.workflow_status (workflow_uuid, status, created_at) VALUES ($1, $2, 0)`, id+"-wf", wfStatus)
	require.NoError(t, err)
	p := store.SuspendParams{SessionID: id, RunID: id + "-r", StepID: id + "-r:1", Step: 1, Record: []byte(`{"step":1}`),
		Interrupted: interrupted}
	for _, c := range calls {
		c.WorkflowID = id + "-wf"
		p.Pending = append(p.Pending, store.PendingCall{Call: c})
	}
	_, err = st.SuspendStep(ctx, p)
	require.NoError(t, err)
}

// answerRows is what an answer writes, read back with the session's name
// replaced by "S": the session's calls and completed calls, its usage,
// its run's status, answer and wake, and the DBOS messages to its run.
type answerRows struct {
	Pending   map[string]store.PendingClientToolCall
	Completed map[string]int64
	Usage     []string
	Run       string
	Messages  []string
}

func readAnswerRows(t *testing.T, st *postgres.Store, id string) answerRows {
	t.Helper()
	ctx := t.Context()
	s, err := st.LoadState(ctx, id)
	require.NoError(t, err)
	var r answerRows
	r.Pending, r.Completed = s.PendingClientToolCalls, s.CompletedClientToolCalls
	for k, c := range r.Pending {
		for _, f := range []*string{&c.OwnerSessionID, &c.RunID, &c.WorkflowID, &c.SentTo} {
			*f = strings.ReplaceAll(*f, id, "S")
		}
		r.Pending[k] = c
	}
	u, err := st.ListUsage(ctx, id)
	require.NoError(t, err)
	for _, x := range u {
		r.Usage = append(r.Usage, strings.Join([]string{strings.ReplaceAll(x.RunID, id, "S"), x.SourceType, x.SourceName, x.Key,
			time.Duration(*x.Value * float64(time.Millisecond)).String()}, " "))
	}
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT concat_ws(' ', status, answered_at IS NOT NULL, hibernated_at IS NOT NULL,
			woken_at IS NOT NULL, wakes) FROM helix.runs WHERE run_id = $1`, id+"-r").Scan(&r.Run))
	rows, err := st.Pool().Query(ctx, `SELECT topic || ' ' || message || ' ' || replace(message_uuid, $1, 'S') FROM dbos.notifications
		WHERE destination_uuid = $2 ORDER BY created_at_epoch_ms, message_uuid`, id, id+"-wf")
	require.NoError(t, err)
	r.Messages, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return r
}

// answerGenerally records sub as SubmitToolResult's general path does:
// RecordSubmission and SendMessageStatement in one transaction.
func answerGenerally(t *testing.T, st *postgres.Store, id string, sub helix.ToolSubmission) (*store.RecordedSubmission, *string) {
	t.Helper()
	var rec *store.RecordedSubmission
	var woke *string
	require.NoError(t, pgx.BeginFunc(t.Context(), st.Pool(), func(tx pgx.Tx) (err error) {
		if rec, err = st.WithQuerier(postgres.PgxQuerier(tx)).RecordSubmission(t.Context(), id, sub); err != nil || rec.AlreadyCompleted {
			return err
		}
		m, err := answerMessage(sub)(rec.Call.SubmittedAt)
		require.NoError(t, err)
		sql, args := postgres.SendMessageStatement(rec.Call.WorkflowID, m.Topic, m.Payload, postgres.MessageKey(m.Key, rec.Call.WorkflowID), false)
		return tx.QueryRow(t.Context(), sql, args...).Scan(&woke)
	}))
	return rec, woke
}

// SubmitAnswer, the answer's common path in one statement, writes what
// the general path writes (RecordSubmission and the message, in one
// transaction): the same call, completed map, usage row, run status and
// DBOS message, to a live wait and to a hibernated run (one update of the
// run's row then: its return to running with its wake).
func TestSubmitAnswerWritesWhatRecordSubmissionWrites(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	now := time.UnixMilli(1_800_000_000_000)
	st := newClusterStore(t, postgres.WithClock(func() time.Time { return now }))
	calls := []store.PendingClientToolCall{{ToolCallID: "a1", ToolName: "pay", Kind: helix.SubmissionApprovalResponse, Index: 0},
		{ToolCallID: "c2", ToolName: "ask", Kind: helix.SubmissionClientToolResult, Index: 1}}

	for _, hibernated := range []bool{false, true} {
		fast, general := "fast", "general"
		status := "PENDING"
		if hibernated {
			fast, general, status = "fast-h", "general-h", "SUCCESS"
		}
		for _, id := range []string{fast, general} {
			waitingSession(t, st, id, status, calls...)
			if hibernated {
				ok, err := postgres.HibernateRun(ctx, postgres.PgxQuerier(st.Pool()), id+"-r", id+"-wf", 0, []string{"helix.tool_call:a1", "helix.tool_call:c2"}, 0)
				require.NoError(t, err)
				require.True(t, ok)
			}
		}
		now = now.Add(1500 * time.Millisecond)
		at := map[string]int64{}
		for _, sub := range []helix.ToolSubmission{helix.Approve("a1", "fine"), {ToolCallID: "c2", Kind: helix.SubmissionClientToolResult,
			Result: []byte(`{"n":1}`)}} {
			rec, woke, ok, err := st.SubmitAnswer(ctx, fast, sub, answerMessage(sub))
			require.NoError(t, err)
			require.True(t, ok, "%s: the common path applies", sub.ToolCallID)
			want, wantWoke := answerGenerally(t, st, general, sub)
			require.Equal(t, want.Unresolved, rec.Unresolved, sub.ToolCallID)
			require.Equal(t, want.Call.ToolName, rec.Call.ToolName)
			require.Equal(t, fast, rec.Call.OwnerSessionID)
			require.Equal(t, fast+"-wf", rec.Call.WorkflowID)
			require.Equal(t, now.UnixMilli(), rec.Call.SubmittedAt)
			require.Equal(t, wantWoke != nil, woke != nil, "%s: woke the run", sub.ToolCallID)
			if woke != nil {
				require.Equal(t, strings.ReplaceAll(*wantWoke, general, "S"), strings.ReplaceAll(*woke, fast, "S"))
			}
			require.Equal(t, readAnswerRows(t, st, general), readAnswerRows(t, st, fast), "%s (hibernated: %v)", sub.ToolCallID, hibernated)
			at[sub.ToolCallID] = now.UnixMilli()
			now = now.Add(time.Second)
		}
		rows := readAnswerRows(t, st, fast)
		require.Equal(t, at, rows.Completed)
		require.Len(t, rows.Usage, 2)
		if hibernated {
			require.Equal(t, "running t f t 1", rows.Run, "woken by the first answer, running after the second")
			require.Equal(t, []string{"helix.tool_call:c2 YzI= helix.submission:c2::S-wf"}, rows.Messages,
				"the answer that woke the run sent no message; the next went to the woken run")
		} else {
			require.Equal(t, "running t f f 0", rows.Run)
			require.Len(t, rows.Messages, 2)
		}
	}
}

// Where SubmitAnswer's common path does not apply it writes nothing and
// says so (RecordSubmission then decides): an unknown session or call, a
// sub-agent's session or a call routed to one, an answer of another kind,
// a result with an output schema to validate, a call answered already; a
// workflow cancelled with DBOS's tools fails it with HX410, nothing
// written.
func TestSubmitAnswerLeavesTheRestToRecordSubmission(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newClusterStore(t)
	waitingSession(t, st, "s", "PENDING", store.PendingClientToolCall{ToolCallID: "a1", ToolName: "pay", Kind: helix.SubmissionApprovalResponse},
		store.PendingClientToolCall{ToolCallID: "c2", ToolName: "ask", Kind: helix.SubmissionClientToolResult, Index: 1,
			OutputSchema: []byte(`{"type":"object"}`)})
	_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: "child", AgentType: "sub", ParentSessionID: "s"})
	require.NoError(t, err)
	_, err = st.CreateRun(ctx, store.CreateRunParams{RunID: "child-r", SessionID: "child", Turn: 1, WorkflowID: "child-wf"})
	require.NoError(t, err)
	_, err = st.SuspendStep(ctx, store.SuspendParams{SessionID: "child", RunID: "child-r", StepID: "child-r:1", Step: 1,
		Record: []byte(`{"step":1}`), Interrupted: interrupted,
		Pending: []store.PendingCall{{Call: store.PendingClientToolCall{ToolCallID: "k1", ToolName: "pay", Kind: helix.SubmissionApprovalResponse,
			WorkflowID: "child-wf"}}}})
	require.NoError(t, err)
	written := func() string {
		var v string
		require.NoError(t, st.Pool().QueryRow(ctx, `SELECT string_agg(session_id || ':' || version, ',' ORDER BY session_id) ||
			'/' || (SELECT count(*) FROM helix.usage) || '/' || (SELECT count(*) FROM dbos.notifications) FROM helix.sessions`).Scan(&v))
		return v
	}
	before := written()
	for name, c := range map[string]struct {
		root string
		sub  helix.ToolSubmission
	}{
		"unknown session":         {"nobody", helix.Approve("a1", "")},
		"unknown call":            {"s", helix.Approve("zz", "")},
		"a sub-agent's session":   {"child", helix.Approve("k1", "")},
		"routed to a sub-agent":   {"s", helix.Approve("k1", "")},
		"while a sub-agent waits": {"s", helix.Approve("a1", "")},
		"another kind":            {"s", helix.Approve("c2", "")},
		"a result to validate":    {"s", helix.ToolSubmission{ToolCallID: "c2", Kind: helix.SubmissionClientToolResult, Result: []byte(`{}`)}},
	} {
		rec, woke, ok, err := st.SubmitAnswer(ctx, c.root, c.sub, answerMessage(c.sub))
		require.NoError(t, err, name)
		require.False(t, ok, name)
		require.Nil(t, rec, name)
		require.Nil(t, woke, name)
		require.Equal(t, before, written(), "%s: nothing written", name)
	}

	waitingSession(t, st, "s2", "PENDING", store.PendingClientToolCall{ToolCallID: "b1", ToolName: "pay", Kind: helix.SubmissionApprovalResponse})
	_, _, ok, err := st.SubmitAnswer(ctx, "s2", helix.Approve("b1", ""), answerMessage(helix.Approve("b1", "")))
	require.NoError(t, err)
	require.True(t, ok, "no sub-agent waits in this conversation")
	before = written()
	_, _, ok, err = st.SubmitAnswer(ctx, "s2", helix.Approve("b1", "again"), answerMessage(helix.Approve("b1", "again")))
	require.NoError(t, err)
	require.False(t, ok, "answered already: RecordSubmission reports it")
	require.Equal(t, before, written())
	rec, err := st.RecordSubmission(ctx, "s2", helix.Approve("b1", "again"))
	require.NoError(t, err)
	require.True(t, rec.AlreadyCompleted)

	_, err = st.Pool().Exec(ctx, `UPDATE dbos.workflow_status SET status = 'CANCELLED' WHERE workflow_uuid = 'child-wf'`)
	require.NoError(t, err)
	waitingSession(t, st, "cancelled", "CANCELLED", store.PendingClientToolCall{ToolCallID: "x1", ToolName: "pay", Kind: helix.SubmissionApprovalResponse})
	before = written()
	_, _, ok, err = st.SubmitAnswer(ctx, "cancelled", helix.Approve("x1", ""), answerMessage(helix.Approve("x1", "")))
	require.False(t, ok)
	require.ErrorContains(t, err, "HX410")
	require.Equal(t, before, written(), "a refused message leaves nothing written")
}
