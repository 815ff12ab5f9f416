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
	"github.com/helix-agents/helix-dbos/workflows"
)

// Interrupt asks a running session to stop: it writes the durable interrupt
// flag, which the run observes before its next step (from any process); a
// run waiting for human input is woken to observe it. The run then ends
// interrupted and the session can be resumed.
//
// A session that is not running is refused with *RefusedError (code
// RefusedNotRunning). So is one whose run ended while the interrupt was
// being recorded: the engine then takes the flag back (on the session and
// its sub-agents), so that it does not stop the session's next turn, and
// nothing stays written. Every surface (Client.Interrupt, the server's
// POST /interrupt, the CLI's interrupt) behaves the same.
func (e *Engine) Interrupt(ctx context.Context, sessionID, reason string) error {
	if err := e.requireLaunched(); err != nil {
		return err
	}
	return e.control().interrupt(ctx, sessionID, reason)
}

// CanResume reports whether Resume would accept the session, and why not.
func (e *Engine) CanResume(ctx context.Context, sessionID string) (helix.CanResumeResult, error) {
	st, err := e.store.LoadState(ctx, sessionID)
	if err != nil {
		return helix.CanResumeResult{}, err
	}
	return canResume(st), nil
}

func canResume(st *store.SessionState) helix.CanResumeResult {
	switch st.Status {
	case helix.SessionInterrupted:
		return helix.CanResumeResult{CanResume: true}
	case helix.SessionActive:
		return helix.CanResumeResult{Reason: "the session is running"}
	case helix.SessionCompleted:
		return helix.CanResumeResult{Reason: "the session completed: start its next turn with Execute"}
	case helix.SessionFailed:
		return helix.CanResumeResult{Reason: "the session failed: run it again with Retry"}
	}
	return helix.CanResumeResult{Reason: fmt.Sprintf("the session is %s", st.Status)}
}

// ResumeOptions refine Resume.
type ResumeOptions struct {
	// Message, when set, is appended as a user message before the run
	// continues.
	Message string
}

