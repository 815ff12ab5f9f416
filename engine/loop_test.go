package engine_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

// Phase 2 finishWith tools see phase 1's state; the system prompt can be a
// function of the custom state; tools emit custom events; the engine runs
// on a pool shared with the application.
func TestFinishWithPromptFuncEmitAndSharedPool(t *testing.T) {
	t.Parallel()
	var x executions
	type report struct {
		Count int `json:"count"`
	}
	summarize := helix.MustNewTool("summarize", "Summarize the notes and finish",
		func(ctx context.Context, _ struct{}, tc helix.ToolContext) (report, error) {
			s, err := helix.GetState[notes](tc)
			if err != nil {
				return report{}, err
			}
			if err := tc.Emit("progress", map[string]int{"notes": len(s.Notes)}); err != nil {
				return report{}, err
			}
			return report{Count: len(s.Notes)}, nil
		}, helix.FinishWith())
	var prompts []string
	agent := &helix.Agent{
		Name:  "summarizer",
		Tools: []*helix.Tool{noteTool(&x), summarize},
		SystemPromptFunc: func(_ context.Context, state json.RawMessage) (string, error) {
			return "State: " + string(state), nil
		},
		Model: script(
			// The finishWith call comes first in the model's order but runs
			// after the regular tools of the same step.
			calls(call("s", "summarize", `{}`), call("n1", "note", `{"text":"x"}`), call("n2", "note", `{"text":"y"}`)),
		),
	}
	agent.Model = recordPrompts(agent.Model, &prompts)

	pool, err := pgxpool.New(t.Context(), pgtest.NewURL(t))
	require.NoError(t, err)
	e, err := engine.New(t.Context(), engine.Config{Pool: pool})
	require.NoError(t, err)
	require.NoError(t, e.Register(agent))
	require.NoError(t, e.Launch(t.Context()))
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })

	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "go", State: json.RawMessage(`{"notes":["w"]}`)}, nil)
	require.NoError(t, err)
	res := result(t, h)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	require.JSONEq(t, `{"count":3}`, string(res.Output), "finishWith saw phase 1's appends")
	require.Equal(t, []string{`State: {"notes": ["w"]}`}, normalize(prompts))

	var custom *helix.CustomEventChunk
	for c, err := range h.Stream(t.Context()) {
		require.NoError(t, err)
		if ce, ok := c.Chunk.(*helix.CustomEventChunk); ok {
			custom = ce
		}
	}
	require.NotNil(t, custom)
	require.Equal(t, "progress", custom.EventName)
	require.JSONEq(t, `{"notes":3}`, string(custom.Data))
	msgs := allMessages(t, e, h.SessionID)
	require.Equal(t, "s", msgs[2].ToolCallID, "tool results keep the model's order")
}

// StopWhen ends the turn after a step that did not finish otherwise.
func TestStopWhen(t *testing.T) {
	t.Parallel()
	var x executions
	agent := &helix.Agent{Name: "stopper", Tools: []*helix.Tool{noteTool(&x)},
		StopWhen: func(r helix.StepResult) bool { return len(r.ToolCalls) > 0 && r.ToolCalls[0].ID == "n2" },
		Model: script(
			calls(call("n1", "note", `{"text":"a"}`)),
			calls(call("n2", "note", `{"text":"b"}`)),
			text("never reached"),
		)}
	e := newEngine(t, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "go"}, nil)
	require.NoError(t, err)
	res := result(t, h)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	st, err := h.State(t.Context())
	require.NoError(t, err)
	require.Equal(t, 2, st.StepCount)
}

func recordPrompts(m helix.Model, into *[]string) helix.Model {
	return helix.ModelFunc(func(ctx context.Context, req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
		if len(req.Messages) > 0 && req.Messages[0].Role == helix.RoleSystem {
			*into = append(*into, req.Messages[0].Content)
		}
		return m.GenerateStep(ctx, req, cb)
	})
}

func normalize(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strings.ReplaceAll(s, `{"notes":["w"]}`, `{"notes": ["w"]}`)
	}
	return out
}

// In-code skills: the catalog is in the system prompt and load_skill returns
// the body as a tool result the model reads.
func TestSkills(t *testing.T) {
	t.Parallel()
	var prompts []string
	agent := &helix.Agent{Name: "skilled", SystemPrompt: "Base.",
		Skills: []helix.Skill{{Name: "deploy-runbook", Description: "How to deploy", Body: "Step 1: ship it."}},
		Model: script(
			calls(call("l1", helix.LoadSkillToolName, `{"name":"deploy-runbook"}`)),
			func(req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
				last := req.Messages[len(req.Messages)-1]
				return text("saw: "+last.Content)(req, cb)
			},
		)}
	agent.Model = recordPrompts(agent.Model, &prompts)
	e := newEngine(t, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "deploy"}, nil)
	require.NoError(t, err)
	res := result(t, h)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	require.Contains(t, string(res.Output), "Step 1: ship it.")
	require.Len(t, prompts, 2)
	require.True(t, strings.HasPrefix(prompts[0], "Base.\n\n## Skills"), prompts[0])
	require.Contains(t, prompts[0], "deploy-runbook")
	require.Equal(t, prompts[0], prompts[1], "the catalog is byte-stable")
}

// Result returns after the workflow's closing hooks ran, so a caller may
// shut down right after it.
func TestResultWaitsForClosingHooks(t *testing.T) {
	t.Parallel()
	var fired atomic.Bool
	agent := &helix.Agent{Name: "hooked", Model: script(text("done")), Hooks: &helix.Hooks{
		OnAgentComplete: func(context.Context, helix.HookContext, helix.AgentResult) error {
			time.Sleep(300 * time.Millisecond) // a slow hook, not an assertion
			fired.Store(true)
			return nil
		}}}
	e := newEngine(t, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "go"}, nil)
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, result(t, h).Status)
	require.True(t, fired.Load(), "OnAgentComplete ran before Result returned")
}
