package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/store"
)

type question struct {
	Question string `json:"question"`
}

type answer struct {
	Answer string `json:"answer" jsonschema:"minLength=1"`
}

// askUser is a client-executed tool; opts add a deadline.
func askUser(opts ...helix.ToolOption) *helix.Tool {
	return helix.MustNewClientTool[question, answer]("ask_user", "Ask the user a question", opts...)
}

type transferIn struct {
	To     string `json:"to"`
	Amount int    `json:"amount"`
}

// transferTool is an approval-gated tool counting its executions per call.
func transferTool(runs *sync.Map, opts ...helix.ToolOption) *helix.Tool {
	return helix.MustNewTool("transfer", "Move money", func(ctx context.Context, in transferIn, tc helix.ToolContext) (map[string]any, error) {
		n, _ := runs.LoadOrStore(tc.ToolCallID(), new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		err := helix.UpdateState(tc, func(s *notes) error {
			s.Notes = append(s.Notes, fmt.Sprintf("sent %d to %s", in.Amount, in.To))
			return nil
		})
		return map[string]any{"sent": in.Amount}, err
	}, append([]helix.ToolOption{helix.RequireApproval()}, opts...)...)
}

// payer asks for approval of one transfer (call t1), then answers "paid".
func payer(runs *sync.Map) *helix.Agent {
	return &helix.Agent{
		Name:  "payer",
		Tools: []*helix.Tool{transferTool(runs)},
		Model: script(calls(call("t1", "transfer", `{"to":"bob","amount":5}`)), text("paid")),
	}
}

func executions2(runs *sync.Map, id string) int32 {
	n, ok := runs.Load(id)
	if !ok {
		return 0
	}
	return n.(*atomic.Int32).Load()
}

func submit(t *testing.T, e *engine.Engine, sessionID string, sub helix.ToolSubmission) helix.SubmitResult {
	t.Helper()
	res, err := e.SubmitToolResult(t.Context(), sessionID, sub)
	require.NoError(t, err)
	return res
}

func clientResult(t *testing.T, id string, v any) helix.ToolSubmission {
	t.Helper()
	s, err := helix.ClientToolResult(id, v)
	require.NoError(t, err)
	return s
}

// streamChunks returns the run's chunks as streamed.
func streamChunks(t *testing.T, h *engine.Handle) []helix.Chunk {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out []helix.Chunk
	for c, err := range h.Stream(ctx) {
		require.NoError(t, err)
		out = append(out, c.Chunk)
	}
	return out
}

func findChunks[T helix.Chunk](chunks []helix.Chunk) []T {
	var out []T
	for _, c := range chunks {
		if v, ok := c.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// A client-executed tool suspends the run: Result reports it at once, the
// run record and the pending entry say the same and the session stays
// active. A submission wakes the run in place: Resume hands back the same
// run, which completes with the client's result in the transcript. A second
// submission is reported as already completed.
func TestClientToolSuspendSubmitContinue(t *testing.T) {
	t.Parallel()
	var hookLog []string
	var mu sync.Mutex
	rec := func(s string) { mu.Lock(); hookLog = append(hookLog, s); mu.Unlock() }
	agent := &helix.Agent{
		Name: "asker", Tools: []*helix.Tool{askUser()},
		Model: script(
			calls(call("c1", "ask_user", `{"question":"favourite colour?"}`)),
			func(req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
				last := req.Messages[len(req.Messages)-1]
				return text("the user said "+last.Content)(req, cb)
			},
		),
		Hooks: &helix.Hooks{
			OnAgentSuspended: func(_ context.Context, hc helix.HookContext, s helix.Suspension) error {
				rec(fmt.Sprintf("suspended:%s:%v", hc.RunID, s.ToolCallIDs))
				return nil
			},
			OnAgentResumed: func(_ context.Context, hc helix.HookContext, prev string) error {
				rec(fmt.Sprintf("resumed:%s:prev=%s", hc.RunID, prev))
				return nil
			},
		},
	}
	e := newEngine(t, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "ask me"}, nil)
	require.NoError(t, err)
	res := result(t, h)
	require.Equal(t, helix.AgentSuspendedClientTool, res.Status)
	require.NotNil(t, res.Suspended)
	require.Equal(t, []string{"c1"}, res.Suspended.ToolCallIDs)

	runs, err := e.Runs(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Equal(t, helix.RunSuspendedClientTool, runs[0].Status)
	st, err := h.State(t.Context())
	require.NoError(t, err)
	require.Equal(t, helix.SessionActive, st.Status, "a suspended session stays active")
	require.Contains(t, st.PendingClientToolCalls, "c1")
	require.Equal(t, helix.SubmissionClientToolResult, st.PendingClientToolCalls["c1"].Kind)
	require.Equal(t, h.SessionID, st.ClientToolCallOwnership["c1"])

	sr := submit(t, e, h.SessionID, clientResult(t, "c1", answer{Answer: "green"}))
	require.False(t, sr.AlreadyCompleted)
	require.Equal(t, h.RunID, sr.RunID)
	require.Empty(t, sr.Remaining)

	h2, err := e.Resume(t.Context(), h.SessionID, nil)
	require.NoError(t, err)
	require.Equal(t, h.RunID, h2.RunID, "the waiting run continues in place (Branch 1)")
	res = result(t, h2)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	require.JSONEq(t, `"the user said {\"answer\":\"green\"}"`, string(res.Output))

	again := submit(t, e, h.SessionID, clientResult(t, "c1", answer{Answer: "red"}))
	require.True(t, again.AlreadyCompleted, "a second submission is reported, not delivered")

	msgs := allMessages(t, e, h.SessionID)
	require.Len(t, msgs, 4)
	require.Equal(t, `{"answer":"green"}`, msgs[2].Content)
	st, err = h.State(t.Context())
	require.NoError(t, err)
	require.Empty(t, st.PendingClientToolCalls, "the commit clears the suspension")
	require.Empty(t, st.ClientToolCallOwnership)
	require.Contains(t, st.CompletedClientToolCalls, "c1")
	runs, err = e.Runs(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Len(t, runs, 1, "no new run record: the same run continued")

	chunks := streamChunks(t, h)
	starts := findChunks[*helix.ToolStartChunk](chunks)
	require.Len(t, starts, 1)
	require.NotNil(t, starts[0].ProviderExecuted)
	require.False(t, *starts[0].ProviderExecuted)
	ends := findChunks[*helix.ToolEndChunk](chunks)
	require.Len(t, ends, 1)
	require.False(t, *ends[0].ProviderExecuted)
	require.JSONEq(t, `{"answer":"green"}`, string(ends[0].Result))

	usage, err := engine.StoreOf(e).ListUsage(t.Context(), h.SessionID)
	require.NoError(t, err)
	var wait *store.UsageRecord
	for i := range usage {
		if usage[i].SourceType == store.UsageClientToolWaitMS {
			wait = &usage[i]
		}
	}
	require.NotNil(t, wait, "client_tool_wait_ms is recorded")
	require.Equal(t, "ask_user", wait.SourceName)
	require.GreaterOrEqual(t, *wait.Value, 0.0)

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{
		fmt.Sprintf("suspended:%s:[c1]", h.RunID),
		fmt.Sprintf("resumed:%s:prev=%s", h.RunID, h.RunID),
	}, hookLog, "onAgentResumed reports the suspended run as previous (its own ID in place)")
}

// Two approval-gated calls in one step, answered in reverse order: the
// approved one runs once with the model's input, the denied one never runs
// and the model reads the denial; the results keep the model's order and
// the approve path fires the hooks in the canonical order.
func TestApprovalApproveAndDenyInReverseOrder(t *testing.T) {
	t.Parallel()
	var runs sync.Map
	var log []string
	var mu sync.Mutex
	rec := func(s string) { mu.Lock(); log = append(log, s); mu.Unlock() }
	agent := &helix.Agent{
		Name: "banker", Tools: []*helix.Tool{transferTool(&runs)}, InitialState: json.RawMessage(`{"notes":[]}`),
		Model: script(
			calls(call("t1", "transfer", `{"to":"mallory","amount":1000}`), call("t2", "transfer", `{"to":"bob","amount":5}`)),
			text("done"),
		),
		Hooks: &helix.Hooks{
			BeforeTool: func(_ context.Context, _ helix.HookContext, c helix.ToolCall) error {
				rec("beforeTool:" + c.ID)
				return nil
			},
			OnStateChange: func(context.Context, helix.HookContext, []helix.PatchOp) error {
				rec("onStateChange")
				return nil
			},
			OnMessage: func(_ context.Context, _ helix.HookContext, m helix.Message) error {
				if m.Role == helix.RoleTool {
					rec("onMessage:" + m.ToolCallID)
				}
				return nil
			},
			AfterTool: func(_ context.Context, _ helix.HookContext, c helix.ToolCall, _ helix.ToolOutcome) error {
				rec("afterTool:" + c.ID)
				return nil
			},
		},
	}
	e := newEngine(t, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "pay"}, nil)
	require.NoError(t, err)
	res := result(t, h)
	require.Equal(t, helix.AgentSuspendedClientTool, res.Status)
	require.Equal(t, []string{"t1", "t2"}, res.Suspended.ToolCallIDs)
	require.Zero(t, executions2(&runs, "t1"))

	first := submit(t, e, h.SessionID, helix.Approve("t2", "small amount"))
	require.Equal(t, []string{"t1"}, first.Remaining)
	require.Equal(t, "transfer", first.ToolName)
	require.Equal(t, helix.SubmissionApprovalResponse, first.Kind)
	res = result(t, h)
	require.Equal(t, helix.AgentSuspendedClientTool, res.Status, "still waiting for t1")
	require.Equal(t, []string{"t1"}, res.Suspended.ToolCallIDs)
	submit(t, e, h.SessionID, helix.Deny("t1", "too much"))

	h2, err := e.Resume(t.Context(), h.SessionID, nil)
	require.NoError(t, err)
	res = result(t, h2)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	require.Equal(t, int32(1), executions2(&runs, "t2"), "approved: executed exactly once")
	require.Zero(t, executions2(&runs, "t1"), "denied: never executed")

	msgs := allMessages(t, e, h.SessionID)
	require.Equal(t, "t1", msgs[2].ToolCallID, "results in the model's order")
	require.Contains(t, msgs[2].Content, helix.NotApprovedMessage)
	require.Equal(t, "t2", msgs[3].ToolCallID)
	require.JSONEq(t, `{"sent":5}`, msgs[3].Content)
	st, err := h.State(t.Context())
	require.NoError(t, err)
	require.JSONEq(t, `{"notes":["sent 5 to bob"]}`, string(st.CustomState))

	chunks := streamChunks(t, h)
	reqs := findChunks[*helix.ToolApprovalRequestChunk](chunks)
	require.Len(t, reqs, 2)
	require.Equal(t, h.RunID+"::t1", reqs[0].ApprovalID)
	require.JSONEq(t, `{"to":"mallory","amount":1000}`, string(reqs[0].Input))
	resps := findChunks[*helix.ToolApprovalResponseChunk](chunks)
	require.Len(t, resps, 2)
	decided := map[string]bool{}
	for _, r := range resps {
		decided[r.ToolCallID] = r.Approved
	}
	require.Equal(t, map[string]bool{"t1": false, "t2": true}, decided)
	var ends []string
	for _, c := range findChunks[*helix.ToolEndChunk](chunks) {
		ends = append(ends, c.ToolCallID+":"+c.ErrorCode)
	}
	require.ElementsMatch(t, []string{"t1:not_approved", "t2:"}, ends)

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"beforeTool:t2", "onStateChange", "onMessage:t1", "onMessage:t2", "afterTool:t2"},
		log, "approve path: beforeTool → execute → onStateChange → onMessage → afterTool; no afterTool for a denial")
}

