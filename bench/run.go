package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
)

// Engine identity of the bench: its own executor and application version,
// so its Launch never recovers another process's workflows and no other
// process recovers its own.
const (
	appName            = "helix-bench"
	applicationVersion = "helix-bench"
)

// warmupHITLSessions is the number of unreported human-in-the-loop
// sessions of the warm-up: enough for the pool's connections to have
// prepared the submission's and the woken run's statements.
const warmupHITLSessions = 3

// topStatements is how many statements a phase's SQL profile lists (the
// text report prints the first textStatements).
const topStatements = 100

// Run measures the engine on cfg.DatabaseURL and returns the report. With
// the defaults it takes about 20 s on a quiet 2-vCPU machine (twice that
// on a busy one), most of it the 1000-step session, the concurrent phase,
// the human-in-the-loop sessions and 2 s of token streaming.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	began := time.Now()
	h, err := newHarness(ctx, cfg, max(cfg.Steps, cfg.StepsPerSession, cfg.WarmupSteps))
	if err != nil {
		return nil, err
	}
	defer h.close(ctx)

	r := &Report{Config: ReportConfig{Steps: cfg.Steps, Sessions: cfg.Sessions, StepsPerSession: cfg.StepsPerSession, FloorSteps: cfg.FloorSteps,
		HITLSamples: max(cfg.HITLSamples, 0), TxTool: cfg.TxTool}}
	if cfg.StreamDeltas > 0 {
		r.Config.StreamSessions, r.Config.StreamDeltas = cfg.StreamSessions, cfg.StreamDeltas
	}
	if r.Machine, err = describeMachine(ctx, h.pool); err != nil {
		return nil, fmt.Errorf("bench: describe the database: %w", err)
	}
	if cfg.WarmupSteps > 1 {
		cfg.Progress(fmt.Sprintf("warm-up: one session of %d steps", cfg.WarmupSteps))
		if _, err := h.sequential(ctx, cfg.WarmupSteps); err != nil {
			return nil, fmt.Errorf("bench: warm-up: %w", err)
		}
		if cfg.HITLSamples > 0 {
			cfg.Progress(fmt.Sprintf("warm-up: %d human-in-the-loop sessions", warmupHITLSessions))
			if _, err := h.hitl(ctx, warmupHITLSessions); err != nil {
				return nil, fmt.Errorf("bench: warm-up: %w", err)
			}
		}
	}
	cfg.Progress(fmt.Sprintf("floor: %d round trips", cfg.FloorSteps))
	if r.Floors.RoundTrip, err = h.roundTripFloor(ctx, cfg.FloorSteps); err != nil {
		return nil, err
	}
	cfg.Progress(fmt.Sprintf("floor: %d single-row commits", cfg.FloorSteps))
	if r.Floors.Commit, err = h.commitFloor(ctx, cfg.FloorSteps); err != nil {
		return nil, err
	}
	cfg.Progress(fmt.Sprintf("floor: %d no-op DBOS steps", cfg.FloorSteps))
	if r.Floors.DBOSStep, err = h.workflowFloor(ctx, h.floors.noop, cfg.FloorSteps); err != nil {
		return nil, fmt.Errorf("bench: DBOS step floor: %w", err)
	}
	cfg.Progress(fmt.Sprintf("floor: %d DBOS agent-step skeletons", cfg.FloorSteps))
	if r.Floors.DBOSAgentStep, err = h.workflowFloor(ctx, h.floors.skeleton, cfg.FloorSteps); err != nil {
		return nil, fmt.Errorf("bench: DBOS agent-step floor: %w", err)
	}
	cfg.Progress(fmt.Sprintf("sequential: one session of %d steps", cfg.Steps))
	if r.Sequential, err = h.sequential(ctx, cfg.Steps); err != nil {
		return nil, fmt.Errorf("bench: sequential session: %w", err)
	}
	cfg.Progress(fmt.Sprintf("concurrent: %d sessions of %d steps", cfg.Sessions, cfg.StepsPerSession))
	if r.Concurrent, err = h.concurrent(ctx, cfg.Sessions, cfg.StepsPerSession); err != nil {
		return nil, fmt.Errorf("bench: concurrent sessions: %w", err)
	}
	if cfg.HITLSamples > 0 {
		cfg.Progress(fmt.Sprintf("human in the loop: %d sessions suspended on a client tool, answered one at a time", cfg.HITLSamples))
		if r.HITL, err = h.hitl(ctx, cfg.HITLSamples); err != nil {
			return nil, fmt.Errorf("bench: human in the loop: %w", err)
		}
	}
	if cfg.StreamDeltas > 0 {
		cfg.Progress(fmt.Sprintf("token streaming: %d streams of %d deltas, one every %s", cfg.StreamSessions, cfg.StreamDeltas, streamInterval))
		if r.Streaming, err = h.streaming(ctx, cfg.StreamSessions, cfg.StreamDeltas); err != nil {
			return nil, fmt.Errorf("bench: token streaming: %w", err)
		}
	}
	r.evaluate()
	r.DurationS = round3(time.Since(began).Seconds())
	return r, nil
}

