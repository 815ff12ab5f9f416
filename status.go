package helix

import "fmt"

// SessionStatus is the stored status of a session (storage perspective).
type SessionStatus string

// Session statuses. A session waiting for a client tool result stays
// SessionActive: the pending client tool calls are the canonical signal.
const (
	SessionActive      SessionStatus = "active"
	SessionCompleted   SessionStatus = "completed"
	SessionFailed      SessionStatus = "failed"
	SessionInterrupted SessionStatus = "interrupted"
	SessionPaused      SessionStatus = "paused"
)

// Valid reports whether s is a known session status.
func (s SessionStatus) Valid() bool {
	switch s {
	case SessionActive, SessionCompleted, SessionFailed, SessionInterrupted, SessionPaused:
		return true
	}
	return false
}

// Terminal reports whether no run is executing on a session in status s
// without a new Execute, Resume or Retry.
func (s SessionStatus) Terminal() bool {
	return s == SessionCompleted || s == SessionFailed
}

// RunStatus is the status of one run (one execution of a turn) of a session.
type RunStatus string

// Run statuses. The three suspended variants mirror the AgentResult statuses
// of human-in-the-loop suspensions.
const (
	RunRunning                   RunStatus = "running"
	RunCompleted                 RunStatus = "completed"
	RunFailed                    RunStatus = "failed"
	RunInterrupted               RunStatus = "interrupted"
	RunSuspendedClientTool       RunStatus = "suspended_client_tool"
	RunSuspendedAwaitingChildren RunStatus = "suspended_awaiting_children"
	RunSuspendedStepPartial      RunStatus = "suspended_step_partial"
)

// Valid reports whether s is a known run status.
func (s RunStatus) Valid() bool {
	switch s {
	case RunRunning, RunCompleted, RunFailed, RunInterrupted,
		RunSuspendedClientTool, RunSuspendedAwaitingChildren, RunSuspendedStepPartial:
		return true
	}
	return false
}

// Suspended reports whether s is one of the three suspended statuses.
func (s RunStatus) Suspended() bool {
	return s == RunSuspendedClientTool || s == RunSuspendedAwaitingChildren || s == RunSuspendedStepPartial
}

// Final reports whether a run in status s will not change status again.
func (s RunStatus) Final() bool {
	return s == RunCompleted || s == RunFailed || s == RunInterrupted
}

// AgentStatus is the runtime status of an agent, reported by
// [AgentResult.Status] (runtime perspective; SessionActive is AgentRunning).
type AgentStatus string

// Agent statuses (the specification's AgentStatusValues plus the three
// suspension outcomes an AgentResult may report).
const (
	AgentRunning                   AgentStatus = "running"
	AgentCompleted                 AgentStatus = "completed"
	AgentFailed                    AgentStatus = "failed"
	AgentPaused                    AgentStatus = "paused"
	AgentWaitingTool               AgentStatus = "waiting_tool"
	AgentInterrupted               AgentStatus = "interrupted"
	AgentSuspendedClientTool       AgentStatus = "suspended_client_tool"
	AgentSuspendedAwaitingChildren AgentStatus = "suspended_awaiting_children"
	AgentSuspendedStepPartial      AgentStatus = "suspended_step_partial"
	// AgentQueued is a run that waits in its engine's queue for a slot
	// (a helix-dbos addition: engine.Config.Queue). Its session is active.
	AgentQueued AgentStatus = "queued"
)

// Valid reports whether s is a known agent status.
func (s AgentStatus) Valid() bool {
	switch s {
	case AgentRunning, AgentCompleted, AgentFailed, AgentPaused, AgentWaitingTool, AgentInterrupted,
		AgentSuspendedClientTool, AgentSuspendedAwaitingChildren, AgentSuspendedStepPartial, AgentQueued:
		return true
	}
	return false
}

// Suspended reports whether s is one of the three suspended statuses.
func (s AgentStatus) Suspended() bool {
	return s == AgentSuspendedClientTool || s == AgentSuspendedAwaitingChildren || s == AgentSuspendedStepPartial
}

// SessionStatusToAgentStatus converts a stored session status to the runtime
// status: active becomes running, the others keep their name.
func SessionStatusToAgentStatus(s SessionStatus) AgentStatus {
	switch s {
	case SessionActive:
		return AgentRunning
	case SessionCompleted:
		return AgentCompleted
	case SessionFailed:
		return AgentFailed
	case SessionInterrupted:
		return AgentInterrupted
	case SessionPaused:
		return AgentPaused
	}
	return AgentStatus(s)
}

