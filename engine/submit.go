package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

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
// The waiting run continues by itself; Resume returns a handle on it. When
// the answer wakes a hibernated run whose agent this engine registers, the
// engine starts its continuation before returning (any engine would start
// it otherwise, on hearing of the wake). A process that runs no agents
// submits with a [Client] instead. To commit
// the answer with the app's own writes, use SubmitToolResultTx.
func (e *Engine) SubmitToolResult(ctx context.Context, rootSessionID string, sub helix.ToolSubmission) (helix.SubmitResult, error) {
	if err := e.requireLaunched(); err != nil {
		return helix.SubmitResult{}, err
	}
	c := e.control()
	c.woke, c.hold = e.startWoken, e.submitting.hold
	return c.submit(ctx, rootSessionID, sub)
}

// PendingToolCalls returns the tool calls waiting in a session and, for a
// root session, in its sub-agents (answer them on the root), by step and
// position: what to show a user. A call stays listed, with its Submission or
// TimedOutAt, until its step commits.
func (e *Engine) PendingToolCalls(ctx context.Context, sessionID string) ([]store.PendingClientToolCall, error) {
	return e.store.ListPendingCalls(ctx, sessionID)
}

// control is what submitting and interrupting need: the database, the
// store and something that sends DBOS messages (an engine's DBOS context or
// a DBOS client).
type control struct {
	pool  *pgxpool.Pool
	store *postgres.Store
	dbos  dbos.Client
	log   zerolog.Logger
	// woke, when set, starts the continuation of a hibernated run a
	// submission woke (its announcement, postgres.ParseWakeAnnouncement),
	// once the submission committed.
	woke func(ctx context.Context, o postgres.OrphanRun, submitted bool)
	// hold, set with woke, records a submission in flight to workflow wf's
	// run until release, which returns the wakes of that run heard
	// meanwhile and left to the submission: it starts them with woke
	// (they may be its own, started already: woke then finds them).
	hold func(wf string) (release func() (left []postgres.OrphanRun))
}

func (e *Engine) control() control {
	return control{pool: e.pool, store: e.store, dbos: e.dbos, log: e.log}
}

func (c control) submit(ctx context.Context, rootSessionID string, sub helix.ToolSubmission) (helix.SubmitResult, error) {
	// The common path in one statement; the general one (below) when it
	// does not apply, or to report a cancelled workflow with its session.
	rec, woke, ok, err := c.store.SubmitAnswer(ctx, rootSessionID, sub, recv.AnswerMessage(sub))
	if ok {
		res := submitResult(sub, rec)
		var release func() []postgres.OrphanRun
		if c.hold != nil {
			release = c.hold(rec.Call.WorkflowID)
		}
		c.announceWake(ctx, woke, release)
		return c.submitted(rootSessionID, sub, res, rec.Call.WorkflowID, nil, false)
	}
	if err != nil && !recv.Cancelled(err) {
		return c.submitted(rootSessionID, sub, helix.SubmitResult{ToolCallID: sub.ToolCallID}, "", err, false)
	}
	return c.submitGeneral(ctx, rootSessionID, sub)
}

// submitGeneral records a submission as RecordSubmission does, in a
// transaction of two round trips, for the submissions SubmitAnswer does
// not take: it validates all of them and reports every refusal.
func (c control) submitGeneral(ctx context.Context, rootSessionID string, sub helix.ToolSubmission) (helix.SubmitResult, error) {
	var res helix.SubmitResult
	var wf string
	var woke *string // the announcement of the hibernated run the message woke
	var release func() []postgres.OrphanRun
	// One transaction in two round trips for a call of the root session:
	// BEGIN with the lock and read of the conversation, then the
	// submission's writes and the message to the waiting run with COMMIT.
	err := pipelinedTx(ctx, c.pool, func(pq *postgres.Pipelined) (err error) {
		res, wf, err = c.recordAnswer(ctx, pq, rootSessionID, sub, &woke)
		if err == nil && wf != "" && c.hold != nil {
			// Held before the COMMIT goes out: the wake's announcement
			// may reach this engine's starter before the commit's reply.
			release = c.hold(wf)
		}
		return err
	})
	if err != nil {
		woke = nil
	}
	c.announceWake(ctx, woke, release)
	return c.submitted(rootSessionID, sub, res, wf, err, false)
}

