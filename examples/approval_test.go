package examples_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/helixtest"
	"github.com/helix-agents/helix-dbos/llm/scripted"
)

// A refund waits for a person's approval: denied, it never runs and the
// model hears why; approved, it runs once.
func TestRefundNeedsApproval(t *testing.T) {
	t.Parallel()
	for _, approve := range []bool{false, true} {
		var refunds atomic.Int32
		refund := helix.MustNewTool("refund", "Refund an order",
			func(_ context.Context, in struct{ Order string }, _ helix.ToolContext) (string, error) {
				refunds.Add(1)
				return "refunded " + in.Order, nil
			}, helix.RequireApproval())
		agent := &helix.Agent{Name: "support", Tools: []*helix.Tool{refund}, Model: scripted.New(
			scripted.Step{ToolCalls: []scripted.Call{{Name: "refund", Args: map[string]string{"Order": "A-1"}}}},
			scripted.Step{Text: "Done."},
		)}
		e := helixtest.NewEngine(t, helixtest.EngineOptions{}, agent)
		h := e.Start(agent, "refund order A-1")
		call := e.AwaitPending(h.SessionID, "")
		if approve {
			e.Approve(h.SessionID, call.ToolCallID)
		} else {
			e.Deny(h.SessionID, call.ToolCallID, "over the limit")
		}
		require.Equal(t, helix.AgentCompleted, e.Await(h).Status)
		require.Equal(t, map[bool]int32{false: 0, true: 1}[approve], refunds.Load())
		result := e.Messages(h.SessionID)[2]
		require.Equal(t, helix.RoleTool, result.Role)
		if !approve {
			require.Contains(t, result.Content, helix.NotApprovedMessage)
		}
	}
}