// harness is a launched engine with the bench agents and the floor
// workflows on a traced pool.
type harness struct {
	cfg       Config
	pool      *pgxpool.Pool
	tracer    *sqlTracer
	eng       *engine.Engine
	script    *script
	agent     *helix.Agent
	hitlAgent *helix.Agent
	floors    *floors
	prefix    string
	// dropTxEffects: Config.TxTool's table was created, and close drops it.
	dropTxEffects bool

	mu   sync.Mutex
	next int
}

// newHarness launches the bench engine; tweak, when given, adjusts its
// engine.Config (the churn mode adds a retention policy and a logger).
func newHarness(ctx context.Context, cfg Config, maxSteps int, tweak ...func(*engine.Config)) (_ *harness, err error) {
	tracer := newSQLTracer()
	pool, err := openEnginePool(ctx, cfg.DatabaseURL, cfg.MaxConns, tracer)
	if err != nil {
		return nil, err
	}
	id := uuid.NewString()[:8]
	ec := engine.Config{Pool: pool, AppName: appName, ExecutorID: "helix-bench-" + id, ApplicationVersion: applicationVersion}
	for _, f := range tweak {
		f(&ec)
	}
	eng, err := engine.New(ctx, ec)
	if err != nil {
		pool.Close()
		return nil, err
	}
	h := &harness{cfg: cfg, pool: pool, tracer: tracer, eng: eng, prefix: "bench-" + id}
	defer func() {
		if err != nil {
			h.close(ctx)
		}
	}()
	if h.floors, err = newFloors(eng.DBOS(), pool); err != nil {
		return nil, err
	}
	h.script = &script{tracer: tracer, traces: map[string]*trace{}, txTool: cfg.TxTool}
	if cfg.TxTool {
		table := pgx.Identifier{TxEffectsTable}.Sanitize()
		if _, err := pool.Exec(ctx, `DROP TABLE IF EXISTS `+table+`; CREATE TABLE `+table+
			` (id bigserial PRIMARY KEY, session_id text NOT NULL, step int NOT NULL, UNIQUE (session_id, step))`); err != nil {
			return nil, fmt.Errorf("bench: create the transactional tool's table %s: %w", TxEffectsTable, err)
		}
		h.dropTxEffects = true
	}
	h.agent, h.hitlAgent = h.script.agent(maxSteps), h.script.hitlAgent()
	if err := eng.Register(h.agent, h.hitlAgent); err != nil {
		return nil, err
	}
	if err := eng.Launch(ctx); err != nil {
		return nil, err
	}
	return h, nil
}

// openEnginePool opens a pool on url as an engine's own (engine.ConfigurePool:
// the figures include its check), of maxConns connections (0: pgx's default
// or the URL's pool_max_conns), with tracer on its connections when not
// nil.
func openEnginePool(ctx context.Context, url string, maxConns int, tracer pgx.QueryTracer) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("bench: parse the database URL: %w", err)
	}
	if tracer != nil {
		pc.ConnConfig.Tracer = tracer
	}
	if maxConns > 0 {
		pc.MaxConns = int32(min(maxConns, 1<<20))
	}
	engine.ConfigurePool(pc)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("bench: open the database: %w", err)
	}
	return pool, nil
}

// close shuts the engine down (which closes the pool).
func (h *harness) close(ctx context.Context) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if h.dropTxEffects {
		_, _ = h.pool.Exec(sctx, `DROP TABLE IF EXISTS `+pgx.Identifier{TxEffectsTable}.Sanitize())
	}
	_ = h.eng.Shutdown(sctx)
	h.pool.Close()
}

// run is one session in flight.
type run struct {
	trace  *trace
	handle *engine.Handle
	steps  int
}