// submitResult is what SubmitToolResult returns for a recorded submission.
func submitResult(sub helix.ToolSubmission, rec *store.RecordedSubmission) helix.SubmitResult {
	return helix.SubmitResult{ToolCallID: sub.ToolCallID, OwnerSessionID: rec.Call.OwnerSessionID, RunID: rec.Call.RunID,
		Remaining: rec.Unresolved, ToolName: rec.Call.ToolName, Kind: rec.Call.Kind, AlreadyCompleted: rec.AlreadyCompleted}
}

// announceWake announces woke, the wake of a hibernated run a committed
// submission woke (nil: none), and starts its continuation when this
// engine starts the runs it wakes (c.woke); release, when not nil, ends
// the submission's hold on the run, and the wakes it left are started too.
func (c control) announceWake(ctx context.Context, woke *string, release func() []postgres.OrphanRun) {
	var own postgres.OrphanRun
	if woke != nil {
		// Announced off the transaction's write path, so that its commit
		// does not wait for Postgres's notification lock.
		c.store.Announce(postgres.RunRecordedChannel, *woke)
		if c.woke != nil {
			var ok bool
			if own, ok = postgres.ParseWakeAnnouncement(*woke); ok {
				c.woke(ctx, own, true)
			}
		}
	}
	if release != nil {
		for _, o := range release() {
			if o != own { // another wake of the run (its deadline's)
				c.woke(ctx, o, false)
			}
		}
	}
}

// recordAnswer is the body of a submission's transaction (SubmitToolResult's
// own, SubmitToolResultTx's savepoint): it validates and records the
// submission on pq and holds the message that wakes the waiting run for
// pq's next statement (the COMMIT, or a Flush). wf is the waiting run's
// workflow, empty when the call was already answered (nothing is written
// then). woke, when not nil, gets the announcement of the hibernated run
// the message woke (helix.send_tool_message's result) once the message
// went out, nil when it woke none.
func (c control) recordAnswer(ctx context.Context, pq *postgres.Pipelined, rootSessionID string, sub helix.ToolSubmission,
	woke **string) (res helix.SubmitResult, wf string, err error) {
	res.ToolCallID = sub.ToolCallID
	rec, err := c.store.WithQuerier(pq).RecordSubmission(ctx, rootSessionID, sub)
	if err != nil {
		return res, "", err
	}
	if res = submitResult(sub, rec); res.AlreadyCompleted {
		return res, "", nil
	}
	wf = rec.Call.WorkflowID
	// In the caller's transaction (woke nil) the wake is announced at its
	// commit; in the submission's own, after it (submit).
	sql, args, err := recv.SendStatement(wf, sub.ToolCallID,
		recv.Message{Kind: recv.KindSubmission, Submission: &sub, SubmittedAt: rec.Call.SubmittedAt}, recv.SubmissionKey(sub.ToolCallID),
		woke == nil)
	if err != nil {
		return res, wf, err
	}
	if woke == nil {
		pq.Defer(ctx, sql, args...)
	} else {
		pq.DeferRow(sql, func(r pgx.Row) error { return r.Scan(woke) }, args...)
	}
	return res, wf, nil
}

