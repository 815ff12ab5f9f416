package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/rs/zerolog"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/migrations"
	"github.com/helix-agents/helix-dbos/steps"
	"github.com/helix-agents/helix-dbos/store/postgres"
	"github.com/helix-agents/helix-dbos/workflows"
)

// Engine runs agents as durable workflows. Create it with New, register
// agents, Launch it, and Shutdown when done. An Engine is safe for
// concurrent use.
type Engine struct {
	cfg   Config
	log   zerolog.Logger
	pool  *pgxpool.Pool
	dbos  dbos.Context
	store *postgres.Store
	env   *steps.Env
	turn  dbos.Workflow[workflows.TurnInput, steps.Outcome]

	// lease is this process's executor lease, which fences step bodies.
	lease *lease
	// formats is the storage format level the store, the journal and the
	// agent loop write at: the cluster's (formats.survey).
	formats *postgres.FormatGate

	mu       sync.Mutex
	launched bool
	closed   bool
	hb       *heartbeat // set by Launch
	wake     *loop      // the wake-up sweep, set by Launch
	cancels  *loop      // the sweep of workflows cancelled through DBOS, set by Launch
	sweep    *loop      // the takeover sweep, set by Launch
	levels   *loop      // the format level's sweep with Config.DisableTakeover, set by Launch
	gcJob    *loop      // the retention job, set by Launch with Config.Retention
	recorded *loop      // the starter of recorded runs (recorded_runs.go), set by Launch
	// submitting holds the workflows whose wake this engine's submissions
	// in flight start themselves (recorded_runs.go).
	submitting wakeHolds
}

// New builds an engine: it connects to the database and prepares DBOS, but
// runs nothing until Launch.
func New(ctx context.Context, cfg Config) (*Engine, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	log := zerolog.Nop()
	if cfg.Logger != nil {
		// The run's log lines carry its trace and span IDs (when tracing).
		log = cfg.Logger.Hook(steps.LogHook{})
	}
	pool := cfg.Pool
	if pool == nil {
		var err error
		if pool, err = openPool(ctx, cfg.DatabaseURL); err != nil {
			return nil, fmt.Errorf("engine: open database: %w (check Config.DatabaseURL)", err)
		}
	}
	fail := func(err error) (*Engine, error) {
		if cfg.Pool == nil {
			pool.Close()
		}
		return nil, err
	}
	if n := pool.Config().MaxConns; n < 2 {
		return fail(fmt.Errorf("engine: the pool allows %d connection(s); the engine needs at least 2 (DBOS's notification listener keeps one): raise pool_max_conns or pgxpool.Config.MaxConns", n))
	}
	// DBOS migrates its system schema here, without a lock of its own:
	// replicas starting together on an empty database take turns.
	var dctx dbos.Context
	db := stdlib.OpenDBFromPool(pool)
	err := migrations.Serialize(ctx, db, migrations.DBOSLockID, func(*sql.Conn) error {
		var err error
		// Not ctx itself: DBOS derives its workflows' contexts from it, and
		// a caller's context that ends (a signal at shutdown) would cancel
		// every running workflow durably instead of leaving it to recovery.
		dctx, err = dbos.NewContext(context.WithoutCancel(ctx), dbos.Config{
			AppName:            cfg.AppName,
			SystemDBPool:       pool,
			Logger:             slog.New(zerolog.NewSlogHandler(log.With().Str("component", "dbos").Logger())),
			ExecutorID:         cfg.ExecutorID,
			ApplicationVersion: cfg.ApplicationVersion,
		})
		return err
	})
	_ = db.Close() // closes the database/sql wrapper, not the pool
	if err != nil {
		return fail(fmt.Errorf("engine: initialize DBOS: %w", err))
	}
	storeOpts := []postgres.Option{postgres.WithLogger(log)}
	if cfg.Clock != nil {
		storeOpts = append(storeOpts, postgres.WithClock(cfg.Clock.Now))
	}
	// The engine's format gate comes last: what the store writes follows
	// the cluster, from FormatLevelBaseline until Launch reads it.
	formats := postgres.NewFormatGate(postgres.FormatLevelBaseline)
	st, err := postgres.New(pool, append(append(storeOpts, cfg.StoreOptions...), postgres.WithFormatGate(formats))...)
	if err != nil {
		return fail(err)
	}
	ds, err := dbos.NewDataSource(dctx, pool)
	if err != nil {
		return fail(fmt.Errorf("engine: DBOS data source: %w", err))
	}
	env := steps.NewEnv(st, log)
	env.Clock = cfg.clock()
	env.HibernateAfter = max(cfg.HibernateAfter, 0)
	env.Telemetry = steps.NewTelemetry(cfg.tracerProvider(), cfg.ExecutorID)
	l := newLease(cfg.ExecutorLease)
	f := newFence(l, pool, cfg.ExecutorID)
	env.DataSource, env.DBOS, env.Fence = ds, dctx, f
	e := &Engine{cfg: cfg, log: log, pool: pool, dbos: dctx, store: st, env: env, turn: workflows.Turn(env), lease: l, formats: formats}
	f.log = log
	env.Revive = e.revive
	env.Probe = cfg.Probe
	dbos.RegisterWorkflow(dctx, e.turn, dbos.WithWorkflowName(workflows.TurnName))
	return e, nil
}

