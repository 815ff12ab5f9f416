package helix

import (
	"encoding/gob"
	"errors"
	"fmt"
	"strings"
)

// Sentinels matched with errors.Is. Typed errors below wrap or match them so
// callers can test a category without knowing the concrete type.
var (
	// ErrNotFound matches every *NotFoundError.
	ErrNotFound = errors.New("helix: not found")
	// ErrSessionExists matches *SessionExistsError.
	ErrSessionExists = errors.New("helix: session already exists")
	// ErrStreamTruncated matches *StreamTruncatedError.
	ErrStreamTruncated = errors.New("helix: stream truncated")
	// ErrStreamFailed matches *StreamFailedError.
	ErrStreamFailed = errors.New("helix: stream failed")
	// ErrStreamNotActive matches *StreamNotActiveError.
	ErrStreamNotActive = errors.New("helix: stream not active")
	// ErrInvalidInput matches *ValidationError.
	ErrInvalidInput = errors.New("helix: invalid input")
	// ErrInvalidDefinition matches *DefinitionError.
	ErrInvalidDefinition = errors.New("helix: invalid definition")
	// ErrSessionRunning matches *SessionRunningError.
	ErrSessionRunning = errors.New("helix: session has a run in progress")
	// ErrNotRootSession matches *NotRootSessionError.
	ErrNotRootSession = errors.New("helix: not a root session")
)

// The error types cross DBOS checkpoints, which gob-encode errors; registering
// them keeps errors.As working after a workflow replays a recorded failure.
func init() {
	gob.Register(&AgentAlreadyRunningError{})
	gob.Register(&AgentNotResumableError{})
	gob.Register(&StaleStateError{})
	gob.Register(&ExecutorSupersededError{})
	gob.Register(&FencingTokenMismatchError{})
	gob.Register(&NotFoundError{})
	gob.Register(&SessionExistsError{})
	gob.Register(&ValidationError{})
	gob.Register(&DefinitionError{})
	gob.Register(&ModelError{})
	gob.Register(&StreamTruncatedError{})
	gob.Register(&StreamFailedError{})
	gob.Register(&StreamNotActiveError{})
	gob.Register(&ToolPanicError{})
	gob.Register(&SessionRunningError{})
	gob.Register(&NotRootSessionError{})
}

// SessionRunningError refuses to delete a session tree that has a run in
// progress: a session of the tree is active (running, queued, or waiting
// for a person) or one of its runs' DBOS workflows is still pending. Stop
// it first (Interrupt or Abort), or delete with force, which aborts it and
// waits for its workflows to end. It matches ErrSessionRunning.
type SessionRunningError struct {
	// SessionID is the root whose deletion was refused.
	SessionID string
	// RunningSessionID is the session of the tree that runs (the root or
	// one of its sub-agents or companions).
	RunningSessionID string
	// Status is that session's status, or the DBOS status of WorkflowID.
	Status string
	// WorkflowID is the pending workflow, when a workflow is what runs.
	WorkflowID string
}

func (e *SessionRunningError) Error() string {
	what := fmt.Sprintf("session %s is %s", e.RunningSessionID, e.Status)
	if e.WorkflowID != "" {
		what = fmt.Sprintf("workflow %s of session %s is %s", e.WorkflowID, e.RunningSessionID, e.Status)
	}
	return fmt.Sprintf("helix: session %s has a run in progress (%s): interrupt or abort it first, or delete with force (which aborts it)",
		e.SessionID, what)
}

// Is reports whether target is ErrSessionRunning.
func (e *SessionRunningError) Is(target error) bool { return target == ErrSessionRunning }

// NotRootSessionError refuses an operation on a whole session tree given a
// sub-agent's or companion's session: delete the tree from its root.
// It matches ErrNotRootSession.
type NotRootSessionError struct {
	SessionID     string
	RootSessionID string
}

func (e *NotRootSessionError) Error() string {
	return fmt.Sprintf("helix: session %s is a sub-agent or companion session of root %s: delete the root session, which deletes its whole tree",
		e.SessionID, e.RootSessionID)
}

