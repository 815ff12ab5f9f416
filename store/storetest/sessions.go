package storetest

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

var sessionCases = map[string]func(t *testing.T, s Store){
	"CreateExactlyOneWins": func(t *testing.T, s Store) {
		var wins, exists atomic.Int32
		parallel(20, func(int) {
			_, err := s.CreateSession(ctxBackground(), store.CreateSessionParams{SessionID: "race", AgentType: "a"})
			switch {
			case err == nil:
				wins.Add(1)
			case errors.Is(err, helix.ErrSessionExists):
				var se *helix.SessionExistsError
				if errors.As(err, &se) && se.SessionID == "race" {
					exists.Add(1)
				}
			}
		})
		require.Equal(t, int32(1), wins.Load())
		require.Equal(t, int32(19), exists.Load())
	},
	"CreateDefaultsAndChild": func(t *testing.T, s Store) {
		ctx := t.Context()
		exp := time.Now().Add(time.Hour).Truncate(time.Millisecond)
		root, err := s.CreateSession(ctx, store.CreateSessionParams{
			SessionID: "root-1", AgentType: "planner", CustomState: raw(`{"n":1}`),
			UserID: "u1", Tags: []string{"a", "b"}, Metadata: map[string]string{"k": "v"},
			Mode: helix.SessionModeStandard, ExpiresAt: &exp,
			TracingContext: &store.TracingContext{TraceID: "t", RootSpanID: "r"},
		})
		require.NoError(t, err)
		require.Equal(t, "root-1", root.RootSessionID)
		require.Equal(t, "root-1", root.StreamID)
		require.Equal(t, helix.SessionActive, root.Status)
		require.Equal(t, int64(1), root.Version)
		jsonEq(t, `{"n":1}`, root.CustomState)
		require.Equal(t, []string{"a", "b"}, root.Tags)
		require.Equal(t, map[string]string{"k": "v"}, root.Metadata)
		require.Equal(t, &store.TracingContext{TraceID: "t", RootSpanID: "r"}, root.TracingContext)
		require.WithinDuration(t, exp, *root.ExpiresAt, time.Millisecond)

		child, err := s.CreateSession(ctx, store.CreateSessionParams{
			SessionID: "root-1-sub-call1", AgentType: "worker", ParentSessionID: "root-1",
		})
		require.NoError(t, err)
		require.Equal(t, "root-1", child.RootSessionID, "child inherits the root")
		require.Equal(t, "root-1", child.StreamID, "sub-agents write into the root's stream")
		grand, err := s.CreateSession(ctx, store.CreateSessionParams{
			SessionID: "g", AgentType: "worker", ParentSessionID: "root-1-sub-call1",
		})
		require.NoError(t, err)
		require.Equal(t, "root-1", grand.RootSessionID)
		require.True(t, root.IsRoot())
		require.False(t, grand.IsRoot())

		_, err = s.CreateSession(ctx, store.CreateSessionParams{SessionID: "orphan", AgentType: "w", ParentSessionID: "missing"})
		require.ErrorIs(t, err, helix.ErrNotFound)
		_, err = s.CreateSession(ctx, store.CreateSessionParams{SessionID: "bad", AgentType: "w", CustomState: raw(`[1]`)})
		require.ErrorContains(t, err, "JSON object")
		_, err = s.CreateSession(ctx, store.CreateSessionParams{SessionID: "", AgentType: "w"})
		require.Error(t, err)
	},
	"LoadMissing": func(t *testing.T, s Store) {
		_, err := s.LoadState(t.Context(), "nope")
		var nf *helix.NotFoundError
		require.ErrorAs(t, err, &nf)
		require.Equal(t, "nope", nf.ID)
		ok, err := s.SessionExists(t.Context(), "nope")
		require.NoError(t, err)
		require.False(t, ok)
	},
	"SaveStateRoundTripAndCAS": func(t *testing.T, s Store) {
		ctx := t.Context()
		st := newSession(t, s, "save")
		ok, err := s.SessionExists(ctx, st.SessionID)
		require.NoError(t, err)
		require.True(t, ok)
		st.Status = helix.SessionFailed
		st.StepCount = 7
		st.CustomState = raw(`{"x":[1,2]}`)
		st.Output = raw(`{"answer":42}`)
		st.Error = "boom"
		st.FailureReason = helix.FailureReasonParentSuspended
		st.InterruptContext = &store.InterruptContext{Reason: "user", StepCount: 3, Timestamp: 99}
		st.PendingClientToolCalls = map[string]store.PendingClientToolCall{
			"tc1": {ToolCallID: "tc1", ToolName: "ask", Kind: helix.SubmissionClientToolResult, Arguments: raw(`{"q":1}`),
				OwnerSessionID: st.SessionID, RunID: "r", Step: 2, CreatedAt: 5, DeadlineAt: 10},
		}
		st.SuspendedAwaitingChildren = map[string]store.SuspendedChildWait{"p1": {ParentToolCallID: "p1", SubSessionID: "c", AgentType: "w"}}
		st.SuspendedStepID = "step-2"
		st.CompletedClientToolCalls = map[string]int64{"tc0": 123}
		st.ClientToolCallOwnership = map[string]string{"tc1": st.SessionID}
		st.Mode = helix.SessionModePersistent
		st.Metadata = map[string]string{"dbosWorkflowId": "wf"}
		saved, err := s.SaveState(ctx, st, st.Version)
		require.NoError(t, err)
		require.Equal(t, st.Version+1, saved.Version)

		got, err := s.LoadState(ctx, st.SessionID)
		require.NoError(t, err)
		require.Equal(t, helix.SessionFailed, got.Status)
		require.Equal(t, 7, got.StepCount)
		jsonEq(t, `{"x":[1,2]}`, got.CustomState)
		jsonEq(t, `{"answer":42}`, got.Output)
		require.Equal(t, "boom", got.Error)
		require.Equal(t, helix.FailureReasonParentSuspended, got.FailureReason)
		require.Equal(t, st.InterruptContext, got.InterruptContext)
		require.Equal(t, "ask", got.PendingClientToolCalls["tc1"].ToolName)
		jsonEq(t, `{"q":1}`, got.PendingClientToolCalls["tc1"].Arguments)
		require.Equal(t, int64(10), got.PendingClientToolCalls["tc1"].DeadlineAt)
		require.Equal(t, st.SuspendedAwaitingChildren, got.SuspendedAwaitingChildren)
		require.Equal(t, "step-2", got.SuspendedStepID)
		require.Equal(t, st.CompletedClientToolCalls, got.CompletedClientToolCalls)
		require.Equal(t, st.ClientToolCallOwnership, got.ClientToolCallOwnership)
		require.Equal(t, helix.SessionModePersistent, got.Mode)

		// Stale version: nothing written.
		got.StepCount = 100
		_, err = s.SaveState(ctx, got, st.Version)
		var stale *helix.StaleStateError
		require.ErrorAs(t, err, &stale)
		require.Equal(t, st.Version, stale.ExpectedVersion)
		require.Equal(t, saved.Version, stale.ActualVersion)
		again, err := s.LoadState(ctx, st.SessionID)
		require.NoError(t, err)
		require.Equal(t, 7, again.StepCount)

		// Mode is write-once.
		again.Mode = helix.SessionModeStandard
		_, err = s.SaveState(ctx, again, 0)
		require.ErrorContains(t, err, "write-once")
		again.Mode = ""
		_, err = s.SaveState(ctx, again, 0)
		require.NoError(t, err, "an empty mode keeps the bound one")
		final, err := s.LoadState(ctx, st.SessionID)
		require.NoError(t, err)
		require.Equal(t, helix.SessionModePersistent, final.Mode)
	},
	"ConcurrentCASOneWinner": func(t *testing.T, s Store) {
		st := newSession(t, s, "cas")
		var wins atomic.Int32
		parallel(10, func(int) {
			res, err := s.CompareAndSetStatus(ctxBackground(), st.SessionID,
				[]helix.SessionStatus{helix.SessionActive}, helix.SessionInterrupted,
				&store.CASOptions{Update: &store.StatusUpdate{InterruptContext: &store.InterruptContext{Reason: "r"}}})
			if err == nil && res.OK {
				wins.Add(1)
			}
		})
		require.Equal(t, int32(1), wins.Load())
		res, err := s.CompareAndSetStatus(t.Context(), st.SessionID, []helix.SessionStatus{helix.SessionActive}, helix.SessionCompleted, nil)
		require.NoError(t, err)
		require.False(t, res.OK)
		require.Equal(t, helix.SessionInterrupted, res.CurrentStatus)
		got, err := s.LoadState(t.Context(), st.SessionID)
		require.NoError(t, err)
		require.Equal(t, "r", got.InterruptContext.Reason)
		require.Equal(t, res.CurrentVersion, got.Version)

		// Version-pinned CAS.
		res, err = s.CompareAndSetStatus(t.Context(), st.SessionID, []helix.SessionStatus{helix.SessionInterrupted},
			helix.SessionActive, &store.CASOptions{ExpectedVersion: got.Version - 1})
		require.NoError(t, err)
		require.False(t, res.OK)
		res, err = s.CompareAndSetStatus(t.Context(), st.SessionID, []helix.SessionStatus{helix.SessionInterrupted},
			helix.SessionActive, &store.CASOptions{ExpectedVersion: got.Version})
		require.NoError(t, err)
		require.True(t, res.OK)
		require.Equal(t, got.Version+1, res.NewVersion)
		_, err = s.CompareAndSetStatus(t.Context(), "missing", []helix.SessionStatus{helix.SessionActive}, helix.SessionCompleted, nil)
		require.ErrorIs(t, err, helix.ErrNotFound)
	},
	"UpdateStatusAndCounters": func(t *testing.T, s Store) {
		ctx := t.Context()
		st := newSession(t, s, "counters")
		require.NoError(t, s.UpdateStatus(ctx, st.SessionID, helix.SessionCompleted, &store.StatusUpdate{Output: raw(`"done"`)}))
		got, err := s.LoadState(ctx, st.SessionID)
		require.NoError(t, err)
		require.Equal(t, helix.SessionCompleted, got.Status)
		jsonEq(t, `"done"`, got.Output)
		require.NoError(t, s.UpdateStatus(ctx, st.SessionID, helix.SessionActive, nil))
		got, err = s.LoadState(ctx, st.SessionID)
		require.NoError(t, err)
		jsonEq(t, `"done"`, got.Output) // nil update keeps the fields

		var seen [20]bool
		parallel(20, func(int) {
			n, err := s.IncrementStepCount(ctxBackground(), st.SessionID)
			if err == nil && n >= 1 && n <= 20 {
				seen[n-1] = true
			}
		})
		for i, ok := range seen {
			require.True(t, ok, "step count %d never returned", i+1)
		}
		n, err := s.IncrementResumeCount(ctx, st.SessionID)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		n, err = s.IncrementResumeCount(ctx, st.SessionID)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		require.ErrorIs(t, s.UpdateStatus(ctx, "missing", helix.SessionActive, nil), helix.ErrNotFound)
	},
	"InterruptFlagCheckAndClear": func(t *testing.T, s Store) {
		ctx := t.Context()
		st := newSession(t, s, "intr")
		r, err := s.CheckInterruptFlag(ctx, st.SessionID)
		require.NoError(t, err)
		require.False(t, r.Requested)
		require.NoError(t, s.SetInterruptFlag(ctx, st.SessionID, "stop please"))
		after, err := s.LoadState(ctx, st.SessionID)
		require.NoError(t, err)
		require.Equal(t, st.Version, after.Version, "the interrupt flag never bumps the version")
		var seen atomic.Int32
		var reason atomic.Value
		parallel(10, func(int) {
			r, err := s.CheckInterruptFlag(ctxBackground(), st.SessionID)
			if err == nil && r.Requested {
				seen.Add(1)
				reason.Store(r.Reason)
			}
		})
		require.Equal(t, int32(1), seen.Load(), "exactly one checker observes a request")
		require.Equal(t, "stop please", reason.Load())
		r, err = s.CheckInterruptFlag(ctx, st.SessionID)
		require.NoError(t, err)
		require.False(t, r.Requested)
		require.NoError(t, s.SetInterruptFlag(ctx, st.SessionID, ""))
		require.NoError(t, s.ClearInterruptFlag(ctx, st.SessionID))
		r, err = s.CheckInterruptFlag(ctx, st.SessionID)
		require.NoError(t, err)
		require.False(t, r.Requested)
		_, err = s.CheckInterruptFlag(ctx, "missing")
		require.ErrorIs(t, err, helix.ErrNotFound)
		require.ErrorIs(t, s.SetInterruptFlag(ctx, "missing", ""), helix.ErrNotFound)
	},
	"PatchMetadata": func(t *testing.T, s Store) {
		ctx := t.Context()
		st := newSession(t, s, "meta")
		v := "wf-1"
		md, err := s.PatchMetadata(ctx, st.SessionID, map[string]*string{"dbosWorkflowId": &v, "other": &v})
		require.NoError(t, err)
		require.Equal(t, map[string]string{"dbosWorkflowId": "wf-1", "other": "wf-1"}, md)
		md, err = s.PatchMetadata(ctx, st.SessionID, map[string]*string{"other": nil})
		require.NoError(t, err)
		require.Equal(t, map[string]string{"dbosWorkflowId": "wf-1"}, md)
		got, err := s.LoadState(ctx, st.SessionID)
		require.NoError(t, err)
		require.Equal(t, md, got.Metadata)
	},
	"MergeCustomStateParallel": func(t *testing.T, s Store) {
		ctx := t.Context()
		st, err := s.CreateSession(ctx, store.CreateSessionParams{SessionID: "merge", AgentType: "a",
			CustomState: raw(`{"items":[],"last":null}`)})
		require.NoError(t, err)
		parallel(20, func(i int) {
			_, _ = s.MergeCustomState(ctxBackground(), st.SessionID, []helix.PatchOp{
				{Op: "add", Path: "/items/-", Value: raw(`"x"`)},
				{Op: "replace", Path: "/last", Value: raw(`1`)},
			})
		})
		got, err := s.LoadState(ctx, st.SessionID)
		require.NoError(t, err)
		var cs struct {
			Items []string `json:"items"`
			Last  int      `json:"last"`
		}
		require.NoError(t, jsonUnmarshal(got.CustomState, &cs))
		require.Len(t, cs.Items, 20, "appends from parallel merges compose")
		require.Equal(t, 1, cs.Last)

		warnings, err := s.MergeCustomState(ctx, st.SessionID, []helix.PatchOp{
			{Op: "remove", Path: "/missing"},
			{Op: "add", Path: "/k", Value: raw(`null`)},
			{Op: "replace", Path: "", Value: raw(`[1]`)},
		})
		require.NoError(t, err)
		require.Len(t, warnings, 2, "an op that cannot apply is skipped with a warning")
		got, err = s.LoadState(ctx, st.SessionID)
		require.NoError(t, err)
		require.Contains(t, string(got.CustomState), `"k"`)
		_, err = s.MergeCustomState(ctx, "missing", nil)
		require.ErrorIs(t, err, helix.ErrNotFound)
	},
	"CommitAtomic": func(t *testing.T, s Store) {
		ctx := t.Context()
		st := newSession(t, s, "commit")
		require.NoError(t, s.StageChanges(ctx, st.SessionID, "step-1", "tc-a", []helix.PatchOp{{Op: "add", Path: "/a", Value: raw(`1`)}}))
		require.NoError(t, s.StageChanges(ctx, st.SessionID, "step-1", "tc-b", []helix.PatchOp{{Op: "add", Path: "/b", Value: raw(`2`)}}))

		// A stale commit writes nothing.
		next := *st
		next.StepCount = 1
		_, err := s.SaveStateAndPromoteStaging(ctx, store.CommitParams{
			State: &next, ExpectedVersion: st.Version + 5,
			AppendMessages: userMsgs("m1", "m2"), PromoteStepID: "step-1",
			Checkpoint: &store.CheckpointParams{ID: helix.GenerateCheckpointID(st.SessionID, 1), StepCount: 1, MessageCount: -1},
		})
		var stale *helix.StaleStateError
		require.ErrorAs(t, err, &stale)
		// An invalid message fails before anything is written too.
		_, err = s.SaveStateAndPromoteStaging(ctx, store.CommitParams{
			State: &next, ExpectedVersion: st.Version,
			AppendMessages: []helix.Message{{Role: "robot"}},
		})
		require.Error(t, err)
		assertUntouched := func() {
			t.Helper()
			got, err := s.LoadState(ctx, st.SessionID)
			require.NoError(t, err)
			require.Equal(t, st.Version, got.Version)
			require.Equal(t, 0, got.StepCount)
			require.Equal(t, 0, got.MessageCount)
			jsonEq(t, `{}`, got.CustomState)
			require.Empty(t, got.CheckpointID)
			n, err := s.GetMessageCount(ctx, st.SessionID)
			require.NoError(t, err)
			require.Zero(t, n)
			has, err := s.HasStagedChanges(ctx, st.SessionID, "step-1")
			require.NoError(t, err)
			require.True(t, has, "staged changes survive a failed commit")
			_, err = s.GetCheckpoint(ctx, "cp-stale")
			require.ErrorIs(t, err, helix.ErrNotFound)
		}
		assertUntouched()

		// A commit in a transaction that fails after the commit statement
		// also leaves no trace: covered by the implementation's own tests.

		res, err := s.SaveStateAndPromoteStaging(ctx, store.CommitParams{
			State: &next, ExpectedVersion: st.Version,
			AppendMessages: userMsgs("m1", "m2"), PromoteStepID: "step-1",
			Checkpoint: &store.CheckpointParams{StepCount: 1, MessageCount: -1, RunID: "run-1"},
		})
		require.NoError(t, err)
		require.Equal(t, st.Version+1, res.State.Version)
		require.Equal(t, 2, res.State.MessageCount)
		require.Equal(t, 1, res.State.StepCount)
		jsonEq(t, `{"a":1,"b":2}`, res.State.CustomState)
		require.Equal(t, res.CheckpointID, res.State.CheckpointID)
		cp, err := s.GetLatestCheckpoint(ctx, st.SessionID)
		require.NoError(t, err)
		require.Equal(t, res.CheckpointID, cp.ID)
		require.Equal(t, 2, cp.MessageCount)
		require.Equal(t, "run-1", cp.RunID)
		jsonEq(t, `{"a":1,"b":2}`, cp.CustomState)
		has, err := s.HasStagedChanges(ctx, st.SessionID, "step-1")
		require.NoError(t, err)
		require.False(t, has)
		parsed, err := helix.ParseCheckpointID(cp.ID)
		require.NoError(t, err)
		require.Equal(t, st.SessionID, parsed.SessionID)
	},
	"CloneFromCheckpoint": func(t *testing.T, s Store) {
		ctx := t.Context()
		st := newSession(t, s, "src")
		_, err := s.AppendMessages(ctx, st.SessionID, userMsgs("a", "b"))
		require.NoError(t, err)
		_, err = s.MergeCustomState(ctx, st.SessionID, []helix.PatchOp{{Op: "add", Path: "/v", Value: raw(`1`)}})
		require.NoError(t, err)
		cp, err := s.CreateCheckpoint(ctx, st.SessionID, store.CheckpointParams{StepCount: 1, MessageCount: -1})
		require.NoError(t, err)
		_, err = s.AppendMessages(ctx, st.SessionID, userMsgs("c"))
		require.NoError(t, err)
		_, err = s.MergeCustomState(ctx, st.SessionID, []helix.PatchOp{{Op: "replace", Path: "/v", Value: raw(`2`)}})
		require.NoError(t, err)

		br, err := s.CloneSession(ctx, store.CloneParams{FromSessionID: st.SessionID, CheckpointID: cp.ID, ToSessionID: "branch"})
		require.NoError(t, err)
		require.Equal(t, 2, br.MessageCount)
		jsonEq(t, `{"v":1}`, br.CustomState)
		require.Equal(t, "branch", br.StreamID)
		page, err := s.GetMessages(ctx, "branch", nil)
		require.NoError(t, err)
		require.Equal(t, userMsgs("a", "b"), page.Messages)
		_, err = s.CloneSession(ctx, store.CloneParams{FromSessionID: st.SessionID, ToSessionID: "branch"})
		require.ErrorIs(t, err, helix.ErrSessionExists)
		// Appending to the branch leaves the source alone.
		_, err = s.AppendMessages(ctx, "branch", userMsgs("z"))
		require.NoError(t, err)
		n, err := s.GetMessageCount(ctx, st.SessionID)
		require.NoError(t, err)
		require.Equal(t, 3, n)
	},
	"DeleteCascadesToOwnedOnly": func(t *testing.T, s Store) {
		ctx := t.Context()
		cps := map[string]string{} // each session's checkpoint ID
		fill := func(id, parent string) {
			_, err := s.CreateSession(ctx, store.CreateSessionParams{SessionID: id, AgentType: "a", ParentSessionID: parent})
			require.NoError(t, err)
			_, err = s.AppendMessages(ctx, id, userMsgs("hi"))
			require.NoError(t, err)
			_, err = s.CreateRun(ctx, store.CreateRunParams{RunID: id + "-run", SessionID: id})
			require.NoError(t, err)
			cp, err := s.CreateCheckpoint(ctx, id, store.CheckpointParams{StepCount: 1, MessageCount: -1})
			require.NoError(t, err)
			cps[id] = cp.ID
			require.NoError(t, s.StageChanges(ctx, id, "s1", "c1", nil))
			require.NoError(t, s.RecordUsage(ctx, []store.UsageRecord{{SessionID: id, SourceType: store.UsageModel, Key: "k", Success: true}}))
		}
		fill("keep", "")
		fill("doomed", "")
		fill("doomed-sub-1", "doomed")
		fill("doomed-sub-1-sub-2", "doomed-sub-1")
		require.NoError(t, s.AddSubSessionRefs(ctx, "doomed", []store.SubSessionRef{{SubSessionID: "doomed-sub-1", AgentType: "a", ParentToolCallID: "c"}}))
		w := s.NewWriter("keep", nil)
		require.NoError(t, w.Write(ctx, &helix.StepStartChunk{Base: helix.Base{AgentID: "keep", AgentType: "a"}}))
		w2 := s.NewWriter("doomed", nil)
		require.NoError(t, w2.Write(ctx, &helix.StepStartChunk{Base: helix.Base{AgentID: "doomed", AgentType: "a"}}))

		require.NoError(t, s.DeleteSession(ctx, "doomed"))
		for _, id := range []string{"doomed", "doomed-sub-1", "doomed-sub-1-sub-2"} {
			ok, err := s.SessionExists(ctx, id)
			require.NoError(t, err)
			require.False(t, ok, id)
			_, err = s.GetRun(ctx, id+"-run")
			require.ErrorIs(t, err, helix.ErrNotFound)
			_, err = s.GetCheckpoint(ctx, cps[id])
			require.ErrorIs(t, err, helix.ErrNotFound)
			usage, err := s.ListUsage(ctx, id)
			require.NoError(t, err)
			require.Empty(t, usage)
			staged, err := s.GetStagedChanges(ctx, id, "s1")
			require.NoError(t, err)
			require.Empty(t, staged)
		}
		_, err := s.GetStreamInfo(ctx, "doomed")
		require.ErrorIs(t, err, helix.ErrNotFound)

		// The other session is intact.
		kept, err := s.LoadState(ctx, "keep")
		require.NoError(t, err)
		require.Equal(t, 1, kept.MessageCount)
		_, err = s.GetRun(ctx, "keep-run")
		require.NoError(t, err)
		_, err = s.GetCheckpoint(ctx, cps["keep"])
		require.NoError(t, err)
		usage, err := s.ListUsage(ctx, "keep")
		require.NoError(t, err)
		require.Len(t, usage, 1)
		info, err := s.GetStreamInfo(ctx, "keep")
		require.NoError(t, err)
		require.Equal(t, int64(1), info.ChunkCount)
		require.ErrorIs(t, s.DeleteSession(ctx, "doomed"), helix.ErrNotFound)
	},
	"ListSessions": func(t *testing.T, s Store) {
		ctx := t.Context()
		for _, id := range []string{"l1", "l2", "l3"} {
			_, err := s.CreateSession(ctx, store.CreateSessionParams{SessionID: id, AgentType: "lister", UserID: "u"})
			require.NoError(t, err)
		}
		_, err := s.CreateSession(ctx, store.CreateSessionParams{SessionID: "l1-sub", AgentType: "lister", ParentSessionID: "l1"})
		require.NoError(t, err)
		require.NoError(t, s.UpdateStatus(ctx, "l2", helix.SessionCompleted, nil))
		all, err := s.ListSessions(ctx, store.ListSessionsOptions{AgentType: "lister"})
		require.NoError(t, err)
		require.Len(t, all, 4)
		roots, err := s.ListSessions(ctx, store.ListSessionsOptions{AgentType: "lister", RootsOnly: true})
		require.NoError(t, err)
		require.Len(t, roots, 3)
		done, err := s.ListSessions(ctx, store.ListSessionsOptions{Status: helix.SessionCompleted})
		require.NoError(t, err)
		require.Len(t, done, 1)
		require.Equal(t, "l2", done[0].SessionID)
		page, err := s.ListSessions(ctx, store.ListSessionsOptions{AgentType: "lister", Limit: 2, Offset: 2})
		require.NoError(t, err)
		require.Len(t, page, 2)
	},
	"UsageIdempotent": func(t *testing.T, s Store) {
		ctx := t.Context()
		st := newSession(t, s, "usage")
		wait := 1500.0
		rows := []store.UsageRecord{
			{SessionID: st.SessionID, RunID: "r", Step: 1, SourceType: store.UsageModel, SourceName: "gpt", InputTokens: 10, OutputTokens: 5, Success: true, Key: "m1"},
			{SessionID: st.SessionID, RunID: "r", Step: 1, SourceType: store.UsageClientToolWaitMS, SourceName: "ask", Value: &wait, Success: false, Key: "w1"},
		}
		require.NoError(t, s.RecordUsage(ctx, rows))
		require.NoError(t, s.RecordUsage(ctx, rows), "a replayed record is a no-op")
		got, err := s.ListUsage(ctx, st.SessionID)
		require.NoError(t, err)
		require.Len(t, got, 2)
		require.Equal(t, 10, got[0].InputTokens)
		require.Equal(t, 1500.0, *got[1].Value)
		require.False(t, got[1].Success)
		require.ErrorIs(t, s.RecordUsage(ctx, []store.UsageRecord{{SessionID: "missing", SourceType: "x", Key: "k"}}), helix.ErrNotFound)
	},
}