// Resume continues a session.
//
// A session whose run waits for human input (suspended on a client tool or
// an approval, or answered and going on in place, however far it got) is
// continued by that same run: Resume returns a handle on it (RunID
// unchanged; the run's OnAgentResumed reports it as its own previous run)
// and starts nothing. That holds when the answered run already ended (an
// answer can carry it to its end before the Resume that follows
// SubmitToolResult comes): the handle's result is its outcome. (CanResume
// still reports such a session as not resumable: nothing is left to
// continue.)
//
// An interrupted session continues from its last committed step in a new
// run (workflow {sessionId}-resume-{N}), emitting run_resumed. When it was
// interrupted while waiting for human input, the new run takes over the
// waiting calls: answers given before are used, the others are waited for
// (the new run is suspended_client_tool until they arrive).
//
// Of concurrent resumes exactly one wins; the others get
// *helix.AgentAlreadyRunningError. A session that cannot be resumed gets
// *helix.AgentNotResumableError.
func (e *Engine) Resume(ctx context.Context, sessionID string, opts *ResumeOptions) (*Handle, error) {
	if err := e.requireLaunched(); err != nil {
		return nil, err
	}
	if opts == nil {
		opts = &ResumeOptions{}
	}
	var runID, workflowID string
	var waiting *store.Run
	var adm *workflows.Admission
	err := e.inTx(ctx, func(s *postgres.Store) error {
		// The session's row is locked first: the decision below reads the
		// session, then its current run, and a run's last commit (which
		// takes the row too) must not land between the two reads (an
		// active session beside a completed run would read as running).
		if _, err := s.LockSessionStatus(ctx, sessionID); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("engine: resume %s: lock the session: %w", sessionID, err)
		}
		st, err := s.LoadState(ctx, sessionID)
		if err != nil {
			return err
		}
		if _, err := e.env.Agent(st.AgentType); err != nil {
			return err
		}
		if st.Status == helix.SessionActive {
			cur, err := s.GetCurrentRun(ctx, sessionID)
			if err != nil && !errors.Is(err, helix.ErrNotFound) {
				return err
			}
			var pending []store.PendingClientToolCall
			if cur != nil {
				if pending, err = s.ListPendingCalls(ctx, sessionID); err != nil {
					return err
				}
			}
			// A message for a run that already took its answers and goes
			// on is refused as for any running session (below).
			if cur != nil && waitingRun(cur, pending) && (opts.Message == "" || cur.Status.Suspended() || len(pending) > 0) {
				if opts.Message != "" {
					return refuse(RefusedAwaitingToolResults, sessionID, "session %s waits for tool results in run %s: submit them with SubmitToolResult; a message cannot be added now", sessionID, cur.RunID)
				}
				waiting = cur
				return nil
			}
		}
		if (st.Status == helix.SessionCompleted || st.Status == helix.SessionFailed) && opts.Message == "" {
			// An answered run that went on in place to its end.
			cur, err := s.GetCurrentRun(ctx, sessionID)
			if err != nil && !errors.Is(err, helix.ErrNotFound) {
				return err
			}
			if cur != nil && cur.AnsweredAt != nil && cur.Status.Final() {
				waiting = cur
				return nil
			}
		}
		if c := canResume(st); !c.CanResume {
			if st.Status == helix.SessionActive {
				return &helix.AgentAlreadyRunningError{SessionID: sessionID, CurrentStatus: string(st.Status)}
			}
			return &helix.AgentNotResumableError{SessionID: sessionID, CurrentStatus: string(st.Status), Reason: c.Reason}
		}
		cas, err := s.CompareAndSetStatus(ctx, sessionID, []helix.SessionStatus{helix.SessionInterrupted}, helix.SessionActive,
			&store.CASOptions{ExpectedVersion: st.Version})
		if err != nil {
			return err
		}
		if !cas.OK {
			return &helix.AgentAlreadyRunningError{SessionID: sessionID, CurrentStatus: string(cas.CurrentStatus)}
		}
		if err := s.ClearInterruptFlag(ctx, sessionID); err != nil { // a stale request must not stop the resumed run
			return err
		}
		prev, err := s.GetCurrentRun(ctx, sessionID)
		if err != nil {
			return err
		}
		adm = e.continuedAdmission(st, prev)
		var msgs []helix.Message
		mode := "continue"
		if opts.Message != "" {
			msgs, mode = []helix.Message{helix.UserMessage(opts.Message)}, "with_message"
		}
		var cp *string
		if st.CheckpointID != "" {
			cp = &st.CheckpointID
		}
		if len(st.SuspendedStep) > 0 && len(msgs) > 0 {
			return refuse(RefusedAwaitingToolResults, sessionID, "session %s was interrupted while waiting for tool results: resume it without a message and submit them", sessionID)
		}
		runID, workflowID, err = beginRun(ctx, s, sessionID, "resume", prev.RunID, msgs, func(runID string) helix.Chunk {
			return &helix.RunResumedChunk{Base: helix.Base{AgentID: sessionID, AgentType: st.AgentType, Step: st.StepCount},
				RunID: runID, FromCheckpointID: cp, FromStepCount: st.StepCount, Mode: mode}
		}, adm)
		if err != nil || len(st.SuspendedStep) == 0 {
			return err
		}
		// The new run takes over the calls the interrupted run waited for.
		open, err := s.RetargetPending(ctx, sessionID, runID, workflowID)
		if err != nil || len(open) == 0 {
			return err
		}
		return s.UpdateRunStatus(ctx, runID, helix.RunSuspendedClientTool, nil)
	})
	if err != nil {
		return nil, err
	}
	if waiting != nil {
		return &Handle{SessionID: sessionID, RunID: waiting.RunID, WorkflowID: waiting.WorkflowID, e: e}, nil
	}
	return e.launchRun(sessionID, runID, workflowID, adm)
}

