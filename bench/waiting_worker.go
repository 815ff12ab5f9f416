package bench

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
)

// Durable identities of the waiting-sessions agent.
const (
	// WaitingAgentName is the agent type of the sessions Waiting leaves
	// waiting for an approval.
	WaitingAgentName = "helix-bench-waiting"
	// ApprovalToolName is the waiting-sessions agent's tool: it needs a
	// person's approval before it runs.
	ApprovalToolName = "apply_change"
)

// approvalCallID is the ID of the approval-gated call of every waiting
// session (call IDs are scoped to their session).
const approvalCallID = "approve-1"

// waitingSessionID is the ID of the i-th (1-based) session started with
// prefix.
func waitingSessionID(prefix string, i int) string { return prefix + "-" + strconv.Itoa(i) }

// waitingStarters is how many sessions a worker starts at once: enough to
// keep a small pool busy, few enough that the starts do not queue for its
// connections behind each other for long.
const waitingStarters = 16

// The operations the parent asks of a worker, one JSON line each on its
// stdin; the worker answers each with one workerLine without Event and
// with the request's ID. It serves launch and stop alone, once the
// requests before them were answered, and the others concurrently: their
// answers may come in any order.
const (
	// opLaunch builds and launches the engine (the first request).
	opLaunch = "launch"
	// opStart starts Sessions sessions, IDs Prefix-1 … Prefix-Sessions,
	// and answers once every Execute returned.
	opStart = "start"
	// opStats answers the process's footprint, after a forced GC.
	opStats = "stats"
	// opWaiting answers how many of the agent's unanswered calls a run of
	// this process waits for now.
	opWaiting = "waiting"
	// opApprove approves the waiting call of Session through the worker's
	// own engine (Engine.SubmitToolResult), which then starts the woken
	// continuation itself, and answers once it returned.
	opApprove = "approve"
	// opStop shuts the engine down; the worker exits after its answer.
	opStop = "stop"
)

// Events a worker writes on its own, between answers.
const (
	// eventTool: the approved tool ran, for Session, at At.
	eventTool = "tool"
	// eventStep: the model was called for step 2 of Session, at At.
	eventStep = "step"
	// eventProgress: a progress line (Message) for the parent's output.
	eventProgress = "progress"
)

// workerRequest is one line the parent writes on a worker's stdin.
type workerRequest struct {
	// ID is echoed in the answer (the parent numbers its requests).
	ID int64  `json:"id"`
	Op string `json:"op"`
	// DatabaseURL, ExecutorID, MaxConns and HibernateAfter (the engine's
	// Config.HibernateAfter, in ns) configure opLaunch.
	DatabaseURL    string        `json:"databaseUrl,omitempty"`
	ExecutorID     string        `json:"executorId,omitempty"`
	MaxConns       int           `json:"maxConns,omitempty"`
	HibernateAfter time.Duration `json:"hibernateAfter,omitempty"`
	// Prefix and Sessions configure opStart.
	Prefix   string `json:"prefix,omitempty"`
	Sessions int    `json:"sessions,omitempty"`
	// Session is opApprove's session.
	Session string `json:"session,omitempty"`
}

// workerLine is one line a worker writes on its stdout: an event when
// Event is set, else the answer to request ID.
type workerLine struct {
	ID      int64  `json:"id,omitempty"`
	Event   string `json:"event,omitempty"`
	Session string `json:"session,omitempty"`
	At      int64  `json:"at,omitempty"` // Unix ns, the wall clock the parent shares
	Message string `json:"message,omitempty"`

	// Error is a failed request's error.
	Error string `json:"error,omitempty"`
	// LaunchNS is opLaunch's Engine.Launch time, PoolMaxConns its pool
	// size.
	LaunchNS     int64 `json:"launchNs,omitempty"`
	PoolMaxConns int32 `json:"poolMaxConns,omitempty"`
	// Stats answers opStats.
	Stats *workerStats `json:"stats,omitempty"`
	// Waiting answers opWaiting.
	Waiting int `json:"waiting,omitempty"`
}

