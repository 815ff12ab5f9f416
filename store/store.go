package store

import (
	"context"
	"time"

	helix "github.com/helix-agents/helix-dbos"
)

// SessionStore is the session-centric state store of the specification's
// SessionStateStore. All implementations must pass store/storetest.
//
// Errors: a missing session is a *helix.NotFoundError (errors.Is
// helix.ErrNotFound); a lost optimistic-concurrency race is a
// *helix.StaleStateError.
type SessionStore interface {
	Sessions
	Messages
	CustomState
	Interrupts
	Runs
	Checkpoints
	SubSessions
	Staging
	Usage
}

// Sessions is the session lifecycle and state.
type Sessions interface {
	// CreateSession atomically creates a session and, when it owns its
	// stream (StreamID == SessionID), registers the stream.
	//
	// Exactly one of any number of concurrent calls with the same ID wins;
	// the others get *helix.SessionExistsError. A retry after a lost
	// acknowledgement also gets *helix.SessionExistsError: callers that
	// need retry-idempotency compare the loaded state.
	CreateSession(ctx context.Context, p CreateSessionParams) (*SessionState, error)

	// SessionExists reports whether the session exists. Read-only.
	SessionExists(ctx context.Context, sessionID string) (bool, error)

	// LoadState returns the session's state. Read-only.
	LoadState(ctx context.Context, sessionID string) (*SessionState, error)

	// SaveState writes the mutable fields of state (everything except
	// identity, messages, counters with their own primitives — message
	// count, resume count — and the interrupt flag) and bumps the version.
	//
	// With expectedVersion != 0 the write is a CAS: on a mismatch nothing is
	// written and *helix.StaleStateError is returned; a retry after a lost
	// acknowledgement therefore fails stale and the caller reloads. With 0
	// the last writer wins. Mode is write-once: changing a bound mode fails.
	SaveState(ctx context.Context, state *SessionState, expectedVersion int64) (*SessionState, error)

	// UpdateStatus sets the status (no CAS) with optional fields, bumping the
	// version. Idempotent: repeating it writes the same values.
	UpdateStatus(ctx context.Context, sessionID string, status helix.SessionStatus, u *StatusUpdate) error

	// CompareAndSetStatus atomically moves the session to newStatus if its
	// status is one of expected (and, when set, its version matches). A
	// mismatch is reported in the result, not as an error. Used to prevent
	// double starts and double resumes: of concurrent callers moving from the
	// same status, exactly one succeeds. A retry after a lost acknowledgement
	// reports a mismatch (the status already moved).
	CompareAndSetStatus(ctx context.Context, sessionID string, expected []helix.SessionStatus, newStatus helix.SessionStatus, opts *CASOptions) (CASResult, error)

	// SaveStateAndPromoteStaging is the atomic per-step commit: state,
	// appended messages, promotion of the step's staged changes and the
	// checkpoint (which becomes the session's checkpoint pointer), in one
	// transaction. On any failure (including *helix.StaleStateError) nothing
	// is written. With an expected version a retry after a lost
	// acknowledgement fails stale rather than applying twice; durable callers
	// run it inside their step transaction so it is never retried blindly.
	SaveStateAndPromoteStaging(ctx context.Context, p CommitParams) (*CommitResult, error)

	// IncrementStepCount atomically increments and returns the step count.
	// Not idempotent: a retry increments again.
	IncrementStepCount(ctx context.Context, sessionID string) (int, error)

	// IncrementResumeCount atomically increments and returns the resume
	// count (used to derive unique resume workflow IDs). Not idempotent.
	IncrementResumeCount(ctx context.Context, sessionID string) (int, error)

	// PatchMetadata sets the given metadata keys (a nil value deletes the
	// key) and returns the resulting metadata. Idempotent.
	PatchMetadata(ctx context.Context, sessionID string, patch map[string]*string) (map[string]string, error)

	// CloneSession creates a new session from a checkpoint of another one
	// (branching): messages up to the checkpoint's message count, its custom
	// state, status active, a fresh stream. Exactly-one-wins like
	// CreateSession.
	CloneSession(ctx context.Context, p CloneParams) (*SessionState, error)

	// DeleteSession removes the session, its descendants (sub-agent sessions
	// whose parent chain leads to it) and everything they own: messages,
	// runs, checkpoints, sub-session references, staged changes, usage and
	// the streams they own. Nothing else is touched. Deleting a missing
	// session returns *helix.NotFoundError.
	DeleteSession(ctx context.Context, sessionID string) error

	// ListSessions lists sessions, newest first. Read-only.
	ListSessions(ctx context.Context, opts ListSessionsOptions) ([]SessionSummary, error)
}

// Messages is the append-only message log of a session.
type Messages interface {
	// AppendMessages appends to the log and returns the new message count.
	// Concurrent appenders are serialized (no lost or interleaved batch).
	// Not idempotent: durable callers append inside their step transaction.
	AppendMessages(ctx context.Context, sessionID string, msgs []helix.Message) (int, error)

	// GetMessages returns one page of messages, oldest first. Read-only.
	GetMessages(ctx context.Context, sessionID string, opts *GetMessagesOptions) (*MessagePage, error)

	// GetMessageCount returns the number of messages. Read-only.
	GetMessageCount(ctx context.Context, sessionID string) (int, error)

	// TruncateMessages keeps the first count messages (recovery and retry
	// paths only). Checkpoints that reference removed messages are deleted
	// and the checkpoint pointer falls back to the newest remaining one.
	// Idempotent.
	TruncateMessages(ctx context.Context, sessionID string, count int) error
}