// Retry modes.
const (
	RetryFromCheckpoint = "from_checkpoint"
	RetryFromStart      = "from_start"
)

// RetryOptions refine Retry.
type RetryOptions struct {
	// Mode is RetryFromCheckpoint (default) or RetryFromStart.
	Mode string
	// CheckpointID picks the checkpoint; default the latest.
	CheckpointID string
	// Message, when set, is appended as a user message before the run.
	Message string
}

// Retry runs a failed or interrupted session again in a new run (workflow
// {sessionId}-retry-{N}). From a checkpoint (the default; the latest unless
// one is named) the message log, custom state and step count go back to the
// checkpoint's; from the start the session keeps only its messages before
// the first model answer and its initial state. Stream chunks after the
// restored point are removed and a stream_resync (reason retry) is emitted.
func (e *Engine) Retry(ctx context.Context, sessionID string, opts *RetryOptions) (*Handle, error) {
	if err := e.requireLaunched(); err != nil {
		return nil, err
	}
	if opts == nil {
		opts = &RetryOptions{}
	}
	mode := opts.Mode
	if mode == "" {
		mode = RetryFromCheckpoint
	}
	if mode != RetryFromCheckpoint && mode != RetryFromStart {
		return nil, fmt.Errorf("engine: unknown retry mode %q (want %q or %q)", opts.Mode, RetryFromCheckpoint, RetryFromStart)
	}
	var runID, workflowID string
	var adm *workflows.Admission
	err := e.inTx(ctx, func(s *postgres.Store) error {
		st, err := s.LoadState(ctx, sessionID)
		if err != nil {
			return err
		}
		def, err := e.env.Agent(st.AgentType)
		if err != nil {
			return err
		}
		switch st.Status {
		case helix.SessionFailed, helix.SessionInterrupted:
		case helix.SessionActive:
			return &helix.AgentAlreadyRunningError{SessionID: sessionID, CurrentStatus: string(st.Status)}
		default:
			return &helix.AgentNotResumableError{SessionID: sessionID, CurrentStatus: string(st.Status),
				Reason: "only a failed or interrupted session can be retried; start a new turn with Execute"}
		}
		var cp *store.Checkpoint
		if mode == RetryFromCheckpoint {
			if opts.CheckpointID != "" {
				if cp, err = s.GetCheckpoint(ctx, opts.CheckpointID); err != nil {
					return err
				}
				if cp.SessionID != sessionID {
					return fmt.Errorf("engine: checkpoint %s belongs to session %s", cp.ID, cp.SessionID)
				}
			} else if cp, err = s.GetLatestCheckpoint(ctx, sessionID); err != nil && !errors.Is(err, helix.ErrNotFound) {
				return err
			}
		}
		// The status CAS is the single-writer gate: of concurrent retries,
		// exactly one moves the session to active.
		cas, err := s.CompareAndSetStatus(ctx, sessionID, []helix.SessionStatus{st.Status}, helix.SessionActive,
			&store.CASOptions{ExpectedVersion: st.Version})
		if err != nil {
			return err
		}
		if !cas.OK {
			return &helix.AgentAlreadyRunningError{SessionID: sessionID, CurrentStatus: string(cas.CurrentStatus)}
		}
		var keep int
		var fromSeq int64
		state, step := st.CustomState, 0
		if cp != nil {
			keep, state, step = cp.MessageCount, cp.CustomState, cp.StepCount
			if cp.StreamSequence != nil {
				fromSeq = *cp.StreamSequence
			}
		} else {
			if keep, err = messagesBeforeFirstAnswer(ctx, s, sessionID); err != nil {
				return err
			}
			state = def.Agent.InitialState
			if len(state) == 0 {
				state = []byte("{}")
			}
		}
		if dropped, err := s.DiscardPending(ctx, sessionID); err != nil {
			return err
		} else if len(dropped) > 0 {
			e.log.Info().Str("event", "client_tool.discarded").Str("sessionId", sessionID).Int("calls", len(dropped)).
				Msg("the retry drops the tool calls the session waited for")
		}
		if err := s.TruncateMessages(ctx, sessionID, keep); err != nil {
			return err
		}
		if st, err = s.LoadState(ctx, sessionID); err != nil {
			return err
		}
		st.CustomState, st.StepCount = state, step
		st.Output, st.Error, st.FailureReason, st.InterruptContext = nil, "", "", nil
		if _, err := s.SaveState(ctx, st, st.Version); err != nil {
			return err
		}
		if err := s.ClearInterruptFlag(ctx, sessionID); err != nil {
			return err
		}
		if err := s.ReactivateStream(ctx, st.StreamID); err != nil {
			return err
		}
		res, err := s.CleanupToStep(ctx, st.StreamID, -1, fromSeq)
		if err != nil {
			return err
		}
		prev, err := s.GetCurrentRun(ctx, sessionID)
		if err != nil {
			return err
		}
		adm = e.continuedAdmission(st, prev)
		var msgs []helix.Message
		if opts.Message != "" {
			msgs = []helix.Message{helix.UserMessage(opts.Message)}
		}
		cpID := ""
		if cp != nil {
			cpID = cp.ID
		}
		runID, workflowID, err = beginRun(ctx, s, sessionID, "retry", prev.RunID, msgs, func(string) helix.Chunk {
			return &helix.StreamResyncChunk{Base: helix.Base{AgentID: sessionID, AgentType: st.AgentType, Step: st.StepCount},
				CheckpointID: cpID, StepCount: st.StepCount, MessageCount: keep + len(msgs), FromSequence: res.MinSequence,
				Reason: helix.ResyncRetry}
		}, adm)
		return err
	})
	if err != nil {
		return nil, err
	}
	return e.launchRun(sessionID, runID, workflowID, adm)
}

