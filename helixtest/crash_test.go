package helixtest_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/helixtest"
	"github.com/helix-agents/helix-dbos/llm/scripted"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// charges is an application's payment service: a charge is applied once
// per idempotency key, however often the tool runs.
type charges struct {
	mu      sync.Mutex
	applied map[string]bool
	runs    atomic.Int32
	effects helixtest.Executions
}

// tool charges an order, idempotently when idem is set.
func (c *charges) tool(idem bool) *helix.Tool {
	return helix.MustNewTool("charge", "Charge an order", func(_ context.Context, in struct{ Order string }, tc helix.ToolContext) (string, error) {
		c.runs.Add(1)
		c.mu.Lock()
		defer c.mu.Unlock()
		if idem && c.applied[tc.IdempotencyKey()] {
			return "charged " + in.Order, nil
		}
		if c.applied == nil {
			c.applied = map[string]bool{}
		}
		c.applied[tc.IdempotencyKey()] = true
		c.effects.Record(tc)
		return "charged " + in.Order, nil
	})
}

// shop charges two orders in two steps, then answers.
func shop(tool *helix.Tool) *helix.Agent {
	return &helix.Agent{Name: "shop", Tools: []*helix.Tool{tool}, Model: scripted.New(
		scripted.Step{ToolCalls: []scripted.Call{{Name: "charge", Args: map[string]string{"Order": "A-1"}}}},
		scripted.Step{ToolCalls: []scripted.Call{{Name: "charge", Args: map[string]string{"Order": "B-2"}}}},
		scripted.Step{Text: "Both orders are charged."},
	)}
}

// Each crash point, with a replacement under the same or a new executor
// ID, at the newest storage format level (a step's model record is its
// assistant message row): the session completes, the model is called once
// per step, each charge is applied once, the transcript and the stream
// hold nothing twice.
func TestCrashPointsAndReplacements(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		point helixtest.CrashPoint
		runs  int32 // executions of the tool, both engines together
	}{
		{"after the model call", helixtest.AfterModelCall(2), 2},
		{"after the tool ran", helixtest.AfterTool("charge"), 3},
		{"after the commit", helixtest.AfterCommit(1), 2},
	} {
		for _, newID := range []bool{false, true} {
			name := tc.name + map[bool]string{false: ", same executor", true: ", new executor"}[newID]
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				var c charges
				var mc helixtest.ModelCalls
				agent := shop(c.tool(true))
				agent.Model = mc.Wrap(agent.Model)
				e := helixtest.NewEngine(t, helixtest.EngineOptions{CrashAt: &tc.point}, agent)
				require.GreaterOrEqual(t, postgres.FormatLevel(e.FormatLevel()), postgres.FormatLevelModelMessages)
				h := e.Start(agent, "charge my orders")
				at := e.AwaitCrash()
				require.Equal(t, tc.point.At, at.Point)

				r := e.Replacement(helixtest.ReplacementOptions{NewExecutorID: newID})
				res := r.Await(r.Attach(h))
				require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
				require.Equal(t, tc.runs, c.runs.Load(), "tool executions")
				mc.RequireOncePerStep(t, 3)
				c.effects.RequireOncePerCall(t, 2)
				r.RequireTranscriptOnce(h.SessionID)
				r.RequireStreamGapFree(h.SessionID)
				require.Len(t, r.Messages(h.SessionID), 6)
			})
		}
	}
}

// A tool that is not idempotent applies its effect twice after a crash
// inside it: what RequireOncePerCall exists to catch.
func TestCrashAfterToolCatchesATwiceAppliedEffect(t *testing.T) {
	t.Parallel()
	var c charges
	agent := shop(c.tool(false))
	point := helixtest.AfterTool("charge")
	e := helixtest.NewEngine(t, helixtest.EngineOptions{CrashAt: &point}, agent)
	h := e.Start(agent, "charge my orders")
	e.AwaitCrash()
	r := e.Replacement(helixtest.ReplacementOptions{})
	require.Equal(t, helix.AgentCompleted, r.Await(r.Attach(h)).Status)
	keys := c.effects.Keys()
	require.Len(t, keys, 2)
	require.Equal(t, 2, c.effects.Count(keys[0])+c.effects.Count(keys[1])-1, "one of the two calls applied twice")

	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); c.effects.RequireOncePerCall(rec, 2) }()
	<-done
	require.Contains(t, rec.fatal, "applied its effect 2 times", "RequireOncePerCall fails on an effect applied twice")
}

// A crash while a run waits for an approval loses nothing: the replacement
// takes the answer and the tool runs once.
func TestCrashWhileWaitingForAnApproval(t *testing.T) {
	t.Parallel()
	var c charges
	agent := shop(helix.MustNewTool("charge", "Charge an order",
		func(_ context.Context, in struct{ Order string }, tc helix.ToolContext) (string, error) {
			c.runs.Add(1)
			c.effects.Record(tc)
			return "charged " + in.Order, nil
		}, helix.RequireApproval()))
	e := helixtest.NewEngine(t, helixtest.EngineOptions{}, agent)
	h := e.Start(agent, "charge my orders")
	first := e.AwaitPending(h.SessionID, "")
	e.Crash()

	r := e.Replacement(helixtest.ReplacementOptions{NewExecutorID: true})
	r.Approve(h.SessionID, first.ToolCallID)
	second := r.AwaitPending(h.SessionID, scripted.CallID(1, 0))
	r.Approve(h.SessionID, second.ToolCallID)
	res := r.Await(r.Attach(h))
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	require.EqualValues(t, 2, c.runs.Load())
	c.effects.RequireOncePerCall(t, 2)
	r.RequireTranscriptOnce(h.SessionID)
	r.RequireStreamGapFree(h.SessionID)
}
