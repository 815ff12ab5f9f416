// Package examples_test holds tests written only against the public test
// kit (helixtest), to copy into an application: a tool crash-tested for
// exactly-once effects (crash_test.go), an approval flow
// (approval_test.go) and a client tool's day-long deadline passed in a
// moment (deadline_test.go).
package examples_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/helixtest"
	"github.com/helix-agents/helix-dbos/llm/scripted"
)

// The process dies inside the charge tool, after it ran: the replacement
// runs the tool again with the same idempotency key, and the customer is
// charged once.
func TestChargeSurvivesACrashInsideTheTool(t *testing.T) {
	t.Parallel()
	var charged helixtest.Executions
	var seen sync.Map // the payment provider's record of idempotency keys
	charge := helix.MustNewTool("charge", "Charge an order", func(_ context.Context, in struct{ Order string }, tc helix.ToolContext) (string, error) {
		if _, dup := seen.LoadOrStore(tc.IdempotencyKey(), true); !dup {
			charged.Record(tc) // the charge itself, once per key
		}
		return "charged " + in.Order, nil
	})
	agent := &helix.Agent{Name: "shop", Tools: []*helix.Tool{charge}, Model: scripted.New(
		scripted.Step{ToolCalls: []scripted.Call{{Name: "charge", Args: map[string]string{"Order": "A-1"}}}},
		scripted.Step{Text: "Charged."},
	)}
	crash := helixtest.AfterTool("charge")
	e := helixtest.NewEngine(t, helixtest.EngineOptions{CrashAt: &crash}, agent)
	h := e.Start(agent, "charge order A-1")
	e.AwaitCrash()

	r := e.Replacement(helixtest.ReplacementOptions{NewExecutorID: true})
	require.Equal(t, helix.AgentCompleted, r.Await(r.Attach(h)).Status)
	charged.RequireOncePerCall(t, 1)
	r.RequireTranscriptOnce(h.SessionID)
	r.RequireStreamGapFree(h.SessionID)
}