// workerStats is a worker's footprint and what its agent did.
type workerStats struct {
	Goroutines int    `json:"goroutines"`
	HeapInuse  uint64 `json:"heapInuse"`
	StackInuse uint64 `json:"stackInuse"`
	// ModelCalls counts the model calls for step 1 and step 2, ToolRuns
	// the approved tool's runs, Failures the calls that did not go as
	// scripted, all since the worker started.
	ModelCalls [2]int64 `json:"modelCalls"`
	ToolRuns   int64    `json:"toolRuns"`
	Failures   int64    `json:"failures"`
}

// waitingWorker is the process under measure: one engine running the
// waiting-sessions agent, driven by the parent's requests.
type waitingWorker struct {
	out  *json.Encoder
	outM sync.Mutex
	log  io.Writer

	pool  *pgxpool.Pool
	eng   *engine.Engine
	agent *helix.Agent

	modelCalls [2]atomic.Int64
	toolRuns   atomic.Int64
	failures   atomic.Int64
}

// WorkerCPUProfileEnv names the environment variable that makes the
// waiting-sessions workers profile themselves: set to a path prefix, each
// worker process writes a pprof CPU profile of its whole life to
// <prefix>.<role>.pprof, its role being migrate (the first worker, which
// migrates the database), A (the worker killed with SIGKILL: its profile
// may be empty or cut short) or B (the restarted worker, stopped cleanly:
// its profile is complete). Read it with `go tool pprof`.
const WorkerCPUProfileEnv = "HELIX_BENCH_WORKER_CPUPROFILE"

// waitingWorkerRoleEnv tells a worker its role (migrate, A or B), for the
// name of its CPU profile; Waiting sets it.
const waitingWorkerRoleEnv = "HELIX_BENCH_WAITING_WORKER_ROLE"

// ServeWaitingWorker is the worker process of [Waiting]: it reads the
// parent's requests, one JSON line each, from in, and writes answers and
// events, one JSON line each, to out; log gets the engine's warnings. It
// returns after a stop request or when in ends (the parent is gone),
// having shut its engine down. `helix-dbos bench-waiting-worker` runs it;
// nothing else should write to out. With [WorkerCPUProfileEnv] set it
// writes a CPU profile until it returns.
func ServeWaitingWorker(ctx context.Context, in io.Reader, out, log io.Writer) (err error) {
	stopProfile, err := startWorkerProfile()
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, stopProfile()) }()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &waitingWorker{out: json.NewEncoder(out), log: log}
	var inflight sync.WaitGroup
	defer func() {
		cancel() // the parent is gone, or the engine stopped: abandon the requests in flight
		inflight.Wait()
		err = errors.Join(err, w.shutdown(ctx))
	}()
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var req workerRequest
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			return fmt.Errorf("bench worker: decode the request %q: %w", sc.Text(), err)
		}
		if req.Op != opLaunch && req.Op != opStop {
			inflight.Go(func() { _ = w.answer(ctx, req) }) // a failed write: the parent is gone, in ends
			continue
		}
		inflight.Wait() // the engine changes: no request may be using it
		if err := w.answer(ctx, req); err != nil {
			return err
		}
		if req.Op == opStop {
			return nil
		}
	}
	return sc.Err()
}

// answer serves req and writes its answer.
func (w *waitingWorker) answer(ctx context.Context, req workerRequest) error {
	ans, err := w.serve(ctx, req)
	if err != nil {
		ans = workerLine{Error: err.Error()}
	}
	ans.ID = req.ID
	return w.write(ans)
}

// startWorkerProfile starts the CPU profile [WorkerCPUProfileEnv] asks
// for, if it does, and returns the function that stops and flushes it.
func startWorkerProfile() (stop func() error, err error) {
	prefix := os.Getenv(WorkerCPUProfileEnv)
	if prefix == "" {
		return func() error { return nil }, nil
	}
	role := cmp.Or(os.Getenv(waitingWorkerRoleEnv), "pid"+strconv.Itoa(os.Getpid()))
	path := prefix + "." + role + ".pprof"
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("bench worker: create the CPU profile (%s): %w: give a writable path prefix", WorkerCPUProfileEnv, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("bench worker: start the CPU profile %s: %w", path, err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("bench worker: write the CPU profile %s: %w", path, err)
		}
		return nil
	}, nil
}