// A predicate gate is evaluated in a checkpointed step and fails closed: a
// panicking predicate requires approval; a predicate that says no lets the
// call run at once.
func TestApprovalPredicateFailsClosed(t *testing.T) {
	t.Parallel()
	var runs sync.Map
	var asked atomic.Int32
	gate := helix.RequireApprovalWhen(func(_ context.Context, in transferIn, _ helix.ToolContext) (bool, error) {
		asked.Add(1)
		if in.Amount < 0 {
			panic("negative amount")
		}
		return in.Amount > 100, nil
	})
	tool := helix.MustNewTool("transfer", "Move money", func(ctx context.Context, in transferIn, tc helix.ToolContext) (map[string]int, error) {
		n, _ := runs.LoadOrStore(tc.ToolCallID(), new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		return map[string]int{"sent": in.Amount}, nil
	}, gate)
	agent := &helix.Agent{Name: "gated", Tools: []*helix.Tool{tool},
		Model: script(
			calls(call("small", "transfer", `{"to":"a","amount":5}`), call("weird", "transfer", `{"to":"b","amount":-1}`)),
			text("done"),
		)}
	e := newEngine(t, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "pay"}, nil)
	require.NoError(t, err)
	res := result(t, h)
	require.Equal(t, helix.AgentSuspendedClientTool, res.Status)
	require.Equal(t, []string{"weird"}, res.Suspended.ToolCallIDs, "the panicking predicate requires approval")
	require.Equal(t, int32(1), executions2(&runs, "small"), "a gate that says no runs the call in phase 1")
	require.Equal(t, int32(2), asked.Load())

	submit(t, e, h.SessionID, helix.Approve("weird", ""))
	res = result(t, h)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	require.Equal(t, int32(1), executions2(&runs, "weird"))
	require.Equal(t, int32(1), executions2(&runs, "small"), "phase 1 results are kept, never re-run")
	require.Equal(t, int32(2), asked.Load(), "the checkpointed decision is not asked again")
}