// AgentStatusToSessionStatus converts a runtime status to the status stored on
// the session: running, waiting_tool and the suspensions are all active (a
// suspended session is resumable and its pending tool calls say why).
func AgentStatusToSessionStatus(s AgentStatus) SessionStatus {
	switch s {
	case AgentRunning, AgentWaitingTool,
		AgentSuspendedClientTool, AgentSuspendedAwaitingChildren, AgentSuspendedStepPartial:
		return SessionActive
	case AgentCompleted:
		return SessionCompleted
	case AgentFailed:
		return SessionFailed
	case AgentInterrupted:
		return SessionInterrupted
	case AgentPaused:
		return SessionPaused
	}
	return SessionStatus(s)
}

// RunStatusToAgentStatus converts a run status to the status an AgentResult
// reports for it.
func RunStatusToAgentStatus(s RunStatus) AgentStatus {
	switch s {
	case RunRunning:
		return AgentRunning
	case RunCompleted:
		return AgentCompleted
	case RunFailed:
		return AgentFailed
	case RunInterrupted:
		return AgentInterrupted
	case RunSuspendedClientTool:
		return AgentSuspendedClientTool
	case RunSuspendedAwaitingChildren:
		return AgentSuspendedAwaitingChildren
	case RunSuspendedStepPartial:
		return AgentSuspendedStepPartial
	}
	return AgentStatus(s)
}

// SubSessionStatus is the lifecycle status of a sub-agent session as tracked
// on its parent's [SubSessionRef].
type SubSessionStatus string

// Sub-session statuses.
const (
	SubSessionRunning   SubSessionStatus = "running"
	SubSessionCompleted SubSessionStatus = "completed"
	SubSessionFailed    SubSessionStatus = "failed"
	// SubSessionInterrupted: the child's run stopped on an interrupt.
	SubSessionInterrupted SubSessionStatus = "interrupted"
	// SubSessionTerminated: a persistent child ended by terminateChild.
	SubSessionTerminated SubSessionStatus = "terminated"
	// SubSessionPausedAwaitingClient: the child waits for a client tool
	// result or an approval.
	SubSessionPausedAwaitingClient SubSessionStatus = "paused_awaiting_client"
)

// Valid reports whether s is a known sub-session status.
func (s SubSessionStatus) Valid() bool {
	switch s {
	case SubSessionRunning, SubSessionCompleted, SubSessionFailed, SubSessionInterrupted, SubSessionTerminated,
		SubSessionPausedAwaitingClient:
		return true
	}
	return false
}

// Final reports whether the child will not run again by itself
// (completed, failed or terminated).
func (s SubSessionStatus) Final() bool {
	return s == SubSessionCompleted || s == SubSessionFailed || s == SubSessionTerminated
}

// SubSessionMode distinguishes ephemeral sub-agents (one tool call, one run)
// from persistent companions (a stable session consulted repeatedly).
type SubSessionMode string

// Sub-session modes.
const (
	SubSessionEphemeral  SubSessionMode = "ephemeral"
	SubSessionPersistent SubSessionMode = "persistent"
)

// Valid reports whether m is a known sub-session mode.
func (m SubSessionMode) Valid() bool { return m == SubSessionEphemeral || m == SubSessionPersistent }

// SessionMode is the write-once binding of a session to standard or
// persistent (companion) execution.
type SessionMode string

// Session modes.
const (
	SessionModeStandard   SessionMode = "standard"
	SessionModePersistent SessionMode = "persistent"
)

// Valid reports whether m is a known session mode.
func (m SessionMode) Valid() bool { return m == SessionModeStandard || m == SessionModePersistent }

// StreamStatus is the lifecycle status of a session's event stream. Note
// "ended", not "completed".
type StreamStatus string

// Stream statuses.
const (
	StreamActive StreamStatus = "active"
	StreamPaused StreamStatus = "paused"
	StreamEnded  StreamStatus = "ended"
	StreamFailed StreamStatus = "failed"
)

// Valid reports whether s is a known stream status.
func (s StreamStatus) Valid() bool {
	switch s {
	case StreamActive, StreamPaused, StreamEnded, StreamFailed:
		return true
	}
	return false
}

// FailureReasonParentSuspended marks a child session that was failed because
// its parent suspended; the parent re-spawns such children when it resumes
// (the γ-cascade of the specification).
const FailureReasonParentSuspended = "parent_suspended"

// ParseSessionStatus converts s to a SessionStatus, rejecting unknown values.
func ParseSessionStatus(s string) (SessionStatus, error) {
	if v := SessionStatus(s); v.Valid() {
		return v, nil
	}
	return "", fmt.Errorf("helix: unknown session status %q (want active, completed, failed, interrupted or paused)", s)
}

// ParseRunStatus converts s to a RunStatus, rejecting unknown values.
func ParseRunStatus(s string) (RunStatus, error) {
	if v := RunStatus(s); v.Valid() {
		return v, nil
	}
	return "", fmt.Errorf("helix: unknown run status %q", s)
}
