package storetest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

var messageCases = map[string]func(t *testing.T, s Store){
	"AppendAndPage": func(t *testing.T, s Store) {
		ctx := t.Context()
		st := newSession(t, s, "page")
		var all []helix.Message
		for i := range 120 {
			all = append(all, helix.UserMessage(fmt.Sprintf("m%03d", i)))
		}
		n, err := s.AppendMessages(ctx, st.SessionID, all[:100])
		require.NoError(t, err)
		require.Equal(t, 100, n)
		n, err = s.AppendMessages(ctx, st.SessionID, all[100:])
		require.NoError(t, err)
		require.Equal(t, 120, n)

		page, err := s.GetMessages(ctx, st.SessionID, nil)
		require.NoError(t, err)
		require.Equal(t, store.DefaultMessagePageSize, page.Limit)
		require.Equal(t, all[:50], page.Messages)
		require.Equal(t, 120, page.Total)
		require.True(t, page.HasMore)
		page, err = s.GetMessages(ctx, st.SessionID, &store.GetMessagesOptions{Offset: 100, Limit: 50})
		require.NoError(t, err)
		require.Equal(t, all[100:], page.Messages)
		require.False(t, page.HasMore)
		page, err = s.GetMessages(ctx, st.SessionID, &store.GetMessagesOptions{Offset: 500})
		require.NoError(t, err)
		require.Empty(t, page.Messages)
		require.Equal(t, 120, page.Total)
		_, err = s.GetMessages(ctx, "missing", nil)
		require.ErrorIs(t, err, helix.ErrNotFound)
		_, err = s.AppendMessages(ctx, "missing", all[:1])
		require.ErrorIs(t, err, helix.ErrNotFound)
	},
	"RoundTripShapes": func(t *testing.T, s Store) {
		ctx := t.Context()
		st := newSession(t, s, "shapes")
		msgs := []helix.Message{
			helix.SystemMessage("sys"),
			{Role: helix.RoleUser, Content: "hi", Metadata: map[string]any{"source": "web-ui"}},
			{Role: helix.RoleAssistant, ToolCalls: []helix.ToolCall{{ID: "c1", Name: "search", Arguments: raw(`{"q":"x"}`)}},
				Thinking: &helix.Thinking{Content: "hmm", Signature: "sig"}},
			helix.ToolResultMessage("c1", "search", `{"r":1}`),
		}
		_, err := s.AppendMessages(ctx, st.SessionID, msgs)
		require.NoError(t, err)
		page, err := s.GetMessages(ctx, st.SessionID, nil)
		require.NoError(t, err)
		require.Len(t, page.Messages, 4)
		require.Equal(t, msgs[0], page.Messages[0])
		require.Equal(t, "web-ui", page.Messages[1].Metadata["source"])
		require.Equal(t, msgs[2].ToolCalls[0].ID, page.Messages[2].ToolCalls[0].ID)
		require.JSONEq(t, `{"q":"x"}`, string(page.Messages[2].ToolCalls[0].Arguments))
		require.Equal(t, msgs[2].Thinking, page.Messages[2].Thinking)
		require.Equal(t, msgs[3], page.Messages[3])
		page, err = s.GetMessages(ctx, st.SessionID, &store.GetMessagesOptions{ExcludeThinking: true})
		require.NoError(t, err)
		require.Nil(t, page.Messages[2].Thinking)

		_, err = s.AppendMessages(ctx, st.SessionID, []helix.Message{{Role: helix.RoleTool, Content: "x"}})
		require.Error(t, err, "a tool message without a tool call ID is rejected")
		n, err := s.GetMessageCount(ctx, st.SessionID)
		require.NoError(t, err)
		require.Equal(t, 4, n)
	},
	"ConcurrentAppendsKeepBatchesWhole": func(t *testing.T, s Store) {
		ctx := t.Context()
		st := newSession(t, s, "conc")
		parallel(10, func(i int) {
			_, _ = s.AppendMessages(ctxBackground(), st.SessionID, userMsgs(
				fmt.Sprintf("w%d-a", i), fmt.Sprintf("w%d-b", i), fmt.Sprintf("w%d-c", i)))
		})
		page, err := s.GetMessages(ctx, st.SessionID, &store.GetMessagesOptions{Limit: 100})
		require.NoError(t, err)
		require.Len(t, page.Messages, 30)
		for i := 0; i < 30; i += 3 {
			a := page.Messages[i].Content
			require.Equal(t, a[:len(a)-1]+"b", page.Messages[i+1].Content, "batches are never interleaved")
			require.Equal(t, a[:len(a)-1]+"c", page.Messages[i+2].Content)
		}
	},
	"TruncateDropsLaterCheckpoints": func(t *testing.T, s Store) {
		ctx := t.Context()
		st := newSession(t, s, "trunc")
		_, err := s.AppendMessages(ctx, st.SessionID, userMsgs("a", "b"))
		require.NoError(t, err)
		cp1, err := s.CreateCheckpoint(ctx, st.SessionID, store.CheckpointParams{StepCount: 1, MessageCount: -1})
		require.NoError(t, err)
		_, err = s.AppendMessages(ctx, st.SessionID, userMsgs("c", "d"))
		require.NoError(t, err)
		cp2, err := s.CreateCheckpoint(ctx, st.SessionID, store.CheckpointParams{StepCount: 2, MessageCount: -1})
		require.NoError(t, err)
		require.Equal(t, 4, cp2.MessageCount)

		require.NoError(t, s.TruncateMessages(ctx, st.SessionID, 2))
		require.NoError(t, s.TruncateMessages(ctx, st.SessionID, 2), "idempotent")
		n, err := s.GetMessageCount(ctx, st.SessionID)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		_, err = s.GetCheckpoint(ctx, cp2.ID)
		require.ErrorIs(t, err, helix.ErrNotFound, "a checkpoint referencing removed messages is gone")
		latest, err := s.GetLatestCheckpoint(ctx, st.SessionID)
		require.NoError(t, err)
		require.Equal(t, cp1.ID, latest.ID, "the pointer falls back to the newest remaining checkpoint")
		n, err = s.AppendMessages(ctx, st.SessionID, userMsgs("e"))
		require.NoError(t, err)
		require.Equal(t, 3, n)
		page, err := s.GetMessages(ctx, st.SessionID, nil)
		require.NoError(t, err)
		require.Equal(t, userMsgs("a", "b", "e"), page.Messages)
		require.Error(t, s.TruncateMessages(ctx, st.SessionID, -1))
	},
}