// start starts a session of steps steps; the SQL counters are snapshot
// when the model plays each of snapSteps.
func (h *harness) start(ctx context.Context, steps int, snapSteps ...int) (*run, error) {
	id := h.sessionID()
	t := newTrace(steps)
	if len(snapSteps) > 0 {
		t.snaps = map[int]*sqlSnapshot{}
		for _, s := range snapSteps {
			t.snaps[s] = &sqlSnapshot{}
		}
	}
	h.script.add(id, t)
	hd, err := h.eng.Execute(ctx, h.agent, engine.Input{Message: "Run the benchmark."}, &engine.ExecuteOptions{SessionID: id})
	if err != nil {
		return nil, err
	}
	return &run{trace: t, handle: hd, steps: steps}, nil
}

// sessionID returns a new session ID of the harness.
func (h *harness) sessionID() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.next++
	return fmt.Sprintf("%s-%d", h.prefix, h.next)
}

// wait returns when the run has ended. While it runs it looks at the run
// record once a second only (to notice a run that failed before its last
// step), so waiting adds no load worth the name; after the last model call
// it polls the run record until the commit lands.
func (h *harness) wait(ctx context.Context, r *run) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-r.trace.done:
			done = true
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			rec, err := h.eng.RunInfo(ctx, r.handle.RunID)
			if err != nil {
				return err
			}
			if rec.Status.Final() || rec.Status.Suspended() {
				done = true
			}
		}
	}
	res, err := r.handle.Result(ctx)
	if err != nil {
		return err
	}
	if res.Status != helix.AgentCompleted {
		return fmt.Errorf("session %s ended %s: %s (%s)", r.handle.SessionID, res.Status, res.Error, res.ErrorCode)
	}
	return nil
}

// verify checks that the session committed every step, once.
func (h *harness) verify(ctx context.Context, r *run) ([]time.Duration, error) {
	st, err := r.handle.State(ctx)
	if err != nil {
		return nil, err
	}
	if st.StepCount != r.steps {
		return nil, fmt.Errorf("session %s committed %d steps, want %d", r.handle.SessionID, st.StepCount, r.steps)
	}
	return r.trace.overheads()
}

// progress reports the model calls played every two seconds until stop.
func (h *harness) progress(label string, total int) (stop func()) {
	from := h.script.played.Load()
	return h.every2s(func() string { return fmt.Sprintf("%s: %d/%d steps", label, h.script.played.Load()-from, total) })
}

// every2s sends line() to the progress output every two seconds until stop.
func (h *harness) every2s(line func() string) (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
				h.cfg.Progress(line())
			}
		}
	})
	return func() { close(quit); wg.Wait() }
}

func (h *harness) sequential(ctx context.Context, steps int) (Sequential, error) {
	stop := h.progress("session", steps)
	defer stop()
	// The early and late windows' SQL: sample i spans steps i+1 to i+2, so
	// a window of w samples from step a spans the snapshots at a and a+w.
	start, w := windowBounds(steps - 1)
	e1, e2, l1, l2 := start+1, start+1+w, steps-w, steps
	// The storage marks are outside the SQL snapshots: their statements
	// are not the session's.
	st0, err := markStorage(ctx, h.pool)
	if err != nil {
		return Sequential{}, err
	}
	cpu0, sql0 := sampleCPU(ctx, h.pool), h.tracer.snapshot()
	r, err := h.start(ctx, steps, e1, e2, l1, l2)
	if err != nil {
		return Sequential{}, err
	}
	if err := h.wait(ctx, r); err != nil {
		return Sequential{}, err
	}
	sql1, cpu1 := h.tracer.snapshot(), sampleCPU(ctx, h.pool)
	st1, err := markStorage(ctx, h.pool)
	if err != nil {
		return Sequential{}, err
	}
	ov, err := h.verify(ctx, r)
	if err != nil {
		return Sequential{}, err
	}
	msgs, err := h.messageBytes(ctx, r.handle.SessionID)
	if err != nil {
		return Sequential{}, err
	}
	early, late, earlyFirst := windows(ov)
	s := Sequential{
		Steps:                steps,
		Overhead:             distribution(ov),
		Early:                distribution(early),
		EarlyFirstStep:       earlyFirst,
		Late:                 distribution(late),
		LateFirstStep:        steps - len(late),
		GrowthMSPer1000Steps: slopePer1000(ov),
		SQL:                  profile(sql0, sql1, steps, topStatements),
		EarlySQL:             profile(*r.trace.snaps[e1], *r.trace.snaps[e2], w, topStatements),
		LateSQL:              profile(*r.trace.snaps[l1], *r.trace.snaps[l2], w, topStatements),
		Growth:               growth(*r.trace.snaps[e1], *r.trace.snaps[e2], *r.trace.snaps[l1], *r.trace.snaps[l2], w, 5),
		CPU:                  cpuProfile(cpu0, cpu1, steps),
		Storage:              storage(st0, st1, msgs, steps),
	}
	if h.cfg.KeepSamples {
		s.SamplesMS = make([]float64, len(ov))
		for i, d := range ov {
			s.SamplesMS[i] = ms(d)
		}
	}
	if s.Early.P50MS > 0 {
		s.LateEarlyRatio = round3(s.Late.P50MS / s.Early.P50MS)
	}
	return s, nil
}

