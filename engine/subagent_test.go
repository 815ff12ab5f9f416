package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/store"
)

const summarySchema = `{"type":"object","properties":{"summary":{"type":"string"}},"required":["summary"]}`

// summarizer is a sub-agent: it answers its first request with a summary
// of the task it was given (or fails when told to).
func summarizer(log func(string)) *helix.Agent {
	return &helix.Agent{
		Name:         "summarizer",
		Description:  "Summarizes a text",
		OutputSchema: json.RawMessage(summarySchema),
		Model: helix.ModelFunc(func(_ context.Context, req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
			var in struct {
				Task string `json:"task"`
			}
			if err := json.Unmarshal([]byte(req.Messages[len(req.Messages)-1].Content), &in); err != nil {
				return helix.StepResult{}, err
			}
			if in.Task == "fail" {
				return helix.StepResult{}, &helix.ModelError{Code: helix.CodeProviderOverloaded, Message: "the summarizer's provider is down"}
			}
			cb.TextDelta("summarizing " + in.Task)
			out, _ := json.Marshal(map[string]string{"summary": "short " + in.Task})
			return helix.StepResult{Type: helix.StepToolCalls, StopReason: helix.StopToolUse,
				ToolCalls: []helix.ToolCall{{ID: "fin", Name: helix.FinishToolName, Arguments: out}}}, nil
		}),
		Hooks: &helix.Hooks{
			OnAgentStart: func(_ context.Context, hc helix.HookContext) error { log("start:" + hc.SessionID); return nil },
			OnAgentComplete: func(_ context.Context, hc helix.HookContext, _ helix.AgentResult) error {
				log("complete:" + hc.SessionID)
				return nil
			},
			OnAgentFail: func(_ context.Context, hc helix.HookContext, _ string) error { log("fail:" + hc.SessionID); return nil },
		},
	}
}