var checkpointCases = map[string]func(t *testing.T, s Store){
	"LatestFollowsPointerNotStepCount": func(t *testing.T, s Store) {
		// The session-model case: a later turn's first checkpoint (a
		// client-tool suspension at step 1) has a lower step count than the
		// previous turn's final checkpoint, and must still be the latest.
		ctx := t.Context()
		st := newSession(t, s, "pointer")
		_, err := s.AppendMessages(ctx, st.SessionID, userMsgs("turn 1"))
		require.NoError(t, err)
		turn1, err := s.CreateCheckpoint(ctx, st.SessionID, store.CheckpointParams{StepCount: 5, MessageCount: -1})
		require.NoError(t, err)
		_, err = s.AppendMessages(ctx, st.SessionID, userMsgs("turn 2"))
		require.NoError(t, err)
		turn2, err := s.CreateCheckpoint(ctx, st.SessionID, store.CheckpointParams{StepCount: 1, MessageCount: -1})
		require.NoError(t, err)
		latest, err := s.GetLatestCheckpoint(ctx, st.SessionID)
		require.NoError(t, err)
		require.Equal(t, turn2.ID, latest.ID)
		require.Equal(t, 1, latest.StepCount)
		require.Equal(t, 2, latest.MessageCount)

		// Re-creating an existing checkpoint (a retry) re-points at it.
		again, err := s.CreateCheckpoint(ctx, st.SessionID, store.CheckpointParams{ID: turn1.ID, StepCount: 5})
		require.NoError(t, err)
		require.Equal(t, turn1.MessageCount, again.MessageCount, "the stored checkpoint is returned unchanged")
		latest, err = s.GetLatestCheckpoint(ctx, st.SessionID)
		require.NoError(t, err)
		require.Equal(t, turn1.ID, latest.ID)

		msgs, err := s.GetCheckpointMessages(ctx, turn1.ID)
		require.NoError(t, err)
		require.Equal(t, userMsgs("turn 1"), msgs, "a checkpoint references the message log")

		other := newSession(t, s, "none")
		_, err = s.GetLatestCheckpoint(ctx, other.SessionID)
		require.ErrorIs(t, err, helix.ErrNotFound)
		_, err = s.GetLatestCheckpoint(ctx, "missing")
		require.ErrorIs(t, err, helix.ErrNotFound)
		_, err = s.CreateCheckpoint(ctx, st.SessionID, store.CheckpointParams{StepCount: 1, MessageCount: 99})
		require.Error(t, err, "a checkpoint cannot reference messages that do not exist")
	},
	"FieldsAndPaging": func(t *testing.T, s Store) {
		ctx := t.Context()
		st := newSession(t, s, "paging")
		seq := int64(42)
		var ids []string
		for i := range 7 {
			cp, err := s.CreateCheckpoint(ctx, st.SessionID, store.CheckpointParams{
				StepCount: i, MessageCount: -1, RunID: "run", StreamSequence: &seq,
				Status: helix.SessionActive, CustomState: raw(fmt.Sprintf(`{"i":%d}`, i)), Output: raw(`"o"`),
			})
			require.NoError(t, err)
			ids = append(ids, cp.ID)
		}
		page, err := s.ListCheckpoints(ctx, st.SessionID, &store.ListOptions{Limit: 3})
		require.NoError(t, err)
		require.Equal(t, 7, page.Total)
		require.True(t, page.HasMore)
		require.Len(t, page.Items, 3)
		require.Equal(t, ids[0], page.Items[0].ID)
		page, err = s.ListCheckpoints(ctx, st.SessionID, &store.ListOptions{Offset: 6, Limit: 3})
		require.NoError(t, err)
		require.False(t, page.HasMore)
		require.Len(t, page.Items, 1)
		got := page.Items[0]
		require.Equal(t, ids[6], got.ID)
		require.Equal(t, int64(42), *got.StreamSequence)
		require.Equal(t, "run", got.RunID)
		require.JSONEq(t, `{"i":6}`, string(got.CustomState))
		require.JSONEq(t, `"o"`, string(got.Output))
	},
}