// One step mixing a server tool, a client tool and a gated tool: the
// server tool runs once before the suspension, the run stays suspended
// until both other calls are answered (here in reverse order), and the
// results are appended in the model's order.
func TestMixedServerClientAndGatedCalls(t *testing.T) {
	t.Parallel()
	var x executions
	var runs sync.Map
	agent := &helix.Agent{
		Name: "mixed", Tools: []*helix.Tool{noteTool(&x), askUser(), transferTool(&runs)},
		InitialState: json.RawMessage(`{"notes":[]}`),
		Model: script(
			calls(call("c", "ask_user", `{"question":"?"}`), call("n", "note", `{"text":"server"}`), call("g", "transfer", `{"to":"x","amount":1}`)),
			text("done"),
		),
	}
	e := newEngine(t, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "go"}, nil)
	require.NoError(t, err)
	res := result(t, h)
	require.Equal(t, helix.AgentSuspendedClientTool, res.Status)
	require.Equal(t, []string{"c", "g"}, res.Suspended.ToolCallIDs)
	require.Len(t, x.keys, 1, "the server tool ran in phase 1")
	waiting, err := e.PendingToolCalls(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Len(t, waiting, 2)
	require.Equal(t, "c", waiting[0].ToolCallID)
	require.Equal(t, helix.SubmissionClientToolResult, waiting[0].Kind)
	require.JSONEq(t, `{"question":"?"}`, string(waiting[0].Arguments))
	require.Equal(t, "g", waiting[1].ToolCallID)
	require.Equal(t, h.RunID+"::g", waiting[1].ApprovalID)

	submit(t, e, h.SessionID, helix.Approve("g", ""))
	require.Equal(t, helix.AgentSuspendedClientTool, result(t, h).Status)
	submit(t, e, h.SessionID, clientResult(t, "c", answer{Answer: "yes"}))
	res = result(t, h)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	for _, n := range x.keys {
		require.Equal(t, 1, n, "the server tool never re-ran")
	}
	require.Equal(t, int32(1), executions2(&runs, "g"))
	msgs := allMessages(t, e, h.SessionID)
	var order []string
	for _, m := range msgs[2:5] {
		order = append(order, m.ToolCallID)
	}
	require.Equal(t, []string{"c", "n", "g"}, order, "results in the model's order")
	st, err := h.State(t.Context())
	require.NoError(t, err)
	require.JSONEq(t, `{"notes":["server","sent 1 to x"]}`, string(st.CustomState))
	ends := findChunks[*helix.ToolEndChunk](streamChunks(t, h))
	require.Len(t, ends, 3, "one tool_end per call, none repeated")
}