func (h *harness) concurrent(ctx context.Context, sessions, steps int) (Concurrent, error) {
	stop := h.progress("concurrent", sessions*steps)
	defer stop()
	runs := make([]*run, sessions)
	errs := make([]error, sessions)
	cpu0, sql0 := sampleCPU(ctx, h.pool), h.tracer.snapshot()
	began := time.Now()
	var wg sync.WaitGroup
	for i := range sessions {
		wg.Go(func() {
			if runs[i], errs[i] = h.start(ctx, steps); errs[i] == nil {
				errs[i] = h.wait(ctx, runs[i])
			}
		})
	}
	wg.Wait()
	wall := time.Since(began)
	sql1, cpu1 := h.tracer.snapshot(), sampleCPU(ctx, h.pool)
	if err := errors.Join(errs...); err != nil {
		return Concurrent{}, err
	}
	var all []time.Duration
	for _, r := range runs {
		ov, err := h.verify(ctx, r)
		if err != nil {
			return Concurrent{}, err
		}
		all = append(all, ov...)
	}
	total := sessions * steps
	return Concurrent{
		Sessions: sessions, StepsPerSession: steps, Steps: total,
		WallS:          round3(wall.Seconds()),
		StepsPerSecond: round3(float64(total) / wall.Seconds()),
		Overhead:       distribution(all),
		SQL:            profile(sql0, sql1, total, topStatements),
		CPU:            cpuProfile(cpu0, cpu1, total),
	}, nil
}

func (h *harness) roundTripFloor(ctx context.Context, n int) (Floor, error) {
	return h.bareFloor(ctx, n, nil, roundTrips)
}

func (h *harness) commitFloor(ctx context.Context, n int) (Floor, error) {
	return h.bareFloor(ctx, n, probeTable, commits)
}

// bareFloor measures n samples of a floor of bare statements (sample) on
// a pool like the engine's (openEnginePool) with a tracer of its own (the
// engine's sweeps, which share the engine's pool and its tracer, would
// count in the floor's statements), after setup (nil for none; its drop
// runs at the end) and after warming the connections with up to 10
// samples (which also prepares the statement).
func (h *harness) bareFloor(ctx context.Context, n int, setup func(context.Context, *pgxpool.Pool) (func() error, error),
	sample func(context.Context, *pgxpool.Pool, int) ([]time.Duration, error)) (_ Floor, err error) {
	tracer := newSQLTracer()
	pool, err := openEnginePool(ctx, h.cfg.DatabaseURL, h.cfg.MaxConns, tracer)
	if err != nil {
		return Floor{}, err
	}
	defer pool.Close()
	if setup != nil {
		drop, err := setup(ctx, pool)
		if err != nil {
			return Floor{}, err
		}
		defer func() {
			if derr := drop(); derr != nil && err == nil {
				err = derr
			}
		}()
	}
	if _, err := sample(ctx, pool, min(n, 10)); err != nil {
		return Floor{}, err
	}
	cpu0, sql0 := sampleCPU(ctx, pool), tracer.snapshot()
	ds, err := sample(ctx, pool, n)
	if err != nil {
		return Floor{}, err
	}
	sql1, cpu1 := tracer.snapshot(), sampleCPU(ctx, pool)
	return Floor{Distribution: distribution(ds), SQL: profile(sql0, sql1, n, 4), CPU: cpuProfile(cpu0, cpu1, n)}, nil
}

func (h *harness) workflowFloor(ctx context.Context, wf dbos.Workflow[int, int], n int) (Floor, error) {
	cpu0, sql0 := sampleCPU(ctx, h.pool), h.tracer.snapshot()
	ds, err := h.floors.run(h.eng.DBOS(), wf, n)
	if err != nil {
		return Floor{}, err
	}
	sql1, cpu1 := h.tracer.snapshot(), sampleCPU(ctx, h.pool)
	return Floor{Distribution: distribution(ds), SQL: profile(sql0, sql1, n, 8), CPU: cpuProfile(cpu0, cpu1, n)}, nil
}