var runCases = map[string]func(t *testing.T, s Store){
	"TurnsContiguousUnderConcurrency": func(t *testing.T, s Store) {
		ctx := t.Context()
		st := newSession(t, s, "runs")
		var mu sync.Mutex
		turns := map[int]string{}
		parallel(10, func(i int) {
			r, err := s.CreateRun(ctxBackground(), store.CreateRunParams{RunID: fmt.Sprintf("run-%d", i), SessionID: st.SessionID})
			if err == nil {
				mu.Lock()
				turns[r.Turn] = r.RunID
				mu.Unlock()
			}
		})
		require.Len(t, turns, 10)
		for turn := 1; turn <= 10; turn++ {
			require.Contains(t, turns, turn)
		}
		runs, err := s.ListRuns(ctx, st.SessionID)
		require.NoError(t, err)
		require.Len(t, runs, 10)
		for i, r := range runs {
			require.Equal(t, i+1, r.Turn)
		}
		cur, err := s.GetCurrentRun(ctx, st.SessionID)
		require.NoError(t, err)
		require.Equal(t, 10, cur.Turn)

		// Idempotent on the run ID.
		again, err := s.CreateRun(ctx, store.CreateRunParams{RunID: turns[3], SessionID: st.SessionID})
		require.NoError(t, err)
		require.Equal(t, 3, again.Turn)
		_, err = s.CreateRun(ctx, store.CreateRunParams{RunID: "x", SessionID: "missing"})
		require.ErrorIs(t, err, helix.ErrNotFound)
	},
	"StatusLifecycle": func(t *testing.T, s Store) {
		ctx := t.Context()
		st := newSession(t, s, "runstat")
		r, err := s.CreateRun(ctx, store.CreateRunParams{RunID: "r1", SessionID: st.SessionID, StartSequence: 17,
			WorkflowID: st.SessionID + "-turn-1"})
		require.NoError(t, err)
		require.Equal(t, helix.RunRunning, r.Status)
		require.Equal(t, int64(17), r.StartSequence)
		require.Nil(t, r.CompletedAt)
		require.NoError(t, s.UpdateRunStatus(ctx, "r1", helix.RunSuspendedClientTool, nil))
		r, err = s.GetRun(ctx, "r1")
		require.NoError(t, err)
		require.Equal(t, helix.RunSuspendedClientTool, r.Status)
		require.Nil(t, r.CompletedAt, "a suspension is not final")
		steps := 4
		require.NoError(t, s.UpdateRunStatus(ctx, "r1", helix.RunFailed, &store.RunUpdate{StepCount: &steps, Error: "max steps", ErrorCode: helix.CodeMaxStepsExceeded}))
		r, err = s.GetRun(ctx, "r1")
		require.NoError(t, err)
		require.Equal(t, helix.RunFailed, r.Status)
		require.Equal(t, 4, r.StepCount)
		require.Equal(t, "max steps", r.Error)
		require.Equal(t, helix.CodeMaxStepsExceeded, r.ErrorCode)
		require.NotNil(t, r.CompletedAt)
		require.Equal(t, st.SessionID+"-turn-1", r.WorkflowID)
		require.Nil(t, r.Admission, "a run without a queue")
		adm := &store.Admission{Queue: "helix-sessions", PartitionKey: "acme", Priority: 3}
		r2, err := s.CreateRun(ctx, store.CreateRunParams{RunID: "r2", SessionID: st.SessionID, PreviousRunID: "r1", Admission: adm})
		require.NoError(t, err)
		require.Equal(t, 2, r2.Turn)
		require.Equal(t, "r1", r2.PreviousRunID)
		require.Equal(t, adm, r2.Admission, "the admission is recorded with the run")
		r2, err = s.GetCurrentRun(ctx, st.SessionID)
		require.NoError(t, err)
		require.Equal(t, adm, r2.Admission)
		require.ErrorIs(t, s.UpdateRunStatus(ctx, "missing", helix.RunCompleted, nil), helix.ErrNotFound)
		_, err = s.GetCurrentRun(ctx, newSession(t, s, "norun").SessionID)
		require.ErrorIs(t, err, helix.ErrNotFound)
	},
}

