package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/recv"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// SubmitToolResult answers a tool call a run is suspended on: a client
// tool's result or error, or an approval decision. Submit on the root
// session of the conversation; a call made by a sub-agent is routed to it.
//
// The submission is validated (the call waits in this conversation, the
// kind matches, a result passes the tool's output schema) and recorded with
// the message that wakes the waiting run, in one transaction: nothing is
// written when it is rejected (*helix.SubmissionError), and the run gets it
// exactly once. A second submission for the same call, from any process, at
// any time, is reported with AlreadyCompleted and changes nothing. It works
// while no process runs the session: the answer waits in Postgres and the
// recovered run consumes it.
//
// The waiting run continues by itself; Resume returns a handle on it.
func (e *Engine) SubmitToolResult(ctx context.Context, rootSessionID string, sub helix.ToolSubmission) (helix.SubmitResult, error) {
	if err := e.requireLaunched(); err != nil {
		return helix.SubmitResult{}, err
	}
	res := helix.SubmitResult{ToolCallID: sub.ToolCallID}
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		rec, err := e.store.WithQuerier(postgres.PgxQuerier(tx)).RecordSubmission(ctx, rootSessionID, sub)
		if err != nil {
			return err
		}
		res.OwnerSessionID, res.RunID, res.Remaining = rec.Call.OwnerSessionID, rec.Call.RunID, rec.Unresolved
		if res.AlreadyCompleted = rec.AlreadyCompleted; res.AlreadyCompleted {
			return nil
		}
		return recv.Send(e.dbos, tx, rec.Call.WorkflowID, sub.ToolCallID,
			recv.Message{Kind: recv.KindSubmission, Submission: &sub, SubmittedAt: rec.Call.SubmittedAt}, recv.SubmissionKey(sub.ToolCallID))
	})
	if err != nil {
		var se *helix.SubmissionError
		if errors.As(err, &se) {
			e.log.Warn().Str("event", "client_tool.validation_failed").Str("sessionId", rootSessionID).
				Str("toolCallId", sub.ToolCallID).Str("code", se.Code).Msg(se.Reason)
			return helix.SubmitResult{}, se
		}
		return helix.SubmitResult{}, fmt.Errorf("engine: submit tool call %s to session %s: %w", sub.ToolCallID, rootSessionID, err)
	}
	ev := e.log.Info().Str("event", "client_tool.submitted").Str("sessionId", rootSessionID).
		Str("ownerSessionId", res.OwnerSessionID).Str("runId", res.RunID).Str("toolCallId", sub.ToolCallID).Str("kind", string(sub.Kind))
	if res.AlreadyCompleted {
		ev.Bool("alreadyCompleted", true).Msg("the call was already answered; this submission changed nothing")
	} else {
		ev.Strs("remaining", res.Remaining).Msg("submission recorded and delivered to the waiting run")
	}
	return res, nil
}

// wakeWaiting sends a wake-up to the run waiting for each unanswered call
// of a session, so it looks at its session (an interrupt was requested)
// without waiting for a submission.
func (e *Engine) wakeWaiting(ctx context.Context, st *store.SessionState) error {
	nonce := uuid.NewString()
	var errs []error
	for id, c := range st.PendingClientToolCalls {
		if c.Resolved() || c.WorkflowID == "" {
			continue
		}
		if err := recv.Send(e.dbos, nil, c.WorkflowID, id, recv.Message{Kind: recv.KindWake}, recv.WakeKey(id, nonce)); err != nil {
			errs = append(errs, err)
		}
	}
	_ = ctx
	return errors.Join(errs...)
}

// waitingRun reports whether the session's current run waits for human
// input (or has its answers and is about to continue): Resume then hands
// back that run instead of starting one.
func waitingRun(st *store.SessionState, run *store.Run) bool {
	if run.Status == helix.RunSuspendedClientTool {
		return true
	}
	for _, c := range st.PendingClientToolCalls {
		if c.RunID == run.RunID {
			return !run.Status.Final()
		}
	}
	return false
}

// suspension returns the routing information of a suspended run: the calls
// still waiting for a submission, by step and position.
func (h *Handle) suspension(ctx context.Context) (*helix.Suspension, error) {
	st, err := h.e.store.LoadState(ctx, h.SessionID)
	if err != nil {
		return nil, err
	}
	var calls []store.PendingClientToolCall
	for _, c := range st.PendingClientToolCalls {
		if c.RunID == h.RunID && !c.Resolved() {
			calls = append(calls, c)
		}
	}
	store.SortPendingCalls(calls)
	s := &helix.Suspension{StepID: st.SuspendedStepID}
	for _, c := range calls {
		s.ToolCallIDs = append(s.ToolCallIDs, c.ToolCallID)
	}
	return s, nil
}