// A parent delegates to two sub-agents and runs a tool in the same step:
// each child runs as its own session in the parent's stream, between
// subagent_start and subagent_end, with its own hooks; the children's
// outputs are the tool results; the parent's stream ends once.
func TestSubAgentsRunAsChildSessions(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var hookLog []string
	rec := func(s string) { mu.Lock(); hookLog = append(hookLog, s); mu.Unlock() }
	var x executions
	sum := summarizer(rec)
	parent := &helix.Agent{
		Name:  "lead",
		Tools: []*helix.Tool{helix.MustSubAgentTool(sum, nil, nil), noteTool(&x)},
		Model: script(
			calls(call("s1", "subagent__summarizer", `{"task":"alpha"}`), call("n1", "note", `{"text":"x"}`),
				call("s2", "subagent__summarizer", `{"task":"beta"}`)),
			text("both summarized"),
		),
	}
	e := newEngine(t, parent)
	h, err := e.Execute(t.Context(), parent, engine.Input{Message: "summarize alpha and beta"}, nil)
	require.NoError(t, err)
	res := result(t, h)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)

	msgs := allMessages(t, e, h.SessionID)
	require.Equal(t, []string{"user", "assistant", "tool", "tool", "tool", "assistant"}, roles(msgs))
	require.JSONEq(t, `{"summary":"short alpha"}`, msgs[2].Content, "the child's output is the tool result")
	require.JSONEq(t, `{"summary":"short beta"}`, msgs[4].Content)

	refs, err := e.SubSessions(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Len(t, refs, 2)
	for i, id := range []string{"s1", "s2"} {
		require.Equal(t, h.SessionID+"-sub-"+id, refs[i].SubSessionID, "deterministic child session IDs")
		require.Equal(t, id, refs[i].ParentToolCallID)
		require.Equal(t, helix.SubSessionEphemeral, refs[i].Mode)
		require.Equal(t, helix.SubSessionCompleted, refs[i].Status)
		require.NotNil(t, refs[i].CompletedAt)
		st, err := e.Session(t.Context(), refs[i].SubSessionID)
		require.NoError(t, err)
		require.Equal(t, h.SessionID, st.ParentSessionID)
		require.Equal(t, h.SessionID, st.RootSessionID)
		require.Equal(t, h.SessionID, st.StreamID, "children write into the root's stream")
		require.Equal(t, helix.SessionCompleted, st.Status)
	}

	chunks := streamChunks(t, h)
	starts := findChunks[*helix.SubAgentStartChunk](chunks)
	ends := findChunks[*helix.SubAgentEndChunk](chunks)
	require.Len(t, starts, 2)
	require.Len(t, ends, 2)
	for _, s := range starts {
		require.Equal(t, h.SessionID, s.AgentID, "subagent_start is the parent's chunk")
		require.Equal(t, "summarizer", s.SubAgentType)
	}
	endOf := map[string]string{}
	for _, e := range ends {
		require.Equal(t, h.SessionID, e.AgentID)
		endOf[e.CallID] = string(e.Result)
	}
	require.JSONEq(t, `{"summary":"short alpha"}`, endOf["s1"])
	var childDeltas []string
	for _, c := range findChunks[*helix.TextDeltaChunk](chunks) {
		if c.AgentID != h.SessionID {
			childDeltas = append(childDeltas, c.AgentID+":"+c.Delta)
		}
	}
	require.ElementsMatch(t, []string{h.SessionID + "-sub-s1:summarizing alpha", h.SessionID + "-sub-s2:summarizing beta"}, childDeltas,
		"child chunks carry the child's agentId")
	require.Len(t, findChunks[*helix.StreamEnd](chunks), 1, "children never end the parent's stream")
	pos := func(match func(helix.Chunk) bool) int {
		for i, c := range chunks {
			if match(c) {
				return i
			}
		}
		return -1
	}
	s1Start := pos(func(c helix.Chunk) bool { s, ok := c.(*helix.SubAgentStartChunk); return ok && s.CallID == "s1" })
	s1Delta := pos(func(c helix.Chunk) bool {
		d, ok := c.(*helix.TextDeltaChunk)
		return ok && d.AgentID == h.SessionID+"-sub-s1"
	})
	s1End := pos(func(c helix.Chunk) bool { s, ok := c.(*helix.SubAgentEndChunk); return ok && s.CallID == "s1" })
	require.True(t, s1Start < s1Delta && s1Delta < s1End, "the child's chunks come between its start and end")

	mu.Lock()
	require.ElementsMatch(t, []string{"start:" + h.SessionID + "-sub-s1", "complete:" + h.SessionID + "-sub-s1",
		"start:" + h.SessionID + "-sub-s2", "complete:" + h.SessionID + "-sub-s2"}, hookLog, "children fire their own hooks")
	mu.Unlock()

	usage, err := engine.StoreOf(e).ListUsage(t.Context(), h.SessionID)
	require.NoError(t, err)
	var subUsage int
	for _, u := range usage {
		if u.SourceType == store.UsageSubAgent {
			subUsage++
		}
	}
	require.Equal(t, 2, subUsage)
}