var subSessionCases = map[string]func(t *testing.T, s Store){
	"ModeNameDeliveryRoundTrip": func(t *testing.T, s Store) {
		ctx := t.Context()
		st := newSession(t, s, "parent")
		refs := []store.SubSessionRef{
			{SubSessionID: st.SessionID + "-sub-c1", AgentType: "researcher", ParentToolCallID: "c1"},
			{SubSessionID: st.SessionID + "-agent-helper", AgentType: "helper", ParentToolCallID: "c2",
				Mode: helix.SubSessionPersistent, Name: "helper"},
		}
		require.NoError(t, s.AddSubSessionRefs(ctx, st.SessionID, refs))
		// Re-adding is a no-op and never rewrites mode or name.
		dup := refs[1]
		dup.Mode, dup.Name = helix.SubSessionEphemeral, "renamed"
		require.NoError(t, s.AddSubSessionRefs(ctx, st.SessionID, []store.SubSessionRef{dup}))
		got, err := s.GetSubSessionRefs(ctx, st.SessionID)
		require.NoError(t, err)
		require.Len(t, got, 2)
		require.Equal(t, helix.SubSessionEphemeral, got[0].Mode)
		require.Equal(t, helix.SubSessionRunning, got[0].Status)
		require.Equal(t, helix.SubSessionPersistent, got[1].Mode)
		require.Equal(t, "helper", got[1].Name)
		require.False(t, got[1].CompletionDelivered)

		done := helix.SubSessionCompleted
		yes := true
		require.NoError(t, s.UpdateSubSessionRef(ctx, st.SessionID, store.SubSessionRefUpdate{SubSessionID: refs[1].SubSessionID, Status: &done}))
		require.NoError(t, s.UpdateSubSessionRef(ctx, st.SessionID, store.SubSessionRefUpdate{SubSessionID: refs[1].SubSessionID, CompletionDelivered: &yes}))
		got, err = s.GetSubSessionRefs(ctx, st.SessionID)
		require.NoError(t, err)
		require.Equal(t, helix.SubSessionCompleted, got[1].Status)
		require.True(t, got[1].CompletionDelivered)
		require.NotNil(t, got[1].CompletedAt)

		running := helix.SubSessionRunning
		require.NoError(t, s.UpdateSubSessionRef(ctx, st.SessionID, store.SubSessionRefUpdate{SubSessionID: refs[1].SubSessionID, Status: &running}))
		got, err = s.GetSubSessionRefs(ctx, st.SessionID)
		require.NoError(t, err)
		require.Nil(t, got[1].CompletedAt, "a re-consulted child is running again")
		require.ErrorIs(t, s.UpdateSubSessionRef(ctx, st.SessionID, store.SubSessionRefUpdate{SubSessionID: "nope", Status: &done}), helix.ErrNotFound)
		require.ErrorIs(t, s.AddSubSessionRefs(ctx, "missing", refs[:1]), helix.ErrNotFound)
	},
}

