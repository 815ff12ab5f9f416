package helixtest_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/helixtest"
	"github.com/helix-agents/helix-dbos/llm/scripted"
)

// lookup is an application tool: it counts its executions.
func lookup(runs *atomic.Int32, opts ...helix.ToolOption) *helix.Tool {
	type in struct {
		Order string `json:"order"`
	}
	return helix.MustNewTool("lookup", "Look an order up", func(_ context.Context, i in, _ helix.ToolContext) (map[string]string, error) {
		runs.Add(1)
		return map[string]string{"order": i.Order, "status": "shipped"}, nil
	}, opts...)
}

// support calls lookup once, then answers.
func support(name string, tool *helix.Tool) *helix.Agent {
	return &helix.Agent{Name: name, SystemPrompt: "help", Tools: []*helix.Tool{tool}, Model: scripted.New(
		scripted.Step{ToolCalls: []scripted.Call{{Name: "lookup", Args: map[string]string{"order": "A-1"}}}},
		scripted.Step{Text: "Your order has shipped."},
	)}
}

func TestEngineRunsTheApplicationsAgent(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	agent := support("support", lookup(&runs))
	e := helixtest.NewEngine(t, helixtest.EngineOptions{}, agent)
	h := e.Start(agent, "where is my order?")
	res := e.Result(h)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	require.EqualValues(t, 1, runs.Load())

	msgs := e.Messages(h.SessionID)
	require.Len(t, msgs, 4, "user, assistant with the call, tool result, answer")
	require.Equal(t, helix.RoleTool, msgs[2].Role)
	var result map[string]string
	require.NoError(t, json.Unmarshal([]byte(msgs[2].Content), &result))
	require.Equal(t, "shipped", result["status"])
	require.Equal(t, "Your order has shipped.", msgs[3].Content)

	var types []helix.ChunkType
	stream := e.Stream(h.SessionID)
	for i, c := range stream {
		require.Equal(t, int64(i+1), c.Sequence, "the stream is gap-free")
		types = append(types, c.Chunk.ChunkType())
	}
	require.Contains(t, types, helix.ChunkToolStart)
	require.Contains(t, types, helix.ChunkToolEnd)
	require.Equal(t, helix.ChunkStreamEnd, types[len(types)-1])
}

func TestApproveAndDeny(t *testing.T) {
	t.Parallel()
	for _, approve := range []bool{true, false} {
		t.Run(map[bool]string{true: "approved", false: "denied"}[approve], func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int32
			agent := support("gated", lookup(&runs, helix.RequireApproval()))
			e := helixtest.NewEngine(t, helixtest.EngineOptions{}, agent)
			h := e.Start(agent, "where is my order?")
			require.Equal(t, helix.AgentSuspendedClientTool, e.Result(h).Status)
			call := e.AwaitPending(h.SessionID, "")
			require.Equal(t, "lookup", call.ToolName)
			require.Len(t, e.Pending(h.SessionID), 1)
			if approve {
				e.Approve(h.SessionID, call.ToolCallID)
			} else {
				e.Deny(h.SessionID, call.ToolCallID, "not today")
			}
			res := e.Await(h)
			require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
			require.Empty(t, e.Pending(h.SessionID))
			want := int32(0)
			if approve {
				want = 1
			}
			require.Equal(t, want, runs.Load(), "the tool runs only when approved")
		})
	}
}

func TestAnswerAClientTool(t *testing.T) {
	t.Parallel()
	type in struct {
		Question string `json:"question"`
	}
	type out struct {
		Answer string `json:"answer"`
	}
	ask := helix.MustNewClientTool[in, out]("ask_user", "Ask the user")
	agent := &helix.Agent{Name: "asker", Tools: []*helix.Tool{ask}, Model: scripted.New(
		scripted.Step{ToolCalls: []scripted.Call{{Name: "ask_user", Args: map[string]string{"question": "colour?"}}}},
		scripted.Step{Text: "Blue it is."},
	)}
	e := helixtest.NewEngine(t, helixtest.EngineOptions{}, agent)
	h := e.Start(agent, "paint my house")
	call := e.AwaitPending(h.SessionID, scripted.CallID(0, 0))
	e.Answer(h.SessionID, call.ToolCallID, out{Answer: "blue"})
	res := e.Await(h)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	msgs := e.Messages(h.SessionID)
	require.JSONEq(t, `{"answer":"blue"}`, msgs[2].Content)
}
