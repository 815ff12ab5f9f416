package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/steps"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
	"github.com/helix-agents/helix-dbos/workflows"
)

// Input is what a run starts from: a user message and/or, for a new
// session, its initial custom state.
type Input struct {
	// Message is a user message appended before the first step.
	Message string
	// Messages are appended as they are (after Message), for callers that
	// need other roles or metadata.
	Messages []helix.Message
	// State is the initial custom state of a new session (a JSON object);
	// it overrides Agent.InitialState. Not allowed when continuing a
	// session.
	State json.RawMessage
}

func (in Input) messages() []helix.Message {
	var msgs []helix.Message
	if in.Message != "" {
		msgs = append(msgs, helix.UserMessage(in.Message))
	}
	return append(msgs, in.Messages...)
}

// ExecuteOptions refine Execute. The zero value starts a new session with a
// generated ID.
type ExecuteOptions struct {
	// SessionID names the session. A new ID creates the session; the ID of
	// a completed session starts its next turn (multi-turn continuation).
	SessionID string
	// Branch creates the new session from a checkpoint of another session.
	Branch *Branch
	// UserID, Tags and Metadata are stored on a new session. When UserID
	// is set and SessionID names an existing session of another user,
	// Execute refuses (RefusedOwnerMismatch) and writes nothing.
	UserID   string
	Tags     []string
	Metadata map[string]string
	// Direct runs this run at once, outside the engine's queue
	// (Config.Queue); without a queue every run is direct.
	Direct bool
	// PartitionKey is the run's partition of the queue (its tenant);
	// default the session's user ID, else DefaultPartitionKey.
	PartitionKey string
	// Priority orders the queue: lower first; 0, the default, first of all.
	Priority uint
}

// Branch names the checkpoint a new session starts from.
type Branch struct {
	FromSessionID string
	// CheckpointID defaults to the source session's latest checkpoint.
	CheckpointID string
}

// Execute starts a run of agent and returns its handle without waiting.
//
// With a new session ID (or none) it creates the session. With the ID of a
// completed session it starts the next turn: a new run record, a fresh
// MaxSteps budget, the step counter from 0 and the whole prior conversation.
// A session that is running (or interrupted, or failed) is refused with
// *helix.AgentAlreadyRunningError (or an error naming Resume or Retry); of
// two processes racing to continue one session, exactly one wins.
//
// The session, the run record and the input messages are written in one
// transaction before the workflow starts; a process that dies in between
// leaves a recorded run that a launched engine's sweep starts (within
// Config.RecordedRunSweepInterval). ExecuteTx writes the same rows on the
// caller's transaction instead.
func (e *Engine) Execute(ctx context.Context, agent *helix.Agent, in Input, opts *ExecuteOptions) (*Handle, error) {
	if err := e.requireLaunched(); err != nil {
		return nil, err
	}
	p, adm, err := e.recordRun(ctx, agent, in, opts)
	if err != nil {
		return nil, err
	}
	return e.launchRun(p.SessionID, p.RunID, p.WorkflowID, adm)
}

// recordRun registers agent and records the run in a transaction of the
// engine's own (execRequest.record), starting nothing.
func (e *Engine) recordRun(ctx context.Context, agent *helix.Agent, in Input, opts *ExecuteOptions) (*PendingRun, *workflows.Admission, error) {
	if err := e.Register(agent); err != nil {
		return nil, nil, err
	}
	req, err := newExecRequest(agent, in, opts)
	if err != nil {
		return nil, nil, err
	}
	var p *PendingRun
	var adm *workflows.Admission
	err = e.inTx(ctx, func(s *postgres.Store) error {
		p, adm, err = req.record(ctx, s, e.recording())
		return err
	})
	return p, adm, err
}

// recording is what recording an Execute needs besides the transaction.
type recording struct {
	// tracer makes the call's span.
	tracer trace.Tracer
	// queue names the queue a run is admitted through unless
	// ExecuteOptions.Direct; "" admits every run directly.
	queue string
}

