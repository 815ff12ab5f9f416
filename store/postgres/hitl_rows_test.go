package postgres_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

// A conversation that answered many calls: the completed calls' map is
// read and written by entry (completedOnly, rowWrite), and still makes an
// answer given twice "already completed", a reused ID refused and a dropped
// call's ID free, whichever of the many calls it is.
func TestManyAnswersInOneConversation(t *testing.T) {
	ctx := t.Context()
	st := newTestStore(t)
	_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: "many", AgentType: "a"})
	require.NoError(t, err)
	_, err = st.CreateRun(ctx, store.CreateRunParams{RunID: "many-run", SessionID: "many", WorkflowID: "many-wf"})
	require.NoError(t, err)
	suspend := func(step int, ids ...string) error {
		p := store.SuspendParams{SessionID: "many", RunID: "many-run", StepID: fmt.Sprintf("many-run:%d", step), Step: step,
			Record: []byte(`{}`)}
		for _, id := range ids {
			p.Pending = append(p.Pending, store.PendingCall{Call: store.PendingClientToolCall{ToolCallID: id, ToolName: "ask",
				Kind: helix.SubmissionApprovalResponse, WorkflowID: "many-wf"}})
		}
		_, err := st.SuspendStep(ctx, p)
		return err
	}
	const n = 40
	for i := range n {
		id := fmt.Sprintf("c%d", i)
		require.NoError(t, suspend(i+1, id))
		if i == 7 {
			// Timed out rather than answered.
			_, err := st.ResolveToolCall(ctx, store.ResolveParams{SessionID: "many", RunID: "many-run", ToolCallID: id, Step: i + 1, TimedOut: true})
			require.NoError(t, err)
		} else {
			rec, err := st.RecordSubmission(ctx, "many", helix.Approve(id, ""))
			require.NoError(t, err)
			require.False(t, rec.AlreadyCompleted)
			_, err = st.ResolveToolCall(ctx, store.ResolveParams{SessionID: "many", RunID: "many-run", ToolCallID: id, Step: i + 1})
			require.NoError(t, err)
		}
		_, err = st.CommitStep(ctx, store.StepCommit{SessionID: "many", RunID: "many-run", Step: i + 1, ClearSuspension: true,
			Messages: []helix.Message{helix.ToolResultMessage(id, "ask", `"ok"`)}})
		require.NoError(t, err)
	}

	got, err := st.LoadState(ctx, "many")
	require.NoError(t, err)
	require.Len(t, got.CompletedClientToolCalls, n, "every call the conversation resolved")
	require.Negative(t, got.CompletedClientToolCalls["c7"], "timed out: a negative time")
	require.Positive(t, got.CompletedClientToolCalls["c3"])
	require.Empty(t, got.ClientToolCallOwnership, "no call is pending")
	requireNoSuspensionRow(t, got)

	again, err := st.RecordSubmission(ctx, "many", helix.Approve("c3", ""))
	require.NoError(t, err)
	require.True(t, again.AlreadyCompleted, "an answer given twice, 36 answers later")
	_, err = st.RecordSubmission(ctx, "many", helix.Approve("c7", ""))
	var se *helix.SubmissionError
	require.ErrorAs(t, err, &se)
	require.Equal(t, helix.SubmissionTimedOut, se.Code)
	err = suspend(n+1, "c12")
	require.ErrorContains(t, err, "tool call ID c12 is already used in this conversation")

	// A dropped call's ID is free again; the others stay completed.
	require.NoError(t, suspend(n+1, "d1"))
	dropped, err := st.DiscardPending(ctx, "many")
	require.NoError(t, err)
	require.Len(t, dropped, 1)
	require.NoError(t, suspend(n+1, "d1"), "a dropped call's ID may come back")
	got, err = st.LoadState(ctx, "many")
	require.NoError(t, err)
	require.Len(t, got.CompletedClientToolCalls, n)
	require.Equal(t, map[string]string{"d1": "many"}, got.ClientToolCallOwnership)
}

func requireNoSuspensionRow(t *testing.T, st *store.SessionState) {
	t.Helper()
	require.Empty(t, st.PendingClientToolCalls)
	require.Empty(t, st.SuspendedStep)
	require.Empty(t, st.SuspendedStepID)
}

// A session's ownership map keeps no entry its row's own pending calls
// imply (a root's own call), and every map reads back as written: a
// sub-agent's call named on the root, a pending call the map does not
// list. An answer to a root's own call (helix.submit_answer) finds the
// root its owner from the pending call alone.
func TestOwnershipKeepsNoImpliedEntries(t *testing.T) {
	ctx := t.Context()
	st := newTestStore(t)
	raw := func(id string) string {
		var s string
		require.NoError(t, st.Pool().QueryRow(ctx, `SELECT client_tool_call_ownership::text FROM helix.sessions WHERE session_id = $1`, id).Scan(&s))
		return s
	}
	suspend := func(session, call string) {
		_, err := st.CreateRun(ctx, store.CreateRunParams{RunID: session + "-run", SessionID: session, WorkflowID: session + "-wf"})
		require.NoError(t, err)
		_, err = st.SuspendStep(ctx, store.SuspendParams{SessionID: session, RunID: session + "-run", StepID: session + "-run:1", Step: 1,
			Record: []byte(`{}`), Pending: []store.PendingCall{{Call: store.PendingClientToolCall{ToolCallID: call, ToolName: "ask",
				Kind: helix.SubmissionApprovalResponse, WorkflowID: session + "-wf"}}}})
		require.NoError(t, err)
	}
	_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: "own", AgentType: "a"})
	require.NoError(t, err)
	_, err = st.CreateSession(ctx, store.CreateSessionParams{SessionID: "own-child", AgentType: "a", ParentSessionID: "own"})
	require.NoError(t, err)

	suspend("own", "a1")
	require.Equal(t, "{}", raw("own"), "the root's own call: implied")
	got, err := st.LoadState(ctx, "own")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"a1": "own"}, got.ClientToolCallOwnership)

	suspend("own-child", "b1")
	require.Equal(t, `{"b1": "own-child"}`, raw("own"), "a sub-agent's call: named")
	got, err = st.LoadState(ctx, "own")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"a1": "own", "b1": "own-child"}, got.ClientToolCallOwnership)
	child, err := st.LoadState(ctx, "own-child")
	require.NoError(t, err)
	require.Empty(t, child.ClientToolCallOwnership, "the sub-agent's own map stays empty")

	// A state saved whole: an entry for another session's call, and a
	// pending call the map does not list.
	child.ClientToolCallOwnership = map[string]string{"x": "elsewhere"}
	_, err = st.SaveState(ctx, child, child.Version)
	require.NoError(t, err)
	child, err = st.LoadState(ctx, "own-child")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"x": "elsewhere"}, child.ClientToolCallOwnership)
	require.Contains(t, child.PendingClientToolCalls, "b1")
}