var stagingCases = map[string]func(t *testing.T, s Store){
	"StagePromoteDiscard": func(t *testing.T, s Store) {
		ctx := t.Context()
		st := newSession(t, s, "stage")
		add := func(path, v string) []helix.PatchOp { return []helix.PatchOp{{Op: "add", Path: path, Value: raw(v)}} }
		require.NoError(t, s.StageChanges(ctx, st.SessionID, "s1", "tc-1", add("/list", `[]`)))
		require.NoError(t, s.StageChanges(ctx, st.SessionID, "s1", "tc-2", add("/list/-", `"a"`)))
		require.NoError(t, s.StageChanges(ctx, st.SessionID, "s1", "tc-3", add("/list/-", `"b"`)))
		// Restaging tc-1 (a replayed tool) keeps its position.
		require.NoError(t, s.StageChanges(ctx, st.SessionID, "s1", "tc-1", add("/list", `["first"]`)))
		require.NoError(t, s.StageChanges(ctx, st.SessionID, "s2", "tc-9", add("/other", `1`)))
		changes, err := s.GetStagedChanges(ctx, st.SessionID, "s1")
		require.NoError(t, err)
		require.Equal(t, []string{"tc-1", "tc-2", "tc-3"}, []string{changes[0].ChangeID, changes[1].ChangeID, changes[2].ChangeID})
		warnings, err := s.PromoteStaging(ctx, st.SessionID, "s1")
		require.NoError(t, err)
		require.Empty(t, warnings)
		got, err := s.LoadState(ctx, st.SessionID)
		require.NoError(t, err)
		jsonEq(t, `{"list":["first","a","b"]}`, got.CustomState)
		warnings, err = s.PromoteStaging(ctx, st.SessionID, "s1")
		require.NoError(t, err, "promoting again finds nothing")
		require.Empty(t, warnings)
		got2, err := s.LoadState(ctx, st.SessionID)
		require.NoError(t, err)
		jsonEq(t, `{"list":["first","a","b"]}`, got2.CustomState)

		require.NoError(t, s.DiscardStaging(ctx, st.SessionID, "s2"))
		has, err := s.HasStagedChanges(ctx, st.SessionID, "s2")
		require.NoError(t, err)
		require.False(t, has)
		require.NoError(t, s.StageChanges(ctx, st.SessionID, "s3", "tc", add("/z", `1`)))
		n, err := s.CleanupOrphanedStaging(ctx, 0)
		require.NoError(t, err)
		require.GreaterOrEqual(t, n, 1)
		require.ErrorIs(t, s.StageChanges(ctx, "missing", "s", "c", nil), helix.ErrNotFound)
	},
}
