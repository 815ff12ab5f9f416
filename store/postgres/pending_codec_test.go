package postgres_test

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// A session's pending calls are stored without what their row and key
// imply (the call's ID, its owner session, its run and step named by the
// row's suspended step ID, an approval's ID from its run and call, an
// index of 0) and read back whole by LoadState and ListPendingCalls
// (PeekAnswer, which needs DBOS's tables, decodes as ListPendingCalls
// does; the engine's submission tests cover it). A call whose values differ from the implied ones (an
// approval whose run a resume moved), and a row written whole, read back
// as written.
func TestPendingCallsStoredWithoutWhatTheRowImplies(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newTestStore(t)
	_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: "s", AgentType: "payer"})
	require.NoError(t, err)
	_, err = st.CreateRun(ctx, store.CreateRunParams{RunID: "r1", SessionID: "s", WorkflowID: "wf-1"})
	require.NoError(t, err)
	schema := json.RawMessage(`{"type":"object","properties":{"ok":{"type":"boolean"}}}`)
	approval := store.PendingClientToolCall{ToolCallID: "a1", ToolName: "apply", Kind: helix.SubmissionApprovalResponse,
		Arguments: json.RawMessage(`{}`), ApprovalID: postgres.ApprovalID("r1", "a1"), OutputSchema: schema, WorkflowID: "wf-1"}
	client := store.PendingClientToolCall{ToolCallID: "c1", ToolName: "ask", Kind: helix.SubmissionClientToolResult,
		Arguments: json.RawMessage(`{"q":"x"}`), OutputSchema: schema, Index: 1, WorkflowID: "wf-1"}
	_, err = st.SuspendStep(ctx, store.SuspendParams{SessionID: "s", RunID: "r1", StepID: "r1:1", Step: 1, Record: json.RawMessage(`{"step":1}`),
		Pending:     []store.PendingCall{{Call: approval}, {Call: client}},
		Interrupted: func(string) helix.Chunk { return nil }})
	require.NoError(t, err)

	storedKeys := func() map[string]bool {
		rows, err := st.Pool().Query(ctx, `SELECT DISTINCT k FROM helix.sessions s, jsonb_each(s.pending_client_tool_calls) p,
			jsonb_object_keys(p.value) k WHERE s.session_id = 's'`)
		require.NoError(t, err)
		keys := map[string]bool{}
		for rows.Next() {
			var k string
			require.NoError(t, rows.Scan(&k))
			keys[k] = true
		}
		require.NoError(t, rows.Err())
		return keys
	}
	keys := storedKeys()
	for _, k := range []string{"toolCallId", "ownerSessionId", "approvalId", "runId", "step"} {
		require.False(t, keys[k], "the stored calls have no %s", k)
	}
	require.True(t, keys["outputSchema"] && keys["workflowId"] && keys["index"], "c1's index, 1, is kept")

	// readAll reads the calls through every reader, which agree.
	readAll := func() map[string]store.PendingClientToolCall {
		t.Helper()
		s, err := st.LoadState(ctx, "s")
		require.NoError(t, err)
		list, err := st.ListPendingCalls(ctx, "s")
		require.NoError(t, err)
		require.ElementsMatch(t, slices.Collect(maps.Values(s.PendingClientToolCalls)), list)
		return s.PendingClientToolCalls
	}
	got := readAll()
	require.Len(t, got, 2)
	for id, want := range map[string]store.PendingClientToolCall{"a1": approval, "c1": client} {
		c := got[id]
		require.Equal(t, want.ToolCallID, c.ToolCallID)
		require.Equal(t, "s", c.OwnerSessionID)
		require.Equal(t, want.ApprovalID, c.ApprovalID)
		require.Equal(t, "r1", c.RunID)
		require.Equal(t, 1, c.Step)
		require.Equal(t, want.Index, c.Index)
		require.JSONEq(t, string(schema), string(c.OutputSchema))
	}

	// Written whole (as before this encoding), the calls read the same.
	whole, err := json.Marshal(got)
	require.NoError(t, err)
	_, err = st.Pool().Exec(ctx, `UPDATE helix.sessions SET pending_client_tool_calls = $1 WHERE session_id = 's'`, whole)
	require.NoError(t, err)
	require.True(t, storedKeys()["ownerSessionId"])
	require.Equal(t, got, readAll())

	// An approval whose run moved keeps its approvalId; a foreign owner
	// and an ID that is not the key are kept too.
	s, err := st.LoadState(ctx, "s")
	require.NoError(t, err)
	a := s.PendingClientToolCalls["a1"]
	a.RunID = "r2"
	s.PendingClientToolCalls["a1"] = a
	c := s.PendingClientToolCalls["c1"]
	c.OwnerSessionID, c.ToolCallID = "other", "c1-renamed"
	s.PendingClientToolCalls["c1"] = c
	_, err = st.SaveState(ctx, s, s.Version)
	require.NoError(t, err)
	require.True(t, storedKeys()["approvalId"])
	require.True(t, storedKeys()["runId"], "a1's run is no longer the one the row's step ID names")
	got = readAll()
	require.Equal(t, postgres.ApprovalID("r1", "a1"), got["a1"].ApprovalID)
	require.Equal(t, "r2", got["a1"].RunID)
	require.Equal(t, 1, got["a1"].Step)
	require.Equal(t, "r1", got["c1"].RunID)

	// A statement that records another suspended step (a parent's wait
	// for sub-agents) spells out what the old ID implied: the calls keep
	// their run and step.
	require.NoError(t, st.SaveChildWait(ctx, store.SaveChildWaitParams{SessionID: "s", StepID: "r3:7", Record: json.RawMessage(`{}`)}))
	require.True(t, storedKeys()["step"])
	moved := readAll()
	require.Equal(t, "r1", moved["c1"].RunID)
	require.Equal(t, 1, moved["c1"].Step)
	require.Equal(t, got, moved)
	require.Equal(t, "other", got["c1"].OwnerSessionID)
	require.Equal(t, "c1-renamed", got["c1"].ToolCallID)
}

// The codec and SQL (helix.step_id_parts, which helix.pending_call and
// helix.submit_answer use) read a suspended step ID the same way, so a call
// the codec left without its run and step reads back the same in both.
func TestStepIDReadTheSameInGoAndSQL(t *testing.T) {
	t.Parallel()
	st := newTestStore(t)
	for _, id := range []string{"r:1", "01a229f0-cbd5-7e2f-8f2e-d6ab11b557c0:12", "a:b:12", "a:12:b", ":3", "r:", "r:x", "r:-1", "r:+1",
		"r: 1", "r:007", "r:123456789", "r:1234567890", "", "step-2", "ré:4", "r::5"} {
		var run string
		var step int
		var named bool
		require.NoError(t, st.Pool().QueryRow(t.Context(), `SELECT coalesce(p ->> 'runId', ''), coalesce((p ->> 'step')::integer, 0), p <> '{}'
			FROM helix.step_id_parts($1) p`, id).Scan(&run, &step, &named))
		goRun, goStep, goNamed := postgres.SplitStepID(id)
		require.Equal(t, []any{goRun, goStep, goNamed}, []any{run, step, named}, "step ID %q", id)
	}
}
