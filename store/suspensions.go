package store

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"time"

	helix "github.com/helix-agents/helix-dbos"
)

// SuspensionStore persists human-in-the-loop suspensions: a step whose tool
// calls wait for a client result or an approval, the submissions that answer
// them, and how each wait ended. Every method locks the root session before
// a sub-agent session and a session before its stream, the order every
// multi-row transaction of the store follows.
type SuspensionStore interface {
	// SuspendStep records a step that waits: its pending calls (on the
	// session, with their ownership on the root session), the engine's
	// record of the step, the step's chunks and usage rows, and the run
	// status suspended_client_tool. When the interrupt flag is set it is
	// consumed and the session and run end interrupted instead, the
	// pending calls kept for a later resume. The session must be active.
	// Not idempotent: durable callers run it in their step transaction.
	SuspendStep(ctx context.Context, p SuspendParams) (*SuspendResult, error)

	// ResolveToolCall records how the wait for one pending call ended, as
	// the waiting run sees it: the submission recorded for it, or (with
	// TimedOut) its deadline passing; it appends the chunks and usage rows
	// the engine builds for that outcome, and consumes the interrupt flag
	// (ending the session and run interrupted). Not idempotent: durable
	// callers run it in their step transaction.
	ResolveToolCall(ctx context.Context, p ResolveParams) (*ResolveResult, error)

	// RecordSubmission records the answer to a pending call, given on the
	// root session: it validates the submission against the call (kind,
	// the client tool's output schema) and the session (it must be the
	// root, the call must be routed to a session that is active and waits
	// for it), stores it on the call, marks the call completed on the root
	// session, records the client_tool_wait_ms usage row and, when no call
	// of the run is left unanswered, moves the run back to running. A call
	// answered before is reported with AlreadyCompleted and nothing is
	// written. Rejections are *helix.SubmissionError. Concurrent
	// submissions for one call serialize on the root row: exactly one
	// records.
	RecordSubmission(ctx context.Context, rootSessionID string, sub helix.ToolSubmission) (*RecordedSubmission, error)

	// RetargetPending moves a session's pending calls to a new run and
	// workflow (a fresh resume of an interrupted, suspended session) and
	// returns the IDs of those still unanswered, by step and position.
	// Idempotent.
	RetargetPending(ctx context.Context, sessionID, runID, workflowID string) ([]string, error)

	// SaveSuspendedStep replaces the engine's record of the session's
	// suspended step (a result known since, such as an approved tool's,
	// so a fresh run does not run it again). Idempotent.
	SaveSuspendedStep(ctx context.Context, sessionID string, record json.RawMessage) error

	// ListPendingCalls returns the calls that wait in a session and in its
	// sub-agents' sessions (its descendants), by step and position.
	// Read-only.
	ListPendingCalls(ctx context.Context, sessionID string) ([]PendingClientToolCall, error)

	// DiscardPending drops a session's pending calls, their ownership and
	// completion marks on the root session and the suspended-step record,
	// and returns the calls dropped (a retry starts over from a
	// checkpoint). Idempotent.
	DiscardPending(ctx context.Context, sessionID string) ([]PendingClientToolCall, error)
}

// PendingCall is one call SuspendStep records, with its deadline.
type PendingCall struct {
	Call PendingClientToolCall
	// Timeout, when positive, sets the call's deadline that long after the
	// suspension is written.
	Timeout time.Duration
}

// SuspendParams describe a step that suspends.
type SuspendParams struct {
	SessionID string
	RunID     string
	// StepID names the suspended step ("{runId}:{step}").
	StepID string
	// Pending are the calls that wait (OwnerSessionID, RunID, Step and
	// CreatedAt are filled in).
	Pending []PendingCall
	// Record is the engine's record of the step (SessionState.SuspendedStep).
	Record json.RawMessage
	// Ahead are appended first, as they are (the step's own chunks that
	// wait for the suspension's transaction: its model call's), in the
	// same append as Chunks, so that their chunks share rows.
	Ahead []ChunkWrite
	// Chunks are appended (the results already known, approval requests).
	Chunks []helix.Chunk
	// Usage rows are recorded for the session (empty run ID or zero step:
	// the commit's).
	Usage []UsageRecord
	Step  int
	// Interrupted returns the chunk appended when the step ends the run
	// interrupted instead.
	Interrupted func(reason string) helix.Chunk
}

// SuspendResult reports what SuspendStep wrote.
type SuspendResult struct {
	// Pending are the calls as stored (with their creation time and
	// deadline), in the model's order.
	Pending []PendingClientToolCall
	// Interrupted is set when the interrupt flag ended the run instead.
	Interrupted     bool
	InterruptReason string
}

