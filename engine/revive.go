package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// A workflow of an aborted session runs again only when someone resumed it
// with DBOS's own tools (`dbos workflow resume`, a DBOS client's
// ResumeWorkflow): an abort cancels the workflows first, and DBOS never
// recovers a cancelled workflow. Such an execution revives its session at
// its start, before any step (Env.Revive): the session, its run and its
// sub-agents run again as they were when the abort stopped them.

// revive is Env.Revive: when the run being executed by its own workflow
// runWF was aborted, the session tree is brought back (reviveTree). One
// primary-key read when it was not, which is every execution but a DBOS
// resume's.
//
// The read and the revival wait out a database outage (postgres.WaitOut):
// an execution that returned the outage's error would end its workflow
// failed in DBOS, leaving its run running with no workflow to run it.
func (e *Engine) revive(ctx context.Context, sessionID, runID, runWF string) error {
	var status helix.RunStatus
	var code, wf string
	var found bool
	err := postgres.WaitOut(ctx, func() (err error) {
		status, code, wf, found, err = e.store.RunAbortState(ctx, runID)
		return err
	}, postgres.LogOutage(e.log, runWF, "read whether the run was aborted"))
	switch {
	case err != nil:
		return fmt.Errorf("engine: read run %s of session %s: %w", runID, sessionID, err)
	case !found:
		return nil // the run's record is gone: BeginRun reports it
	case status != helix.RunFailed || code != helix.CodeAborted || wf != runWF:
		return nil // not aborted; or a copy of the run's workflow (a DBOS fork), which runs nothing
	}
	return postgres.WaitOut(ctx, func() error { return e.reviveTree(ctx, sessionID) },
		postgres.LogOutage(e.log, runWF, "revive the aborted session "+sessionID))
}

// reviveTree revives an aborted session and the sub-agents the abort
// stopped with it. The DBOS workflows first (the cancel sweep aborts an
// active session whose workflow is cancelled): the run's own workflow and
// a queued run's segments, and each sub-agent's run; then, for each session
// still failed by the abort, in one transaction: the session active again,
// its run back to running or waiting, its stream open, and every call it
// waited for announced again (the abort ended them in the stream).
func (e *Engine) reviveTree(ctx context.Context, sessionID string) error {
	tree, err := e.store.ListSubtree(ctx, sessionID)
	if err != nil {
		return err
	}
	for _, st := range tree {
		if st.Status != helix.SessionFailed {
			continue
		}
		run, err := e.store.GetCurrentRun(ctx, st.SessionID)
		if err != nil {
			return err
		}
		if run.Status != helix.RunFailed || run.ErrorCode != helix.CodeAborted || run.WorkflowID == "" {
			continue
		}
		if err := e.resumeCancelled(ctx, run.WorkflowID); err != nil {
			return err
		}
		revived, err := e.reviveOne(ctx, st.SessionID, run.RunID)
		if err != nil {
			return err
		}
		if revived {
			e.log.Warn().Str("event", "session.resumed_through_dbos").Str("sessionId", st.SessionID).Str("runId", run.RunID).
				Str("workflowId", run.WorkflowID).
				Msg("a workflow of an aborted session was resumed with DBOS's tools: the session runs again")
		}
	}
	return nil
}

// resumeCancelled resumes, with DBOS, the cancelled workflows of the run
// whose workflow is runWF: that one and its queued segments (back on their
// own queue).
func (e *Engine) resumeCancelled(ctx context.Context, runWF string) error {
	list, err := postgres.ListCancelledRunWorkflows(ctx, postgres.PgxQuerier(e.pool), runWF)
	if err != nil {
		return fmt.Errorf("engine: list the cancelled workflows of run workflow %s: %w", runWF, err)
	}
	for _, c := range list {
		var opts []dbos.ResumeWorkflowOption
		if c.Queue != "" && c.Queue != dbosRecoveryQueue {
			opts = append(opts, dbos.WithResumeQueue(c.Queue))
		}
		if _, err := dbos.ResumeWorkflow[any](e.dbos, c.WorkflowID, opts...); err != nil {
			return fmt.Errorf("engine: resume workflow %s of an aborted session resumed through DBOS: %w", c.WorkflowID, err)
		}
	}
	return nil
}

// reviveOne undoes an abort of one session, in one transaction, if the
// session is still failed by it (a peer may have revived it first).
func (e *Engine) reviveOne(ctx context.Context, sessionID, runID string) (revived bool, err error) {
	err = pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		s := e.store.WithQuerier(postgres.PgxQuerier(tx))
		status, err := s.LockSessionStatus(ctx, sessionID)
		if err != nil {
			return fmt.Errorf("engine: lock session %s: %w", sessionID, err)
		}
		run, err := s.GetRun(ctx, runID)
		if err != nil {
			return err
		}
		if status != helix.SessionFailed || run.Status != helix.RunFailed || run.ErrorCode != helix.CodeAborted {
			return nil
		}
		st, err := s.LoadState(ctx, sessionID)
		if err != nil {
			return err
		}
		pending := make([]store.PendingClientToolCall, 0, len(st.PendingClientToolCalls))
		for _, p := range st.PendingClientToolCalls {
			pending = append(pending, p)
		}
		store.SortPendingCalls(pending)
		runStatus, chunks := helix.RunRunning, []store.ChunkWrite(nil)
		for _, p := range pending {
			if p.ConsumedAt != 0 || p.Resolved() {
				continue
			}
			runStatus = helix.RunSuspendedClientTool
			chunks = append(chunks, store.ChunkWrite{RunID: run.RunID, Chunk: announce(st, p)})
		}
		if runStatus == helix.RunRunning && len(st.SuspendedAwaitingChildren) > 0 {
			runStatus = helix.RunSuspendedAwaitingChildren
		}
		if err := s.ReactivateSession(ctx, sessionID); err != nil {
			return fmt.Errorf("engine: reactivate session %s: %w", sessionID, err)
		}
		if err := s.ReactivateRun(ctx, runID, runStatus); err != nil {
			return fmt.Errorf("engine: reactivate run %s: %w", runID, err)
		}
		if st.StreamID == st.SessionID {
			if err := s.ReactivateStream(ctx, st.StreamID); err != nil {
				return err
			}
		}
		if len(chunks) > 0 {
			if _, err := s.Append(ctx, st.StreamID, chunks); err != nil {
				return err
			}
		}
		if !st.IsRoot() {
			err := s.UpdateSubSessionRef(ctx, st.ParentSessionID, store.SubSessionRefUpdate{SubSessionID: sessionID,
				Status: ptrTo(helix.SubSessionRunning)})
			if err != nil && !errors.Is(err, helix.ErrNotFound) {
				return err
			}
		}
		revived = true
		return nil
	})
	return revived, err
}

// announce is the chunk that asks for a waiting call again: the approval
// request of a gated call, the tool_start of a client-executed one.
func announce(st *store.SessionState, p store.PendingClientToolCall) helix.Chunk {
	b := helix.Base{AgentID: st.SessionID, AgentType: st.AgentType, Step: p.Step}
	if p.Kind == helix.SubmissionApprovalResponse {
		return &helix.ToolApprovalRequestChunk{Base: b, ToolCallID: p.ToolCallID, ToolName: p.ToolName, ApprovalID: p.ApprovalID, Input: p.Arguments}
	}
	client := false
	return &helix.ToolStartChunk{Base: b, ToolCallID: p.ToolCallID, ToolName: p.ToolName, Arguments: p.Arguments, ProviderExecuted: &client}
}
