package store

import (
	"encoding/json"
	"fmt"
	"time"

	helix "github.com/helix-agents/helix-dbos"
)

// SessionState is the stored state of one session.
type SessionState struct {
	// Identity.
	SessionID       string `json:"sessionId"`
	AgentType       string `json:"agentType"`
	StreamID        string `json:"streamId"`
	ParentSessionID string `json:"parentSessionId,omitempty"`
	RootSessionID   string `json:"rootSessionId"`

	// Status and progress.
	Status       helix.SessionStatus `json:"status"`
	StepCount    int                 `json:"stepCount"`
	MessageCount int                 `json:"messageCount"`
	CustomState  json.RawMessage     `json:"customState"`
	Output       json.RawMessage     `json:"output,omitempty"`
	Error        string              `json:"error,omitempty"`
	// FailureReason discriminates failures the runtime must treat specially,
	// e.g. helix.FailureReasonParentSuspended (the γ-cascade).
	FailureReason    string            `json:"failureReason,omitempty"`
	InterruptContext *InterruptContext `json:"interruptContext,omitempty"`

	// Human-in-the-loop suspension state.
	PendingClientToolCalls    map[string]PendingClientToolCall `json:"pendingClientToolCalls,omitempty"`
	SuspendedAwaitingChildren map[string]SuspendedChildWait    `json:"suspendedAwaitingChildren,omitempty"`
	SuspendedStepID           string                           `json:"suspendedStepId,omitempty"`
	// SuspendedStep is the engine's record of the suspended step (its model
	// answer and the results already known), opaque to the store.
	SuspendedStep json.RawMessage `json:"suspendedStep,omitempty"`
	// CompletedClientToolCalls maps tool call IDs already resolved to the
	// time (Unix ms) they were: answered at t > 0, timed out at -t; root
	// sessions only. It makes "already completed" durable.
	CompletedClientToolCalls map[string]int64 `json:"completedClientToolCalls,omitempty"`
	// ClientToolCallOwnership maps pending tool call IDs to the session that
	// owns them; root sessions only, so submissions on the root are routed.
	ClientToolCallOwnership map[string]string `json:"clientToolCallOwnership,omitempty"`

	// Durable interrupt flag (see SessionStore.SetInterruptFlag).
	InterruptRequested bool   `json:"interruptRequested,omitempty"`
	InterruptReason    string `json:"interruptReason,omitempty"`

	// Mode is write-once: the empty value means "not bound yet".
	Mode helix.SessionMode `json:"mode,omitempty"`
	// Version increases on every write (optimistic concurrency).
	Version     int64 `json:"version"`
	ResumeCount int   `json:"resumeCount"`

	// Checkpoint pointer: the most recently written checkpoint.
	CheckpointID     string     `json:"checkpointId,omitempty"`
	CheckpointedAt   *time.Time `json:"checkpointedAt,omitempty"`
	CheckpointSource string     `json:"checkpointSource,omitempty"`

	// User context.
	UserID         string            `json:"userId,omitempty"`
	Tags           []string          `json:"tags,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	TracingContext *TracingContext   `json:"tracingContext,omitempty"`
	ExpiresAt      *time.Time        `json:"expiresAt,omitempty"`

	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// IsRoot reports whether the session has no parent.
func (s *SessionState) IsRoot() bool { return s.ParentSessionID == "" }

// InterruptContext records why and where a session was interrupted.
type InterruptContext struct {
	Reason            string `json:"reason,omitempty"`
	PendingToolCallID string `json:"pendingToolCallId,omitempty"`
	PendingToolName   string `json:"pendingToolName,omitempty"`
	StepCount         int    `json:"stepCount"`
	Timestamp         int64  `json:"timestamp"` // Unix ms
}

// TracingContext keeps one trace per session across runs: every run span of
// the session has it as its remote parent (W3C trace and span IDs in hex).
type TracingContext struct {
	TraceID    string `json:"traceId"`
	RootSpanID string `json:"rootSpanId"`
	// Unsampled records a parent whose trace flags did not ask for
	// sampling (W3C traceparent flags 00); the zero value, as in contexts
	// stored before it existed, is sampled.
	Unsampled bool `json:"unsampled,omitempty"`
}

// PendingClientToolCall is a tool call waiting for a client submission: a
// client-executed tool's result or an approval decision. The entry lives in
// the owner session's PendingClientToolCalls from the step that suspended
// until the step commits with every call resolved.
type PendingClientToolCall struct {
	ToolCallID string               `json:"toolCallId"`
	ToolName   string               `json:"toolName"`
	Kind       helix.SubmissionKind `json:"kind"`
	Arguments  json.RawMessage      `json:"arguments,omitempty"`
	ApprovalID string               `json:"approvalId,omitempty"`
	// OutputSchema is the client tool's output schema, so any process can
	// validate a submitted result without the agent's definition (none for
	// an approval, which has no result to validate).
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	// Index is the call's position in the model's tool calls of its step.
	Index int `json:"index"`
	// OwnerSessionID is the session whose workflow waits for the submission.
	OwnerSessionID string `json:"ownerSessionId,omitempty"`
	// RunID and WorkflowID are the run waiting for the call now (a fresh
	// resume moves them to its own run).
	RunID      string `json:"runId,omitempty"`
	WorkflowID string `json:"workflowId,omitempty"`
	Step       int    `json:"step"`
	CreatedAt  int64  `json:"createdAt"`            // Unix ms of the durable suspension write
	DeadlineAt int64  `json:"deadlineAt,omitempty"` // Unix ms; 0 means no deadline
	// Submission is the answer, recorded once by SubmitToolResult (durable,
	// so a fresh resume finds answers given before it).
	Submission  *helix.ToolSubmission `json:"submission,omitempty"`
	SubmittedAt int64                 `json:"submittedAt,omitempty"`
	// SentTo is the workflow the submission's message was addressed to
	// (WorkflowID when it was recorded; a later resume moves WorkflowID).
	SentTo string `json:"sentTo,omitempty"`
	// TimedOutAt is set when the deadline passed before an answer.
	TimedOutAt int64 `json:"timedOutAt,omitempty"`
	// ConsumedAt is set when the waiting run took the outcome (its chunks
	// and usage rows are written): a later run does not write them again.
	ConsumedAt int64 `json:"consumedAt,omitempty"`
}

// Resolved reports whether the call has its answer or timed out.
func (p PendingClientToolCall) Resolved() bool { return p.Submission != nil || p.TimedOutAt != 0 }

// SuspendedChildWait records a sub-agent a suspended parent waits on.
type SuspendedChildWait struct {
	ParentToolCallID string `json:"parentToolCallId"`
	SubSessionID     string `json:"subSessionId"`
	AgentType        string `json:"agentType"`
	WorkflowID       string `json:"workflowId,omitempty"`
	// Companion is the name of a persistent companion the step waits for
	// (empty for a sub-agent).
	Companion string `json:"companion,omitempty"`
}

// CreateSessionParams describes a new session. SessionID and AgentType are
// required; the rest have defaults.
type CreateSessionParams struct {
	SessionID string
	AgentType string
	// StreamID defaults to the root session's ID: sub-agents write into their
	// root's stream. A session whose StreamID equals its SessionID owns its
	// stream: CreateSession registers it and DeleteSession removes it.
	StreamID        string
	ParentSessionID string
	// RootSessionID defaults to SessionID for a root session and to the
	// parent's root for a child.
	RootSessionID string
	// CustomState defaults to {}; it must be a JSON object.
	CustomState    json.RawMessage
	Mode           helix.SessionMode
	UserID         string
	Tags           []string
	Metadata       map[string]string
	TracingContext *TracingContext
	ExpiresAt      *time.Time
}

// StatusUpdate carries optional fields written together with a status.
type StatusUpdate struct {
	InterruptContext *InterruptContext
	Error            string
	FailureReason    string
	Output           json.RawMessage
}

// CASOptions refine CompareAndSetStatus.
type CASOptions struct {
	// ExpectedVersion, when non-zero, must also match.
	ExpectedVersion int64
	// Update, when set, is written with the new status (see UpdateStatus).
	Update *StatusUpdate
}

// CASResult reports the outcome of CompareAndSetStatus. On success NewVersion
// is the session's new version; on a mismatch CurrentStatus and
// CurrentVersion describe what was found.
type CASResult struct {
	OK             bool
	NewVersion     int64
	CurrentStatus  helix.SessionStatus
	CurrentVersion int64
}

// InterruptRequest is the durable interrupt flag as read by
// CheckInterruptFlag.
type InterruptRequest struct {
	Requested bool
	Reason    string
}

// GetMessagesOptions page through a session's messages. Limit defaults to
// DefaultMessagePageSize and is capped at MaxPageSize.
type GetMessagesOptions struct {
	Offset          int
	Limit           int
	ExcludeThinking bool
}

// Page sizes.
const (
	DefaultMessagePageSize    = 50
	DefaultCheckpointPageSize = 50
	MaxPageSize               = 1000
)

// MessagePage is one page of messages.
type MessagePage struct {
	Messages []helix.Message
	Total    int
	Offset   int
	Limit    int
	HasMore  bool
}

// Run is one execution of a session: a turn, a resume or a retry.
type Run struct {
	RunID         string          `json:"runId"`
	SessionID     string          `json:"sessionId"`
	Turn          int             `json:"turn"`
	Status        helix.RunStatus `json:"status"`
	StepCount     int             `json:"stepCount"`
	StartSequence int64           `json:"startSequence"`
	WorkflowID    string          `json:"workflowId,omitempty"`
	PreviousRunID string          `json:"previousRunId,omitempty"`
	Error         string          `json:"error,omitempty"`
	// ErrorCode classifies the failure of a failed run (a helix.Code*
	// value such as max_steps_exceeded or aborted); empty otherwise.
	ErrorCode string `json:"errorCode,omitempty"`
	// Admission is how the run is admitted through a queue; nil for a run
	// that starts at once.
	Admission   *Admission `json:"admission,omitempty"`
	StartedAt   time.Time  `json:"startedAt"`
	CompletedAt *time.Time `json:"completedAt,omitempty"`
	UpdatedAt   time.Time  `json:"updatedAt"`
	// AnsweredAt is when the run's last wait for human input ended (every
	// call answered, or timed out; for a run waiting for sub-agents, every
	// wait in its sub-agents) and the run went on in place; nil for a run
	// that never waited.
	AnsweredAt *time.Time `json:"answeredAt,omitempty"`
	// HibernatedAt is when the run, waiting for people, last hibernated
	// (no workflow runs it until a wake), nil when it is not hibernated
	// (or it ended: an aborted hibernated run is not woken again).
	HibernatedAt *time.Time `json:"hibernatedAt,omitempty"`
	// WakeAt is, while the run is hibernated, the earliest deadline of the
	// calls it waits for, when the engines' sweep wakes it; nil for none.
	WakeAt *time.Time `json:"wakeAt,omitempty"`
	// Wakes counts the run's wakes from hibernation: its workflow is
	// continuation Wakes of WorkflowID (WakeWorkflowID) when not 0.
	Wakes int `json:"wakes,omitempty"`
	// WokenAt is set from the run's last wake until its continuation
	// begins (an engine starts it within its recorded-run sweep
	// interval); nil otherwise.
	WokenAt *time.Time `json:"wokenAt,omitempty"`
}

// CurrentWorkflowID is the workflow that runs the run now, or ran it last:
// its own, or its last continuation after a wake from hibernation.
func (r *Run) CurrentWorkflowID() string {
	if r.Wakes > 0 {
		return WakeWorkflowID(r.WorkflowID, r.Wakes)
	}
	return r.WorkflowID
}

// WakeWorkflowID is the workflow ID of continuation n (1, 2, …) of the run
// whose workflow is origin (helix.wake_workflow_id in SQL).
func WakeWorkflowID(origin string, n int) string { return fmt.Sprintf("%s-wake-%d", origin, n) }

// Admission is how a run is admitted through a queue (engine.Config.Queue):
// the DBOS queue, the run's partition and its priority.
type Admission struct {
	Queue        string `json:"queue"`
	PartitionKey string `json:"partitionKey,omitempty"`
	Priority     int    `json:"priority,omitempty"`
}

// CreateRunParams describes a new run. Turn 0 means "the next turn" (one more
// than the session's latest), which keeps turns contiguous.
type CreateRunParams struct {
	RunID         string
	SessionID     string
	Turn          int
	Status        helix.RunStatus // default running
	StartSequence int64
	WorkflowID    string
	PreviousRunID string
	// Admission is recorded with the run (nil: none).
	Admission *Admission
}

// RunUpdate carries optional fields written with a run status.
type RunUpdate struct {
	StepCount *int
	Error     string
	// ErrorCode classifies a failure (see Run.ErrorCode).
	ErrorCode string
}

// Checkpoint is a snapshot of a session after a step. It references the
// message log by MessageCount (messages [0, MessageCount)) instead of copying
// it.
type Checkpoint struct {
	ID           string `json:"id"`
	SessionID    string `json:"sessionId"`
	RunID        string `json:"runId,omitempty"`
	StepCount    int    `json:"stepCount"`
	MessageCount int    `json:"messageCount"`
	// StreamSequence is the stream's latest sequence when the checkpoint was
	// written, or nil when unknown.
	StreamSequence *int64              `json:"streamSequence,omitempty"`
	Status         helix.SessionStatus `json:"status"`
	CustomState    json.RawMessage     `json:"customState"`
	Output         json.RawMessage     `json:"output,omitempty"`
	CreatedAt      time.Time           `json:"createdAt"`
}

// CheckpointParams describes a checkpoint to write.
type CheckpointParams struct {
	// ID defaults to helix.GenerateCheckpointID(sessionID, StepCount). A
	// given ID must be one of the session's own checkpoint IDs, in the
	// form helix.FormatCheckpointID writes (the store keeps a checkpoint
	// by its parts); any other is refused.
	ID        string
	RunID     string
	StepCount int
	// MessageCount < 0 means "the session's message count at write time"
	// (after any messages appended in the same operation).
	MessageCount   int
	StreamSequence *int64
	// Status defaults to the session's status; CustomState to its custom
	// state at write time (after staged changes are promoted).
	Status      helix.SessionStatus
	CustomState json.RawMessage
	Output      json.RawMessage
	// Source records how the checkpoint was written ("staging", "save", ...).
	Source string
}

// ListOptions page through a list.
type ListOptions struct {
	Offset int
	Limit  int
}

// CheckpointPage is one page of checkpoints, oldest first.
type CheckpointPage struct {
	Items   []Checkpoint
	Total   int
	HasMore bool
}

// SubSessionRef is a parent session's record of one of its sub-agent
// sessions.
type SubSessionRef struct {
	SubSessionID        string                 `json:"subSessionId"`
	AgentType           string                 `json:"agentType"`
	ParentToolCallID    string                 `json:"parentToolCallId"`
	Status              helix.SubSessionStatus `json:"status"`
	Mode                helix.SubSessionMode   `json:"mode"`
	Name                string                 `json:"name,omitempty"`
	CompletionDelivered bool                   `json:"completionDelivered"`
	StartedAt           time.Time              `json:"startedAt"`
	CompletedAt         *time.Time             `json:"completedAt,omitempty"`
}

// SubSessionRefUpdate changes a sub-session reference; nil fields are left
// alone.
type SubSessionRefUpdate struct {
	SubSessionID        string
	Status              *helix.SubSessionStatus
	CompletionDelivered *bool
}

// StagedChange is one tool's staged custom-state patches within a step.
type StagedChange struct {
	ChangeID string
	Patches  []helix.PatchOp
}

// CommitParams describe the atomic per-step commit of
// SaveStateAndPromoteStaging.
type CommitParams struct {
	// State is the session state to write (its mutable fields); State.Version
	// is ignored, see ExpectedVersion.
	State *SessionState
	// ExpectedVersion, when non-zero, must equal the stored version or the
	// commit fails with *helix.StaleStateError and writes nothing.
	ExpectedVersion int64
	// AppendMessages are appended to the message log.
	AppendMessages []helix.Message
	// PromoteStepID, when set, applies that step's staged changes to the
	// custom state (after State.CustomState) and deletes them.
	PromoteStepID string
	// Checkpoint, when set, is written last and becomes the session's
	// checkpoint pointer.
	Checkpoint *CheckpointParams
}

// CommitResult reports what a commit wrote.
type CommitResult struct {
	State        *SessionState
	CheckpointID string
	// Warnings lists staged patch operations that could not be applied.
	Warnings []string
}

// CloneParams describe a branch: a new session seeded from another session's
// checkpoint.
type CloneParams struct {
	FromSessionID string
	// CheckpointID defaults to the source's latest checkpoint; without one,
	// the source's current messages and state are copied.
	CheckpointID string
	ToSessionID  string
	// AgentType defaults to the source's agent type.
	AgentType string
}

// ListSessionsOptions filter and page ListSessions. Results are newest first.
type ListSessionsOptions struct {
	Status    helix.SessionStatus
	AgentType string
	UserID    string
	RootsOnly bool
	Offset    int
	Limit     int
}

// SessionSummary is one row of ListSessions.
type SessionSummary struct {
	SessionID       string              `json:"sessionId"`
	AgentType       string              `json:"agentType"`
	ParentSessionID string              `json:"parentSessionId,omitempty"`
	Status          helix.SessionStatus `json:"status"`
	StepCount       int                 `json:"stepCount"`
	MessageCount    int                 `json:"messageCount"`
	UserID          string              `json:"userId,omitempty"`
	CreatedAt       time.Time           `json:"createdAt"`
	UpdatedAt       time.Time           `json:"updatedAt"`
}

// SessionCursor is a position in the keyset list of [PageSessionsOptions]:
// the creation time and ID of a session. The list is ordered by both, so a
// cursor stays valid, and a page starts exactly after it, while sessions
// are created and deleted around it.
type SessionCursor struct {
	CreatedAt time.Time
	SessionID string
}

// DefaultSessionPageSize is the page size of PageSessions.
const DefaultSessionPageSize = 50

// PageSessionsOptions filter and position a page of PageSessions, a keyset
// list of sessions, newest first (by creation time, then ID). Only the
// filters given become conditions, so each combination is planned for its
// own index.
type PageSessionsOptions struct {
	// Status, AgentType: sessions with that status, of that agent (empty:
	// any).
	Status    helix.SessionStatus
	AgentType string
	// UserID keeps the sessions of that owner (empty: any): root sessions
	// with that user ID and, with IncludeSubSessions, the sub-agent and
	// companion sessions of such roots (a sub-session belongs to its root's
	// owner, whatever its own user ID).
	UserID string
	// CreatedFrom and CreatedBefore bound the creation time: from
	// inclusive, before exclusive (nil: unbounded).
	CreatedFrom   *time.Time
	CreatedBefore *time.Time
	// IDPrefix keeps the sessions whose ID starts with it (an exact ID
	// matches itself and the IDs it prefixes). %, _ and \ match themselves.
	IDPrefix string
	// IncludeSubSessions lists sub-agent and companion sessions too; by
	// default only root sessions.
	IncludeSubSessions bool
	// After starts the page at the first session older than the cursor
	// (the SessionPage.Next of the page before); Before ends it at the last
	// session newer than the cursor (a SessionPage.Prev). At most one; none
	// is the first (newest) page.
	After  *SessionCursor
	Before *SessionCursor
	// Limit defaults to DefaultSessionPageSize and is capped at MaxPageSize.
	Limit int
}

// SessionPage is one page of PageSessions.
type SessionPage struct {
	// Sessions are newest first.
	Sessions []SessionSummary
	// Next is the position to pass as After for the older sessions: set
	// when the page was cut short, or was reached with Before. Prev, to
	// pass as Before for the newer sessions, is its mirror: set when the
	// page was reached with After, or with Before and cut short; nil on
	// the first page. Both are nil on an empty page.
	Next *SessionCursor
	Prev *SessionCursor
}

// SubSessionNode is a sub-agent or companion session in a session's tree
// (SubSessionTree), with the sessions it started, in the order they were
// started.
type SubSessionNode struct {
	SubSessionRef
	// Children is never nil (it encodes as []).
	Children []SubSessionNode `json:"children"`
}

// SubSessionTree is the tree of the sessions a session started, theirs
// nested under them: its first sessions depth first, the children of each
// session in the order they were started.
type SubSessionTree struct {
	// Children are the session's own sub-sessions (never nil).
	Children []SubSessionNode
	// Truncated is true when the tree holds more sessions than were read.
	Truncated bool
}

// Usage source types.
const (
	UsageModel            = "model"
	UsageTool             = "tool"
	UsageSubAgent         = "subagent"
	UsageClientToolWaitMS = "client_tool_wait_ms"
)

// UsageRecord is one usage row: a model call, a tool call, or a client-tool
// wait. Key makes recording idempotent per session.
type UsageRecord struct {
	SessionID        string    `json:"sessionId"`
	RunID            string    `json:"runId,omitempty"`
	Step             int       `json:"step"`
	SourceType       string    `json:"sourceType"`
	SourceName       string    `json:"sourceName,omitempty"`
	InputTokens      int       `json:"inputTokens,omitempty"`
	OutputTokens     int       `json:"outputTokens,omitempty"`
	CachedTokens     int       `json:"cachedTokens,omitempty"`
	CacheWriteTokens int       `json:"cacheWriteTokens,omitempty"`
	Value            *float64  `json:"value,omitempty"`
	DurationMS       *int64    `json:"durationMs,omitempty"`
	Success          bool      `json:"success"`
	Key              string    `json:"key"`
	CreatedAt        time.Time `json:"createdAt"`
}
