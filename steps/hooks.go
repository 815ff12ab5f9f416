package steps

import (
	"context"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	helix "github.com/helix-agents/helix-dbos"
)

// Hook event kinds.
const (
	HookAgentStart       = "agentStart"
	HookAgentComplete    = "agentComplete"
	HookAgentFail        = "agentFail"
	HookAgentInterrupted = "agentInterrupted"
	HookAgentSuspended   = "agentSuspended"
	HookAgentResumed     = "agentResumed"
	HookMessage          = "message"
	HookAfterTool        = "afterTool"
	HookStepEnd          = "stepEnd"
)

// HookEvent is one hook invocation, in firing order.
type HookEvent struct {
	Kind    string             `json:"kind"`
	Message *helix.Message     `json:"message,omitempty"`
	Call    *helix.ToolCall    `json:"call,omitempty"`
	Outcome *helix.ToolOutcome `json:"outcome,omitempty"`
	Step    *helix.StepResult  `json:"stepResult,omitempty"`
	Result  *helix.AgentResult `json:"result,omitempty"`
	Reason  string             `json:"reason,omitempty"`
	// Suspension is what a suspended run waits for (agentSuspended).
	Suspension *helix.Suspension `json:"suspension,omitempty"`
	// PreviousRunID is the suspended or interrupted run a resumed run
	// continues (agentResumed).
	PreviousRunID string `json:"previousRunId,omitempty"`
}

// HooksInput lists the hooks to fire after a step or at a lifecycle point.
type HooksInput struct {
	Run    RunInfo     `json:"run"`
	Step   int         `json:"step"`
	Events []HookEvent `json:"events"`
}

// FireHooks returns the step that fires the agent's hooks for the events in
// order. Hook errors and panics are logged, never propagated.
func (e *Env) FireHooks(in HooksInput) dbos.Step[int] {
	return func(ctx context.Context) (int, error) {
		def, err := e.RunAgent(in.Run)
		if err != nil || def.Agent.Hooks == nil {
			return 0, nil
		}
		h := def.Agent.Hooks
		hc := helix.HookContext{SessionID: in.Run.SessionID, RunID: in.Run.RunID, AgentType: in.Run.AgentType, Step: in.Step}
		fired := 0
		for _, ev := range in.Events {
			var fn func() error
			switch ev := ev; ev.Kind {
			case HookAgentStart:
				if h.OnAgentStart != nil {
					fn = func() error { return h.OnAgentStart(ctx, hc) }
				}
			case HookAgentComplete:
				if h.OnAgentComplete != nil && ev.Result != nil {
					fn = func() error { return h.OnAgentComplete(ctx, hc, *ev.Result) }
				}
			case HookAgentFail:
				if h.OnAgentFail != nil {
					fn = func() error { return h.OnAgentFail(ctx, hc, ev.Reason) }
				}
			case HookAgentInterrupted:
				if h.OnAgentInterrupted != nil {
					fn = func() error { return h.OnAgentInterrupted(ctx, hc, ev.Reason) }
				}
			case HookAgentSuspended:
				if h.OnAgentSuspended != nil && ev.Suspension != nil {
					fn = func() error { return h.OnAgentSuspended(ctx, hc, *ev.Suspension) }
				}
			case HookAgentResumed:
				if h.OnAgentResumed != nil {
					fn = func() error { return h.OnAgentResumed(ctx, hc, ev.PreviousRunID) }
				}
			case HookMessage:
				if h.OnMessage != nil && ev.Message != nil {
					fn = func() error { return h.OnMessage(ctx, hc, *ev.Message) }
				}
			case HookAfterTool:
				if h.AfterTool != nil && ev.Call != nil && ev.Outcome != nil {
					fn = func() error { return h.AfterTool(ctx, hc, *ev.Call, *ev.Outcome) }
				}
			case HookStepEnd:
				if h.OnStepEnd != nil && ev.Step != nil {
					fn = func() error { return h.OnStepEnd(ctx, hc, *ev.Step) }
				}
			}
			if fn != nil {
				e.hook(ctx, ev.Kind, hc, fn)
				fired++
			}
		}
		return fired, nil
	}
}

// HasHooks reports whether the agent type has any hooks, so workflows skip
// the hook steps entirely when there is nothing to fire.
func (e *Env) HasHooks(agentType string) bool {
	def, err := e.Agent(agentType)
	return err == nil && def.Agent.Hooks != nil
}