// Submissions are validated against the call and the conversation; a
// rejected one writes nothing. Two submissions racing for one call:
// exactly one is delivered, the other is reported already completed.
func TestSubmissionValidationAndRace(t *testing.T) {
	t.Parallel()
	var runs sync.Map
	agent := &helix.Agent{
		Name: "validated", Tools: []*helix.Tool{askUser(), transferTool(&runs)},
		Model: script(
			calls(call("c", "ask_user", `{"question":"?"}`), call("g", "transfer", `{"to":"x","amount":1}`)),
			text("done"),
		),
	}
	e := newEngine(t, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "go"}, nil)
	require.NoError(t, err)
	require.Equal(t, helix.AgentSuspendedClientTool, result(t, h).Status)
	other, err := e.Execute(t.Context(), &helix.Agent{Name: "other", Model: script(text("hi"))}, engine.Input{Message: "x"}, nil)
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, result(t, other).Status)

	code := func(err error) string {
		var se *helix.SubmissionError
		require.ErrorAs(t, err, &se)
		return se.Code
	}
	_, err = e.SubmitToolResult(t.Context(), h.SessionID, clientResult(t, "nope", answer{Answer: "x"}))
	require.Equal(t, helix.SubmissionUnknownToolCall, code(err))
	require.ErrorIs(t, err, helix.ErrNotFound)
	_, err = e.SubmitToolResult(t.Context(), other.SessionID, clientResult(t, "c", answer{Answer: "x"}))
	require.Equal(t, helix.SubmissionUnknownToolCall, code(err), "a session that does not own the call")
	_, err = e.SubmitToolResult(t.Context(), h.SessionID, helix.Approve("c", ""))
	require.Equal(t, helix.SubmissionKindMismatch, code(err))
	_, err = e.SubmitToolResult(t.Context(), h.SessionID, clientResult(t, "c", map[string]int{"answer": 3}))
	require.Equal(t, helix.SubmissionInvalidResult, code(err))
	var se *helix.SubmissionError
	require.ErrorAs(t, err, &se)
	require.NotEmpty(t, se.Violations)
	require.Equal(t, "/answer", se.Violations[0].Pointer)
	_, err = e.SubmitToolResult(t.Context(), h.SessionID, helix.ToolSubmission{Kind: "approval-response", ToolCallID: "g"})
	require.Equal(t, helix.SubmissionInvalid, code(err), "approved is required")
	st, err := h.State(t.Context())
	require.NoError(t, err)
	require.Nil(t, st.PendingClientToolCalls["c"].Submission, "rejections write nothing")
	require.Empty(t, st.CompletedClientToolCalls)

	var delivered, already atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			r, err := e.SubmitToolResult(context.Background(), h.SessionID, clientResult(t, "c", answer{Answer: "once"}))
			if err != nil {
				t.Error(err)
				return
			}
			if r.AlreadyCompleted {
				already.Add(1)
			} else {
				delivered.Add(1)
			}
		})
	}
	wg.Wait()
	require.Equal(t, int32(1), delivered.Load())
	require.Equal(t, int32(7), already.Load())
	submit(t, e, h.SessionID, helix.Approve("g", ""))
	res := result(t, h)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	msgs := allMessages(t, e, h.SessionID)
	require.Equal(t, `{"answer":"once"}`, msgs[2].Content)
}

