package integration_test

// The process side of the crash tests (crash_test.go): the agent both the
// killed and the recovering process run, and the child's entry point.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/steps"
)

// Environment of a crash child process.
const (
	crashEnvMode  = "HELIX_CRASH_CHILD" // crashModeRun or crashModeRecover
	crashEnvURL   = "HELIX_CRASH_DATABASE_URL"
	crashEnvPoint = "HELIX_CRASH_KILL_POINT"
	crashEnvGen   = "HELIX_CRASH_GEN"
	// crashEnvExecutor overrides the child's executor ID (default
	// crashExecutorID); crashEnvLease sets its executor lease.
	crashEnvExecutor = "HELIX_CRASH_EXECUTOR"
	crashEnvLease    = "HELIX_CRASH_LEASE"
	// crashEnvHibernate sets the child's Config.HibernateAfter.
	crashEnvHibernate = "HELIX_CRASH_HIBERNATE"

	// crashModeRun starts both sessions and waits to be killed.
	crashModeRun = "run"
	// crashModeRecover launches (DBOS recovers the executor's pending
	// workflows) and exits 0 once every session's run completed.
	crashModeRecover = "recover"
	// crashModeZombie starts both sessions like crashModeRun, but its
	// stalls end when the parent inserts into crash_release (after
	// SIGSTOP, a takeover and SIGCONT); it then waits until its executor
	// rejoined the cluster, runs crashAfterZombie to completion, and exits
	// 0.
	crashModeZombie = "zombie"
)

// Kill points (the value of crashEnvPoint): where the killed process stalls
// the target session so that the parent's SIGKILL lands there.
const (
	crashKillModel       = "model"        // mid-stream in the model call of step 2
	crashKillBeforeTools = "before-tools" // model step 2 checkpointed, its tool not yet executing
	crashKillInTool      = "in-tool"      // tool call-beta of step 1 executing, call-alpha finished
	crashKillBetween     = "between"      // step 1 committed, step 2 not started (OnStepEnd hook of step 1)
)

const (
	// crashExecutorID is the executor ID of both processes: DBOS recovers
	// only its own executor's pending workflows at Launch.
	crashExecutorID = "crash-exec"
	crashAgentName  = "crash-recorder"
	// crashTarget is the session stalled at the kill point under test;
	// crashBystander is stalled in the middle of its first model call in
	// every killed process, so each test also recovers a session with
	// nothing committed.
	crashTarget    = "crash-target"
	crashBystander = "crash-bystander"
	// crashStall bounds a stall; the parent kills the process long before.
	crashStall = 2 * time.Minute
)

// crashSessions are the sessions every crash process runs.
var crashSessions = []string{crashTarget, crashBystander}

// crashStep is one scripted model step: the text, streamed in deltas, and
// the tool calls. Tool call IDs are fixed so that every run's transcript is
// byte for byte the same.
type crashStep struct {
	deltas []string
	calls  []helix.ToolCall
}

func (s crashStep) text() string { return strings.Join(s.deltas, "") }

func crashCall(id, item string) helix.ToolCall {
	return helix.ToolCall{ID: id, Name: "record", Arguments: json.RawMessage(`{"item":"` + item + `"}`)}
}

// crashScript: step 1 calls two tools in parallel, step 2 one tool, step 3
// answers.
var crashScript = []crashStep{
	{deltas: []string{"Let me record ", "alpha ", "and beta."}, calls: []helix.ToolCall{crashCall("call-alpha", "alpha"), crashCall("call-beta", "beta")}},
	{deltas: []string{"Alpha and beta ", "are recorded; ", "now gamma."}, calls: []helix.ToolCall{crashCall("call-gamma", "gamma")}},
	{deltas: []string{"All three ", "items ", "are recorded."}},
}

// crashSchema creates the tables in which the model and the tool record
// every execution (one row per execution, no uniqueness: the tests count).
const crashSchema = `
CREATE TABLE crash_model_calls (
	session_id text NOT NULL,
	step       int  NOT NULL,
	gen        int  NOT NULL,
	at         timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE crash_release (
	at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE crash_tool_runs (
	key          text NOT NULL, -- ToolContext.IdempotencyKey()
	session_id   text NOT NULL,
	tool_call_id text NOT NULL,
	phase        text NOT NULL, -- 'start' when the body begins, 'done' when its effect is complete
	gen          int  NOT NULL,
	at           timestamptz NOT NULL DEFAULT clock_timestamp()
);`