// messagesBeforeFirstAnswer counts the messages before the first assistant
// message: the session's original input.
func messagesBeforeFirstAnswer(ctx context.Context, s *postgres.Store, sessionID string) (int, error) {
	page, err := s.GetMessages(ctx, sessionID, &store.GetMessagesOptions{Limit: store.MaxPageSize})
	if err != nil {
		return 0, err
	}
	for i, m := range page.Messages {
		if m.Role == helix.RoleAssistant {
			return i, nil
		}
	}
	return len(page.Messages), nil
}

// Abort stops a running session now: its workflow is cancelled (it stops
// at its next step boundary) and the session and run are failed with
// reason (error code "aborted"). Its running sub-agents are aborted with
// it. An aborted session can be retried.
func (e *Engine) Abort(ctx context.Context, sessionID, reason string) error {
	if err := e.requireLaunched(); err != nil {
		return err
	}
	return e.control().abort(ctx, sessionID, reason)
}

// abort implements Engine.Abort and Client.Abort.
func (c control) abort(ctx context.Context, sessionID, reason string) error {
	if reason == "" {
		reason = "aborted"
	}
	tree, err := c.store.ListSubtree(ctx, sessionID)
	if err != nil {
		return err
	}
	if len(tree) == 0 || tree[0].Status != helix.SessionActive {
		status := helix.SessionStatus("missing")
		if len(tree) > 0 {
			status = tree[0].Status
		}
		return refuse(RefusedNotRunning, sessionID, "session %s is %s: only a running session can be aborted", sessionID, status)
	}
	// Deepest first: the root's stream fails last, after its sub-agents
	// wrote their ends into it.
	for i := len(tree) - 1; i >= 0; i-- {
		st := tree[i]
		if st.Status != helix.SessionActive {
			continue
		}
		msg := "aborted: " + reason
		if i > 0 {
			msg = fmt.Sprintf("aborted with its parent session %s: %s", sessionID, reason)
		}
		if err := c.abortOne(ctx, st, msg); err != nil {
			return err
		}
	}
	return nil
}