// A client tool's deadline is durable: when it passes, the model sees a
// timeout error (tool_end with errorCode client_tool_timeout, a failed usage
// row, onMessage and afterTool fired) and a late submission is refused.
func TestClientToolDeadline(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var after []helix.ToolOutcome
	var msgs []string
	agent := &helix.Agent{
		Name: "impatient", Tools: []*helix.Tool{askUser(helix.ClientTimeout(300 * time.Millisecond))},
		Model: script(calls(call("c", "ask_user", `{"question":"?"}`)), text("moving on")),
		Hooks: &helix.Hooks{
			OnMessage: func(_ context.Context, _ helix.HookContext, m helix.Message) error {
				mu.Lock()
				msgs = append(msgs, string(m.Role)+":"+m.ToolCallID)
				mu.Unlock()
				return nil
			},
			AfterTool: func(_ context.Context, _ helix.HookContext, _ helix.ToolCall, o helix.ToolOutcome) error {
				mu.Lock()
				after = append(after, o)
				mu.Unlock()
				return nil
			},
		},
	}
	e := newEngine(t, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "go"}, nil)
	require.NoError(t, err)
	waitFor(t, h, helix.AgentCompleted)
	all := allMessages(t, e, h.SessionID)
	require.Contains(t, all[2].Content, "did not return a result")
	ends := findChunks[*helix.ToolEndChunk](streamChunks(t, h))
	require.Len(t, ends, 1)
	require.Equal(t, helix.CodeClientToolTimeout, ends[0].ErrorCode)
	require.False(t, *ends[0].ProviderExecuted)
	usage, err := engine.StoreOf(e).ListUsage(t.Context(), h.SessionID)
	require.NoError(t, err)
	var tool *store.UsageRecord
	for i := range usage {
		if usage[i].SourceType == store.UsageTool {
			tool = &usage[i]
		}
	}
	require.NotNil(t, tool)
	require.False(t, tool.Success)
	mu.Lock()
	require.Contains(t, msgs, "tool:c")
	require.Len(t, after, 1)
	require.Contains(t, after[0].Error, "did not return a result")
	mu.Unlock()

	_, err = e.SubmitToolResult(t.Context(), h.SessionID, clientResult(t, "c", answer{Answer: "late"}))
	var se *helix.SubmissionError
	require.ErrorAs(t, err, &se)
	require.Equal(t, helix.SubmissionTimedOut, se.Code)
}