func (w *waitingWorker) serve(ctx context.Context, req workerRequest) (workerLine, error) {
	if req.Op != opLaunch && w.eng == nil {
		return workerLine{}, fmt.Errorf("bench worker: %q before launch: the parent must launch the engine first", req.Op)
	}
	switch req.Op {
	case opLaunch:
		return w.launch(ctx, req)
	case opStart:
		return workerLine{}, w.start(ctx, req.Prefix, req.Sessions)
	case opStats:
		return workerLine{Stats: w.stats()}, nil
	case opWaiting:
		n, err := w.waiting(ctx)
		return workerLine{Waiting: n}, err
	case opApprove:
		return workerLine{}, approveSession(ctx, w.eng.SubmitToolResult, req.Session)
	case opStop:
		return workerLine{}, w.shutdown(ctx)
	}
	return workerLine{}, fmt.Errorf("bench worker: unknown request %q", req.Op)
}

// write writes one line to the parent; events come from the engine's
// goroutines, answers from the request loop.
func (w *waitingWorker) write(l workerLine) error {
	w.outM.Lock()
	defer w.outM.Unlock()
	if err := w.out.Encode(l); err != nil {
		return fmt.Errorf("bench worker: write to the parent: %w", err)
	}
	return nil
}

// stampEvent tells the parent that session reached what event stands for,
// now.
func (w *waitingWorker) stampEvent(event, session string) {
	_ = w.write(workerLine{Event: event, Session: session, At: time.Now().UnixNano()})
}

func (w *waitingWorker) launch(ctx context.Context, req workerRequest) (workerLine, error) {
	if w.eng != nil {
		return workerLine{}, errors.New("bench worker: launched twice")
	}
	pool, err := openEnginePool(ctx, req.DatabaseURL, req.MaxConns, nil)
	if err != nil {
		return workerLine{}, err
	}
	logger := zerolog.New(w.log).Level(zerolog.WarnLevel).With().Timestamp().Logger()
	eng, err := engine.New(ctx, engine.Config{Pool: pool, AppName: appName, ExecutorID: req.ExecutorID,
		ApplicationVersion: applicationVersion, Logger: &logger, HibernateAfter: req.HibernateAfter})
	if err != nil {
		pool.Close()
		return workerLine{}, err
	}
	w.pool, w.eng, w.agent = pool, eng, w.newAgent()
	if err := eng.Register(w.agent); err != nil {
		return workerLine{}, err
	}
	began := time.Now()
	if err := eng.Launch(ctx); err != nil {
		return workerLine{}, err
	}
	return workerLine{LaunchNS: int64(time.Since(began)), PoolMaxConns: pool.Config().MaxConns}, nil
}