// cancelSegments cancels the segments of a queued run whose driver is
// driverID that are still queued or running: a queued run leaves the queue
// at once.
func (c control) cancelSegments(ctx context.Context, driverID string) error {
	ids, err := postgres.ListOpenSegments(ctx, postgres.PgxQuerier(c.pool), driverID)
	if err != nil {
		return fmt.Errorf("engine: list the queued segments of workflow %s: %w", driverID, err)
	}
	if len(ids) == 0 {
		return nil
	}
	if err := dbos.CancelWorkflows(c.dbos, ids); err != nil {
		return fmt.Errorf("engine: cancel the segments %v of workflow %s: %w", ids, driverID, err)
	}
	return nil
}

// abortOne cancels a session's current run and fails the session and run.
func (c control) abortOne(ctx context.Context, st *store.SessionState, msg string) error {
	sessionID := st.SessionID
	run, err := c.store.GetCurrentRun(ctx, sessionID)
	if err != nil {
		return err
	}
	if run.WorkflowID != "" {
		// The run's workflow, and its continuation when it was woken from
		// hibernation (which may not have started yet: it then runs
		// nothing, its run being ended below).
		ids := []string{run.WorkflowID}
		if cur := run.CurrentWorkflowID(); cur != run.WorkflowID {
			ids = append(ids, cur)
		}
		if err := dbos.CancelWorkflows(c.dbos, ids); err != nil {
			return fmt.Errorf("engine: cancel workflows %v: %w", ids, err)
		}
		if err := c.cancelSegments(ctx, run.WorkflowID); err != nil {
			return err
		}
	}
	return pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		// Two aborts racing (Abort, and an engine's sweep of workflows
		// cancelled through DBOS) record one: the second finds it done.
		s := c.store.WithQuerier(postgres.PgxQuerier(tx))
		status, err := s.LockSessionStatus(ctx, sessionID)
		if err != nil {
			return fmt.Errorf("engine: lock session %s: %w", sessionID, err)
		}
		if status != helix.SessionActive {
			return nil
		}
		if err := s.UpdateStatus(ctx, sessionID, helix.SessionFailed, &store.StatusUpdate{Error: msg}); err != nil {
			return err
		}
		// Calls the run waited for stay recorded (a late submission is told
		// the session was aborted); clients are told now.
		var ends []store.ChunkWrite
		for _, p := range st.PendingClientToolCalls {
			if p.ConsumedAt != 0 {
				continue
			}
			serverSide := p.Kind != helix.SubmissionClientToolResult // an approval gate's tool runs on the server
			ends = append(ends, store.ChunkWrite{RunID: run.RunID, Chunk: &helix.ToolEndChunk{
				Base:       helix.Base{AgentID: sessionID, AgentType: st.AgentType, Step: p.Step},
				ToolCallID: p.ToolCallID, ToolName: p.ToolName, Result: []byte("null"), Error: msg, ErrorCode: helix.CodeAborted,
				ProviderExecuted: &serverSide,
			}})
			c.log.Info().Str("event", "client_tool.aborted").Str("sessionId", sessionID).Str("runId", run.RunID).
				Str("toolCallId", p.ToolCallID).Str("tool", p.ToolName).Msg("the session was aborted while the call waited")
		}
		if len(ends) > 0 {
			if _, err := s.Append(ctx, st.StreamID, ends); err != nil {
				return err
			}
		}
		if err := s.UpdateRunStatus(ctx, run.RunID, helix.RunFailed, &store.RunUpdate{Error: msg, ErrorCode: helix.CodeAborted}); err != nil {
			return err
		}
		if _, err := s.Append(ctx, st.StreamID, []store.ChunkWrite{{RunID: run.RunID, Chunk: &helix.ErrorChunk{
			Base: helix.Base{AgentID: sessionID, AgentType: st.AgentType, Step: st.StepCount}, Error: msg, Code: helix.CodeAborted,
		}}}); err != nil {
			return err
		}
		if !st.IsRoot() {
			err := s.UpdateSubSessionRef(ctx, st.ParentSessionID, store.SubSessionRefUpdate{SubSessionID: sessionID,
				Status: ptrTo(helix.SubSessionFailed)})
			if err != nil && !errors.Is(err, helix.ErrNotFound) { // not found: a child its parent does not track
				return err
			}
		}
		if st.StreamID == st.SessionID { // a session that owns its stream (root, companion)
			return s.FailStream(ctx, st.StreamID, msg)
		}
		return nil
	})
}

