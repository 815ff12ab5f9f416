package steps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/rs/zerolog"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// Step names: explicit constants, stable across refactors (design §4).
const (
	NameBeginRun   = "helix.begin_run"
	NameCallModel  = "helix.call_model"
	NameRunTool    = "helix.run_tool"
	NameCommitStep = "helix.commit_step"
	NameEndRun     = "helix.end_run"
	NameFireHooks  = "helix.fire_hooks"
)

// Names of the steps that write a step's held start chunks (HeldStarts).
// They are never recorded (their writes are idempotent or fenced): the
// names are for errors and logs.
const (
	NameRestoreStarts = "helix.restore_step_start"
	NameTakeStarts    = "helix.take_step_start"
)

// InfraRetries is how many times a step is retried (with DBOS's backoff,
// 100 ms doubling to 5 s) after an infrastructure error (a failed write,
// a refused fence). A database outage (a lost or refused connection, a
// server shutting down: postgres.Transient) is waited out instead, without
// counting. Domain outcomes (model and tool errors) are step outputs and
// never retried this way.
const InfraRetries = 5

// Env is what step bodies need: the store, the registered agents and a
// logger. DataSource is the DBOS data source on the store's pool, through
// which commits run as DBOS transactions.
type Env struct {
	Store      *postgres.Store
	DataSource *dbos.DataSource
	// DBOS is the engine's DBOS context, for steps that manage workflows
	// (cancelling a terminated companion's).
	DBOS dbos.Context
	Log  zerolog.Logger
	// Fence, when set, fences the step bodies of workflow executions (see
	// Fence); nil runs them unfenced.
	Fence Fence
	// Revive, when set, is called at the start of every execution of a
	// run's workflow (runWorkflowID; for a segment, its driver's), before
	// any step and unrecorded: it brings back a session whose aborted run's
	// workflow was resumed with DBOS's tools.
	Revive func(ctx context.Context, sessionID, runID, runWorkflowID string) error
	// Clock is the time of the deadlines of calls that wait for people
	// (store their deadlines with the store's clock, postgres.WithClock,
	// the same one). NewEnv sets SystemClock; never nil.
	Clock Clock
	// HibernateAfter is how long a run waits for people in its workflow
	// before it hibernates (NameHibernate), on Clock; 0 or negative: never.
	HibernateAfter time.Duration
	// Probe, when set, is called at the loop's probe points (ProbePoint);
	// an error stops the run there (ProbeStop). For test kits; nil in
	// production.
	Probe func(ctx context.Context, at ProbeInfo) error
	// Telemetry is the engine's traces and metrics. NewEnv sets one that
	// traces nothing; never nil.
	Telemetry *Telemetry

	mu     sync.RWMutex
	queues map[string]dbos.Queue
	agents map[string]*AgentDef
	cache  messageCache
}

// NewEnv returns an Env on st.
func NewEnv(st *postgres.Store, log zerolog.Logger) *Env {
	return &Env{Store: st, Log: log, Clock: SystemClock{}, Telemetry: NewTelemetry(nil, ""), agents: map[string]*AgentDef{}, cache: messageCache{m: map[string]*cachedLog{}}}
}

// AgentDef is a registered agent with its effective tools compiled.
type AgentDef struct {
	Agent  *helix.Agent
	Tools  map[string]*helix.Tool
	Specs  []helix.ToolSpec
	Output *helix.Schema
}