// A failed child is a failed call the parent's model reads as {"error": …};
// a call that cannot be dispatched (invalid arguments) fails alone, logged
// as subagent.dispatch_failed, and its sibling runs.
func TestSubAgentFailures(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	var logMu sync.Mutex
	log := zerolog.New(zerolog.SyncWriter(&lockedWriter{w: &logs, mu: &logMu}))
	sum := summarizer(func(string) {})
	parent := &helix.Agent{
		Name:  "lead2",
		Tools: []*helix.Tool{helix.MustSubAgentTool(sum, nil, nil)},
		Model: script(
			calls(call("bad", "subagent__summarizer", `{"task":42}`), call("f", "subagent__summarizer", `{"task":"fail"}`),
				call("ok", "subagent__summarizer", `{"task":"gamma"}`)),
			text("handled"),
		),
	}
	url := pgtest.NewURL(t)
	e, err := engine.New(t.Context(), engine.Config{DatabaseURL: url, Logger: &log})
	require.NoError(t, err)
	require.NoError(t, e.Register(parent))
	require.NoError(t, e.Launch(t.Context()))
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })

	h, err := e.Execute(t.Context(), parent, engine.Input{Message: "go"}, nil)
	require.NoError(t, err)
	res := result(t, h)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	msgs := allMessages(t, e, h.SessionID)
	require.Contains(t, msgs[2].Content, `"error"`)
	require.Contains(t, msgs[2].Content, "invalid arguments")
	require.Contains(t, msgs[3].Content, "the summarizer's provider is down", "a failed child is {\"error\": …} for the model")
	require.JSONEq(t, `{"summary":"short gamma"}`, msgs[4].Content, "siblings are unaffected")

	refs, err := e.SubSessions(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Len(t, refs, 2, "the undispatched call has no child")
	require.Equal(t, helix.SubSessionFailed, refs[0].Status)
	require.Equal(t, helix.SubSessionCompleted, refs[1].Status)

	chunks := streamChunks(t, h)
	var ends []string
	for _, c := range findChunks[*helix.ToolEndChunk](chunks) {
		if c.AgentID == h.SessionID {
			ends = append(ends, c.ToolCallID+":"+c.ErrorCode)
		}
	}
	require.Equal(t, []string{"bad:subagent_dispatch_failed", "f:subagent_failed", "ok:"}, ends)
	subEnds := findChunks[*helix.SubAgentEndChunk](chunks)
	require.Len(t, subEnds, 2)
	endOf := map[string]string{}
	for _, c := range subEnds {
		endOf[c.CallID] = string(c.Result)
	}
	require.Contains(t, endOf["f"], "provider is down", "the children end in either order")
	require.JSONEq(t, `{"summary":"short gamma"}`, endOf["ok"])
	logMu.Lock()
	require.Contains(t, logs.String(), `"event":"subagent.dispatch_failed"`)
	logMu.Unlock()
}

// lockedWriter serializes writes to a buffer read by the test.
type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// askingResearcher is a sub-agent that asks its user which topic (call
// ask1), then finishes with a summary "about" the answer.
func askingResearcher() *helix.Agent {
	return &helix.Agent{
		Name: "researcher", OutputSchema: json.RawMessage(summarySchema),
		Tools: []*helix.Tool{askUser()},
		Model: script(
			calls(call("ask1", "ask_user", `{"question":"which topic?"}`)),
			func(req helix.ModelRequest, _ helix.StreamCallbacks) (helix.StepResult, error) {
				out, _ := json.Marshal(map[string]string{"summary": "about " + req.Messages[len(req.Messages)-1].Content})
				return helix.StepResult{Type: helix.StepToolCalls, StopReason: helix.StopToolUse,
					ToolCalls: []helix.ToolCall{{ID: "fin", Name: helix.FinishToolName, Arguments: out}}}, nil
			},
		),
	}
}