func ptrTo[T any](v T) *T { return &v }

// Session returns a session's stored state.
func (e *Engine) Session(ctx context.Context, sessionID string) (*store.SessionState, error) {
	return e.store.LoadState(ctx, sessionID)
}

// Messages returns one page of a session's messages, oldest first.
func (e *Engine) Messages(ctx context.Context, sessionID string, opts *store.GetMessagesOptions) (*store.MessagePage, error) {
	return e.store.GetMessages(ctx, sessionID, opts)
}

// Runs returns a session's runs by turn.
func (e *Engine) Runs(ctx context.Context, sessionID string) ([]store.Run, error) {
	return e.store.ListRuns(ctx, sessionID)
}

// Checkpoints returns one page of a session's checkpoints, oldest first.
func (e *Engine) Checkpoints(ctx context.Context, sessionID string, opts *store.ListOptions) (*store.CheckpointPage, error) {
	return e.store.ListCheckpoints(ctx, sessionID, opts)
}

// Sessions lists sessions, newest first.
func (e *Engine) Sessions(ctx context.Context, opts store.ListSessionsOptions) ([]store.SessionSummary, error) {
	return e.store.ListSessions(ctx, opts)
}

// SubSessions returns the sub-agent sessions a session started (ephemeral
// sub-agents and persistent companions), in the order they were started.
func (e *Engine) SubSessions(ctx context.Context, sessionID string) ([]store.SubSessionRef, error) {
	return e.store.GetSubSessionRefs(ctx, sessionID)
}

// PageSessions returns one page of sessions, newest first, by keyset
// (postgres.Store.PageSessions): root sessions by default, filtered by
// status, agent, owner, creation time and ID prefix.
func (e *Engine) PageSessions(ctx context.Context, opts *store.PageSessionsOptions) (*store.SessionPage, error) {
	return e.store.PageSessions(ctx, opts)
}

// SubSessionTree returns the sessions a session started and theirs,
// nested, depth first: at most limit of them, and whether there are more
// (postgres.Store.SubSessionTree).
func (e *Engine) SubSessionTree(ctx context.Context, sessionID string, limit int) (*store.SubSessionTree, error) {
	return e.store.SubSessionTree(ctx, sessionID, limit)
}

// Cluster returns the executors sharing the database, the sessions each
// owns, and the DBOS queues with work. It reads only what is live (the
// executors' rows and the workflows in flight), so its cost follows the
// work in flight, not the history of runs.
func (e *Engine) Cluster(ctx context.Context, opts *ClusterOptions) (*Cluster, error) {
	return e.control().cluster(ctx, opts)
}

// Cluster returns the executors sharing the database, the sessions each
// owns, and the DBOS queues with work; see Engine.Cluster.
func (c *Client) Cluster(ctx context.Context, opts *ClusterOptions) (*Cluster, error) {
	return c.c.cluster(ctx, opts)
}

func (c control) cluster(ctx context.Context, opts *ClusterOptions) (*Cluster, error) {
	cl, err := c.store.ReadCluster(ctx, opts.store())
	if err != nil {
		return nil, err
	}
	return clusterOf(cl), nil
}