// shutdown shuts the engine down (which closes the pool); idempotent.
func (w *waitingWorker) shutdown(ctx context.Context) error {
	if w.eng == nil {
		return nil
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	err := w.eng.Shutdown(sctx)
	w.pool.Close()
	w.eng = nil
	return err
}

// start starts sessions prefix-1 … prefix-n, waitingStarters at a time, and
// returns once each Execute returned (each run is then under way; it
// suspends by itself). It tells the parent its progress every 2 s, however
// slow the starts.
func (w *waitingWorker) start(ctx context.Context, prefix string, n int) error {
	var next, started, last atomic.Int64
	last.Store(time.Now().UnixNano())
	errs := make([]error, waitingStarters)
	var wg sync.WaitGroup
	for g := range waitingStarters {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n) && ctx.Err() == nil; i = next.Add(1) {
				id := waitingSessionID(prefix, int(i))
				if _, err := w.eng.Execute(ctx, w.agent, engine.Input{Message: "Apply the change."}, &engine.ExecuteOptions{SessionID: id}); err != nil {
					errs[g] = fmt.Errorf("start session %s: %w", id, err)
					return
				}
				s, now, l := started.Add(1), time.Now().UnixNano(), last.Load()
				if time.Duration(now-l) >= 2*time.Second && last.CompareAndSwap(l, now) {
					_ = w.write(workerLine{Event: eventProgress, Message: fmt.Sprintf("start: %d/%d sessions started", s, n)})
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return ctx.Err()
}

// stats returns the footprint after debug.FreeOSMemory: a forced GC that
// also returns the freed memory to the system, so the parent's reading of
// the resident set counts what the process holds, not what it has not
// given back yet.
func (w *waitingWorker) stats() *workerStats {
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return &workerStats{
		Goroutines: runtime.NumGoroutine(), HeapInuse: m.HeapInuse, StackInuse: m.StackInuse,
		ModelCalls: [2]int64{w.modelCalls[0].Load(), w.modelCalls[1].Load()},
		ToolRuns:   w.toolRuns.Load(), Failures: w.failures.Load(),
	}
}

// waiting counts the agent's unanswered calls whose run waits for the
// answer in this process now (its wait watches the call's wake-up).
func (w *waitingWorker) waiting(ctx context.Context) (int, error) {
	rows, err := w.pool.Query(ctx, `SELECT p.value->>'workflowId', p.key FROM helix.sessions s, jsonb_each(s.pending_client_tool_calls) p
		WHERE s.agent_type = $1 AND NOT p.value ? 'submission'`, WaitingAgentName)
	if err != nil {
		return 0, fmt.Errorf("bench worker: list the waiting calls: %w", err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var wf, call string
		if err := rows.Scan(&wf, &call); err != nil {
			return 0, fmt.Errorf("bench worker: list the waiting calls: %w", err)
		}
		if w.eng.WaitsForAnswer(wf, call) {
			n++
		}
	}
	return n, rows.Err()
}

// newAgent returns the waiting-sessions agent: its scripted model calls the
// approval-gated tool at step 1 and answers in text at step 2, once it
// reads the tool's result; the tool and the step-2 model call tell the
// parent when they ran.
func (w *waitingWorker) newAgent() *helix.Agent {
	tool := helix.MustNewTool(ApprovalToolName, "Apply a change, once a person approved it.",
		func(_ context.Context, _ noopInput, tc helix.ToolContext) (noopOutput, error) {
			w.toolRuns.Add(1)
			w.stampEvent(eventTool, tc.SessionID())
			return noopOutput{OK: true}, nil
		}, helix.RequireApproval())
	model := func(_ context.Context, req helix.ModelRequest, _ helix.StreamCallbacks) (helix.StepResult, error) {
		switch req.Step {
		case 1:
			w.modelCalls[0].Add(1)
			return helix.StepResult{Type: helix.StepToolCalls, StopReason: helix.StopToolUse, ToolCalls: []helix.ToolCall{{
				ID: approvalCallID, Name: ApprovalToolName, Arguments: json.RawMessage(`{}`),
			}}}, nil
		case 2:
			w.modelCalls[1].Add(1)
			w.stampEvent(eventStep, req.AgentID)
			if n := len(req.Messages); n == 0 || req.Messages[n-1].Role != helix.RoleTool || req.Messages[n-1].ToolCallID != approvalCallID {
				w.failures.Add(1)
				return helix.StepResult{}, fmt.Errorf("bench: step 2 of session %s does not read the approved tool's result last", req.AgentID)
			}
			return helix.StepResult{Type: helix.StepText, Content: "done", StopReason: helix.StopEndTurn}, nil
		}
		w.failures.Add(1)
		return helix.StepResult{}, fmt.Errorf("bench: model called for step %d of a 2-step session", req.Step)
	}
	return &helix.Agent{Name: WaitingAgentName, Model: helix.ModelFunc(model), Tools: []*helix.Tool{tool}, MaxSteps: 2}
}
