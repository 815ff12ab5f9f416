package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
)

// A step with two parallel tools that both append to the state, then a
// structured output: the appends compose, the output is validated and
// delivered, and the stream carries the spec's chunks in order.
func TestToolsStateAndStructuredOutput(t *testing.T) {
	t.Parallel()
	var x executions
	var order []string
	var mu sync.Mutex
	rec := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	agent := &helix.Agent{
		Name: "notetaker", SystemPrompt: "Take notes.",
		Tools:        []*helix.Tool{noteTool(&x)},
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"count":{"type":"integer"}},"required":["count"]}`),
		InitialState: json.RawMessage(`{"notes":[]}`),
		Model: script(
			calls(call("c1", "note", `{"text":"a"}`), call("c2", "note", `{"text":"b"}`)),
			calls(call("c3", helix.FinishToolName, `{"count":"two"}`)), // invalid: back to the model
			calls(call("c4", helix.FinishToolName, `{"count":2}`)),
		),
		Hooks: &helix.Hooks{
			BeforeTool: func(_ context.Context, _ helix.HookContext, c helix.ToolCall) error {
				rec("beforeTool:" + c.ID)
				return nil
			},
			OnStateChange: func(_ context.Context, hc helix.HookContext, p []helix.PatchOp) error {
				rec(fmt.Sprintf("onStateChange:%d", hc.Step))
				return nil
			},
			OnMessage: func(_ context.Context, _ helix.HookContext, m helix.Message) error {
				rec("onMessage:" + string(m.Role) + ":" + m.ToolCallID)
				return nil
			},
			AfterTool: func(_ context.Context, _ helix.HookContext, c helix.ToolCall, _ helix.ToolOutcome) error {
				rec("afterTool:" + c.ID)
				return nil
			},
		},
	}
	e := newEngine(t, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "note a and b"}, nil)
	require.NoError(t, err)
	res := result(t, h)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	require.JSONEq(t, `{"count":2}`, string(res.Output))

	st, err := h.State(t.Context())
	require.NoError(t, err)
	var n notes
	require.NoError(t, json.Unmarshal(st.CustomState, &n))
	require.ElementsMatch(t, []string{"a", "b"}, n.Notes, "parallel appends compose")
	require.Equal(t, 3, st.StepCount)
	require.Equal(t, map[string]int{h.WorkflowID + "/c1": 1, h.WorkflowID + "/c2": 1}, x.keys)

	msgs := allMessages(t, e, h.SessionID)
	roles := make([]string, len(msgs))
	for i, m := range msgs {
		roles[i] = string(m.Role)
	}
	require.Equal(t, []string{"user", "assistant", "tool", "tool", "assistant", "tool", "assistant", "tool"}, roles)
	require.Contains(t, msgs[5].Content, "error", "invalid output goes back to the model")
	require.Equal(t, "c1", msgs[2].ToolCallID, "results in the model's call order")

	types := chunkTypes(t, h)
	require.Equal(t, "step_start", types[0])
	require.Contains(t, types, "state_patch")
	require.Contains(t, types, "tool_end")
	require.Contains(t, types, "checkpoint_created")
	require.Contains(t, types, "output")
	require.Equal(t, "stream_end", types[len(types)-1])

	// Canonical order per tool: before → onStateChange → onMessage → after.
	idx := func(s string) int {
		for i, v := range order {
			if v == s {
				return i
			}
		}
		t.Fatalf("hook %s not fired: %v", s, order)
		return -1
	}
	for _, id := range []string{"c1", "c2"} {
		require.Less(t, idx("beforeTool:"+id), idx("onMessage:tool:"+id))
		require.Less(t, idx("onMessage:tool:"+id), idx("afterTool:"+id))
	}
	require.Less(t, idx("onStateChange:1"), idx("onMessage:assistant:"))

	runs, err := e.Runs(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	require.Equal(t, helix.RunCompleted, runs[0].Status)
	require.Equal(t, h.SessionID+"-turn-1", runs[0].WorkflowID)
}

// Multi-turn: a completed session takes a new turn with the whole prior
// conversation and a fresh step budget; racing continuations, one wins.
func TestMultiTurnAndSingleWriter(t *testing.T) {
	t.Parallel()
	var seen []int
	var mu sync.Mutex
	// Turn 2 holds its model call until every racer has returned: a turn
	// that finished before a slow racer started would let that racer
	// rightly begin turn 3, and the race would not be a race.
	release := make(chan struct{})
	agent := &helix.Agent{Name: "chat", MaxSteps: 1, Model: helix.ModelFunc(
		func(ctx context.Context, req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
			mu.Lock()
			seen = append(seen, len(req.Messages))
			mu.Unlock()
			if len(req.Messages) == 3 {
				select {
				case <-release:
				case <-ctx.Done():
					return helix.StepResult{}, ctx.Err()
				}
			}
			return helix.StepResult{Type: helix.StepText, Content: fmt.Sprintf("reply %d", len(req.Messages))}, nil
		})}
	e := newEngine(t, agent)
	h1, err := e.Execute(t.Context(), agent, engine.Input{Message: "one"}, nil)
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, result(t, h1).Status)

	// Racing continuations: exactly one starts turn 2.
	const racers = 8
	var wg sync.WaitGroup
	handles := make([]*engine.Handle, racers)
	errs := make([]error, racers)
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			handles[i], errs[i] = e.Execute(t.Context(), agent, engine.Input{Message: "two"}, &engine.ExecuteOptions{SessionID: h1.SessionID})
		}()
	}
	wg.Wait()
	close(release)
	var winner *engine.Handle
	for i := range racers {
		if errs[i] == nil {
			require.Nil(t, winner, "two continuations won")
			winner = handles[i]
			continue
		}
		var running *helix.AgentAlreadyRunningError
		require.True(t, errors.As(errs[i], &running), "loser error: %v", errs[i])
	}
	require.NotNil(t, winner)
	require.Equal(t, h1.SessionID+"-turn-2", winner.WorkflowID)
	res := result(t, winner)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	require.JSONEq(t, `"reply 3"`, string(res.Output), "turn 2 sees the whole conversation")

	h3, err := e.Execute(t.Context(), agent, engine.Input{Message: "three"}, &engine.ExecuteOptions{SessionID: h1.SessionID})
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, result(t, h3).Status, "a fresh step budget each turn")

	runs, err := e.Runs(t.Context(), h1.SessionID)
	require.NoError(t, err)
	require.Len(t, runs, 3)
	for i, r := range runs {
		require.Equal(t, i+1, r.Turn)
		require.Equal(t, fmt.Sprintf("%s-turn-%d", h1.SessionID, i+1), r.WorkflowID)
		require.Equal(t, 1, r.StepCount)
	}
	require.Equal(t, []int{1, 3, 5}, seen)
}

// Tool errors and panics are results the model sees; a model error fails
// the run with the classified error chunk; max steps fails clearly.
func TestFailuresAreOutcomes(t *testing.T) {
	t.Parallel()
	boom := helix.MustNewTool("boom", "fails", func(ctx context.Context, in struct{}, tc helix.ToolContext) (string, error) {
		return "", errors.New("disk full")
	})
	panicky := helix.MustNewTool("panicky", "panics", func(ctx context.Context, in struct{}, tc helix.ToolContext) (string, error) {
		panic("oops")
	})
	var sawErrors []string
	agent := &helix.Agent{Name: "failing", Tools: []*helix.Tool{boom, panicky}, Model: script(
		calls(call("b", "boom", `{}`), call("p", "panicky", `{}`), call("u", "nope", `{}`)),
		func(req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
			for _, m := range req.Messages {
				if m.Role == helix.RoleTool {
					sawErrors = append(sawErrors, m.Content)
				}
			}
			return helix.StepResult{}, &helix.ModelError{Code: helix.CodeProviderRateLimited, Message: "slow down", Recoverable: true}
		},
	)}
	e := newEngine(t, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "go"}, nil)
	require.NoError(t, err)
	res := result(t, h)
	require.Equal(t, helix.AgentFailed, res.Status)
	require.Equal(t, helix.CodeProviderRateLimited, res.ErrorCode)
	require.Len(t, sawErrors, 3)
	require.Contains(t, sawErrors[0], "disk full")
	require.Contains(t, sawErrors[1], "oops")
	require.Contains(t, sawErrors[2], "unknown tool")
	var last helix.Chunk
	for c, err := range h.Stream(t.Context()) {
		require.NoError(t, err)
		last = c.Chunk
		if te, ok := c.Chunk.(*helix.ToolEndChunk); ok {
			require.NotEmpty(t, te.Error)
			require.True(t, *te.ProviderExecuted)
		}
	}
	ec, ok := last.(*helix.ErrorChunk)
	require.True(t, ok, "the run ends with an error chunk, got %T", last)
	require.Equal(t, helix.CodeProviderRateLimited, ec.Code)
	require.True(t, ec.Recoverable)

	loop := &helix.Agent{Name: "looper", MaxSteps: 2, Tools: []*helix.Tool{boom}, Model: helix.ModelFunc(
		func(context.Context, helix.ModelRequest, helix.StreamCallbacks) (helix.StepResult, error) {
			return helix.StepResult{Type: helix.StepToolCalls, ToolCalls: []helix.ToolCall{call(fmt.Sprint("x", strings.Repeat("y", 1)), "boom", `{}`)}}, nil
		})}
	require.NoError(t, e.Register(loop))
	h2, err := e.Execute(t.Context(), loop, engine.Input{Message: "loop"}, nil)
	require.NoError(t, err)
	res2 := result(t, h2)
	require.Equal(t, helix.AgentFailed, res2.Status)
	require.Equal(t, helix.CodeMaxStepsExceeded, res2.ErrorCode)
	require.Contains(t, res2.Error, "MaxSteps")
}

// A model that reuses a tool-call ID (scripted models do, and nothing
// forbids it) gets a usage row for each call it made: usage keys name the
// run and the step, not the call ID alone.
func TestReusedToolCallIDKeepsEachUsageRow(t *testing.T) {
	t.Parallel()
	var x executions
	agent := &helix.Agent{Name: "reuser", Tools: []*helix.Tool{noteTool(&x)}, InitialState: json.RawMessage(`{"notes":[]}`),
		Model: script(
			calls(call("c1", "note", `{"text":"a"}`)),
			calls(call("c1", "note", `{"text":"b"}`)),
			text("done"),
		)}
	e := newEngine(t, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "go"}, nil)
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, result(t, h).Status)
	usage, err := engine.StoreOf(e).ListUsage(t.Context(), h.SessionID)
	require.NoError(t, err)
	tools := 0
	for _, u := range usage {
		if u.SourceType == "tool" {
			tools++
		}
	}
	require.Equal(t, 2, tools, "one row per tool call: %+v", usage)
}