// Is reports whether target is ErrNotRootSession.
func (e *NotRootSessionError) Is(target error) bool { return target == ErrNotRootSession }

// AgentAlreadyRunningError is returned when Execute or Resume targets a
// session that is already running (the single-writer rule). Wait for the run
// to finish, or interrupt it first.
type AgentAlreadyRunningError struct {
	SessionID     string
	CurrentStatus string
}

func (e *AgentAlreadyRunningError) Error() string {
	return fmt.Sprintf("helix: session %s is already running (status %s): wait for its result or interrupt it before starting another run",
		e.SessionID, e.CurrentStatus)
}

// AgentNotResumableError is returned when Resume targets a session that
// cannot be resumed; Reason says why.
type AgentNotResumableError struct {
	SessionID     string
	CurrentStatus string
	Reason        string
}

func (e *AgentNotResumableError) Error() string {
	msg := fmt.Sprintf("helix: session %s cannot be resumed (status %s)", e.SessionID, e.CurrentStatus)
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// StaleStateError is returned when a versioned write finds the session at a
// different version than expected (optimistic concurrency): another writer
// changed it first. Reload the state and decide again.
type StaleStateError struct {
	SessionID       string
	ExpectedVersion int64
	ActualVersion   int64
}

func (e *StaleStateError) Error() string {
	return fmt.Sprintf("helix: stale state for session %s: expected version %d, found %d (another writer changed it; reload and retry)",
		e.SessionID, e.ExpectedVersion, e.ActualVersion)
}

// ExecutorSupersededError signals that another executor took over a session.
// It is a graceful stop, not a failure.
type ExecutorSupersededError struct {
	SessionID string
}

func (e *ExecutorSupersededError) Error() string {
	return fmt.Sprintf("helix: executor superseded on session %s: another executor now owns it", e.SessionID)
}

// FencingTokenMismatchError signals split-brain detection: a write carried a
// fencing token older than the current one.
type FencingTokenMismatchError struct {
	SessionID     string
	ExpectedToken int64
	ActualToken   int64
}

func (e *FencingTokenMismatchError) Error() string {
	return fmt.Sprintf("helix: fencing token mismatch on session %s: expected %d, got %d",
		e.SessionID, e.ExpectedToken, e.ActualToken)
}

// NotFoundError reports a missing session, run, checkpoint or stream. It
// matches ErrNotFound.
type NotFoundError struct {
	Kind string // "session", "run", "checkpoint", "stream", ...
	ID   string
}

func (e *NotFoundError) Error() string { return fmt.Sprintf("helix: %s %q not found", e.Kind, e.ID) }

// Is reports whether target is ErrNotFound.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// SessionExistsError is returned by CreateSession when the session ID is
// taken; exactly one concurrent creator wins. It matches ErrSessionExists.
type SessionExistsError struct {
	SessionID string
}

func (e *SessionExistsError) Error() string {
	return fmt.Sprintf("helix: session %s already exists: continue it with the same ID or choose a new one", e.SessionID)
}

// Is reports whether target is ErrSessionExists.
func (e *SessionExistsError) Is(target error) bool { return target == ErrSessionExists }

// Violation is one JSON Schema violation: where (a JSON pointer into the
// validated document; "" is the root) and what.
type Violation struct {
	Pointer string `json:"pointer"`
	Message string `json:"message"`
}

// ValidationError reports every violation found when JSON input (tool
// arguments, structured output, a client tool result) is checked against its
// schema. It matches ErrInvalidInput. Its message lists every violation so a
// model can repair its input in one attempt.
type ValidationError struct {
	// Subject names what was validated, e.g. `arguments of tool "search"`.
	Subject    string
	Violations []Violation
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "invalid %s:", e.Subject)
	for _, v := range e.Violations {
		ptr := v.Pointer
		if ptr == "" {
			ptr = "/"
		}
		fmt.Fprintf(&b, "\n- at %s: %s", ptr, v.Message)
	}
	return b.String()
}