func (e *Engine) recording() recording {
	var queue string
	if e.cfg.Queue != nil {
		queue = e.cfg.Queue.Name
	}
	return recording{tracer: e.env.Telemetry.Tracer, queue: queue}
}

// execRequest is a validated Execute (or ExecuteTx) request.
type execRequest struct {
	agent     *helix.Agent
	in        Input
	opts      ExecuteOptions
	msgs      []helix.Message
	sessionID string
}

// newExecRequest validates what can be checked without the database and
// settles the session ID (a new UUIDv7 when opts names none).
func newExecRequest(agent *helix.Agent, in Input, opts *ExecuteOptions) (*execRequest, error) {
	r := &execRequest{agent: agent, in: in, msgs: in.messages()}
	if opts != nil {
		r.opts = *opts
	}
	for i, m := range r.msgs {
		if err := m.Validate(); err != nil {
			return nil, fmt.Errorf("engine: input message %d: %w", i, err)
		}
	}
	r.sessionID = r.opts.SessionID
	if r.sessionID == "" {
		r.sessionID = uuid.Must(uuid.NewV7()).String()
	}
	return r, nil
}

// record is the one implementation behind Execute and ExecuteTx: on s (one
// transaction: the engine's own, or a savepoint of the caller's) it checks
// the session ID, creates the session or reopens a completed one, and
// records the run with its input messages (and, for a queued run, its
// run_queued chunk). It starts nothing: it returns the recorded run and how
// it is to be admitted. Every read goes through s.
func (r *execRequest) record(ctx context.Context, s *postgres.Store, rec recording) (_ *PendingRun, _ *workflows.Admission, err error) {
	agent, in, opts, sessionID := r.agent, r.in, &r.opts, r.sessionID
	// The span of this call: a new session stores it (or, tracing off,
	// the caller's span) as the parent of all its runs' spans.
	ctx, span := rec.tracer.Start(ctx, "helix.execute "+agent.Name)
	defer func() {
		if err != nil && span.IsRecording() {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()
	if span.IsRecording() {
		span.SetAttributes(steps.AttrSessionID.String(sessionID), steps.AttrAgentName.String(agent.Name))
	}
	if err := checkDerivable(ctx, s, sessionID); err != nil {
		return nil, nil, err
	}
	userID := opts.UserID
	st, err := s.LoadState(ctx, sessionID)
	switch {
	case errors.Is(err, helix.ErrNotFound):
		if err := createSession(ctx, s, agent, in, opts, sessionID, len(r.msgs)); err != nil {
			return nil, nil, err
		}
	case err != nil:
		return nil, nil, err
	case opts.Branch != nil:
		return nil, nil, refuse(RefusedSessionExists, sessionID, "session %s already exists: a branch needs a new session ID", sessionID)
	case opts.UserID != "" && st.UserID != opts.UserID:
		// Checked in the transaction that continues the session, so an
		// ownership check before the call cannot be raced.
		return nil, nil, refuse(RefusedOwnerMismatch, sessionID, "session %s belongs to another user", sessionID)
	default:
		if err := continueSession(ctx, s, agent, in, st, len(r.msgs)); err != nil {
			return nil, nil, err
		}
		if sc, ok := steps.SpanContextOf(st.TracingContext); ok && span.IsRecording() {
			// The run goes on in the session's trace: link this call
			// (in the caller's trace) to it.
			span.AddLink(trace.Link{SpanContext: sc})
		}
		userID = st.UserID
	}
	adm := admit(rec.queue, opts.PartitionKey, userID, opts.Priority, opts.Direct)
	runID, workflowID, err := beginRun(ctx, s, sessionID, "turn", "", r.msgs, nil, adm)
	if err != nil {
		return nil, nil, err
	}
	return &PendingRun{SessionID: sessionID, RunID: runID, WorkflowID: workflowID}, adm, nil
}

// checkDerivable refuses a session ID that another session's sub-agent or
// companion would derive ({existing}-sub-…, {existing}-agent-…): taking it
// would make that child impossible to create. An ID whose prefix names no
// session is free (a "support-agent-7" with no session "support").
func checkDerivable(ctx context.Context, s *postgres.Store, sessionID string) error {
	for _, infix := range reservedInfixes {
		for i := strings.Index(sessionID, infix); i > 0; {
			prefix := sessionID[:i]
			if _, err := s.LoadState(ctx, prefix); err == nil {
				return refuse(RefusedReservedSessionID, sessionID,
					"session ID %q is the form of a sub-agent or companion session of session %q (%q…); choose another ID", sessionID, prefix, prefix+infix)
			} else if !errors.Is(err, helix.ErrNotFound) {
				return err
			}
			next := strings.Index(sessionID[i+1:], infix)
			if next < 0 {
				break
			}
			i += 1 + next
		}
	}
	return nil
}

func createSession(ctx context.Context, s *postgres.Store, agent *helix.Agent, in Input, opts *ExecuteOptions, sessionID string, inputs int) error {
	if b := opts.Branch; b != nil {
		if len(in.State) > 0 {
			return refuse(RefusedStateNotAllowed, sessionID, "Input.State is not allowed with a branch: the branch starts from the checkpoint's state")
		}
		src, err := s.LoadState(ctx, b.FromSessionID)
		if err != nil {
			return fmt.Errorf("engine: branch source: %w", err)
		}
		if src.AgentType != agent.Name {
			return refuse(RefusedAgentMismatch, sessionID, "cannot branch session %s of agent %q with agent %q", b.FromSessionID, src.AgentType, agent.Name)
		}
		_, err = s.CloneSession(ctx, store.CloneParams{FromSessionID: b.FromSessionID, CheckpointID: b.CheckpointID, ToSessionID: sessionID})
		return err
	}
	if inputs == 0 && len(in.State) == 0 {
		return refuse(RefusedMessageRequired, sessionID, "empty input: give a message (Input.Message or Input.Messages) or an initial state")
	}
	state := in.State
	if len(state) == 0 {
		state = agent.InitialState
	}
	_, err := s.CreateSession(ctx, store.CreateSessionParams{
		SessionID: sessionID, AgentType: agent.Name, CustomState: state, Mode: helix.SessionModeStandard,
		UserID: opts.UserID, Tags: opts.Tags, Metadata: opts.Metadata,
		TracingContext: steps.TracingContextOf(trace.SpanContextFromContext(ctx)),
	})
	var exists *helix.SessionExistsError
	if errors.As(err, &exists) {
		return &helix.AgentAlreadyRunningError{SessionID: sessionID, CurrentStatus: string(helix.SessionActive)}
	}
	return err
}

// continueSession reopens a completed session for its next turn.
func continueSession(ctx context.Context, s *postgres.Store, agent *helix.Agent, in Input, st *store.SessionState, inputs int) error {
	if st.AgentType != agent.Name {
		return refuse(RefusedAgentMismatch, st.SessionID, "session %s belongs to agent %q, not %q", st.SessionID, st.AgentType, agent.Name)
	}
	switch st.Status {
	case helix.SessionCompleted:
	case helix.SessionActive:
		return &helix.AgentAlreadyRunningError{SessionID: st.SessionID, CurrentStatus: string(st.Status)}
	case helix.SessionInterrupted:
		return refuse(RefusedNotContinuable, st.SessionID, "session %s is interrupted: continue it with Resume, or start over with Retry", st.SessionID)
	default:
		return refuse(RefusedNotContinuable, st.SessionID, "session %s is %s: only a completed session takes a new turn; use Retry to run it again", st.SessionID, st.Status)
	}
	if len(in.State) > 0 {
		return refuse(RefusedStateNotAllowed, st.SessionID, "session %s exists: Input.State only seeds new sessions", st.SessionID)
	}
	if inputs == 0 {
		return refuse(RefusedMessageRequired, st.SessionID, "continuing session %s needs a message", st.SessionID)
	}
	if err := s.HealFinish(ctx, st); err != nil {
		return err
	}
	version := st.Version
	st.Status, st.StepCount, st.Output, st.Error, st.FailureReason = helix.SessionActive, 0, nil, "", ""
	if _, err := s.SaveState(ctx, st, version); err != nil {
		var stale *helix.StaleStateError
		if errors.As(err, &stale) {
			return &helix.AgentAlreadyRunningError{SessionID: st.SessionID, CurrentStatus: string(helix.SessionActive)}
		}
		return err
	}
	// An Interrupt that raced with the previous turn's end must not stop
	// this one.
	if err := s.ClearInterruptFlag(ctx, st.SessionID); err != nil {
		return err
	}
	return s.ReactivateStream(ctx, st.StreamID)
}

// beginRun records a run (kind: turn, resume or retry) with its
// deterministic workflow ID and appends the input messages, then first's
// chunk and, for a run admitted through the queue (adm), its run_queued.
func beginRun(ctx context.Context, s *postgres.Store, sessionID, kind, previousRunID string, msgs []helix.Message,
	first func(runID string) helix.Chunk, adm *workflows.Admission) (runID, workflowID string, err error) {
	st, err := s.LoadState(ctx, sessionID)
	if err != nil {
		return "", "", err
	}
	turn := 1
	if cur, err := s.GetCurrentRun(ctx, sessionID); err == nil {
		turn = cur.Turn + 1
	} else if !errors.Is(err, helix.ErrNotFound) {
		return "", "", err
	}
	latest, err := s.LatestSequence(ctx, st.StreamID)
	if err != nil {
		return "", "", err
	}
	n := turn
	if kind == "resume" {
		if n, err = s.IncrementResumeCount(ctx, sessionID); err != nil {
			return "", "", err
		}
	}
	runID = uuid.Must(uuid.NewV7()).String()
	workflowID = fmt.Sprintf("%s-%s-%d", sessionID, kind, n)
	var recorded *store.Admission
	if adm != nil {
		recorded = &store.Admission{Queue: adm.Queue, PartitionKey: adm.PartitionKey, Priority: int(adm.Priority)}
	}
	if _, err := s.CreateRun(ctx, store.CreateRunParams{RunID: runID, SessionID: sessionID, Turn: turn,
		StartSequence: latest, WorkflowID: workflowID, PreviousRunID: previousRunID, Admission: recorded}); err != nil {
		return "", "", err
	}
	if len(msgs) > 0 {
		if _, err := s.AppendMessages(ctx, sessionID, msgs); err != nil {
			return "", "", err
		}
	}
	var chunks []store.ChunkWrite
	if first != nil {
		chunks = append(chunks, store.ChunkWrite{RunID: runID, Chunk: first(runID)})
	}
	if adm != nil {
		chunks = append(chunks, store.ChunkWrite{RunID: runID, Chunk: &helix.RunQueuedChunk{
			Base:  helix.Base{AgentID: sessionID, AgentType: st.AgentType, Step: st.StepCount},
			RunID: runID, Queue: adm.Queue, PartitionKey: adm.PartitionKey}})
	}
	if len(chunks) > 0 {
		if _, err := s.Append(ctx, st.StreamID, chunks); err != nil {
			return "", "", err
		}
	}
	return runID, workflowID, nil
}

func (e *Engine) launchRun(sessionID, runID, workflowID string, adm *workflows.Admission) (*Handle, error) {
	if err := e.start(sessionID, runID, workflowID, adm); err != nil {
		// The run is recorded: a launched engine's sweep starts it.
		return nil, fmt.Errorf("%w (the run is recorded: a launched engine that registers its agent starts it within Config.RecordedRunSweepInterval)", err)
	}
	return &Handle{SessionID: sessionID, RunID: runID, WorkflowID: workflowID, e: e}, nil
}

// inTx runs fn on a store view inside one transaction.
func (e *Engine) inTx(ctx context.Context, fn func(s *postgres.Store) error) error {
	return pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		return fn(e.store.WithQuerier(postgres.PgxQuerier(tx)))
	})
}