// submitted turns how a submission's transaction ended (err) into what
// SubmitToolResult (inTx false) or SubmitToolResultTx (inTx true) returns,
// and logs it.
func (c control) submitted(rootSessionID string, sub helix.ToolSubmission, res helix.SubmitResult, wf string, err error, inTx bool) (helix.SubmitResult, error) {
	if recv.Cancelled(err) {
		// Cancelled with DBOS's tools and not yet aborted by the engine's
		// sweep: nothing would ever take the answer.
		err = &helix.SubmissionError{Code: helix.SubmissionNotWaiting, SessionID: res.OwnerSessionID, ToolCallID: sub.ToolCallID,
			Reason: fmt.Sprintf("session %s is being aborted: %s", res.OwnerSessionID, cancelledByDBOS(wf))}
	}
	if err != nil {
		var se *helix.SubmissionError
		if errors.As(err, &se) {
			ev := c.log.Warn().Str("event", "client_tool.validation_failed").Str("sessionId", rootSessionID).
				Str("toolCallId", sub.ToolCallID).Str("code", se.Code)
			if inTx {
				ev.Bool("inCallerTx", true)
			}
			ev.Msg(se.Reason)
			return helix.SubmitResult{}, se
		}
		if inTx {
			return helix.SubmitResult{}, fmt.Errorf("engine: submit tool call %s to session %s in the caller's transaction "+
				"(roll that transaction back; do not retry on it): %w%s", sub.ToolCallID, rootSessionID, err, foreignTxHint(err))
		}
		return helix.SubmitResult{}, fmt.Errorf("engine: submit tool call %s to session %s: %w", sub.ToolCallID, rootSessionID, err)
	}
	ev := c.log.Info().Str("event", "client_tool.submitted").Str("sessionId", rootSessionID).
		Str("ownerSessionId", res.OwnerSessionID).Str("runId", res.RunID).Str("toolCallId", sub.ToolCallID).Str("kind", string(sub.Kind))
	switch {
	case res.AlreadyCompleted:
		ev.Bool("alreadyCompleted", true).Msg("the call was already answered; this submission changed nothing")
	case inTx:
		ev.Bool("inCallerTx", true).Strs("remaining", res.Remaining).
			Msg("submission recorded in the caller's transaction; the waiting run gets it when that transaction commits")
	default:
		ev.Strs("remaining", res.Remaining).Msg("submission recorded and delivered to the waiting run")
	}
	return res, nil
}

