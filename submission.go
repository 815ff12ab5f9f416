package helix

import (
	"encoding/gob"
	"encoding/json"
	"errors"
	"fmt"
)

// SubmissionKind discriminates a [ToolSubmission] (the specification's
// SubmitToolResult union; the wire names are kept).
type SubmissionKind string

// Submission kinds.
const (
	// SubmissionClientToolResult answers a client-executed tool call with a
	// result or an error.
	SubmissionClientToolResult SubmissionKind = "client-tool-result"
	// SubmissionApprovalResponse approves or denies an approval-gated call.
	SubmissionApprovalResponse SubmissionKind = "approval-response"
)

// NotApprovedMessage is the tool error the model sees for a denied call.
const NotApprovedMessage = "Tool call was not approved by the user"

// ToolSubmission answers a tool call a run is suspended on. Build one with
// [ClientToolResult], [ClientToolError], [Approve] or [Deny], or decode it
// from JSON (the specification's wire shape) and call Validate.
type ToolSubmission struct {
	Kind       SubmissionKind `json:"kind"`
	ToolCallID string         `json:"toolCallId"`
	// Result is a client tool's JSON result (client-tool-result); it is
	// validated against the tool's output schema.
	Result json.RawMessage `json:"result,omitempty"`
	// Error reports that the client tool failed (client-tool-result): the
	// model sees it as the tool's error. Exactly one of Result and Error.
	Error string `json:"error,omitempty"`
	// Approved is the decision (approval-response); required.
	Approved *bool `json:"approved,omitempty"`
	// Reason optionally explains the decision (approval-response).
	Reason string `json:"reason,omitempty"`
}

// ClientToolResult answers a client-executed tool call with its result,
// marshalled with encoding/json.
func ClientToolResult(toolCallID string, result any) (ToolSubmission, error) {
	b, err := json.Marshal(result)
	if err != nil {
		return ToolSubmission{}, fmt.Errorf("helix: encode the result of tool call %s: %w", toolCallID, err)
	}
	return ToolSubmission{Kind: SubmissionClientToolResult, ToolCallID: toolCallID, Result: b}, nil
}

// ClientToolError answers a client-executed tool call with a failure the
// model sees as the tool's error.
func ClientToolError(toolCallID, message string) ToolSubmission {
	return ToolSubmission{Kind: SubmissionClientToolResult, ToolCallID: toolCallID, Error: message}
}

// Approve approves an approval-gated call: the tool runs with the input the
// model gave it.
func Approve(toolCallID, reason string) ToolSubmission {
	yes := true
	return ToolSubmission{Kind: SubmissionApprovalResponse, ToolCallID: toolCallID, Approved: &yes, Reason: reason}
}

// Deny denies an approval-gated call: the tool never runs and the model sees
// [NotApprovedMessage].
func Deny(toolCallID, reason string) ToolSubmission {
	no := false
	return ToolSubmission{Kind: SubmissionApprovalResponse, ToolCallID: toolCallID, Approved: &no, Reason: reason}
}

// Validate checks the submission's shape (not whether anything waits for
// it) and returns a *SubmissionError with code SubmissionInvalid.
func (s ToolSubmission) Validate() error {
	bad := func(format string, args ...any) error {
		return &SubmissionError{Code: SubmissionInvalid, ToolCallID: s.ToolCallID, Reason: fmt.Sprintf(format, args...)}
	}
	if s.ToolCallID == "" {
		return bad("toolCallId is empty")
	}
	switch s.Kind {
	case SubmissionClientToolResult:
		if s.Approved != nil || s.Reason != "" {
			return bad("a %s carries result or error, not approved or reason", s.Kind)
		}
		if (len(s.Result) == 0) == (s.Error == "") {
			return bad("a %s needs exactly one of result and error", s.Kind)
		}
		if len(s.Result) > 0 && !json.Valid(s.Result) {
			return bad("result is not valid JSON")
		}
	case SubmissionApprovalResponse:
		if len(s.Result) > 0 || s.Error != "" {
			return bad("an %s carries approved and reason, not result or error", s.Kind)
		}
		if s.Approved == nil {
			return bad("an %s needs approved (true or false)", s.Kind)
		}
	default:
		return bad("unknown kind %q (want %q or %q)", s.Kind, SubmissionClientToolResult, SubmissionApprovalResponse)
	}
	return nil
}

