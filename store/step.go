package store

import (
	"context"
	"encoding/json"

	helix "github.com/helix-agents/helix-dbos"
)

// StepStore is the per-step path of the durable agent loop: one read when a
// step begins and one atomic commit when it ends, each a small, fixed number
// of statements whatever the length of the session, so the engine's cost per
// step does not grow with history. Implementations must pass the Steps group
// of store/storetest.
type StepStore interface {
	// ReadStep reads what a step needs when it begins: the session's
	// status, counters, custom state and checkpoint pointer, and whether
	// the stream holds the trace of a lost attempt (Stale). Read-only.
	ReadStep(ctx context.Context, p ReadStepParams) (*StepView, error)

	// CleanupAttempt removes the chunks a lost attempt of a run left in
	// the stream: chunks of runID for steps after step, with a sequence
	// above minSequence. Other runs' chunks (sub-agents share their root's
	// stream) are never touched. Readers attached before the cleanup whose
	// unread chunks were removed get *helix.StreamTruncatedError.
	// Idempotent: a repeat removes nothing. With fence set, it removes
	// nothing unless the fence's execution still owns its workflow (an
	// execution taken over must not remove what the new owner wrote): it
	// fails with ErrFenced instead.
	CleanupAttempt(ctx context.Context, fence *Fence, streamID, runID string, step int, minSequence int64) (CleanupResult, error)

	// CommitStep is the atomic per-step commit: it appends the step's
	// messages, applies its custom-state patches, writes the checkpoint
	// (which becomes the session's checkpoint pointer), the run's and the
	// session's counters and status, the usage rows and the step's chunks,
	// consumes the interrupt flag, and ends the stream when asked, in one
	// transaction. A session that is not active gets nothing written and
	// an error; so does a stream that is not active.
	//
	// Not idempotent (a second call appends again): durable callers run it
	// inside their step's transaction (a DBOS RunAsTransaction), which
	// records the step with it, so a replay never applies it twice. Usage
	// rows are idempotent on their keys in any case.
	CommitStep(ctx context.Context, c StepCommit) (*StepCommitResult, error)
}

// ReadStepParams identify the step ReadStep reads for.
type ReadStepParams struct {
	SessionID string
	RunID     string
	// AfterStep is the last committed step: chunks of RunID for later
	// steps are the trace of a lost attempt.
	AfterStep int
	// MinSequence is the run's start sequence: nothing at or below it is
	// ever considered stale (earlier turns are protected).
	MinSequence int64
}

// StepView is what ReadStep returns.
type StepView struct {
	Status       helix.SessionStatus
	StepCount    int
	MessageCount int
	CustomState  json.RawMessage
	CheckpointID string
	// CheckpointSequence is the stream sequence the session's checkpoint
	// points at (0 without one).
	CheckpointSequence int64
	// StaleFrom is the sequence above which the stale check looked: the
	// larger of MinSequence and CheckpointSequence. Pass it to
	// CleanupAttempt.
	StaleFrom int64
	// Stale reports chunks of the run for steps after AfterStep above
	// StaleFrom.
	Stale bool
}

// StepCommit is everything one agent step writes.
type StepCommit struct {
	SessionID string
	RunID     string
	Step      int
	// AgentType is the session's agent type (set when the session is
	// created, never changed). The commit's chunk rows leave out the
	// agentType their chunks share with it (marker rows); empty: they keep
	// it (coded rows).
	AgentType string
	// Messages are appended to the message log.
	Messages []helix.Message
	// Patches are applied to the custom state in order (operations that
	// cannot apply are skipped and reported as warnings).
	Patches []helix.PatchOp
	// Usage rows are recorded for the commit's session (idempotent on
	// their keys); an empty run ID or a zero step means the commit's.
	Usage []UsageRecord
	// Chunks are appended before the checkpoint: the checkpoint's stream
	// sequence is the last of them (or the stream's latest without any).
	Chunks []helix.Chunk
	// Complete ends the session completed with Output (null for none),
	// clears any interrupt request and completes the run.
	Complete bool
	Output   json.RawMessage
	// EndStream, with Complete, also ends the stream with Output as its
	// final output (root sessions: sub-agents share their root's stream).
	EndStream bool
	// RefStatus, when set, moves the session's reference on its parent
	// (store.SubSessionRef) to this status with the commit: a sub-agent's
	// run ending.
	RefStatus helix.SubSessionStatus
	// ReadInbox takes the messages waiting in the session's inbox (a
	// persistent companion's): they are appended after Messages, and a
	// step that would complete goes on instead (Continued).
	ReadInbox bool
	// ClearSuspension ends the step's suspension: the session's pending
	// calls, their ownership on the root session and the suspended-step
	// record are removed with the commit that appends their results.
	ClearSuspension bool
	// ExpectMessageCount, when not 0, is the session's message count
	// before the step as the caller knows it (its own last commit), and
	// StreamID the session's stream. With both, no patches and no inbox, a
	// store whose querier holds writes may send the whole commit as one
	// statement with the transaction's next one, assuming them (and that
	// no interrupt was requested): the Postgres store then fails the
	// transaction with postgres.CommitRefused when they do not hold, and
	// the caller commits again with postgres.LockedCommit.
	ExpectMessageCount int
	StreamID           string
	// Closing returns the chunks appended after the checkpoint, given the
	// checkpoint's ID and whether the commit consumed an interrupt
	// request. Nil appends nothing.
	Closing func(StepClosing) []helix.Chunk
	// Journal, when set, returns what the checkpoint carries in its
	// journal column (the step journal's records that
	// commit with it), given what the commit decided: the result as
	// CommitStep returns it, but for Version, CheckpointSequence and
	// LatestSequence. Called once per commit, before the checkpoint is
	// written; its error fails the commit. Nil: no journal (NULL).
	Journal func(StepCommitResult) (string, error)
}

// StepClosing is what a commit decided, for the chunks that follow its
// checkpoint.
type StepClosing struct {
	CheckpointID string
	// Continued is set when the step asked to complete but inbox messages
	// arrived: the session stays active and the run goes on.
	Continued bool
	// Interrupted is set when the interrupt flag was set: the commit
	// consumed it and ended the session and the run interrupted, with
	// InterruptReason.
	Interrupted     bool
	InterruptReason string
}

// StepCommitResult reports what CommitStep wrote.
type StepCommitResult struct {
	StepClosing
	// Inbox are the inbox messages appended after the step's.
	Inbox        []helix.Message
	MessageCount int
	// Version is the session's version after the commit.
	Version int64
	// CheckpointSequence is the stream sequence the checkpoint points at;
	// LatestSequence the stream's latest after the commit. Both, and
	// Version, are zero for a commit sent as one held statement
	// (ExpectMessageCount): it has not run when CommitStep returns.
	CheckpointSequence int64
	LatestSequence     int64
	// Warnings lists patch operations that could not be applied.
	Warnings []string
}
