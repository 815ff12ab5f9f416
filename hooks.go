package helix

import (
	"context"
	"encoding/json"
	"time"
)

// Hooks observe an agent's lifecycle. Every field is optional. The engine
// fires them inside durable steps, so a hook runs at least once per event and
// is not fired again once its step is checkpointed; a crash between a hook
// and its checkpoint fires it again (make hooks with side effects
// idempotent, e.g. keyed by HookContext.RunID and Step).
//
// A hook's error or panic is logged (event hook.failed) and never fails the
// run. Hooks run on the engine's goroutines and should return quickly.
//
// For one regular tool call the order is canonical:
// BeforeTool → (the tool executes) → OnStateChange (when the tool changed
// the custom state) → OnMessage (the tool-result message) → AfterTool.
type Hooks struct {
	// OnAgentStart fires when a run starts (Execute, Resume or Retry).
	OnAgentStart func(ctx context.Context, hc HookContext) error
	// OnAgentComplete fires when a run completes, with the output (nil
	// without an output schema) or the final text.
	OnAgentComplete func(ctx context.Context, hc HookContext, result AgentResult) error
	// OnAgentFail fires when a run fails.
	OnAgentFail func(ctx context.Context, hc HookContext, err string) error
	// OnAgentInterrupted fires when a run stops on an interrupt.
	OnAgentInterrupted func(ctx context.Context, hc HookContext, reason string) error
	// OnAgentSuspended fires when a run suspends for human input;
	// OnAgentResumed when it continues, with PreviousRunID set to the
	// suspended run's ID.
	OnAgentSuspended func(ctx context.Context, hc HookContext, s Suspension) error
	OnAgentResumed   func(ctx context.Context, hc HookContext, previousRunID string) error
	// OnStepStart and OnStepEnd bracket each model step.
	OnStepStart func(ctx context.Context, hc HookContext) error
	OnStepEnd   func(ctx context.Context, hc HookContext, step StepResult) error
	// BeforeTool fires before a tool executes.
	BeforeTool func(ctx context.Context, hc HookContext, call ToolCall) error
	// OnStateChange fires after a tool changed the custom state, with the
	// RFC 6902 patches of the change.
	OnStateChange func(ctx context.Context, hc HookContext, patches []PatchOp) error
	// OnMessage fires for every message appended to the conversation
	// (assistant messages and tool results).
	OnMessage func(ctx context.Context, hc HookContext, msg Message) error
	// AfterTool fires after a tool's result message, with its outcome.
	AfterTool func(ctx context.Context, hc HookContext, call ToolCall, result ToolOutcome) error
}

// HookContext identifies where a hook fires.
type HookContext struct {
	SessionID string `json:"sessionId"`
	RunID     string `json:"runId"`
	AgentType string `json:"agentType"`
	// Step is the step number within the turn (0 outside a step).
	Step int `json:"step"`
}

// ToolOutcome is the result of one tool call as AfterTool sees it.
type ToolOutcome struct {
	// Result is the tool's JSON output (nil on error).
	Result json.RawMessage `json:"result,omitempty"`
	// Error is the error text the model saw, empty on success.
	Error    string        `json:"error,omitempty"`
	Duration time.Duration `json:"durationNs"`
}