// IsApproved reports an approval-response that approves.
func (s ToolSubmission) IsApproved() bool { return s.Approved != nil && *s.Approved }

// SubmitResult reports what a submission did.
type SubmitResult struct {
	// ToolCallID is the call the submission answered.
	ToolCallID string `json:"toolCallId"`
	// OwnerSessionID is the session whose run waits for the call (the root
	// session, or the sub-agent session the call was routed to).
	OwnerSessionID string `json:"ownerSessionId"`
	// RunID is the run that receives the submission.
	RunID string `json:"runId"`
	// ToolName and Kind describe the call answered.
	ToolName string         `json:"toolName,omitempty"`
	Kind     SubmissionKind `json:"kind,omitempty"`
	// AlreadyCompleted is set when the call had already been answered
	// (by an earlier or a concurrent submission): this one was not
	// delivered, the first one stands.
	AlreadyCompleted bool `json:"alreadyCompleted,omitempty"`
	// Remaining lists the run's tool calls still waiting for a submission
	// after this one (empty: the run continues now).
	Remaining []string `json:"remaining,omitempty"`
}

// Submission error codes (SubmissionError.Code).
const (
	// SubmissionInvalid: the submission is malformed.
	SubmissionInvalid = "invalid_submission"
	// SubmissionUnknownToolCall: no tool call with that ID waits in the
	// session (never existed, or belongs to another session).
	SubmissionUnknownToolCall = "unknown_tool_call"
	// SubmissionNotRoot: submissions go to the root session, which routes
	// them to the sub-agent that owns the call.
	SubmissionNotRoot = "not_root_session"
	// SubmissionKindMismatch: an approval for a client tool or a result for
	// an approval gate.
	SubmissionKindMismatch = "kind_mismatch"
	// SubmissionInvalidResult: the result fails the tool's output schema
	// (Violations lists every problem).
	SubmissionInvalidResult = "invalid_result"
	// SubmissionTimedOut: the call's deadline passed; the model was told.
	SubmissionTimedOut = "timed_out"
	// SubmissionSessionInterrupted: the session was interrupted while it
	// waited; resume it, then answer the calls still waiting.
	SubmissionSessionInterrupted = "session_interrupted"
	// SubmissionNotWaiting: the session ended (aborted, failed, completed):
	// nothing will consume the answer.
	SubmissionNotWaiting = "session_not_waiting"
	// SubmissionAlreadyAnswered: the call was already answered, by an
	// earlier submission or by a concurrent one that committed first; that
	// answer stands. Only SubmitToolResultTx (package engine) refuses so,
	// so that the caller rolls back the writes that went with its answer;
	// SubmitToolResult reports SubmitResult.AlreadyCompleted instead.
	SubmissionAlreadyAnswered = "already_answered"
)

// ErrSubmissionRejected matches every *SubmissionError.
var ErrSubmissionRejected = errors.New("helix: submission rejected")

// SubmissionError reports a submission that was rejected; nothing was
// written. It matches ErrSubmissionRejected, and ErrNotFound when the code is
// SubmissionUnknownToolCall.
type SubmissionError struct {
	Code       string
	SessionID  string
	ToolCallID string
	Reason     string
	// Violations lists the schema violations of an invalid result.
	Violations []Violation
}

func (e *SubmissionError) Error() string {
	where := ""
	if e.SessionID != "" {
		where = " in session " + e.SessionID
	}
	return fmt.Sprintf("helix: submission for tool call %s%s rejected (%s): %s", e.ToolCallID, where, e.Code, e.Reason)
}

// Is matches ErrSubmissionRejected, and ErrNotFound for an unknown call.
func (e *SubmissionError) Is(target error) bool {
	return target == ErrSubmissionRejected || (target == ErrNotFound && e.Code == SubmissionUnknownToolCall)
}

func init() { gob.Register(&SubmissionError{}) }
