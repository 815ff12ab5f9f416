package storetest

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

// clockSlack bounds how far a store's clock may stray from the test's (ms).
const clockSlack = int64(5000)

// outputSchema is the test client tool's output schema.
const outputSchema = `{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`

// clientCall waits for a client tool's result; approvalCall for an approval.
func clientCall(id string, index int) store.PendingClientToolCall {
	return store.PendingClientToolCall{ToolCallID: id, ToolName: "lookup", Kind: helix.SubmissionClientToolResult,
		Arguments: raw(`{"q":"x"}`), OutputSchema: raw(outputSchema), Index: index}
}

func approvalCall(id string, index int) store.PendingClientToolCall {
	return store.PendingClientToolCall{ToolCallID: id, ToolName: "deploy", Kind: helix.SubmissionApprovalResponse, Index: index}
}

func clientResult(id, result string) helix.ToolSubmission {
	return helix.ToolSubmission{Kind: helix.SubmissionClientToolResult, ToolCallID: id, Result: raw(result)}
}

// interruptedChunk builds the chunk of a run that ends interrupted.
func interruptedChunk(agent string, step int) func(string) helix.Chunk {
	return func(reason string) helix.Chunk { return delta(agent, step, "interrupted:"+reason) }
}

// suspendParams describe step of runID waiting on calls (no deadlines).
func suspendParams(sessionID, runID string, step int, calls ...store.PendingClientToolCall) store.SuspendParams {
	p := store.SuspendParams{SessionID: sessionID, RunID: runID, StepID: fmt.Sprintf("%s:%d", runID, step), Step: step,
		Record: raw(fmt.Sprintf(`{"step":%d}`, step)), Interrupted: interruptedChunk(sessionID, step)}
	for _, c := range calls {
		p.Pending = append(p.Pending, store.PendingCall{Call: c})
	}
	return p
}

// suspended creates a root session whose run suspends step 1 on calls.
func suspended(t *testing.T, s Store, suffix string, calls ...store.PendingClientToolCall) (*store.SessionState, *store.Run) {
	t.Helper()
	st, run := stepSession(t, s, suffix)
	_, err := s.SuspendStep(t.Context(), suspendParams(st.SessionID, run.RunID, 1, calls...))
	require.NoError(t, err)
	return st, run
}

// outcomes counts ResolveToolCall's Outcome calls and builds their records.
func outcomes(agent string, step int, n *atomic.Int32) func(store.PendingClientToolCall) ([]helix.Chunk, []store.UsageRecord) {
	return func(c store.PendingClientToolCall) ([]helix.Chunk, []store.UsageRecord) {
		n.Add(1)
		return []helix.Chunk{delta(agent, step, "outcome:"+c.ToolCallID)},
			[]store.UsageRecord{{SourceType: store.UsageTool, SourceName: c.ToolName, Success: c.Submission != nil, Key: "outcome:" + c.ToolCallID}}
	}
}

func load(t *testing.T, s Store, sessionID string) *store.SessionState {
	t.Helper()
	st, err := s.LoadState(t.Context(), sessionID)
	require.NoError(t, err)
	return st
}

func getRun(t *testing.T, s Store, runID string) *store.Run {
	t.Helper()
	r, err := s.GetRun(t.Context(), runID)
	require.NoError(t, err)
	return r
}

func usageOf(t *testing.T, s Store, sessionID string) []store.UsageRecord {
	t.Helper()
	u, err := s.ListUsage(t.Context(), sessionID)
	require.NoError(t, err)
	return u
}

// requireRejected asserts a *helix.SubmissionError with code.
func requireRejected(t *testing.T, err error, code string) *helix.SubmissionError {
	t.Helper()
	var se *helix.SubmissionError
	require.ErrorAs(t, err, &se)
	require.Equal(t, code, se.Code, "%v", err)
	require.ErrorIs(t, err, helix.ErrSubmissionRejected)
	return se
}