// NewAgentDef validates a and compiles its tools.
func NewAgentDef(a *helix.Agent) (*AgentDef, error) {
	tools, err := a.EffectiveTools()
	if err != nil {
		return nil, err
	}
	d := &AgentDef{Agent: a, Tools: make(map[string]*helix.Tool, len(tools))}
	for _, t := range tools {
		d.Tools[t.Name()] = t
		d.Specs = append(d.Specs, t.Spec())
	}
	if len(a.OutputSchema) > 0 {
		if d.Output, err = helix.CompileSchema(a.OutputSchema); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// Register adds agent definitions. Registering a name twice with a different
// definition is an error; the same *helix.Agent again is a no-op.
func (e *Env) Register(defs ...*AgentDef) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, d := range defs {
		if old, ok := e.agents[d.Agent.Name]; ok && old.Agent != d.Agent {
			return fmt.Errorf("engine: agent type %q is already registered with a different definition; agent names must be unique", d.Agent.Name)
		}
		e.agents[d.Agent.Name] = d
	}
	return nil
}

// Agent returns the registered agent of the given type.
func (e *Env) Agent(agentType string) (*AgentDef, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	d, ok := e.agents[agentType]
	if !ok {
		known := make([]string, 0, len(e.agents))
		for k := range e.agents {
			known = append(known, k)
		}
		sort.Strings(known)
		return nil, fmt.Errorf("engine: agent type %q is not registered in this process (registered: %v); register every agent with Engine.Register before Launch, in every process that may recover its sessions", agentType, known)
	}
	return d, nil
}

// Fence is the engine's executor lease, as the workflows and steps see it.
// A workflow execution takes a ticket when it starts (Acquire) and returns
// it when it ends (Release); a step body runs, and writes to the stream,
// only while Check accepts the ticket: the process's lease is valid, its
// sessions were not taken over by another engine since the ticket was
// taken, and no newer execution of the same workflow started in this
// process. Acquire and Check wait while the lease is not known to be valid.
// Acquire is given the owner token DBOS gave the execution (Ticket.Owner).
type Fence interface {
	Acquire(ctx context.Context, workflowID, owner string) (Ticket, error)
	Check(ctx context.Context, t Ticket) error
	Release(t Ticket)
}

// Ticket identifies one workflow execution to its Fence.
type Ticket struct {
	WorkflowID string
	Epoch, Seq uint64
	// Owner is the execution's DBOS owner token (the one DBOS gave it when
	// it started it, not the one the workflow's row holds later): the
	// stream writes of its steps carry it (RunInfo.StreamFence), so that
	// the database refuses them once the workflow was taken over.
	Owner string
}

// Check is e.Fence.Check, or nil without a fence.
func (e *Env) Check(ctx context.Context, t Ticket) error {
	if e.Fence == nil {
		return nil
	}
	return e.Fence.Check(ctx, t)
}

// RunInfo describes the run a workflow executes. It is the output of the
// begin step and part of every later step's input.
type RunInfo struct {
	// Ticket is the workflow execution's fencing ticket (see Fence): set by
	// the workflow for each execution, never recorded.
	Ticket Ticket `json:"-"`
	// ReadOnly reports that the begin transaction wrote nothing (never
	// recorded): its record can wait for the journal's next write, since
	// running it again after a crash changes nothing (WroteNothing).
	ReadOnly bool `json:"-"`
	// Def is the agent's definition with the run's pinned tools
	// (NamePinTools), set by the workflow once they are known, never
	// recorded; nil for an agent without tool sources (RunAgent).
	Def *AgentDef `json:"-"`

	// The begin's record leaves out what its workflow's input implies
	// (workflows: beginRecord), so these are omitted when empty.
	SessionID     string `json:"sessionId,omitempty"`
	RunID         string `json:"runId,omitempty"`
	AgentType     string `json:"agentType"`
	StreamID      string `json:"streamId,omitempty"`
	RootSessionID string `json:"rootSessionId,omitempty"`
	WorkflowID    string `json:"workflowId,omitempty"`
	Turn          int    `json:"turn"`
	PreviousRunID string `json:"previousRunId,omitempty"`
	StartSequence int64  `json:"startSequence,omitempty"`
	// StartStep is the session's step count when the run began (non-zero
	// for a resume in the middle of a turn).
	StartStep int `json:"startStep,omitempty"`
	// Done is set when the run had already ended before this execution
	// began (a replay of a finished run's workflow): the workflow returns
	// its recorded outcome.
	Done *Outcome `json:"done,omitempty"`
	// Interrupted is set when the durable interrupt flag was found set at
	// the start: the run ended interrupted without a step.
	Interrupted bool `json:"interrupted,omitempty"`
	// Resumed is set for a resume run (workflow {sessionId}-resume-{N}).
	Resumed bool `json:"resumed,omitempty"`
	// Trace is the session's tracing context, the remote parent of every
	// execution's run span (read with the session; nil when it has none).
	Trace *store.TracingContext `json:"trace,omitempty"`
	// Parent is set for a sub-agent's run: where its parent delegated.
	Parent *ParentLink `json:"parent,omitempty"`
	// Persistent is set for a persistent companion's run (it reads its
	// inbox at each step's commit).
	Persistent bool `json:"persistent,omitempty"`
	// Suspended and Pending hand a step that waits for human input to the
	// run that finishes it (a fresh resume): the workflow takes them out
	// of RunInfo before passing it to other steps.
	Suspended *SuspendedStep                `json:"suspended,omitempty"`
	Pending   []store.PendingClientToolCall `json:"pending,omitempty"`
	Children  []store.SuspendedChildWait    `json:"children,omitempty"`
}

// WroteNothing reports ReadOnly: the workflows' journal holds the record
// of a transaction step whose output says so for its next write, instead
// of committing the transaction with it.
func (r RunInfo) WroteNothing() bool { return r.ReadOnly }

// IsRoot reports whether the run's session is a root session.
func (r RunInfo) IsRoot() bool { return r.RootSessionID == r.SessionID }

// OwnsStream reports whether the run's session owns its stream (a root
// session or a persistent companion): its run's end ends the stream.
// Ephemeral sub-agents write into their root's stream and never end it.
func (r RunInfo) OwnsStream() bool { return r.StreamID == r.SessionID }

// Outcome is how a run ended; it is the turn workflow's result.
type Outcome struct {
	Status helix.RunStatus `json:"status"`
	Output json.RawMessage `json:"output,omitempty"`
	Text   string          `json:"text,omitempty"`
	Error  string          `json:"error,omitempty"`
	Code   string          `json:"code,omitempty"`
	Steps  int             `json:"steps"`
	// Await, set only on the outcome of a run's segment (a run admitted
	// through a queue), names the call the run waits for: the run's
	// driver waits for it, holding no queue slot, then starts the next
	// segment. Status is then RunSuspendedClientTool.
	Await *AwaitCall `json:"await,omitempty"`
	// Children, set only on the outcome of a segment whose step waits for
	// sub-agents that run as queued runs of their own, are those runs: the
	// driver waits for each one's outcome (holding no slot) and hands them
	// to the next segment, which finishes the step.
	Children []AwaitChild `json:"children,omitempty"`
	// Hibernated is set on the outcome of a workflow that hibernated its
	// run, which waits for people with no workflow running it until a wake
	// starts a continuation (postgres.HibernateRun). Status is then
	// RunSuspendedClientTool.
	Hibernated bool `json:"hibernated,omitempty"`
}

// AwaitChild is a sub-agent's run a queued run's driver waits for.
type AwaitChild struct {
	ToolCallID string `json:"toolCallId"`
	// WorkflowID is the child run's workflow (its own driver); Topic the
	// DBOS message topic on which it reports its outcome.
	WorkflowID string `json:"workflowId"`
	Topic      string `json:"topic"`
}

// AwaitCall is a pending tool call a queued run's driver waits for.
type AwaitCall struct {
	ToolCallID string `json:"toolCallId"`
	// DeadlineAt is the call's deadline (Unix ms), 0 for none.
	DeadlineAt int64 `json:"deadlineAt,omitempty"`
	// Then are the step's later calls that wait too, in order: once the
	// call's message arrived, the driver takes those of theirs that are
	// already there, so the next segment resolves them all at once and
	// every message is taken once.
	Then []string `json:"then,omitempty"`
}

// Failure is a classified error carried as step output.
type Failure struct {
	Message     string `json:"message"`
	Code        string `json:"code,omitempty"`
	Recoverable bool   `json:"recoverable,omitempty"`
}

func nowMS() int64 { return time.Now().UnixMilli() }

// StreamFence is the fence of the run's stream writes outside a step's
// commit (store.Fence: this execution's workflow and owner token), nil
// before the execution knows its owner token.
func (r RunInfo) StreamFence() *store.Fence {
	if r.Ticket.Owner == "" {
		return nil
	}
	return &store.Fence{WorkflowID: r.Ticket.WorkflowID, Owner: r.Ticket.Owner}
}

// fenced turns a stream write the database refused for its fence
// (store.ErrFenced: the workflow was taken over since this execution
// began) into the error of an execution fenced off by another engine: it
// matches dbos.ErrConflictingWorkflowID, so the execution ends and records
// nothing more. Any other error is returned as it is.
func fenced(run RunInfo, err error) error {
	if !errors.Is(err, store.ErrFenced) {
		return err
	}
	return &dbos.Error{Code: dbos.ErrorCodeConflictingID, WorkflowID: run.Ticket.WorkflowID,
		Message: fmt.Sprintf("helix: a stream write of run %s was refused: %v; this execution stops, the workflow's owner continues it", run.RunID, err)}
}

func base(run RunInfo, step int) helix.Base {
	return helix.Base{AgentID: run.SessionID, AgentType: run.AgentType, Timestamp: nowMS(), Step: step}
}

// StepID names a step of a run in chunks and staging: "{runId}:{step}".
func StepID(runID string, step int) string { return fmt.Sprintf("%s:%d", runID, step) }

// txQuerier adapts a DBOS transaction to the store's Querier.
type txQuerier struct{ tx dbos.Tx }

func (q txQuerier) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	res, err := q.tx.Exec(ctx, sql, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (q txQuerier) Query(ctx context.Context, sql string, args ...any) (postgres.Rows, error) {
	rows, err := q.tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return rowsAdapter{rows}, nil
}

func (q txQuerier) QueryRow(ctx context.Context, sql string, args ...any) postgres.Row {
	return q.tx.QueryRow(ctx, sql, args...)
}

type rowsAdapter struct{ dbos.Rows }

func (r rowsAdapter) Close() { _ = r.Rows.Close() }

// deferrer is a transaction that can hold writes for its next statement
// (the step journal's transactions).
type deferrer interface {
	Defer(ctx context.Context, sql string, args ...any)
}

// deferringTx is txQuerier on a deferrer: a postgres.Deferrer.
type deferringTx struct {
	txQuerier
	d deferrer
}

func (q deferringTx) Defer(ctx context.Context, sql string, args ...any) {
	q.d.Defer(ctx, sql, args...)
}

var _ postgres.Deferrer = deferringTx{}

// InTx returns a view of the store running on a DBOS transaction.
func (e *Env) InTx(tx dbos.Tx) *postgres.Store { return e.Store.WithQuerier(inTx(tx)) }

// inTx is tx as a querier, a [postgres.Deferrer] when tx can hold writes
// for its next statement.
func inTx(tx dbos.Tx) postgres.Querier {
	if d, ok := tx.(deferrer); ok {
		return deferringTx{txQuerier{tx}, d}
	}
	return txQuerier{tx}
}

// skillsFragment is the agent's skills catalog (and preloaded skill bodies)
// for the system prompt: deterministic data of the definition.
func (d *AgentDef) skillsFragment() string { return d.Agent.SkillsPromptFragment() }

// SetQueue makes q the handle Queue returns for its name (the engine's
// admission queue, registered at Launch).
func (e *Env) SetQueue(q dbos.Queue) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.queues == nil {
		e.queues = map[string]dbos.Queue{}
	}
	e.queues[q.GetName()] = q
}

// Queue returns the handle of the DBOS queue name, which a queued run's
// driver enqueues its segments on: the one SetQueue gave, or else the
// queue's configuration read from DBOS's system database (a run admitted
// through a queue this process was not configured with, recovered here).
func (e *Env) Queue(ctx dbos.Context, name string) (dbos.Queue, error) {
	e.mu.RLock()
	q, ok := e.queues[name]
	e.mu.RUnlock()
	if ok {
		return q, nil
	}
	q, err := dbos.RetrieveQueue(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("queue %q of a queued run: %w (a run admitted through a queue needs it registered: start an engine with that queue, or remove the run's workflows)", name, err)
	}
	e.SetQueue(q)
	return q, nil
}