// interrupt writes the durable interrupt flag of a running session and of
// its running sub-agents, and wakes the runs that wait for human input in
// any of them (they would see the flag only when they wake).
func (c control) interrupt(ctx context.Context, sessionID, reason string) error {
	st, err := c.store.LoadState(ctx, sessionID)
	if err != nil {
		return err
	}
	if st.Status != helix.SessionActive {
		return refuse(RefusedNotRunning, sessionID, "session %s is %s: only a running session can be interrupted", sessionID, st.Status)
	}
	if reason == "" {
		reason = "interrupted"
	}
	flagged, err := c.store.InterruptTree(ctx, sessionID, reason)
	if err != nil {
		return err
	}
	// The status check and the flag are not one statement: a run that
	// ended in between, or that ended after the flag was written without
	// seeing it, would leave a flag that stops the session's next turn
	// before its first step. Take it back and refuse, as for a session that
	// was not running. (Interrupted means the run already stopped, on this
	// flag.)
	if st, err = c.store.LoadState(ctx, sessionID); err != nil {
		return fmt.Errorf("engine: session %s: read its status after recording the interrupt: %w", sessionID, err)
	}
	if st.Status != helix.SessionActive && st.Status != helix.SessionInterrupted {
		if err := c.takeBackInterrupt(ctx, sessionID, flagged); err != nil {
			return fmt.Errorf("engine: session %s ended %s while it was being interrupted, and taking the interrupt flag back failed "+
				"(its next turn would stop before its first step: interrupt and resume it, or retry): %w", sessionID, st.Status, err)
		}
		return refuse(RefusedNotRunning, sessionID, "session %s ended %s before the interrupt was recorded: nothing to interrupt", sessionID, st.Status)
	}
	waiting, err := c.store.ListPendingCalls(ctx, sessionID)
	if err != nil {
		return err
	}
	nonce := uuid.NewString()
	var errs []error
	for _, p := range waiting {
		if p.Resolved() || p.WorkflowID == "" {
			continue
		}
		// Sent as answers are (helix.send_tool_message), so that it also
		// wakes a hibernated run.
		sql, args, err := recv.SendStatement(p.WorkflowID, p.ToolCallID, recv.Message{Kind: recv.KindWake}, recv.WakeKey(p.ToolCallID, nonce), true)
		if err == nil {
			_, err = c.pool.Exec(ctx, sql, args...)
		}
		if err != nil && !recv.Cancelled(err) { // a cancelled workflow is being aborted: nothing waits
			errs = append(errs, fmt.Errorf("engine: wake workflow %s for tool call %s: %w", p.WorkflowID, p.ToolCallID, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("engine: session %s: the interrupt is recorded, but waking its waiting run failed (it stops when it next wakes): %w", sessionID, err)
	}
	c.log.Info().Str("event", "session.interrupt_requested").Str("sessionId", sessionID).Str("reason", reason).
		Int("sessions", len(flagged)).Msg("interrupt requested (with the running sub-agents)")
	return nil
}

// takeBackInterrupt clears the interrupt flag of the session and of the
// sessions of its tree that interrupt flagged: the interrupt of a session
// that ended is void, for its sub-agents and companions too.
func (c control) takeBackInterrupt(ctx context.Context, sessionID string, flagged []string) error {
	ids := append([]string{sessionID}, flagged...)
	slices.Sort(ids)
	var errs []error
	for _, id := range slices.Compact(ids) {
		if err := c.store.ClearInterruptFlag(ctx, id); err != nil && !errors.Is(err, helix.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// waitingRun reports whether the session's current run waits for human
// input, in the session or in its sub-agents (or has its answers and is
// about to continue): Resume then hands back that run instead of starting
// one. pending are the calls of the session's subtree.
func waitingRun(run *store.Run, pending []store.PendingClientToolCall) bool {
	if run.Status.Suspended() {
		return true
	}
	return !run.Status.Final() && (len(pending) > 0 || run.AnsweredAt != nil)
}

// suspension returns the routing information of a suspended run: the calls
// still waiting for a submission, by step and position, and, for a run that
// waits for sub-agents, the children whose sessions (or descendants) wait,
// with their calls (answer them on the root session).
func (h *Handle) suspension(ctx context.Context, status helix.RunStatus) (*helix.Suspension, error) {
	st, err := h.e.store.LoadState(ctx, h.SessionID)
	if err != nil {
		return nil, err
	}
	s := &helix.Suspension{StepID: st.SuspendedStepID}
	if status == helix.RunSuspendedAwaitingChildren {
		refs, err := h.e.store.GetSubSessionRefs(ctx, h.SessionID)
		if err != nil {
			return nil, err
		}
		for _, r := range refs {
			if r.Status != helix.SubSessionPausedAwaitingClient {
				continue
			}
			calls, err := h.e.store.ListPendingCalls(ctx, r.SubSessionID)
			if err != nil {
				return nil, err
			}
			c := helix.SuspendedChild{ParentToolCallID: r.ParentToolCallID, SubSessionID: r.SubSessionID,
				AgentType: r.AgentType, Status: helix.AgentSuspendedClientTool}
			for _, p := range calls {
				if !p.Resolved() {
					c.ToolCallIDs = append(c.ToolCallIDs, p.ToolCallID)
					if p.OwnerSessionID != r.SubSessionID {
						c.Status = helix.AgentSuspendedAwaitingChildren
					}
				}
			}
			s.Children = append(s.Children, c)
		}
		return s, nil
	}
	var calls []store.PendingClientToolCall
	for _, c := range st.PendingClientToolCalls {
		if c.RunID == h.RunID && !c.Resolved() {
			calls = append(calls, c)
		}
	}
	store.SortPendingCalls(calls)
	for _, c := range calls {
		s.ToolCallIDs = append(s.ToolCallIDs, c.ToolCallID)
	}
	return s, nil
}

// pipelinedTx runs fn in a transaction on a connection of the pool whose
// BEGIN goes out with its first statement and whose COMMIT with the writes
// fn held (postgres.Pipelined): a transaction of n reads costs n round
// trips. Whatever fn or the commit fails with rolls it back.
func pipelinedTx(ctx context.Context, pool *pgxpool.Pool, fn func(*postgres.Pipelined) error) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	pq := postgres.NewPipelined(conn)
	pq.Defer(ctx, postgres.BeginSQL)
	err = fn(pq)
	if err == nil {
		pq.Defer(ctx, postgres.CommitSQL)
		err = pq.Flush(ctx)
	}
	if err != nil {
		// Without a transaction in progress (nothing was sent) this is a
		// no-op; a connection it cannot reset is closed on release.
		_, _ = conn.Exec(context.WithoutCancel(ctx), postgres.RollbackSQL)
		return err
	}
	return nil
}