// Register makes agents runnable and recoverable by this engine, with the
// agents their sub-agent tools delegate to. Register every agent before
// Launch: recovery resumes sessions by agent type, and a
// session whose type is not registered fails with a clear error. Registering
// the same *helix.Agent again is a no-op; another definition under a used
// name is an error.
func (e *Engine) Register(agents ...*helix.Agent) error {
	seen := map[*helix.Agent]bool{}
	for _, a := range agents {
		if err := e.register(a, seen); err != nil {
			return err
		}
	}
	return nil
}

// register registers a and, recursively, the agents its sub-agent tools
// and persistent companions delegate to (a child run may be recovered in any process that runs its
// parent).
func (e *Engine) register(a *helix.Agent, seen map[*helix.Agent]bool) error {
	return eachAgent(a, seen, func(a *helix.Agent) error {
		def, err := compile(a)
		if err != nil {
			return err
		}
		if err := e.env.Register(def); err != nil {
			return err
		}
		if unknown := a.UnknownPreloadSkills(); len(unknown) > 0 {
			e.log.Warn().Str("event", "skills.unknown_preload").Str("agent", a.Name).Strs("skills", unknown).
				Msg("PreloadSkills names skills the agent does not define; they are skipped")
		}
		return nil
	})
}

// eachAgent calls fn on a and then, recursively, on the agents its
// sub-agent tools and persistent companions delegate to, once each (seen).
// fn validates its agent: the walk reads a's children only after fn
// accepted a.
func eachAgent(a *helix.Agent, seen map[*helix.Agent]bool, fn func(a *helix.Agent) error) error {
	if seen[a] {
		return nil
	}
	seen[a] = true
	if err := fn(a); err != nil {
		return err
	}
	for _, sub := range append(a.SubAgents(), a.CompanionAgents()...) {
		if err := eachAgent(sub, seen, fn); err != nil {
			return err
		}
	}
	return nil
}

// validateAgent checks a and the agents it delegates to as Register does,
// without an engine (Client.ExecuteTx).
func validateAgent(a *helix.Agent) error {
	return eachAgent(a, map[*helix.Agent]bool{}, func(a *helix.Agent) error {
		_, err := compile(a)
		return err
	})
}

func compile(a *helix.Agent) (*steps.AgentDef, error) {
	return steps.NewAgentDef(a)
}

