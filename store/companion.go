package store

import (
	"context"
	"encoding/json"

	helix "github.com/helix-agents/helix-dbos"
)

// CompanionStore persists persistent companions: long-lived child sessions
// ({parentSessionId}-agent-{name}) a parent spawns, consults again and
// terminates, and the inbox of a running companion. Each method locks the
// root session, then the parent, then the child, as every multi-row
// transaction of the store does.
type CompanionStore interface {
	// DispatchCompanion performs the durable part of spawnAgent or
	// sendMessage and says what the caller does next (see
	// CompanionAction): a new companion session and its first run; a
	// message into a running companion's inbox; a finished companion
	// consulted again (its session reopened with its memory: CAS
	// completed → active, a dangling __finish__ healed, the message
	// appended once, the step count back to 0, a run whose workflow is
	// {childSessionId}-continue-{toolCallId}, recorded in the child's
	// metadata under MetaWorkflowID); an interrupted companion continued;
	// a failed or terminated one re-spawned fresh. A dispatch replayed for
	// the same tool call finds the marker and returns the same run without
	// writing. Not idempotent otherwise: durable callers run it in their
	// step transaction.
	DispatchCompanion(ctx context.Context, p CompanionDispatchParams) (*CompanionDispatch, error)

	// Companion returns a parent's companion by name, with the child's
	// session (nil when no such companion). Read-only.
	Companion(ctx context.Context, parentSessionID, name string) (*SubSessionRef, *SessionState, error)

	// TerminateCompanion ends a companion for good: its session failed
	// with failureReason terminated, its current run failed, its reference
	// terminated. It returns the run's workflow ID (to cancel) or "" when
	// the companion had already ended. Idempotent.
	TerminateCompanion(ctx context.Context, parentSessionID, name, reason string) (string, error)

	// DeliverCompletions appends, as user messages of the parent, the
	// outcomes of its companions that ended and were not delivered yet, and
	// marks them delivered (completionDelivered), in one transaction: each
	// outcome is delivered exactly once. message renders one outcome.
	DeliverCompletions(ctx context.Context, parentSessionID string, message func(ref SubSessionRef, child *SessionState) helix.Message) (int, error)

	// MarkDelivered marks a companion's outcome delivered (the parent got
	// it inline, from a blocking wait). Idempotent.
	MarkDelivered(ctx context.Context, parentSessionID, childSessionID string) error
}

// Child-session metadata keys of companion dispatches: the workflow the
// last dispatch started and the tool call that dispatched it (the replay
// marker: a dispatch replayed for the same call writes nothing again).
const (
	MetaWorkflowID   = "dbosWorkflowId"
	MetaDispatchCall = "helix.dispatchToolCallId"
)

// Companion dispatch kinds.
const (
	DispatchSpawn = "spawn"
	DispatchSend  = "send"
)

// CompanionDispatchParams describe a spawnAgent or sendMessage call.
type CompanionDispatchParams struct {
	// Kind is DispatchSpawn or DispatchSend.
	Kind            string
	ParentSessionID string
	ParentRunID     string
	ParentAgentType string
	ParentStep      int
	ToolCallID      string
	// AgentType is the companion's type (spawn; for send it is read from
	// the child). Name is the companion's name; empty on a spawn means
	// {AgentType}-{n}, n counting the parent's companions of that type.
	AgentType string
	Name      string
	Message   string
	// InitialState seeds a new or re-spawned companion.
	InitialState json.RawMessage
	// Blocking records that the parent receives the outcome inline (it is
	// not delivered again as a message).
	Blocking bool
	// RunID is the ID of the run to create, if one is created.
	RunID string
	// TracingContext is stored with a new companion session (a spawn):
	// its runs continue that trace (the parent's, under the spawning
	// call's span).
	TracingContext *TracingContext
	// Metadata is merged into the child's metadata (the parent link).
	Metadata map[string]string
}

// Companion actions.
const (
	// ActionStart: run RunID with workflow WorkflowID.
	ActionStart = "start"
	// ActionDelivered: the message is in the running companion's inbox.
	ActionDelivered = "delivered"
	// ActionRefused: Error says why nothing was done.
	ActionRefused = "refused"
)

// CompanionDispatch is what DispatchCompanion did.
type CompanionDispatch struct {
	Action     string `json:"action"`
	SessionID  string `json:"sessionId,omitempty"`
	Name       string `json:"name,omitempty"`
	AgentType  string `json:"agentType,omitempty"`
	RunID      string `json:"runId,omitempty"`
	WorkflowID string `json:"workflowId,omitempty"`
	// How names the path: "spawned", "continued", "resumed", "respawned".
	How   string `json:"how,omitempty"`
	Error string `json:"error,omitempty"`
}

// FailureReasonTerminated marks a companion ended by terminateChild.
const FailureReasonTerminated = "terminated"
