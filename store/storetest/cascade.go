package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

// subAgent creates an ephemeral sub-agent of parentID for tool call callID
// ({parent}-sub-{callID}, on its root's stream), its reference on the parent
// and its running run.
func subAgent(t *testing.T, s Store, parentID, callID string) (*store.SessionState, *store.Run) {
	t.Helper()
	ctx := t.Context()
	st, err := s.CreateSession(ctx, store.CreateSessionParams{SessionID: parentID + "-sub-" + callID, AgentType: "worker",
		ParentSessionID: parentID})
	require.NoError(t, err)
	require.NoError(t, s.AddSubSessionRefs(ctx, parentID, []store.SubSessionRef{{SubSessionID: st.SessionID, AgentType: "worker",
		ParentToolCallID: callID}}))
	run, err := s.CreateRun(ctx, store.CreateRunParams{RunID: st.SessionID + "-run-1", SessionID: st.SessionID,
		WorkflowID: st.SessionID + "-wf"})
	require.NoError(t, err)
	return st, run
}

// stopOnFlag commits a step of a child whose interrupt flag is set: the
// child's run ends interrupted, as it does when the parent's interrupt
// reaches it.
func stopOnFlag(t *testing.T, s Store, sessionID, runID string) {
	t.Helper()
	res, err := s.CommitStep(t.Context(), store.StepCommit{SessionID: sessionID, RunID: runID, Step: 1,
		Messages: []helix.Message{helix.AssistantMessage("stopping")}})
	require.NoError(t, err)
	require.True(t, res.Interrupted)
}

// childWait is the record of a child a parent step waits for.
func childWait(st *store.SessionState, callID string) store.SuspendedChildWait {
	return store.SuspendedChildWait{ParentToolCallID: callID, SubSessionID: st.SessionID, AgentType: st.AgentType,
		WorkflowID: st.SessionID + "-wf"}
}

// childrenParams describe step 2 of runID stopped with children in flight.
func childrenParams(sessionID, runID string, children ...store.SuspendedChildWait) store.InterruptForChildrenParams {
	p := store.InterruptForChildrenParams{SessionID: sessionID, RunID: runID, StepID: runID + ":2", Step: 2,
		Record: raw(`{"step":2}`), Children: map[string]store.SuspendedChildWait{}, Interrupted: interruptedChunk(sessionID, 1)}
	for _, c := range children {
		p.Children[c.ParentToolCallID] = c
	}
	return p
}

func subtreeIDs(t *testing.T, s Store, sessionID string) []string {
	t.Helper()
	states, err := s.ListSubtree(t.Context(), sessionID)
	require.NoError(t, err)
	out := make([]string, len(states))
	for i, st := range states {
		out[i] = st.SessionID
	}
	return out
}

