package engine

import "fmt"

// Refusal codes: why the engine refused a request without writing anything.
// They are stable; servers map them to their answers.
const (
	// RefusedNotRunning: Interrupt or Abort of a session that is not
	// running.
	RefusedNotRunning = "not_running"
	// RefusedNotContinuable: Execute on a session that is not completed
	// (interrupted, failed): Resume or Retry it instead.
	RefusedNotContinuable = "not_continuable"
	// RefusedAgentMismatch: the session belongs to another agent.
	RefusedAgentMismatch = "agent_mismatch"
	// RefusedStateNotAllowed: Input.State given for an existing session
	// or a branch.
	RefusedStateNotAllowed = "state_not_allowed"
	// RefusedMessageRequired: a new turn or session without a message.
	RefusedMessageRequired = "message_required"
	// RefusedAwaitingToolResults: a message while the session waits for
	// tool results, which must be submitted instead.
	RefusedAwaitingToolResults = "awaiting_tool_results"
	// RefusedSessionExists: a branch into an existing session ID.
	RefusedSessionExists = "session_exists"
	// RefusedOwnerMismatch: ExecuteOptions.UserID names another user than
	// the existing session's.
	RefusedOwnerMismatch = "owner_mismatch"
	// RefusedNotLaunched: the engine is not launched, or shut down.
	RefusedNotLaunched = "not_launched"
	// RefusedReservedSessionID: a session ID of the form the engine
	// derives for an existing session's children (sub-agents
	// {parent}-sub-{callId}, companions {parent}-agent-{name}).
	RefusedReservedSessionID = "reserved_session_id"
)

// reservedInfixes are the infixes of derived session IDs: a session a
// caller names {existing}{infix}… could take the ID of another session's
// child.
var reservedInfixes = []string{"-sub-", "-agent-"}

// RefusedError is a request the engine refused because of the session's
// state or the request itself; nothing was written. Message says what to
// do instead and is safe to show to the caller.
type RefusedError struct {
	Code      string
	SessionID string
	Message   string
}

func (e *RefusedError) Error() string { return "engine: " + e.Message }

func refuse(code, sessionID, format string, args ...any) *RefusedError {
	return &RefusedError{Code: code, SessionID: sessionID, Message: fmt.Sprintf(format, args...)}
}