// CustomState merges concurrent custom-state changes.
type CustomState interface {
	// MergeCustomState applies RFC 6902 patches to the custom state
	// atomically. Concurrent merges are serialized: appends ("add" at
	// "/path/-") compose, replaces are last-write-wins. Operations that
	// cannot apply (e.g. removing a missing path) are skipped and reported
	// as warnings. Not idempotent for appends.
	MergeCustomState(ctx context.Context, sessionID string, patches []helix.PatchOp) (warnings []string, err error)
}

// Interrupts is the durable interrupt flag, written by any process and
// observed by the run loop at the top of every step. It never bumps the
// session version.
type Interrupts interface {
	// SetInterruptFlag requests an interrupt. Idempotent (the latest reason
	// wins).
	SetInterruptFlag(ctx context.Context, sessionID, reason string) error
	// CheckInterruptFlag atomically reads and clears the flag: of concurrent
	// checkers exactly one sees a given request.
	CheckInterruptFlag(ctx context.Context, sessionID string) (InterruptRequest, error)
	// ClearInterruptFlag clears the flag. Idempotent.
	ClearInterruptFlag(ctx context.Context, sessionID string) error
}

// Runs tracks the runs of a session.
type Runs interface {
	// CreateRun records a run. Idempotent on RunID: a retry returns the
	// existing record. Turn 0 allocates the next turn atomically, so
	// concurrent creators get distinct, contiguous turns.
	CreateRun(ctx context.Context, p CreateRunParams) (*Run, error)
	// UpdateRunStatus sets a run's status; final statuses also stamp the
	// completion time (once) and end its hibernation (an ended run is
	// neither hibernated nor due to wake). Idempotent.
	UpdateRunStatus(ctx context.Context, runID string, status helix.RunStatus, u *RunUpdate) error
	// GetRun returns one run. Read-only.
	GetRun(ctx context.Context, runID string) (*Run, error)
	// GetCurrentRun returns the run with the highest turn, or
	// *helix.NotFoundError when the session has none. Read-only.
	GetCurrentRun(ctx context.Context, sessionID string) (*Run, error)
	// ListRuns returns every run of the session by turn. Read-only.
	ListRuns(ctx context.Context, sessionID string) ([]Run, error)
}

// Checkpoints stores checkpoints and the session's checkpoint pointer.
type Checkpoints interface {
	// CreateCheckpoint writes a checkpoint and points the session at it.
	// Idempotent on the checkpoint ID (a retry returns the stored one and
	// re-points the session at it).
	CreateCheckpoint(ctx context.Context, sessionID string, p CheckpointParams) (*Checkpoint, error)
	// GetCheckpoint returns one checkpoint. Read-only.
	GetCheckpoint(ctx context.Context, checkpointID string) (*Checkpoint, error)
	// GetLatestCheckpoint returns the most recently WRITTEN checkpoint — the
	// one the session's pointer references — not the one with the highest
	// step count (step counts restart every turn). Without a valid pointer
	// it falls back to the newest by write order; *helix.NotFoundError when
	// there is none. Read-only.
	GetLatestCheckpoint(ctx context.Context, sessionID string) (*Checkpoint, error)
	// ListCheckpoints pages through checkpoints, oldest first. Read-only.
	ListCheckpoints(ctx context.Context, sessionID string, opts *ListOptions) (*CheckpointPage, error)
	// GetCheckpointMessages returns the messages a checkpoint references.
	// Read-only.
	GetCheckpointMessages(ctx context.Context, checkpointID string) ([]helix.Message, error)
}

// SubSessions tracks a parent's sub-agent sessions.
type SubSessions interface {
	// AddSubSessionRefs records references. Idempotent per sub-session ID:
	// re-adding an existing reference leaves it unchanged (its mode and name
	// are write-once).
	AddSubSessionRefs(ctx context.Context, sessionID string, refs []SubSessionRef) error
	// UpdateSubSessionRef changes a reference's status or delivery flag;
	// moving to completed or failed stamps the completion time once.
	// Idempotent.
	UpdateSubSessionRef(ctx context.Context, sessionID string, u SubSessionRefUpdate) error
	// GetSubSessionRefs returns the references in creation order. Read-only.
	GetSubSessionRefs(ctx context.Context, sessionID string) ([]SubSessionRef, error)
}

// Staging holds the custom-state patches of a step's parallel tools until
// the step commits.
type Staging interface {
	// StageChanges stages one change (typically one tool call's patches).
	// Idempotent on changeID: restaging replaces the patches and keeps the
	// original order position.
	StageChanges(ctx context.Context, sessionID, stepID, changeID string, patches []helix.PatchOp) error
	// GetStagedChanges returns a step's staged changes in staging order.
	// Read-only.
	GetStagedChanges(ctx context.Context, sessionID, stepID string) ([]StagedChange, error)
	// HasStagedChanges reports whether a step has staged changes.
	HasStagedChanges(ctx context.Context, sessionID, stepID string) (bool, error)
	// PromoteStaging applies a step's staged changes to the custom state in
	// staging order and deletes them, atomically. Idempotent: a retry finds
	// nothing staged.
	PromoteStaging(ctx context.Context, sessionID, stepID string) (warnings []string, err error)
	// DiscardStaging deletes a step's staged changes. Idempotent.
	DiscardStaging(ctx context.Context, sessionID, stepID string) error
	// CleanupOrphanedStaging deletes staged changes older than the given age
	// and returns how many it removed. Idempotent.
	CleanupOrphanedStaging(ctx context.Context, olderThan time.Duration) (int, error)
}

// Usage records token usage, tool calls and client-tool waits.
type Usage interface {
	// RecordUsage inserts usage rows. Idempotent on (SessionID, Key).
	RecordUsage(ctx context.Context, rows []UsageRecord) error
	// ListUsage returns a session's usage rows in insertion order. Read-only.
	ListUsage(ctx context.Context, sessionID string) ([]UsageRecord, error)
}