var cascadeCases = map[string]func(t *testing.T, s Store){
	"InterruptTreeFlagsTheActiveSubtree": func(t *testing.T, s Store) {
		ctx := t.Context()
		root, rrun := stepSession(t, s, "root")
		c1, _ := subAgent(t, s, root.SessionID, "c1")
		g, _ := subAgent(t, s, c1.SessionID, "g1")
		done, _ := subAgent(t, s, root.SessionID, "c2")
		require.NoError(t, s.UpdateStatus(ctx, done.SessionID, helix.SessionCompleted, nil))
		stopped, _ := subAgent(t, s, root.SessionID, "c3")
		require.NoError(t, s.UpdateStatus(ctx, stopped.SessionID, helix.SessionInterrupted, nil))
		comp := dispatch(t, s, spawnCall(rrun, "p1", "helper", "pal", "task")).SessionID
		other := newSession(t, s, "other")
		otherChild, _ := subAgent(t, s, other.SessionID, "x1")
		all := []string{root.SessionID, c1.SessionID, g.SessionID, done.SessionID, stopped.SessionID, comp,
			other.SessionID, otherChild.SessionID}
		versions := map[string]int64{}
		for _, id := range all {
			versions[id] = load(t, s, id).Version
		}
		flagged := func() map[string]string {
			out := map[string]string{}
			for _, id := range all {
				if st := load(t, s, id); st.InterruptRequested {
					out[id] = st.InterruptReason
				}
			}
			return out
		}

		// From the middle of the tree: that session and what is below it.
		ids, err := s.InterruptTree(ctx, c1.SessionID, "mid")
		require.NoError(t, err)
		require.ElementsMatch(t, []string{c1.SessionID, g.SessionID}, ids)
		require.Equal(t, map[string]string{c1.SessionID: "mid", g.SessionID: "mid"}, flagged())

		// From the root: every active session of the conversation,
		// companions included; ended sessions and other conversations are
		// left alone.
		want := []string{root.SessionID, c1.SessionID, g.SessionID, comp}
		for range 2 { // idempotent
			ids, err = s.InterruptTree(ctx, root.SessionID, "stop")
			require.NoError(t, err)
			require.ElementsMatch(t, want, ids)
			require.Equal(t, map[string]string{root.SessionID: "stop", c1.SessionID: "stop", g.SessionID: "stop", comp: "stop"},
				flagged(), "the latest reason wins")
		}
		for _, id := range all {
			require.Equal(t, versions[id], load(t, s, id).Version, "the flag never bumps the version (%s)", id)
		}
		// The run loop of a sub-agent sees the request at its next step.
		req, err := s.CheckInterruptFlag(ctx, g.SessionID)
		require.NoError(t, err)
		require.Equal(t, store.InterruptRequest{Requested: true, Reason: "stop"}, req)
	},
	"ListSubtreeParentsFirst": func(t *testing.T, s Store) {
		ctx := t.Context()
		root, rrun := stepSession(t, s, "root")
		c1, _ := subAgent(t, s, root.SessionID, "c1")
		c2, _ := subAgent(t, s, root.SessionID, "c2")
		require.NoError(t, s.UpdateStatus(ctx, c2.SessionID, helix.SessionCompleted, nil))
		g, _ := subAgent(t, s, c1.SessionID, "g1")
		gg, _ := subAgent(t, s, g.SessionID, "gg1")
		comp := dispatch(t, s, spawnCall(rrun, "p1", "helper", "pal", "task")).SessionID
		other := newSession(t, s, "other")
		subAgent(t, s, other.SessionID, "x1")

		states, err := s.ListSubtree(ctx, root.SessionID)
		require.NoError(t, err)
		pos := map[string]int{}
		for i, st := range states {
			pos[st.SessionID] = i
			if st.SessionID == root.SessionID {
				continue
			}
			p, ok := pos[st.ParentSessionID]
			require.True(t, ok, "%s is listed before its parent %s", st.SessionID, st.ParentSessionID)
			require.Less(t, p, i)
			if st.SessionID == c2.SessionID {
				require.Equal(t, helix.SessionCompleted, st.Status, "the sessions are listed as stored")
			}
		}
		require.ElementsMatch(t, []string{root.SessionID, c1.SessionID, c2.SessionID, g.SessionID, gg.SessionID, comp},
			subtreeIDs(t, s, root.SessionID))
		require.Equal(t, root.SessionID, states[0].SessionID)
		require.Equal(t, []string{g.SessionID, gg.SessionID}, subtreeIDs(t, s, g.SessionID))
		require.Equal(t, []string{gg.SessionID}, subtreeIDs(t, s, gg.SessionID))
	},
	"InterruptForChildrenWithoutTheFlagWritesNothing": func(t *testing.T, s Store) {
		ctx := t.Context()
		root, rrun := stepSession(t, s, "root")
		e, erun := subAgent(t, s, root.SessionID, "e1")
		// The child was interrupted on its own, not by its parent.
		require.NoError(t, s.SetInterruptFlag(ctx, e.SessionID, "child only"))
		stopOnFlag(t, s, e.SessionID, erun.RunID)
		before, child := load(t, s, root.SessionID), load(t, s, e.SessionID)
		chunks := labels(ctx, t, s, root.StreamID)

		res, err := s.InterruptForChildren(ctx, childrenParams(root.SessionID, rrun.RunID, childWait(e, "e1")))
		require.NoError(t, err)
		require.False(t, res.Interrupted)
		require.Empty(t, res.InterruptReason)
		after := load(t, s, root.SessionID)
		require.Equal(t, before.Version, after.Version, "nothing written")
		require.Equal(t, helix.SessionActive, after.Status)
		require.Empty(t, after.SuspendedStep)
		require.Empty(t, after.SuspendedAwaitingChildren)
		require.Equal(t, helix.RunRunning, getRun(t, s, rrun.RunID).Status)
		require.Equal(t, child.Version, load(t, s, e.SessionID).Version)
		require.Equal(t, helix.SessionInterrupted, load(t, s, e.SessionID).Status)
		require.Empty(t, load(t, s, e.SessionID).FailureReason)
		require.Equal(t, chunks, labels(ctx, t, s, root.StreamID))
	},
	"SaveChildWaitRecordsTheStepAndItsChildren": func(t *testing.T, s Store) {
		ctx := t.Context()
		root, rrun := stepSession(t, s, "root")
		e, _ := subAgent(t, s, root.SessionID, "e1")
		before := load(t, s, root.SessionID)
		p := store.SaveChildWaitParams{SessionID: root.SessionID, StepID: rrun.RunID + ":2", Record: raw(`{"step": 2, "results": [{"b":1,"a":2}]}`),
			Children: map[string]store.SuspendedChildWait{"e1": childWait(e, "e1")}}
		require.NoError(t, s.SaveChildWait(ctx, p))
		require.NoError(t, s.SaveChildWait(ctx, p), "idempotent")
		after := load(t, s, root.SessionID)
		require.Equal(t, `{"step": 2, "results": [{"b":1,"a":2}]}`, string(after.SuspendedStep), "the record's text as written")
		require.Equal(t, rrun.RunID+":2", after.SuspendedStepID)
		require.Equal(t, p.Children, after.SuspendedAwaitingChildren)
		require.Equal(t, helix.SessionActive, after.Status, "no status changes")
		require.Equal(t, helix.RunRunning, getRun(t, s, rrun.RunID).Status)
		require.Greater(t, after.Version, before.Version)

		require.NoError(t, s.UpdateStatus(ctx, root.SessionID, helix.SessionFailed, &store.StatusUpdate{Error: "gone"}))
		require.ErrorContains(t, s.SaveChildWait(ctx, p), "is not active", "only an active session's step waits")
	},
	"InterruptForChildrenFailsSubAgentsAndKeepsCompanions": func(t *testing.T, s Store) {
		ctx := t.Context()
		root, rrun := stepSession(t, s, "root")
		_, err := s.CommitStep(ctx, store.StepCommit{SessionID: root.SessionID, RunID: rrun.RunID, Step: 1,
			Messages: []helix.Message{helix.AssistantMessage("delegating")}})
		require.NoError(t, err)
		e1, e1run := subAgent(t, s, root.SessionID, "e1")
		e2, _ := subAgent(t, s, root.SessionID, "e2")
		cp := spawnCall(rrun, "p1", "helper", "pal", "task")
		cp.Blocking = true
		comp := load(t, s, dispatch(t, s, cp).SessionID)

		_, err = s.InterruptTree(ctx, root.SessionID, "stop")
		require.NoError(t, err)
		// e1 and the companion stop on the flag; e2 has not reached a step
		// boundary yet.
		stopOnFlag(t, s, e1.SessionID, e1run.RunID)
		stopOnFlag(t, s, comp.SessionID, cp.RunID)

		p := childrenParams(root.SessionID, rrun.RunID, childWait(e1, "e1"), childWait(e2, "e2"), childWait(comp, "p1"))
		res, err := s.InterruptForChildren(ctx, p)
		require.NoError(t, err)
		require.True(t, res.Interrupted)
		require.Equal(t, "stop", res.InterruptReason)

		got := load(t, s, root.SessionID)
		require.Equal(t, helix.SessionInterrupted, got.Status)
		require.False(t, got.InterruptRequested, "the flag is consumed")
		require.NotNil(t, got.InterruptContext)
		require.Equal(t, "stop", got.InterruptContext.Reason)
		require.Equal(t, 1, got.InterruptContext.StepCount, "step 2 never committed")
		jsonEq(t, `{"step":2}`, got.SuspendedStep)
		require.Equal(t, rrun.RunID+":2", got.SuspendedStepID)
		require.Equal(t, p.Children, got.SuspendedAwaitingChildren, "the children are recorded for the resume")
		r := getRun(t, s, rrun.RunID)
		require.Equal(t, helix.RunInterrupted, r.Status)
		require.Equal(t, 1, r.StepCount)
		require.Equal(t, "stop", r.Error)
		require.NotNil(t, r.CompletedAt)
		chunks := labels(ctx, t, s, root.StreamID)
		require.Equal(t, "interrupted:stop", chunks[len(chunks)-1])

		for _, e := range []*store.SessionState{e1, e2} {
			st := load(t, s, e.SessionID)
			require.Equal(t, helix.SessionFailed, st.Status, e.SessionID)
			require.Equal(t, helix.FailureReasonParentSuspended, st.FailureReason)
			require.NotEmpty(t, st.Error)
			require.False(t, st.InterruptRequested, "a failed child has nothing left to interrupt")
			ref := refOf(t, s, root.SessionID, e.SessionID)
			require.Equal(t, helix.SubSessionFailed, ref.Status)
			require.NotNil(t, ref.CompletedAt)
		}
		// A companion keeps its memory: it stays interrupted, to be
		// continued, never re-spawned.
		st := load(t, s, comp.SessionID)
		require.Equal(t, helix.SessionInterrupted, st.Status)
		require.Empty(t, st.FailureReason)
		require.Equal(t, helix.SubSessionInterrupted, refOf(t, s, root.SessionID, comp.SessionID).Status)
		_, err = s.RespawnChild(ctx, store.RespawnParams{SessionID: comp.SessionID, RunID: "nope", WorkflowID: "nope"})
		require.Error(t, err)
		_, err = s.GetRun(ctx, "nope")
		require.ErrorIs(t, err, helix.ErrNotFound)
		n := len(transcript(t, s, comp.SessionID))
		d := dispatch(t, s, sendCall(rrun, "p2", "pal", "go on"))
		require.Equal(t, "resumed", d.How)
		require.Len(t, transcript(t, s, comp.SessionID), n+1)
	},
	"RespawnChildStartsFromScratch": func(t *testing.T, s Store) {
		ctx := t.Context()
		root, rrun := stepSession(t, s, "root")
		e, erun := subAgent(t, s, root.SessionID, "e1")
		_, err := s.AppendMessages(ctx, e.SessionID, userMsgs("the task"))
		require.NoError(t, err)
		_, err = s.CommitStep(ctx, store.StepCommit{SessionID: e.SessionID, RunID: erun.RunID, Step: 1,
			Messages: []helix.Message{helix.AssistantMessage("", helix.ToolCall{ID: "t1", Name: "t", Arguments: raw(`{}`)}),
				helix.ToolResultMessage("t1", "t", `{}`)},
			Patches: []helix.PatchOp{{Op: "add", Path: "/x", Value: raw(`1`)}}, Chunks: []helix.Chunk{delta(e.SessionID, 1, "e1")}})
		require.NoError(t, err)
		_, err = s.SuspendStep(ctx, suspendParams(e.SessionID, erun.RunID, 2, clientCall("w1", 0)))
		require.NoError(t, err)

		respawn := store.RespawnParams{SessionID: e.SessionID, RunID: e.SessionID + "-run-2",
			WorkflowID: e.SessionID + "-respawn-" + rrun.RunID, KeepMessages: 1, CustomState: raw(`{"fresh":true}`)}
		refused := func(why string) {
			t.Helper()
			before := load(t, s, e.SessionID)
			_, err := s.RespawnChild(ctx, respawn)
			require.Error(t, err, why)
			require.Equal(t, before.Version, load(t, s, e.SessionID).Version, "nothing written: %s", why)
			require.Len(t, runsOf(t, s, e.SessionID), 1)
		}
		refused("an active child")
		require.NoError(t, s.UpdateStatus(ctx, e.SessionID, helix.SessionFailed, &store.StatusUpdate{Error: "boom"}))
		refused("a child that failed on its own")
		require.NoError(t, s.UpdateStatus(ctx, e.SessionID, helix.SessionFailed, &store.StatusUpdate{Error: "parent stopped",
			FailureReason: helix.FailureReasonParentSuspended}))
		failed := helix.SubSessionFailed
		require.NoError(t, s.UpdateSubSessionRef(ctx, root.SessionID, store.SubSessionRefUpdate{SubSessionID: e.SessionID, Status: &failed}))

		run, err := s.RespawnChild(ctx, respawn)
		require.NoError(t, err)
		require.Equal(t, respawn.RunID, run.RunID)
		require.Equal(t, e.SessionID, run.SessionID)
		require.Equal(t, respawn.WorkflowID, run.WorkflowID)
		require.Equal(t, helix.RunRunning, run.Status)
		require.Equal(t, 2, run.Turn)
		info, err := s.GetStreamInfo(ctx, root.StreamID)
		require.NoError(t, err)
		require.Equal(t, info.LatestSequence, run.StartSequence, "the new run starts after the chunks already in the stream")
		cur, err := s.GetCurrentRun(ctx, e.SessionID)
		require.NoError(t, err)
		require.Equal(t, run.RunID, cur.RunID)

		got := load(t, s, e.SessionID)
		require.Equal(t, helix.SessionActive, got.Status)
		require.Zero(t, got.StepCount)
		require.Empty(t, got.Error)
		require.Empty(t, got.FailureReason)
		jsonEq(t, `{"fresh":true}`, got.CustomState)
		require.Equal(t, []string{"user:the task"}, transcript(t, s, e.SessionID))
		requireNoSuspension(t, got)
		require.NotContains(t, load(t, s, root.SessionID).ClientToolCallOwnership, "w1")
		pending, err := s.ListPendingCalls(ctx, root.SessionID)
		require.NoError(t, err)
		require.Empty(t, pending)
		ref := refOf(t, s, root.SessionID, e.SessionID)
		require.Equal(t, helix.SubSessionRunning, ref.Status)
		require.Nil(t, ref.CompletedAt)
		_, err = s.CommitStep(ctx, store.StepCommit{SessionID: e.SessionID, RunID: run.RunID, Step: 1,
			Messages: []helix.Message{helix.AssistantMessage("again")}})
		require.NoError(t, err)

		// Running again, it is not re-spawned twice.
		respawn.RunID = e.SessionID + "-run-3"
		_, err = s.RespawnChild(ctx, respawn)
		require.Error(t, err)
		_, err = s.GetRun(ctx, respawn.RunID)
		require.ErrorIs(t, err, helix.ErrNotFound)

		// Without a custom state it is reset to {}.
		e2, _ := subAgent(t, s, root.SessionID, "e2")
		_, err = s.MergeCustomState(ctx, e2.SessionID, []helix.PatchOp{{Op: "add", Path: "/y", Value: raw(`2`)}})
		require.NoError(t, err)
		require.NoError(t, s.UpdateStatus(ctx, e2.SessionID, helix.SessionFailed, &store.StatusUpdate{
			FailureReason: helix.FailureReasonParentSuspended}))
		_, err = s.RespawnChild(ctx, store.RespawnParams{SessionID: e2.SessionID, RunID: e2.SessionID + "-run-2"})
		require.NoError(t, err)
		jsonEq(t, `{}`, load(t, s, e2.SessionID).CustomState)

		_, err = s.RespawnChild(ctx, store.RespawnParams{SessionID: "missing", RunID: "r"})
		require.ErrorIs(t, err, helix.ErrNotFound)
	},
}