// Interrupting a suspended run wakes it and ends it interrupted with the
// calls kept; a submission then gets a clear error, not a hang. Resume
// starts a fresh run (Branch 2) that takes the calls over and finishes the
// step once they are answered; onAgentResumed names the suspended run.
func TestInterruptWhileSuspendedThenFreshResume(t *testing.T) {
	t.Parallel()
	var runs sync.Map
	var resumed []string
	var mu sync.Mutex
	agent := &helix.Agent{
		Name: "paused", Tools: []*helix.Tool{transferTool(&runs), askUser()},
		Model: script(calls(call("g", "transfer", `{"to":"x","amount":1}`), call("c", "ask_user", `{"question":"?"}`)), text("done")),
		Hooks: &helix.Hooks{OnAgentResumed: func(_ context.Context, hc helix.HookContext, prev string) error {
			mu.Lock()
			resumed = append(resumed, hc.RunID+"<"+prev)
			mu.Unlock()
			return nil
		}},
	}
	e := newEngine(t, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "go"}, nil)
	require.NoError(t, err)
	require.Equal(t, helix.AgentSuspendedClientTool, result(t, h).Status)
	submit(t, e, h.SessionID, helix.Approve("g", "")) // answered before the interrupt
	// The approved tool runs while the run waits for c: interrupt after it
	// ran, so the fresh run must not run it again.
	require.Eventually(t, func() bool { return executions2(&runs, "g") == 1 }, 10*time.Second, 5*time.Millisecond)

	require.NoError(t, e.Interrupt(t.Context(), h.SessionID, "lunch"))
	res := waitFor(t, h, helix.AgentInterrupted)
	require.Equal(t, "lunch", res.Error)
	st, err := h.State(t.Context())
	require.NoError(t, err)
	require.Equal(t, helix.SessionInterrupted, st.Status)
	require.Contains(t, st.PendingClientToolCalls, "c", "the waiting calls are kept")

	_, err = e.SubmitToolResult(t.Context(), h.SessionID, clientResult(t, "c", answer{Answer: "x"}))
	var se *helix.SubmissionError
	require.ErrorAs(t, err, &se)
	require.Equal(t, helix.SubmissionSessionInterrupted, se.Code)
	require.Contains(t, se.Reason, "resume it")

	h2, err := e.Resume(t.Context(), h.SessionID, nil)
	require.NoError(t, err)
	require.NotEqual(t, h.RunID, h2.RunID, "a fresh run (Branch 2)")
	res = result(t, h2)
	require.Equal(t, helix.AgentSuspendedClientTool, res.Status)
	require.Equal(t, []string{"c"}, res.Suspended.ToolCallIDs, "the answered call is not asked again")
	submit(t, e, h.SessionID, clientResult(t, "c", answer{Answer: "ok"}))
	res = result(t, h2)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	require.Equal(t, int32(1), executions2(&runs, "g"), "the approval given before the interrupt is honoured once")

	msgs := allMessages(t, e, h.SessionID)
	require.Equal(t, []string{"user", "assistant", "tool", "tool", "assistant"}, roles(msgs))
	runsList, err := e.Runs(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Len(t, runsList, 2)
	require.Equal(t, helix.RunInterrupted, runsList[0].Status)
	require.Equal(t, helix.RunCompleted, runsList[1].Status)
	mu.Lock()
	require.Equal(t, []string{h2.RunID + "<" + h.RunID}, resumed)
	mu.Unlock()
}