// crashRig is the agent of one process: gen numbers the process (0 for the
// uninterrupted reference run, 1 for the process that is killed, 2 for the
// one that recovers) and point is the kill point the killed process stalls
// at.
type crashRig struct {
	pool  *pgxpool.Pool
	gen   int
	point string
	// zombie: stalls end at the parent's release, not with the process.
	zombie bool
}

// stall blocks a killed process (gen 1) at a kill point until the parent
// kills it.
func (r *crashRig) stall(ctx context.Context, when bool) error {
	if r.gen != 1 || !when {
		return nil
	}
	if r.zombie {
		return r.awaitRelease(ctx)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(crashStall):
		return errors.New("crash test: stalled process was never killed")
	}
}

// awaitRelease polls crash_release until the parent released the stalls.
func (r *crashRig) awaitRelease(ctx context.Context) error {
	for {
		var released bool
		if err := r.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM crash_release)`).Scan(&released); err != nil || released {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (r *crashRig) agent() *helix.Agent {
	type recordIn struct {
		Item string `json:"item"`
	}
	type recordOut struct {
		Item string `json:"item"`
		Key  string `json:"key"`
	}
	record := helix.MustNewTool("record", "Record an item durably", func(ctx context.Context, in recordIn, tc helix.ToolContext) (recordOut, error) {
		target := tc.SessionID() == crashTarget
		if err := r.stall(ctx, target && r.point == crashKillBeforeTools && tc.ToolCallID() == "call-gamma"); err != nil {
			return recordOut{}, err
		}
		if err := r.toolRun(ctx, tc, "start"); err != nil {
			return recordOut{}, err
		}
		if err := r.stall(ctx, target && r.point == crashKillInTool && tc.ToolCallID() == "call-beta"); err != nil {
			return recordOut{}, err
		}
		if err := r.toolRun(ctx, tc, "done"); err != nil {
			return recordOut{}, err
		}
		return recordOut{Item: in.Item, Key: tc.IdempotencyKey()}, nil
	})
	model := helix.ModelFunc(func(ctx context.Context, req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
		// The script position is the number of assistant messages, so a
		// re-executed call plays the same step.
		n := 0
		for _, m := range req.Messages {
			if m.Role == helix.RoleAssistant {
				n++
			}
		}
		if n >= len(crashScript) {
			return helix.StepResult{}, fmt.Errorf("crash script has %d steps, asked for step %d", len(crashScript), n+1)
		}
		step := n + 1
		if _, err := r.pool.Exec(ctx, `INSERT INTO crash_model_calls (session_id, step, gen) VALUES ($1, $2, $3)`,
			req.AgentID, step, r.gen); err != nil {
			return helix.StepResult{}, err
		}
		stall := (req.AgentID == crashBystander && step == 1) ||
			(req.AgentID == crashTarget && r.point == crashKillModel && step == 2)
		s := crashScript[n]
		for i, d := range s.deltas {
			cb.TextDelta(d)
			if i == 0 {
				if err := r.stall(ctx, stall); err != nil {
					return helix.StepResult{}, err
				}
			}
		}
		res := helix.StepResult{Type: helix.StepText, Content: s.text(), StopReason: helix.StopEndTurn,
			Usage: helix.Usage{InputTokens: 10 * step, OutputTokens: len(s.deltas)}}
		if len(s.calls) > 0 {
			res.Type, res.ToolCalls, res.StopReason = helix.StepToolCalls, s.calls, helix.StopToolUse
		}
		return res, nil
	})
	return &helix.Agent{
		Name:         crashAgentName,
		SystemPrompt: "Record the items you are asked to record.",
		Model:        model,
		Tools:        []*helix.Tool{record},
		Hooks: &helix.Hooks{
			// Fired in its own step after the commit of each step: the gap
			// between a commit and the next model call.
			OnStepEnd: func(ctx context.Context, hc helix.HookContext, _ helix.StepResult) error {
				return r.stall(ctx, hc.SessionID == crashTarget && r.point == crashKillBetween && hc.Step == 1)
			},
		},
	}
}

func (r *crashRig) toolRun(ctx context.Context, tc helix.ToolContext, phase string) error {
	_, err := r.pool.Exec(ctx, `INSERT INTO crash_tool_runs (key, session_id, tool_call_id, phase, gen) VALUES ($1, $2, $3, $4, $5)`,
		tc.IdempotencyKey(), tc.SessionID(), tc.ToolCallID(), phase, r.gen)
	return err
}

// The child process is this test binary re-executed with crashEnvMode set.
// It takes over in init, before TestMain: TestMain would start a Postgres
// container in every child (and a SIGKILLed child would leave its container
// running), and the child needs nothing of the testing package.
func init() {
	if os.Getenv(crashEnvMode) == "" {
		return
	}
	// The parent holds stdin open; if it dies without killing us, we exit
	// instead of stalling.
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		fmt.Fprintln(os.Stderr, "crash child: stdin closed, exiting")
		os.Exit(3)
	}()
	if err := runCrashChild(context.Background()); err != nil {
		fmt.Fprintf(os.Stderr, "crash child: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runCrashChild(ctx context.Context) error {
	mode, url, point := os.Getenv(crashEnvMode), os.Getenv(crashEnvURL), os.Getenv(crashEnvPoint)
	gen, err := strconv.Atoi(os.Getenv(crashEnvGen))
	if err != nil {
		return fmt.Errorf("%s: %w", crashEnvGen, err)
	}
	log := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, NoColor: true, TimeFormat: "15:04:05.000"}).
		Level(zerolog.InfoLevel).With().Timestamp().Int("gen", gen).Logger()
	if mode == chaosModeWorker {
		lease, err := time.ParseDuration(os.Getenv(crashEnvLease))
		if err != nil {
			return fmt.Errorf("%s: %w", crashEnvLease, err)
		}
		return runChaosWorker(ctx, url, os.Getenv(crashEnvExecutor), lease, log.With().Str("worker", os.Getenv(crashEnvExecutor)).Logger())
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	rig := &crashRig{pool: pool, gen: gen, point: point, zombie: mode == crashModeZombie}
	agent, sessions, input := rig.agent(), crashSessions, "Record alpha, beta and gamma."
	switch mode {
	case hitlModeRun, hitlModeRecover:
		agent, sessions, input = rig.hitlAgent(), []string{hitlTarget}, hitlInput
		mode = map[string]string{hitlModeRun: crashModeRun, hitlModeRecover: crashModeRecover}[mode]
	case companionModeRun, companionModeRecover:
		agent, sessions, input = rig.companionLead(), []string{companionTarget}, companionInput
		mode = map[string]string{companionModeRun: crashModeRun, companionModeRecover: crashModeRecover}[mode]
	}
	cfg := engine.Config{DatabaseURL: url, ExecutorID: cmp.Or(os.Getenv(crashEnvExecutor), crashExecutorID), Logger: &log,
		ShutdownTimeout: 2 * time.Second}
	if v := os.Getenv(crashEnvLease); v != "" {
		if cfg.ExecutorLease, err = time.ParseDuration(v); err != nil {
			return fmt.Errorf("%s: %w", crashEnvLease, err)
		}
	}
	if v := os.Getenv(crashEnvHibernate); v != "" {
		if cfg.HibernateAfter, err = time.ParseDuration(v); err != nil {
			return fmt.Errorf("%s: %w", crashEnvHibernate, err)
		}
	}
	e, err := engine.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() { _ = e.Shutdown(context.WithoutCancel(ctx)) }()
	if err := e.Register(agent); err != nil {
		return err
	}
	// In recover mode with crashExecutorID this is the recovery: DBOS
	// resumes the executor's pending workflows here. With another executor
	// ID, the engine's takeover sweep claims the dead executor's.
	if err := e.Launch(ctx); err != nil {
		return err
	}
	switch mode {
	case crashModeZombie:
		for _, sid := range sessions {
			if _, err := e.Execute(ctx, agent, engine.Input{Message: input}, &engine.ExecuteOptions{SessionID: sid}); err != nil {
				return err
			}
		}
		return runZombie(ctx, e, agent, pool, cfg.ExecutorID, input)
	case crashModeRun:
		for _, sid := range sessions {
			if _, err := e.Execute(ctx, agent, engine.Input{Message: input},
				&engine.ExecuteOptions{SessionID: sid}); err != nil {
				return err
			}
		}
		time.Sleep(crashStall) // not an assertion: this process waits to be killed
		return errors.New("never killed")
	case crashModeRecover:
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		for _, sid := range sessions {
			// Reads go on through a Postgres restart (the takeover tests
			// restart it under this process).
			var res helix.AgentResult
			var h *engine.Handle
			err := retryReads(ctx, func() error {
				var err error
				if h, err = e.Run(ctx, sid, ""); err != nil {
					return err
				}
				res, err = h.Result(ctx)
				return err
			})
			if err != nil {
				return fmt.Errorf("session %s: %w", sid, err)
			}
			if res.Status != helix.AgentCompleted {
				return fmt.Errorf("session %s ended %s: %s", sid, res.Status, res.Error)
			}
			// Result returns once the run record is final, which the last
			// commit writes; the workflow still fires that step's hooks
			// after it. Wait for the workflow itself, or Shutdown would
			// leave it pending.
			wh, err := dbos.RetrieveWorkflow[steps.Outcome](e.DBOS(), h.WorkflowID)
			if err != nil {
				return err
			}
			if _, err := wh.GetResult(dbos.WithHandleTimeout(30*time.Second), dbos.WithHandlePollingInterval(20*time.Millisecond)); err != nil {
				return fmt.Errorf("session %s: workflow %s: %w", sid, h.WorkflowID, err)
			}
		}
		// Child workflows (companions) may end just after their parent
		// got what it waited for.
		for {
			var pending []dbos.WorkflowStatus
			err := retryReads(ctx, func() error {
				var err error
				pending, err = dbos.ListWorkflows(e.DBOS(), dbos.WithFilterStatus(dbos.WorkflowStatusPending))
				return err
			})
			if err != nil {
				return err
			}
			if len(pending) == 0 {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("workflow %s is still pending: %w", pending[0].ID, ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
		if err := e.Shutdown(ctx); err != nil {
			// Whatever still holds a connection or a goroutine is in here.
			_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
			return err
		}
		return nil
	}
	return fmt.Errorf("unknown mode %q", mode)
}

// crashAfterZombie is the session a zombie runs once it rejoined.
const crashAfterZombie = "crash-after-zombie"

// runZombie is the rest of a zombie's life after the parent resumed it: it
// waits until its executor rejoined the cluster (its row renewed after the
// release), then serves new work: one session, to completion.
func runZombie(ctx context.Context, e *engine.Engine, agent *helix.Agent, pool *pgxpool.Pool, id, input string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	rig := &crashRig{pool: pool}
	if err := rig.awaitRelease(ctx); err != nil {
		return err
	}
	for {
		var rejoined bool
		err := pool.QueryRow(ctx, `SELECT x.taken_over_by IS NULL AND x.started_at > r.at
			FROM helix.executors x, crash_release r WHERE x.executor_id = $1`, id).Scan(&rejoined)
		if err != nil {
			return fmt.Errorf("waiting to rejoin: %w", err)
		}
		if rejoined {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("executor %s never rejoined: %w", id, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	h, err := e.Execute(ctx, agent, engine.Input{Message: input}, &engine.ExecuteOptions{SessionID: crashAfterZombie})
	if err != nil {
		return err
	}
	res, err := h.Await(ctx)
	if err != nil {
		return err
	}
	if res.Status != helix.AgentCompleted {
		return fmt.Errorf("session %s ended %s: %s", crashAfterZombie, res.Status, res.Error)
	}
	return e.Shutdown(ctx)
}

// retryReads runs read until it succeeds or ctx ends: a read (or a test
// tool's write) that fails while Postgres restarts is tried again.
func retryReads(ctx context.Context, read func() error) error {
	for {
		err := read()
		if err == nil || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}
