package engine

import (
	"context"
	"fmt"

	"github.com/helix-agents/helix-dbos/recv"
	"github.com/helix-agents/helix-dbos/store"
)

// CurrentRun returns a session's current run: its latest, by turn. It
// returns an error wrapping helix.ErrNotFound when the session has no run.
// Its StartSequence is where Stream reads the run from its first chunk.
func (e *Engine) CurrentRun(ctx context.Context, sessionID string) (*store.Run, error) {
	return e.store.GetCurrentRun(ctx, sessionID)
}

// CurrentRun returns a session's current run; see Engine.CurrentRun.
func (c *Client) CurrentRun(ctx context.Context, sessionID string) (*store.Run, error) {
	return c.c.store.GetCurrentRun(ctx, sessionID)
}

// RunInfo returns the stored record of a run (its status, turn, stream
// position and error) by run ID. It returns an error wrapping
// helix.ErrNotFound when there is no such run.
func (e *Engine) RunInfo(ctx context.Context, runID string) (*store.Run, error) {
	return e.store.GetRun(ctx, runID)
}

// RunInfo returns the stored record of a run; see Engine.RunInfo.
func (c *Client) RunInfo(ctx context.Context, runID string) (*store.Run, error) {
	return c.c.store.GetRun(ctx, runID)
}

// Checkpoint returns a checkpoint by ID (the IDs Checkpoints lists, and
// RetryOptions.CheckpointID takes). It returns an error wrapping
// helix.ErrNotFound when there is no such checkpoint.
func (e *Engine) Checkpoint(ctx context.Context, checkpointID string) (*store.Checkpoint, error) {
	return e.store.GetCheckpoint(ctx, checkpointID)
}

// Usage returns the usage records of a session (model calls with their
// tokens, tool calls, sub-agents, the waits for human input), oldest first.
func (e *Engine) Usage(ctx context.Context, sessionID string) ([]store.UsageRecord, error) {
	return e.store.ListUsage(ctx, sessionID)
}

// Ping checks that the engine's database answers: a health check.
func (e *Engine) Ping(ctx context.Context) error {
	if err := e.pool.Ping(ctx); err != nil {
		return fmt.Errorf("engine: the database does not answer: %w", err)
	}
	return nil
}

// Ping checks that the client's database answers; see Engine.Ping.
func (c *Client) Ping(ctx context.Context) error {
	if err := c.c.pool.Ping(ctx); err != nil {
		return fmt.Errorf("engine: the database does not answer: %w", err)
	}
	return nil
}

// DatabaseStats reads the figures of the whole database that monitoring
// exports: runs and sessions by status, committed steps, usage by source,
// tool calls waiting for an answer, and the DBOS queues' load, in one round
// trip. Its cost grows with the tables it counts: cache it (package server
// reads it at most once per DatabaseMetricsMaxAge).
func (e *Engine) DatabaseStats(ctx context.Context) (*store.DatabaseStats, error) {
	return e.store.ReadDatabaseStats(ctx)
}

// WaitsForAnswer reports whether a run of this engine waits now, in its
// workflow workflowID, for the answer to tool call toolCallID (its wait
// watches the call's wake-up). A benchmark or a test submits after it to
// measure the wake-up of a waiting run rather than the wait's first look.
// It reads no database.
func (e *Engine) WaitsForAnswer(workflowID, toolCallID string) bool {
	return e.store.Watching(recv.NotifyChannel, recv.WakePayload(workflowID, toolCallID)) > 0
}