// Aborting a suspended run fails it, tells clients (tool_end aborted) and
// leaves the calls answerable with a clear error only.
func TestAbortWhileSuspended(t *testing.T) {
	t.Parallel()
	agent := &helix.Agent{Name: "aborted", Tools: []*helix.Tool{askUser()},
		Model: script(calls(call("c", "ask_user", `{"question":"?"}`)), text("never"))}
	e := newEngine(t, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "go"}, nil)
	require.NoError(t, err)
	require.Equal(t, helix.AgentSuspendedClientTool, result(t, h).Status)
	require.NoError(t, e.Abort(t.Context(), h.SessionID, "user left"))
	res := result(t, h)
	require.Equal(t, helix.AgentFailed, res.Status)

	_, err = e.SubmitToolResult(t.Context(), h.SessionID, clientResult(t, "c", answer{Answer: "x"}))
	var se *helix.SubmissionError
	require.ErrorAs(t, err, &se)
	require.Equal(t, helix.SubmissionNotWaiting, se.Code)
	require.Contains(t, se.Reason, "aborted")

	var aborted []*helix.ToolEndChunk
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for c, err := range h.Stream(ctx) {
		require.NoError(t, err)
		if end, ok := c.Chunk.(*helix.ToolEndChunk); ok {
			aborted = append(aborted, end)
		}
	}
	require.Len(t, aborted, 1)
	require.Equal(t, helix.CodeAborted, aborted[0].ErrorCode)
}

// waitFor awaits the end of the run and requires the given status.
func waitFor(t *testing.T, h *engine.Handle, want helix.AgentStatus) helix.AgentResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	res, err := h.Await(ctx)
	require.NoError(t, err)
	require.Equal(t, want, res.Status, res.Error)
	return res
}

func roles(msgs []helix.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = string(m.Role)
	}
	return out
}

