package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	helix "github.com/helix-agents/helix-dbos"
)

// DeleteOptions refine DeleteSession and DeleteSessions. nil means the
// defaults: a session tree with a run in progress is refused.
type DeleteOptions struct {
	// Force stops a tree's run in progress before deleting it: its active
	// sessions are aborted (as Abort does), its pending workflows are
	// cancelled, and the deletion waits for DBOS to record every workflow
	// ended. Default false.
	Force bool
}

// deleteWaitInterval is how often a forced deletion reads whether the
// workflows it cancelled have ended.
const deleteWaitInterval = 50 * time.Millisecond

// DeleteSession deletes a session and its whole tree for good: its
// sub-agent and companion sessions, their messages, checkpoints, runs,
// streams and chunks, inbox, usage and step-journal rows, and the DBOS rows
// of every workflow of their runs (all in one transaction, under the trees' row locks).
//
// sessionID must be a root session: a sub-agent's or companion's session is
// refused with *helix.NotRootSessionError (they belong to their root's
// conversation). A tree with a run in progress (a session running, queued
// or waiting for a person, or a workflow DBOS has not finished) is refused
// with *helix.SessionRunningError (errors.Is helix.ErrSessionRunning)
// unless opts.Force is set. A session that does not exist is not an error:
// the result lists it in NotFound.
func (e *Engine) DeleteSession(ctx context.Context, sessionID string, opts *DeleteOptions) (*DeleteStats, error) {
	return e.DeleteSessions(ctx, []string{sessionID}, opts)
}

// DeleteSessions deletes the session trees of sessionIDs in one
// transaction, as DeleteSession does for one: when one of them is refused
// nothing is deleted (with Force, the trees stopped before the refusal
// stay aborted). Give it batches of at most a few hundred roots.
func (e *Engine) DeleteSessions(ctx context.Context, sessionIDs []string, opts *DeleteOptions) (*DeleteStats, error) {
	if opts != nil && opts.Force {
		if err := e.requireLaunched(); err != nil {
			return nil, err
		}
	}
	return e.control().deleteSessions(ctx, sessionIDs, opts)
}

// deleteSessions implements Engine.DeleteSessions and Client.DeleteSessions.
func (c control) deleteSessions(ctx context.Context, sessionIDs []string, opts *DeleteOptions) (*DeleteStats, error) {
	if opts != nil && opts.Force {
		for _, id := range sessionIDs {
			if err := c.stopTree(ctx, id); err != nil {
				return nil, err
			}
		}
	}
	// Without Force, or when a run started on a tree after it was stopped,
	// the store refuses the batch under the tree's row locks.
	stats, err := c.store.DeleteSessionTrees(ctx, sessionIDs, nil)
	return deleteStatsOf(stats), err
}

// stopTree aborts the active sessions of rootID's tree, cancels its
// workflows DBOS has not finished, and waits until DBOS records them ended.
func (c control) stopTree(ctx context.Context, rootID string) error {
	tree, err := c.store.ListSubtree(ctx, rootID)
	if err != nil || len(tree) == 0 {
		return err
	}
	if !tree[0].IsRoot() {
		return &helix.NotRootSessionError{SessionID: rootID, RootSessionID: tree[0].RootSessionID}
	}
	// Parents first; aborting a session aborts its running descendants,
	// so each is read again before it is aborted.
	for _, s := range tree {
		st, err := c.store.LoadState(ctx, s.SessionID)
		if errors.Is(err, helix.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if st.Status != helix.SessionActive {
			continue
		}
		err = c.abort(ctx, st.SessionID, fmt.Sprintf("deleted with session %s", rootID))
		var refused *RefusedError
		if err != nil && !(errors.As(err, &refused) && refused.Code == RefusedNotRunning) { // ended meanwhile
			return err
		}
	}
	t := time.NewTicker(deleteWaitInterval)
	defer t.Stop()
	for {
		pending, err := c.store.PendingTreeWorkflows(ctx, rootID)
		if err != nil || len(pending) == 0 {
			return err
		}
		if err := dbos.CancelWorkflows(c.dbos, pending); err != nil {
			return fmt.Errorf("engine: cancel the workflows %v of session %s: %w", pending, rootID, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("engine: wait for the workflows %v of session %s to end: %w", pending, rootID, ctx.Err())
		case <-t.C:
		}
	}
}