// ResolveParams identify the wait that ended.
type ResolveParams struct {
	SessionID  string
	RunID      string
	Step       int
	ToolCallID string
	// TimedOut reports that the wait ended at the call's deadline without
	// a message.
	TimedOut bool
	// Outcome returns the chunks and usage rows of the call's outcome. It
	// is called once per call, when the call is resolved and its outcome
	// was not taken before (ConsumedAt), not at all while the call is
	// unanswered (the wake was for an interrupt).
	Outcome func(call PendingClientToolCall) ([]helix.Chunk, []UsageRecord)
	// Interrupted returns the chunk appended when the interrupt flag ends
	// the run.
	Interrupted func(reason string) helix.Chunk
	// LeaveInterrupt leaves the interrupt flag to the step's commit, which
	// runs in the same transaction after the resolution.
	LeaveInterrupt bool
}

// ResolveResult reports the state of the call after ResolveToolCall.
type ResolveResult struct {
	// Call is the pending call as stored now: Submission or TimedOutAt is
	// set when it is resolved.
	Call PendingClientToolCall
	// Interrupted is set when the interrupt flag was consumed: the session
	// and the run ended interrupted.
	Interrupted     bool
	InterruptReason string
	// Unresolved lists the run's calls still waiting, by step and position.
	Unresolved []string
}

// RecordedSubmission reports what RecordSubmission did.
type RecordedSubmission struct {
	// Call is the pending call, with the submission recorded on it.
	Call PendingClientToolCall
	// AlreadyCompleted: the call had been answered before; nothing was
	// written and no message must be sent.
	AlreadyCompleted bool
	// Unresolved lists the run's calls still waiting after this one.
	Unresolved []string
}

// SortPendingCalls orders pending calls by step, then position in the step.
func SortPendingCalls(calls []PendingClientToolCall) {
	slices.SortFunc(calls, func(a, b PendingClientToolCall) int {
		return cmp.Or(cmp.Compare(a.Step, b.Step), cmp.Compare(a.Index, b.Index), cmp.Compare(a.ToolCallID, b.ToolCallID))
	})
}

// CascadeStore carries interrupts and failures through a conversation's
// tree of sessions: a parent's interrupt reaches its sub-agents, and a
// parent that stops while sub-agents run records them for its resume (the
// specification's γ-cascade).
type CascadeStore interface {
	// InterruptTree sets the durable interrupt flag of a session and of
	// every active session below it, and returns their IDs. Idempotent.
	InterruptTree(ctx context.Context, sessionID, reason string) ([]string, error)

	// ListSubtree returns a session and its descendants, parents first.
	// Read-only.
	ListSubtree(ctx context.Context, sessionID string) ([]*SessionState, error)

	// InterruptForChildren ends a parent's run interrupted while children
	// of its step were stopped by the same interrupt: when the parent's
	// flag is set it consumes it, records the step (the engine's record,
	// and the children awaited), marks the ephemeral children failed with
	// failureReason parent_suspended (their references failed; the
	// parent's resume re-spawns them), leaves persistent companions
	// interrupted (their references interrupted; the resume continues
	// them), and ends the session and run interrupted. A child that cannot
	// be failed (it ended meanwhile) gets its reference interrupted; the
	// resume reads its outcome. Without the flag it writes nothing
	// and reports Interrupted false (the children stopped on their own).
	// Not idempotent: durable callers run it in their step transaction.
	InterruptForChildren(ctx context.Context, p InterruptForChildrenParams) (*InterruptForChildrenResult, error)

	// SaveChildWait records that a step of an active session waits for
	// its children (a queued run's segment that ended while its sub-agents
	// run): the engine's record of the step and the children awaited, which
	// the run's next execution reads back (SessionState.SuspendedStep and
	// SuspendedAwaitingChildren). It changes no status. Idempotent.
	SaveChildWait(ctx context.Context, p SaveChildWaitParams) error

	// RespawnChild gives a child failed with parent_suspended a fresh run
	// from scratch: its waiting calls dropped, its messages back to the
	// first KeepMessages, its custom state reset, status active, reference
	// running, and a new run record with the given IDs. Not idempotent:
	// durable callers run it in their step transaction.
	RespawnChild(ctx context.Context, p RespawnParams) (*Run, error)
}

// InterruptForChildrenParams describe a parent step stopped with children
// in flight.
type InterruptForChildrenParams struct {
	SessionID string
	RunID     string
	StepID    string
	Step      int
	// Record is the engine's record of the step (SessionState.SuspendedStep).
	Record json.RawMessage
	// Children are the children the step waits for, by parent tool call ID.
	Children map[string]SuspendedChildWait
	// Interrupted returns the run_interrupted chunk.
	Interrupted func(reason string) helix.Chunk
}

// SaveChildWaitParams is a step that waits for its children.
type SaveChildWaitParams struct {
	SessionID string
	StepID    string
	// Record is the engine's record of the step (SessionState.SuspendedStep).
	Record json.RawMessage
	// Children are the children the step waits for, by parent tool call ID.
	Children map[string]SuspendedChildWait
}

// InterruptForChildrenResult reports whether the parent ended interrupted.
type InterruptForChildrenResult struct {
	Interrupted     bool
	InterruptReason string
}

// RespawnParams describe a child's fresh run.
type RespawnParams struct {
	SessionID    string
	RunID        string
	WorkflowID   string
	KeepMessages int
	CustomState  json.RawMessage
}