// A process that runs no agents drives HITL with a Client: its submission
// wakes the run another process (here, another engine object) runs, and
// its interrupt stops a waiting run.
func TestClientSubmitsAndInterrupts(t *testing.T) {
	t.Parallel()
	agent := &helix.Agent{Name: "remote", Tools: []*helix.Tool{askUser()},
		Model: script(calls(call("c1", "ask_user", `{"question":"?"}`)), text("thanks"), calls(call("c2", "ask_user", `{"question":"again?"}`)))}
	url := pgtest.NewURL(t)
	e := newEngineOn(t, url, agent)
	c, err := engine.NewClient(t.Context(), engine.ClientConfig{DatabaseURL: url})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })

	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "go"}, nil)
	require.NoError(t, err)
	require.Equal(t, helix.AgentSuspendedClientTool, result(t, h).Status)
	res, err := c.SubmitToolResult(t.Context(), h.SessionID, clientResult(t, "c1", answer{Answer: "hi"}))
	require.NoError(t, err)
	require.False(t, res.AlreadyCompleted)
	require.Equal(t, helix.AgentCompleted, result(t, h).Status)

	h2, err := e.Execute(t.Context(), agent, engine.Input{Message: "once more"}, &engine.ExecuteOptions{SessionID: h.SessionID})
	require.NoError(t, err)
	require.Equal(t, helix.AgentSuspendedClientTool, result(t, h2).Status)
	require.NoError(t, c.Interrupt(t.Context(), h.SessionID, "stop"))
	waitFor(t, h2, helix.AgentInterrupted)
	st, err := c.Session(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Equal(t, helix.SessionInterrupted, st.Status)

	// The client also aborts: the waiting run, whose workflow runs in the
	// engine's process, is cancelled and the session fails.
	h3, err := e.Resume(t.Context(), h.SessionID, nil)
	require.NoError(t, err)
	require.Equal(t, helix.AgentSuspendedClientTool, result(t, h3).Status)
	require.NoError(t, c.Abort(t.Context(), h.SessionID, "user left"))
	waitFor(t, h3, helix.AgentFailed)
	runs, err := e.Runs(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Equal(t, helix.CodeAborted, runs[len(runs)-1].ErrorCode)
	var refused *engine.RefusedError
	require.ErrorAs(t, c.Abort(t.Context(), h.SessionID, ""), &refused)
	require.Equal(t, engine.RefusedNotRunning, refused.Code)
}

// A submission's wake-up is a Postgres NOTIFY: one the waiting run misses
// (DBOS's listener was not listening yet, as after a Launch that recovered
// the run) must not leave it waiting forever. With DBOS's notification
// trigger disabled no submission or interrupt wakes anything by itself;
// the engine's wake-up sweep still delivers both.
func TestMissedWakeupsAreResent(t *testing.T) {
	t.Parallel()
	agent := &helix.Agent{
		Name: "asker", Tools: []*helix.Tool{askUser()},
		Model: script(
			calls(call("c1", "ask_user", `{"question":"favourite colour?"}`)),
			text("thanks"),
		),
	}
	url := pgtest.NewURL(t)
	e := newEngineOn(t, url, agent)
	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(t.Context(), `ALTER TABLE dbos.notifications DISABLE TRIGGER dbos_notifications_trigger`)
	require.NoError(t, err)

	answered, err := e.Execute(t.Context(), agent, engine.Input{Message: "ask me"}, nil)
	require.NoError(t, err)
	require.Equal(t, helix.AgentSuspendedClientTool, result(t, answered).Status)
	submit(t, e, answered.SessionID, clientResult(t, "c1", answer{Answer: "green"}))
	res, err := awaitResult(t, answered)
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)

	interrupted, err := e.Execute(t.Context(), agent, engine.Input{Message: "ask me"}, nil)
	require.NoError(t, err)
	require.Equal(t, helix.AgentSuspendedClientTool, result(t, interrupted).Status)
	require.NoError(t, e.Interrupt(t.Context(), interrupted.SessionID, "stop"))
	res, err = awaitResult(t, interrupted)
	require.NoError(t, err)
	require.Equal(t, helix.AgentInterrupted, res.Status, res.Error)
}

// awaitResult waits through suspensions for the run's end, for up to 30 s.
func awaitResult(t *testing.T, h *engine.Handle) (helix.AgentResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	return h.Await(ctx)
}