// Launch runs the helix migrations (unless Config.SkipMigrations), launches
// DBOS, which recovers this executor's pending workflows, and starts the
// runs whose workflow was never started (a process that died between
// recording a run and starting it).
func (e *Engine) Launch(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errors.New("engine: Launch after Shutdown: build a new engine")
	}
	if e.launched {
		return nil
	}
	{
		db := stdlib.OpenDBFromPool(e.pool)
		var err error
		if e.cfg.SkipMigrations {
			err = migrations.CheckSchema(ctx, db)
		} else {
			_, err = migrations.Up(ctx, db)
		}
		_ = db.Close()
		if err != nil {
			return fmt.Errorf("engine: %w", err)
		}
	}
	// Before DBOS launches: it recovers this executor ID's workflows.
	hb, err := claimExecutor(ctx, e.pool, e.cfg.ExecutorID, e.cfg.AppName, e.cfg.ApplicationVersion, e.lease)
	if err != nil {
		if _, ok := errors.AsType[*ExecutorInUseError](err); ok {
			return err
		}
		return fmt.Errorf("engine: record executor %s in helix.executors: %w", e.cfg.ExecutorID, err)
	}
	// The cluster's format level before anything runs here (DBOS's
	// recovery included): until then the engine writes FormatLevelBaseline.
	fm := &formats{pool: e.pool, id: e.cfg.ExecutorID, ns: hb.ns, gate: e.formats, log: &e.log}
	if _, err := fm.survey(ctx); err != nil {
		return fmt.Errorf("engine: read the storage format level of the cluster: %w", err)
	}
	if err := e.registerQueue(ctx); err != nil {
		return err
	}
	if err := dbos.Launch(e.dbos); err != nil {
		return fmt.Errorf("engine: launch DBOS: %w", err)
	}
	e.launched = true
	hb.onEvicted = e.evicted
	hb.start(ctx, &e.log)
	e.hb = hb
	e.wake = startWakeups(ctx, e.pool, e.cfg.ExecutorID, e.cfg.clock(), &e.log)
	e.cancels = startCancelSweep(ctx, e.pool, e.control, &e.log)
	if !e.cfg.DisableTakeover {
		e.sweep = startTakeover(ctx, &takeover{pool: e.pool, id: e.cfg.ExecutorID, app: e.cfg.AppName,
			version: e.cfg.ApplicationVersion, adopt: e.cfg.AdoptVersions, ns: hb.ns, lease: e.cfg.ExecutorLease, log: &e.log,
			metrics: e.env.Telemetry.Metrics, formats: fm})
	} else {
		e.levels = every(ctx, min(TakeoverSweepInterval, e.cfg.ExecutorLease/10), func(ctx context.Context) {
			if _, err := fm.survey(ctx); err != nil && ctx.Err() == nil {
				e.log.Warn().Err(err).Str("event", "executor.format_level_failed").
					Msg("could not read the cluster's storage format level; this engine keeps writing at its last one and retries")
			}
		})
	}
	if e.cfg.Retention != nil {
		e.gcJob = startRetention(ctx, e.gc(), *e.cfg.Retention)
	}
	if err := e.startOrphans(ctx, nil); err != nil {
		return fmt.Errorf("engine: start recorded runs: %w", err)
	}
	if e.recorded, err = e.startRecordedRuns(ctx); err != nil {
		return fmt.Errorf("engine: listen for recorded runs: %w", err)
	}
	e.log.Info().Str("event", "engine.launched").Str("executorId", e.cfg.ExecutorID).
		Str("applicationVersion", e.cfg.ApplicationVersion).Msg("engine launched")
	return nil
}

// start starts (or joins, when it exists) a run's workflow: through the
// queue with adm, or at once without.
// startWake starts continuation n of the woken run runID, whose workflow
// is origin (workflows.WakeID; several engines may start it: one runs). A
// queued run's (adm) is a continuation of its driver: it goes on
// enqueuing the run's segments under origin's IDs.
func (e *Engine) startWake(sessionID, runID, origin string, n int, adm *workflows.Admission) error {
	in := workflows.TurnInput{SessionID: sessionID, RunID: runID, Wake: n, Origin: origin, Queue: adm}
	if adm != nil {
		in.Driver = origin
	}
	id := workflows.WakeID(origin, n)
	if _, err := dbos.RunWorkflow(e.dbos, e.turn, in, dbos.WithWorkflowID(id)); err != nil {
		return fmt.Errorf("engine: start workflow %s (run %s woken from hibernation): %w", id, runID, err)
	}
	return nil
}