// Nested human in the loop (unsupported in the original runtime): a client
// tool inside an ephemeral sub-agent suspends the child in its own wait; the
// parent reports suspended_awaiting_children with the routing information;
// a submission on the root session reaches the child, which finishes, and
// the parent continues, all in the same runs.
func TestNestedHumanInTheLoop(t *testing.T) {
	t.Parallel()
	researcher := askingResearcher()
	var resumed []string
	var mu sync.Mutex
	parent := &helix.Agent{
		Name:  "boss",
		Tools: []*helix.Tool{helix.MustSubAgentTool(researcher, nil, nil)},
		Model: script(calls(call("r1", "subagent__researcher", `{"task":"research"}`)), text("done")),
		Hooks: &helix.Hooks{OnAgentResumed: func(_ context.Context, hc helix.HookContext, prev string) error {
			mu.Lock()
			resumed = append(resumed, hc.SessionID)
			mu.Unlock()
			return nil
		}},
	}
	e := newEngine(t, parent)
	h, err := e.Execute(t.Context(), parent, engine.Input{Message: "go"}, nil)
	require.NoError(t, err)
	child := h.SessionID + "-sub-r1"

	var res helix.AgentResult
	require.Eventually(t, func() bool {
		res, err = h.Result(t.Context())
		return err == nil && res.Status == helix.AgentSuspendedAwaitingChildren
	}, 10*time.Second, 5*time.Millisecond)
	require.NotNil(t, res.Suspended)
	require.Equal(t, []helix.SuspendedChild{{ParentToolCallID: "r1", SubSessionID: child, AgentType: "researcher",
		Status: helix.AgentSuspendedClientTool, ToolCallIDs: []string{"ask1"}}}, res.Suspended.Children)
	runs, err := e.Runs(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Equal(t, helix.RunSuspendedAwaitingChildren, runs[0].Status)
	childRuns, err := e.Runs(t.Context(), child)
	require.NoError(t, err)
	require.Equal(t, helix.RunSuspendedClientTool, childRuns[0].Status, "the child waits in its own Recv")
	refs, err := e.SubSessions(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Equal(t, helix.SubSessionPausedAwaitingClient, refs[0].Status)
	waiting, err := e.PendingToolCalls(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Len(t, waiting, 1)
	require.Equal(t, child, waiting[0].OwnerSessionID)

	_, err = e.SubmitToolResult(t.Context(), child, clientResult(t, "ask1", answer{Answer: "durability"}))
	var se *helix.SubmissionError
	require.ErrorAs(t, err, &se)
	require.Equal(t, helix.SubmissionNotRoot, se.Code, "answers go to the root session")

	sr := submit(t, e, h.SessionID, clientResult(t, "ask1", answer{Answer: "durability"}))
	require.Equal(t, child, sr.OwnerSessionID, "routed to the child by the root's ownership map")
	h2, err := e.Resume(t.Context(), h.SessionID, nil)
	require.NoError(t, err)
	require.Equal(t, h.RunID, h2.RunID, "the parent's run continues in place")
	res = result(t, h2)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)

	msgs := allMessages(t, e, h.SessionID)
	require.JSONEq(t, `{"summary":"about {\"answer\":\"durability\"}"}`, msgs[2].Content)
	refs, err = e.SubSessions(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Equal(t, helix.SubSessionCompleted, refs[0].Status)
	runs, err = e.Runs(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	childRuns, err = e.Runs(t.Context(), child)
	require.NoError(t, err)
	require.Len(t, childRuns, 1)
	require.Equal(t, helix.RunCompleted, childRuns[0].Status)
	root, err := e.Session(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Empty(t, root.ClientToolCallOwnership, "the child's commit cleared the routing")
}

// Resume after a submission that reached a sub-agent returns a handle on
// the parent's run even when the parent already went on (its child took
// the answer and finished first): the run continues in place, as for a
// run whose own call was answered.
func TestResumeAfterTheParentWentOn(t *testing.T) {
	t.Parallel()
	wentOn, release := make(chan struct{}), make(chan struct{})
	parent := &helix.Agent{
		Name:  "boss",
		Tools: []*helix.Tool{helix.MustSubAgentTool(askingResearcher(), nil, nil)},
		Model: script(calls(call("r1", "subagent__researcher", `{"task":"research"}`)),
			func(req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
				close(wentOn) // the parent's next model call: it went on by itself
				<-release
				return text("done")(req, cb)
			}),
	}
	e := newEngine(t, parent)
	h, err := e.Execute(t.Context(), parent, engine.Input{Message: "go"}, nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		res, err := h.Result(t.Context())
		return err == nil && res.Status == helix.AgentSuspendedAwaitingChildren
	}, 10*time.Second, 5*time.Millisecond)

	submit(t, e, h.SessionID, clientResult(t, "ask1", answer{Answer: "durability"}))
	<-wentOn // the child answered and finished; the parent went on by itself
	pending, err := e.PendingToolCalls(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Empty(t, pending, "nothing waits any more")
	h2, err := e.Resume(t.Context(), h.SessionID, nil)
	require.NoError(t, err, "the run went on in place: Resume returns it")
	require.Equal(t, h.RunID, h2.RunID)
	close(release)
	res := result(t, h2)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
}

// The γ-cascade: interrupting a parent reaches its running sub-agent (here
// waiting for a client tool); the child is recorded failed with
// failureReason parent_suspended and the parent ends interrupted. Resuming
// the parent re-spawns the child from scratch, which asks again; once
// answered, the child and the parent finish. Aborting a parent aborts its
// children.
func TestParentInterruptReachesChildrenAndResumeRespawns(t *testing.T) {
	t.Parallel()
	researcher := &helix.Agent{
		Name: "researcher2", OutputSchema: json.RawMessage(summarySchema), Tools: []*helix.Tool{askUser()},
		Model: script(
			calls(call("ask1", "ask_user", `{"question":"which topic?"}`)),
			func(req helix.ModelRequest, _ helix.StreamCallbacks) (helix.StepResult, error) {
				return helix.StepResult{Type: helix.StepToolCalls, StopReason: helix.StopToolUse,
					ToolCalls: []helix.ToolCall{{ID: "fin", Name: helix.FinishToolName, Arguments: json.RawMessage(`{"summary":"done"}`)}}}, nil
			},
		),
	}
	parent := &helix.Agent{Name: "boss2", Tools: []*helix.Tool{helix.MustSubAgentTool(researcher, nil, nil)},
		Model: script(calls(call("r1", "subagent__researcher2", `{"task":"t"}`)), text("finished"))}
	e := newEngine(t, parent)
	awaitingChildren := func(h *engine.Handle) {
		t.Helper()
		require.Eventually(t, func() bool {
			res, err := h.Result(t.Context())
			return err == nil && res.Status == helix.AgentSuspendedAwaitingChildren
		}, 10*time.Second, 5*time.Millisecond)
	}

	h, err := e.Execute(t.Context(), parent, engine.Input{Message: "go"}, nil)
	require.NoError(t, err)
	child := h.SessionID + "-sub-r1"
	awaitingChildren(h)
	require.NoError(t, e.Interrupt(t.Context(), h.SessionID, "stop everything"))
	res := waitFor(t, h, helix.AgentInterrupted)
	require.Equal(t, "stop everything", res.Error)
	cs, err := e.Session(t.Context(), child)
	require.NoError(t, err)
	require.Equal(t, helix.SessionFailed, cs.Status)
	require.Equal(t, helix.FailureReasonParentSuspended, cs.FailureReason, "the γ-cascade discriminator")
	refs, err := e.SubSessions(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Equal(t, helix.SubSessionFailed, refs[0].Status)

	h2, err := e.Resume(t.Context(), h.SessionID, nil)
	require.NoError(t, err)
	require.NotEqual(t, h.RunID, h2.RunID)
	awaitingChildren(h2)
	childRuns, err := e.Runs(t.Context(), child)
	require.NoError(t, err)
	require.Len(t, childRuns, 2, "re-spawned: a new run of the child")
	require.Equal(t, child+"-respawn-"+h2.RunID, childRuns[1].WorkflowID)
	submit(t, e, h.SessionID, clientResult(t, "ask1", answer{Answer: "durability"}))
	res = waitFor(t, h2, helix.AgentCompleted)
	msgs := allMessages(t, e, h.SessionID)
	require.Equal(t, []string{"user", "assistant", "tool", "assistant"}, roles(msgs))
	require.JSONEq(t, `{"summary":"done"}`, msgs[2].Content)
	cmsgs := allMessages(t, e, child)
	require.Equal(t, []string{"user", "assistant", "tool", "assistant", "tool"}, roles(cmsgs), "the child ran from scratch, once")

	// Abort reaches the children too.
	h3, err := e.Execute(t.Context(), parent, engine.Input{Message: "again"}, nil)
	require.NoError(t, err)
	awaitingChildren(h3)
	require.NoError(t, e.Abort(t.Context(), h3.SessionID, "user left"))
	require.Equal(t, helix.AgentFailed, waitFor(t, h3, helix.AgentFailed).Status)
	cs, err = e.Session(t.Context(), h3.SessionID+"-sub-r1")
	require.NoError(t, err)
	require.Equal(t, helix.SessionFailed, cs.Status)
	require.Contains(t, cs.Error, "aborted with its parent session")
	refs, err = e.SubSessions(t.Context(), h3.SessionID)
	require.NoError(t, err)
	require.Equal(t, helix.SubSessionFailed, refs[0].Status)
}