// requireNoSuspension asserts a session has no pending call, owns none (on
// a root session) and has no suspended-step record.
func requireNoSuspension(t *testing.T, st *store.SessionState) {
	t.Helper()
	require.Empty(t, st.PendingClientToolCalls)
	require.Empty(t, st.ClientToolCallOwnership)
	require.Empty(t, st.SuspendedStep)
	require.Empty(t, st.SuspendedStepID)
}

var suspensionCases = map[string]func(t *testing.T, s Store){
	"SuspendWritesCallsRecordAndRunStatus": func(t *testing.T, s Store) {
		ctx := t.Context()
		st, run := stepSession(t, s, "suspend")
		p := suspendParams(st.SessionID, run.RunID, 1)
		p.Pending = []store.PendingCall{{Call: clientCall("c1", 1), Timeout: 90 * time.Second}, {Call: approvalCall("a1", 0)}}
		p.Chunks = []helix.Chunk{delta(st.SessionID, 1, "known"), delta(st.SessionID, 1, "approval?")}
		p.Usage = []store.UsageRecord{{SourceType: store.UsageModel, SourceName: "m", InputTokens: 5, Success: true, Key: "model:1"}}
		before := time.Now().UnixMilli()
		res, err := s.SuspendStep(ctx, p)
		after := time.Now().UnixMilli()
		require.NoError(t, err)
		require.Len(t, res.Pending, 2)
		require.Equal(t, "a1", res.Pending[0].ToolCallID, "the calls come back in the model's order")
		require.Equal(t, "c1", res.Pending[1].ToolCallID)

		got := load(t, s, st.SessionID)
		require.Equal(t, helix.SessionActive, got.Status, "a suspended session stays active")
		require.Len(t, got.PendingClientToolCalls, 2)
		for _, want := range res.Pending {
			c := got.PendingClientToolCalls[want.ToolCallID]
			require.Equal(t, want.CreatedAt, c.CreatedAt, "the result reports the calls as stored")
			require.Equal(t, want.DeadlineAt, c.DeadlineAt)
			require.Equal(t, st.SessionID, c.OwnerSessionID)
			require.Equal(t, run.RunID, c.RunID)
			require.Equal(t, 1, c.Step)
			require.GreaterOrEqual(t, c.CreatedAt, before-clockSlack)
			require.LessOrEqual(t, c.CreatedAt, after+clockSlack)
			require.Equal(t, st.SessionID, got.ClientToolCallOwnership[c.ToolCallID], "ownership is on the root")
		}
		c1 := got.PendingClientToolCalls["c1"]
		require.Equal(t, c1.CreatedAt+90_000, c1.DeadlineAt, "the deadline is the timeout after the suspension")
		require.Zero(t, got.PendingClientToolCalls["a1"].DeadlineAt, "no timeout, no deadline")
		jsonEq(t, outputSchema, c1.OutputSchema)
		jsonEq(t, `{"step":1}`, got.SuspendedStep)
		require.Equal(t, run.RunID+":1", got.SuspendedStepID)
		require.Equal(t, []string{"known", "approval?"}, labels(ctx, t, s, st.StreamID))
		usage := usageOf(t, s, st.SessionID)
		require.Len(t, usage, 1)
		require.Equal(t, run.RunID, usage[0].RunID, "usage defaults to the suspension's run and step")
		require.Equal(t, 1, usage[0].Step)
		r := getRun(t, s, run.RunID)
		require.Equal(t, helix.RunSuspendedClientTool, r.Status)
		require.Zero(t, r.StepCount, "the suspended step has not committed")

		// A tool call ID already owned in the conversation is refused, and
		// the refused suspension writes nothing.
		dup := suspendParams(st.SessionID, run.RunID, 2, clientCall("c2", 0), clientCall("c1", 1))
		dup.Chunks = []helix.Chunk{delta(st.SessionID, 2, "dup")}
		_, err = s.SuspendStep(ctx, dup)
		require.ErrorContains(t, err, "c1")
		again := load(t, s, st.SessionID)
		require.Equal(t, got.Version, again.Version)
		require.NotContains(t, again.PendingClientToolCalls, "c2")
		require.NotContains(t, again.ClientToolCallOwnership, "c2")
		require.Len(t, labels(ctx, t, s, st.StreamID), 2)

		// A session that is not active is refused; nothing is written.
		st2, run2 := stepSession(t, s, "failed")
		require.NoError(t, s.UpdateStatus(ctx, st2.SessionID, helix.SessionFailed, &store.StatusUpdate{Error: "aborted"}))
		p2 := suspendParams(st2.SessionID, run2.RunID, 1, clientCall("c1", 0))
		p2.Chunks, p2.Usage = []helix.Chunk{delta(st2.SessionID, 1, "x")}, p.Usage
		_, err = s.SuspendStep(ctx, p2)
		require.ErrorContains(t, err, "is failed")
		requireNoSuspension(t, load(t, s, st2.SessionID))
		require.Empty(t, labels(ctx, t, s, st2.StreamID))
		require.Empty(t, usageOf(t, s, st2.SessionID))
		require.Equal(t, helix.RunRunning, getRun(t, s, run2.RunID).Status)
	},
	"SuspendConsumesTheInterruptFlag": func(t *testing.T, s Store) {
		ctx := t.Context()
		st, run := stepSession(t, s, "interrupt")
		_, err := s.CommitStep(ctx, store.StepCommit{SessionID: st.SessionID, RunID: run.RunID, Step: 1,
			Messages: []helix.Message{helix.AssistantMessage("one")}})
		require.NoError(t, err)
		require.NoError(t, s.SetInterruptFlag(ctx, st.SessionID, "stop"))
		p := suspendParams(st.SessionID, run.RunID, 2, clientCall("c1", 0))
		p.Chunks = []helix.Chunk{delta(st.SessionID, 2, "s2")}
		res, err := s.SuspendStep(ctx, p)
		require.NoError(t, err)
		require.True(t, res.Interrupted)
		require.Equal(t, "stop", res.InterruptReason)

		got := load(t, s, st.SessionID)
		require.Equal(t, helix.SessionInterrupted, got.Status)
		require.NotNil(t, got.InterruptContext)
		require.Equal(t, "stop", got.InterruptContext.Reason)
		require.Equal(t, 1, got.InterruptContext.StepCount, "the suspended step 2 never committed")
		req, err := s.CheckInterruptFlag(ctx, st.SessionID)
		require.NoError(t, err)
		require.False(t, req.Requested, "the flag is consumed")
		r := getRun(t, s, run.RunID)
		require.Equal(t, helix.RunInterrupted, r.Status)
		require.Equal(t, "stop", r.Error)
		require.Equal(t, 1, r.StepCount, "the run's steps are its committed ones")
		require.NotNil(t, r.CompletedAt)
		require.Equal(t, []string{"s2", "interrupted:stop"}, labels(ctx, t, s, st.StreamID))
		require.Contains(t, got.PendingClientToolCalls, "c1", "the calls are kept for a resume")
		require.Equal(t, run.RunID+":2", got.SuspendedStepID)

		// Nothing waits on an interrupted session: a submission is refused
		// (resume first) and writes nothing.
		_, err = s.RecordSubmission(ctx, st.SessionID, clientResult("c1", `{"n":1}`))
		requireRejected(t, err, helix.SubmissionSessionInterrupted)
		after := load(t, s, st.SessionID)
		require.Equal(t, got.Version, after.Version)
		require.Empty(t, after.CompletedClientToolCalls)
	},
	"SubmissionIsValidatedAndRecordedOnce": func(t *testing.T, s Store) {
		ctx := t.Context()
		c1call := clientCall("c1", 0)
		c1call.WorkflowID = "wf-submit"
		st, run := suspended(t, s, "submit", c1call, approvalCall("a1", 1))
		base := load(t, s, st.SessionID)

		_, err := s.RecordSubmission(ctx, st.SessionID, clientResult("nope", `{"n":1}`))
		requireRejected(t, err, helix.SubmissionUnknownToolCall)
		require.ErrorIs(t, err, helix.ErrNotFound)
		_, err = s.RecordSubmission(ctx, st.SessionID, helix.Approve("c1", ""))
		requireRejected(t, err, helix.SubmissionKindMismatch)
		_, err = s.RecordSubmission(ctx, st.SessionID, clientResult("a1", `{"n":1}`))
		requireRejected(t, err, helix.SubmissionKindMismatch)
		_, err = s.RecordSubmission(ctx, st.SessionID, clientResult("c1", `{"n":"many"}`))
		se := requireRejected(t, err, helix.SubmissionInvalidResult)
		require.NotEmpty(t, se.Violations, "every schema violation is reported")
		got := load(t, s, st.SessionID)
		require.Equal(t, base.Version, got.Version, "rejected submissions write nothing")
		require.Empty(t, got.CompletedClientToolCalls)
		require.Nil(t, got.PendingClientToolCalls["c1"].Submission)
		require.Empty(t, usageOf(t, s, st.SessionID))

		rec, err := s.RecordSubmission(ctx, st.SessionID, clientResult("c1", `{"n":7}`))
		require.NoError(t, err)
		require.False(t, rec.AlreadyCompleted)
		require.Equal(t, []string{"a1"}, rec.Unresolved)
		require.NotNil(t, rec.Call.Submission)
		jsonEq(t, `{"n":7}`, rec.Call.Submission.Result)
		got = load(t, s, st.SessionID)
		c1 := got.PendingClientToolCalls["c1"]
		require.NotNil(t, c1.Submission, "the submission is durable on the call")
		require.Equal(t, "wf-submit", c1.SentTo, "the submission records the workflow its message goes to")
		require.Equal(t, "wf-submit", rec.Call.SentTo)
		require.Equal(t, c1.SubmittedAt, got.CompletedClientToolCalls["c1"])
		require.Positive(t, got.CompletedClientToolCalls["c1"])
		usage := usageOf(t, s, st.SessionID)
		require.Len(t, usage, 1)
		require.Equal(t, store.UsageClientToolWaitMS, usage[0].SourceType)
		require.Equal(t, run.RunID, usage[0].RunID)
		require.Equal(t, 1, usage[0].Step)
		require.NotNil(t, usage[0].Value)
		require.InDelta(t, float64(c1.SubmittedAt-c1.CreatedAt), *usage[0].Value, 0.5)
		require.Equal(t, helix.RunSuspendedClientTool, getRun(t, s, run.RunID).Status, "a1 still waits")

		// A second answer reports the first and writes nothing.
		dup, err := s.RecordSubmission(ctx, st.SessionID, clientResult("c1", `{"n":8}`))
		require.NoError(t, err)
		require.True(t, dup.AlreadyCompleted)
		jsonEq(t, `{"n":7}`, dup.Call.Submission.Result)
		require.Equal(t, got.Version, load(t, s, st.SessionID).Version)
		require.Len(t, usageOf(t, s, st.SessionID), 1)

		// Concurrent answers to one call: exactly one records it.
		const n = 32
		recs, errs := make([]*store.RecordedSubmission, n), make([]error, n)
		parallel(n, func(i int) {
			recs[i], errs[i] = s.RecordSubmission(ctxBackground(), st.SessionID, helix.Approve("a1", fmt.Sprint(i)))
		})
		winners, winner := 0, ""
		for i := range n {
			require.NoError(t, errs[i])
			if !recs[i].AlreadyCompleted {
				winners, winner = winners+1, fmt.Sprint(i)
				require.Empty(t, recs[i].Unresolved)
			}
		}
		require.Equal(t, 1, winners)
		got = load(t, s, st.SessionID)
		require.True(t, got.PendingClientToolCalls["a1"].Submission.IsApproved())
		require.Equal(t, winner, got.PendingClientToolCalls["a1"].Submission.Reason, "the first answer stands")
		require.Len(t, usageOf(t, s, st.SessionID), 2)
		require.Equal(t, helix.RunRunning, getRun(t, s, run.RunID).Status, "no call of the run is left unanswered")
	},
	"SubAgentCallsAreRoutedAndClearedWithTheStep": func(t *testing.T, s Store) {
		ctx := t.Context()
		root, rootRun := stepSession(t, s, "root")
		child, err := s.CreateSession(ctx, store.CreateSessionParams{SessionID: root.SessionID + "-child", AgentType: "sub",
			ParentSessionID: root.SessionID})
		require.NoError(t, err)
		childRun, err := s.CreateRun(ctx, store.CreateRunParams{RunID: child.SessionID + "-run-1", SessionID: child.SessionID})
		require.NoError(t, err)
		_, err = s.SuspendStep(ctx, suspendParams(child.SessionID, childRun.RunID, 1, clientCall("c1", 0)))
		require.NoError(t, err)
		r := load(t, s, root.SessionID)
		require.Equal(t, child.SessionID, r.ClientToolCallOwnership["c1"], "the root routes the call to its owner")
		listed, err := s.ListPendingCalls(ctx, root.SessionID)
		require.NoError(t, err)
		require.Len(t, listed, 1, "the root lists its sub-agents' calls")
		require.Equal(t, child.SessionID, listed[0].OwnerSessionID)
		listed, err = s.ListPendingCalls(ctx, child.SessionID)
		require.NoError(t, err)
		require.Len(t, listed, 1)
		// The same ID cannot be used again anywhere in the conversation.
		_, err = s.SuspendStep(ctx, suspendParams(root.SessionID, rootRun.RunID, 1, approvalCall("c1", 0)))
		require.Error(t, err)

		_, err = s.RecordSubmission(ctx, child.SessionID, clientResult("c1", `{"n":1}`))
		requireRejected(t, err, helix.SubmissionNotRoot)
		require.Nil(t, load(t, s, child.SessionID).PendingClientToolCalls["c1"].Submission, "nothing written")
		require.Empty(t, load(t, s, root.SessionID).CompletedClientToolCalls)

		rec, err := s.RecordSubmission(ctx, root.SessionID, clientResult("c1", `{"n":1}`))
		require.NoError(t, err)
		require.Equal(t, child.SessionID, rec.Call.OwnerSessionID)
		require.NotNil(t, load(t, s, child.SessionID).PendingClientToolCalls["c1"].Submission)
		require.Positive(t, load(t, s, root.SessionID).CompletedClientToolCalls["c1"])
		require.Len(t, usageOf(t, s, child.SessionID), 1, "the wait is the owner's usage")
		require.Equal(t, helix.RunRunning, getRun(t, s, childRun.RunID).Status)

		// The commit that appends the result clears the child's suspension
		// and the root's ownership, in the same transaction: a commit that
		// fails keeps them.
		commit := store.StepCommit{SessionID: child.SessionID, RunID: "missing-run", Step: 1, ClearSuspension: true,
			Messages: []helix.Message{helix.ToolResultMessage("c1", "lookup", `{"n":1}`)}}
		_, err = s.CommitStep(ctx, commit)
		require.ErrorIs(t, err, helix.ErrNotFound)
		c := load(t, s, child.SessionID)
		require.Contains(t, c.PendingClientToolCalls, "c1")
		require.NotEmpty(t, c.SuspendedStep)
		require.Zero(t, c.StepCount)
		require.Equal(t, child.SessionID, load(t, s, root.SessionID).ClientToolCallOwnership["c1"])
		commit.RunID = childRun.RunID
		_, err = s.CommitStep(ctx, commit)
		require.NoError(t, err)
		c = load(t, s, child.SessionID)
		requireNoSuspension(t, c)
		require.Equal(t, 1, c.StepCount)
		r = load(t, s, root.SessionID)
		require.NotContains(t, r.ClientToolCallOwnership, "c1")
		require.Positive(t, r.CompletedClientToolCalls["c1"], "completion stays durable")
		again, err := s.RecordSubmission(ctx, root.SessionID, clientResult("c1", `{"n":2}`))
		require.NoError(t, err)
		require.True(t, again.AlreadyCompleted)
		// A completed ID stays used in the conversation.
		_, err = s.SuspendStep(ctx, suspendParams(root.SessionID, rootRun.RunID, 1, clientCall("c1", 0)))
		require.ErrorContains(t, err, "c1")
		require.Empty(t, load(t, s, root.SessionID).PendingClientToolCalls)
	},
	"TimeoutResolvesOnceAndRejectsLateSubmissions": func(t *testing.T, s Store) {
		ctx := t.Context()
		st, run := suspended(t, s, "timeout", clientCall("c1", 0), clientCall("c2", 1))
		rec, err := s.RecordSubmission(ctx, st.SessionID, clientResult("c2", `{"n":2}`))
		require.NoError(t, err)
		require.Equal(t, []string{"c1"}, rec.Unresolved)
		require.Equal(t, helix.RunSuspendedClientTool, getRun(t, s, run.RunID).Status, "c1 still waits")

		var n atomic.Int32
		p := store.ResolveParams{SessionID: st.SessionID, RunID: run.RunID, Step: 1, ToolCallID: "c1", TimedOut: true,
			Outcome: outcomes(st.SessionID, 1, &n), Interrupted: interruptedChunk(st.SessionID, 0)}
		res, err := s.ResolveToolCall(ctx, p)
		require.NoError(t, err)
		require.False(t, res.Interrupted)
		require.Positive(t, res.Call.TimedOutAt)
		require.Positive(t, res.Call.ConsumedAt)
		require.Empty(t, res.Unresolved)
		require.Equal(t, int32(1), n.Load())
		got := load(t, s, st.SessionID)
		require.Equal(t, res.Call, got.PendingClientToolCalls["c1"])
		require.Equal(t, -res.Call.TimedOutAt, got.CompletedClientToolCalls["c1"], "timed out: a negative time")
		require.Equal(t, []string{"outcome:c1"}, labels(ctx, t, s, st.StreamID))
		require.Len(t, usageOf(t, s, st.SessionID), 2, "the c2 wait and the c1 outcome")
		require.Equal(t, helix.RunRunning, getRun(t, s, run.RunID).Status, "the last call's timeout resumes the run")

		// A replayed wake does not take the outcome again.
		res2, err := s.ResolveToolCall(ctx, p)
		require.NoError(t, err)
		require.Equal(t, int32(1), n.Load())
		require.Equal(t, res.Call, res2.Call)
		require.Len(t, labels(ctx, t, s, st.StreamID), 1)

		_, err = s.RecordSubmission(ctx, st.SessionID, clientResult("c1", `{"n":1}`))
		requireRejected(t, err, helix.SubmissionTimedOut)
		require.Nil(t, load(t, s, st.SessionID).PendingClientToolCalls["c1"].Submission)

		// An answered call never times out, even at its deadline.
		p.ToolCallID = "c2"
		res, err = s.ResolveToolCall(ctx, p)
		require.NoError(t, err)
		require.Zero(t, res.Call.TimedOutAt)
		require.NotNil(t, res.Call.Submission)
		require.Equal(t, int32(2), n.Load())
		require.Positive(t, load(t, s, st.SessionID).CompletedClientToolCalls["c2"])
		// The step's commit clears the root's own suspension; the timeout
		// stays durable.
		_, err = s.CommitStep(ctx, store.StepCommit{SessionID: st.SessionID, RunID: run.RunID, Step: 1, ClearSuspension: true})
		require.NoError(t, err)
		requireNoSuspension(t, load(t, s, st.SessionID))
		_, err = s.RecordSubmission(ctx, st.SessionID, clientResult("c1", `{"n":1}`))
		requireRejected(t, err, helix.SubmissionTimedOut)

		// A wake-up for an interrupt ends the session and the run; the
		// unanswered call keeps waiting for a resume and has no outcome.
		st2, run2 := suspended(t, s, "wake", clientCall("w1", 0))
		require.NoError(t, s.SetInterruptFlag(ctx, st2.SessionID, "bye"))
		res, err = s.ResolveToolCall(ctx, store.ResolveParams{SessionID: st2.SessionID, RunID: run2.RunID, Step: 1,
			ToolCallID: "w1", Outcome: outcomes(st2.SessionID, 1, &n), Interrupted: interruptedChunk(st2.SessionID, 0)})
		require.NoError(t, err)
		require.True(t, res.Interrupted)
		require.Equal(t, "bye", res.InterruptReason)
		require.False(t, res.Call.Resolved())
		require.Equal(t, int32(2), n.Load(), "no outcome for an unanswered call")
		got = load(t, s, st2.SessionID)
		require.Equal(t, helix.SessionInterrupted, got.Status)
		require.Equal(t, 0, got.InterruptContext.StepCount)
		require.Contains(t, got.PendingClientToolCalls, "w1")
		r := getRun(t, s, run2.RunID)
		require.Equal(t, helix.RunInterrupted, r.Status)
		require.Equal(t, 0, r.StepCount)
		require.Equal(t, []string{"interrupted:bye"}, labels(ctx, t, s, st2.StreamID))
		req, err := s.CheckInterruptFlag(ctx, st2.SessionID)
		require.NoError(t, err)
		require.False(t, req.Requested)
	},
	"RetargetAndDiscardAreIdempotent": func(t *testing.T, s Store) {
		ctx := t.Context()
		// Position order differs from ID order on purpose.
		st, run := suspended(t, s, "retarget", clientCall("z", 0), approvalCall("m", 1), clientCall("a", 2))
		_, err := s.RecordSubmission(ctx, st.SessionID, helix.Deny("m", "no"))
		require.NoError(t, err)
		run2, err := s.CreateRun(ctx, store.CreateRunParams{RunID: st.SessionID + "-run-2", SessionID: st.SessionID,
			WorkflowID: "wf-2", PreviousRunID: run.RunID})
		require.NoError(t, err)
		for range 2 {
			open, err := s.RetargetPending(ctx, st.SessionID, run2.RunID, "wf-2")
			require.NoError(t, err)
			require.Equal(t, []string{"z", "a"}, open, "the unanswered calls, by step and position")
		}
		got := load(t, s, st.SessionID)
		require.Len(t, got.PendingClientToolCalls, 3)
		for id, c := range got.PendingClientToolCalls {
			require.Equal(t, run2.RunID, c.RunID, id)
			require.Equal(t, "wf-2", c.WorkflowID, id)
		}
		require.NotNil(t, got.PendingClientToolCalls["m"].Submission, "answers given before the resume are kept")
		// Answers now go to the new run.
		rec, err := s.RecordSubmission(ctx, st.SessionID, clientResult("z", `{"n":0}`))
		require.NoError(t, err)
		require.Equal(t, run2.RunID, rec.Call.RunID)
		require.Equal(t, []string{"a"}, rec.Unresolved)

		dropped, err := s.DiscardPending(ctx, st.SessionID)
		require.NoError(t, err)
		ids := make([]string, len(dropped))
		for i, c := range dropped {
			ids[i] = c.ToolCallID
		}
		require.Equal(t, []string{"z", "m", "a"}, ids, "what was dropped, by step and position")
		require.NotNil(t, dropped[1].Submission)
		requireNoSuspension(t, load(t, s, st.SessionID))
		dropped, err = s.DiscardPending(ctx, st.SessionID)
		require.NoError(t, err)
		require.Empty(t, dropped)
		open, err := s.RetargetPending(ctx, st.SessionID, "run-3", "wf-3")
		require.NoError(t, err)
		require.Empty(t, open)
		_, err = s.RecordSubmission(ctx, st.SessionID, clientResult("a", `{"n":1}`))
		requireRejected(t, err, helix.SubmissionUnknownToolCall)
	},
}