// Is reports whether target is ErrInvalidInput.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidInput }

// DefinitionError reports an invalid agent or tool definition, naming the
// offending field. It matches ErrInvalidDefinition.
type DefinitionError struct {
	Kind   string // "agent" or "tool"
	Name   string
	Field  string
	Reason string
}

func (e *DefinitionError) Error() string {
	name := e.Name
	if name == "" {
		name = "(unnamed)"
	}
	return fmt.Sprintf("helix: invalid %s %s: %s: %s", e.Kind, name, e.Field, e.Reason)
}

// Is reports whether target is ErrInvalidDefinition.
func (e *DefinitionError) Is(target error) bool { return target == ErrInvalidDefinition }

// StreamTruncatedError is returned by a stream reader when chunks it had not
// read yet were removed by a cleanup (crash recovery, retry, rollback). The
// consumer should reload state and re-read; the stream carries a
// stream_resync chunk describing the new baseline.
type StreamTruncatedError struct {
	StreamID        string
	TruncatedAtStep int
	AtSequence      int64
}

func (e *StreamTruncatedError) Error() string {
	return fmt.Sprintf("helix: stream %s was truncated past step %d at sequence %d while being read: reload state and read again",
		e.StreamID, e.TruncatedAtStep, e.AtSequence)
}

// Is reports whether target is ErrStreamTruncated.
func (e *StreamTruncatedError) Is(target error) bool { return target == ErrStreamTruncated }

// StreamFailedError is returned by a stream reader after the last chunk of a
// stream that was marked failed.
type StreamFailedError struct {
	StreamID string
	Message  string
}

func (e *StreamFailedError) Error() string {
	return fmt.Sprintf("helix: stream %s failed: %s", e.StreamID, e.Message)
}

// Is reports whether target is ErrStreamFailed.
func (e *StreamFailedError) Is(target error) bool { return target == ErrStreamFailed }

// StreamNotActiveError is returned when writing to a stream that has ended or
// failed. A new turn reactivates its session's stream first.
type StreamNotActiveError struct {
	StreamID string
	Status   StreamStatus
}

func (e *StreamNotActiveError) Error() string {
	return fmt.Sprintf("helix: stream %s is %s and accepts no chunks: reactivate it before writing", e.StreamID, e.Status)
}

// Is reports whether target is ErrStreamNotActive.
func (e *StreamNotActiveError) Is(target error) bool { return target == ErrStreamNotActive }

// Error codes carried by error chunks, [ModelError] and [AgentResult.ErrorCode].
const (
	CodeProviderRateLimited    = "provider_rate_limited"
	CodeProviderOverloaded     = "provider_overloaded"
	CodeProviderAuth           = "provider_auth"
	CodeProviderInvalidRequest = "provider_invalid_request"
	CodeProviderTimeout        = "provider_timeout"
	CodeProviderUnavailable    = "provider_unavailable"
	CodeProviderContentFilter  = "provider_content_filter"
	CodeProviderError          = "provider_error"
	CodeMaxStepsExceeded       = "max_steps_exceeded"
	CodeModelError             = "model_error"
	CodeInternal               = "internal_error"
	// Client-executed tool error codes (tool_end.errorCode).
	CodeClientToolTimeout = "client_tool_timeout"
	CodeAborted           = "aborted"
	CodeClientToolError   = "client_tool_error"
)

// ModelError is a classified model failure. Code is one of the Code*
// constants; Recoverable says whether retrying the same request may succeed
// (rate limits, overload, timeouts). The runtime copies both into the error
// chunk it emits.
type ModelError struct {
	Code        string
	Message     string
	Recoverable bool
	// StatusCode is the provider's HTTP status, when there was one.
	StatusCode int
}

func (e *ModelError) Error() string {
	if e.StatusCode != 0 {
		return fmt.Sprintf("model error %s (HTTP %d): %s", e.Code, e.StatusCode, e.Message)
	}
	return fmt.Sprintf("model error %s: %s", e.Code, e.Message)
}
