package helix

import (
	"encoding/json"
	"fmt"
)

// AgentResult is the outcome of a run as reported by a handle's Result.
//
// Status is one of the final statuses (completed, failed, interrupted) or one
// of the three suspended statuses; exhaustive switches must handle all of
// them. When the run is suspended, Suspended carries the routing information
// needed to drive it forward (which tool calls await a submission, which
// children the parent waits on).
type AgentResult struct {
	SessionID string          `json:"sessionId"`
	RunID     string          `json:"runId"`
	Status    AgentStatus     `json:"status"`
	Output    json.RawMessage `json:"output,omitempty"`
	Error     string          `json:"error,omitempty"`
	// ErrorCode classifies Error when the failure came from a classified
	// error (for example provider_rate_limited); empty otherwise.
	ErrorCode string      `json:"errorCode,omitempty"`
	Suspended *Suspension `json:"suspended,omitempty"`
}

// DecodeOutput unmarshals the structured output into v. It fails when the run
// did not complete with an output.
func (r AgentResult) DecodeOutput(v any) error {
	if len(r.Output) == 0 {
		return fmt.Errorf("helix: session %s has no output (status %s)", r.SessionID, r.Status)
	}
	if err := json.Unmarshal(r.Output, v); err != nil {
		return fmt.Errorf("helix: decode output of session %s: %w", r.SessionID, err)
	}
	return nil
}

// Suspension is the routing information of a suspended run (the
// specification's AgentResult.suspended).
//
//   - suspended_client_tool: ToolCallIDs awaiting a client result or an
//     approval decision.
//   - suspended_step_partial: ToolCallIDs and the StepID of the partially
//     completed step.
//   - suspended_awaiting_children: Children the parent waits on.
type Suspension struct {
	ToolCallIDs []string         `json:"toolCallIds,omitempty"`
	StepID      string           `json:"stepId,omitempty"`
	Children    []SuspendedChild `json:"children,omitempty"`
}

// SuspendedChild describes one sub-agent a suspended parent waits on. When
// the child is itself suspended on a client tool or an approval, ToolCallIDs
// lists them: submissions go to the root session and are routed to the child.
type SuspendedChild struct {
	ParentToolCallID string      `json:"parentToolCallId"`
	SubSessionID     string      `json:"subSessionId"`
	AgentType        string      `json:"agentType"`
	Status           AgentStatus `json:"status"`
	ToolCallIDs      []string    `json:"toolCallIds,omitempty"`
}

// CanResumeResult answers whether a session can be resumed and, if not, why.
type CanResumeResult struct {
	CanResume bool   `json:"canResume"`
	Reason    string `json:"reason,omitempty"`
}