func (e *Engine) start(sessionID, runID, workflowID string, adm *workflows.Admission) error {
	in := workflows.TurnInput{SessionID: sessionID, RunID: runID, Queue: adm}
	if adm != nil {
		in.Driver = workflowID
	}
	_, err := dbos.RunWorkflow(e.dbos, e.turn, in, dbos.WithWorkflowID(workflowID))
	if err != nil {
		return fmt.Errorf("engine: start workflow %s: %w", workflowID, err)
	}
	return nil
}

// ErrShutdownTimedOut is matched (errors.Is) by the error of a Shutdown
// that stopped waiting at Config.ShutdownTimeout (or its context's
// deadline): a step, or a connection it held, was still busy. What still
// ran is abandoned as in a crash; nothing is lost, as the next engine with
// this executor ID (or a peer, once the lease expires) recovers it.
var ErrShutdownTimedOut = errors.New("engine shutdown timed out")

// Shutdown stops DBOS (running workflows stop at their next step; the
// heartbeat goes on meanwhile), marks the executor stopped, so that a live
// engine takes its pending sessions over at once (or the next process with
// this executor ID recovers them), and closes the store and the pool.
// Idempotent.
func (e *Engine) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	timeout := e.cfg.ShutdownTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, max(0, time.Until(d)))
	}
	// A connection of its own marks the executor stopped once DBOS has
	// stopped (DBOS closes the pool).
	var last *pgx.Conn
	if e.hb != nil {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		if c, err := e.pool.Acquire(actx); err == nil {
			last = c.Hijack()
		} else {
			e.log.Warn().Err(err).Str("event", "executor.unregister_failed").
				Msg("no connection to mark this executor stopped; peers take its pending sessions over once its lease expires")
		}
		cancel()
	}
	e.gcJob.stop() // a batch in progress rolls back
	e.recorded.stop()
	e.sweep.stop()
	e.levels.stop()
	e.wake.stop()
	e.cancels.stop()
	// The heartbeat goes on while DBOS drains: the running steps keep
	// their lease until they stop, and no peer takes them over meanwhile.
	e.hb.draining()
	err := dbos.Shutdown(e.dbos, timeout)
	if err != nil {
		// DBOS's only error: a part of it did not stop in time.
		err = fmt.Errorf("%w (%v): what still ran is abandoned, as in a crash, and recovered by the next engine with this executor ID or by a peer",
			ErrShutdownTimedOut, err)
	}
	e.hb.stop()
	e.hb.markStopped(ctx, last)
	if cerr := e.store.Close(); cerr != nil && err == nil {
		err = cerr
	}
	if e.cfg.Pool == nil {
		e.pool.Close()
	}
	return err
}

// evicted runs when another process holds this engine's executor ID: the
// engine stops (its steps are already fenced), as two live processes must
// never share an ID.
func (e *Engine) evicted(error) {
	go func() {
		if err := e.Shutdown(context.Background()); err != nil {
			e.log.Warn().Err(err).Str("event", "engine.shutdown_failed").Msg("shutdown after losing the executor ID failed")
		}
	}()
}

// ExecutorID returns the engine's executor ID (Config.ExecutorID, or the
// one it generated).
func (e *Engine) ExecutorID() string { return e.cfg.ExecutorID }

// DBOS returns the engine's DBOS context, for applications that run their
// own workflows beside the agents.
func (e *Engine) DBOS() dbos.Context { return e.dbos }

func (e *Engine) requireLaunched() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.closed:
		return refuse(RefusedNotLaunched, "", "the engine is shut down")
	case !e.launched:
		return refuse(RefusedNotLaunched, "", "call Launch before running agents")
	}
	return nil
}
