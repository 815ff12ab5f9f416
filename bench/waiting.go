package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
)

// Defaults of WaitingConfig.
const (
	// DefaultWaitingWakeSamples is the number of sessions answered one at
	// a time, one wake-latency sample each.
	DefaultWaitingWakeSamples = 200
	// DefaultWaitingCallers is the number of concurrent callers that
	// answer the other sessions.
	DefaultWaitingCallers = 32
)

// The routes of the approvals (WaitingConfig.ApproveVia).
const (
	// ApproveViaClient submits each approval through an engine.Client in
	// the bench process: the worker's engine hears of it through
	// Postgres and resumes (or wakes) the run. The default.
	ApproveViaClient = "client"
	// ApproveViaEngine sends each approval to worker B, whose own engine
	// submits it (Engine.SubmitToolResult): the deployment where a
	// replica's request handler takes the answer, and the submitting
	// engine starts a hibernated run's continuation itself.
	ApproveViaEngine = "engine"
)

const (
	// waitingSettle is the pause before a footprint is read, for the
	// worker's background work to quiet down.
	waitingSettle = time.Second
	// wakeTimeout bounds the wait for one answered session's next step.
	wakeTimeout = 30 * time.Second
	// requestTimeout bounds a worker's answer to a quick request.
	requestTimeout = 2 * time.Minute
	// settleLimit bounds the wait for a recovered worker's goroutine count
	// to stop changing.
	settleLimit = 30 * time.Second
	// pollInterval is the time between two counts of the sessions that
	// reached a phase's state (the completions: a finer 50 ms, for the
	// drain's rate).
	pollInterval = 200 * time.Millisecond
)

// WaitingConfig configures Waiting. DatabaseURL, Sessions and Worker are
// required.
type WaitingConfig struct {
	// DatabaseURL is the scratch database, as Config.DatabaseURL: Waiting
	// writes sessions of agent type WaitingAgentName and their DBOS
	// workflows into it.
	DatabaseURL string
	// Sessions is the number of sessions left waiting for an approval
	// (at least 1).
	Sessions int
	// WakeSamples is the number of sessions answered one at a time, each a
	// wake-latency sample (default DefaultWaitingWakeSamples, at most
	// Sessions; negative for none).
	WakeSamples int
	// Callers is the number of concurrent callers that answer the other
	// sessions (default DefaultWaitingCallers).
	Callers int
	// MaxConns is the worker engine's pool size, as Config.MaxConns.
	MaxConns int
	// HibernateAfter is the worker engine's engine.Config.HibernateAfter.
	// Positive: the runs hibernate once they have waited that long, and
	// Waiting measures the hibernated sessions (WaitingReport.Hibernation)
	// and their restart and wake from hibernation. Zero or negative (the
	// default): they never hibernate, their waits are held live in the
	// worker (the baseline).
	HibernateAfter time.Duration
	// NoDrain skips the wake and drain phases: after the restart worker B
	// stops and the sessions are left waiting (or hibernated) in the
	// database, unanswered; the report has no Wake and no Drain, and
	// Drained false. For measuring the restart of many sessions without
	// answering them all. The default answers them.
	NoDrain bool
	// ApproveVia is the route of the approvals, ApproveViaClient (the
	// default) or ApproveViaEngine.
	ApproveVia string
	// WakeIsolated makes each wake-latency sample wait, before the next
	// approval, until its session completed and its workflows ended: each
	// sample then measures a wake on an otherwise idle worker. The default
	// approves the next session as soon as the last one's next step began,
	// while that session finishes.
	WakeIsolated bool
	// Worker returns a new command that runs ServeWaitingWorker, its stdin,
	// stdout and stderr unset: helix-dbos runs itself with the hidden
	// command bench-waiting-worker. Waiting runs two, one after the
	// other.
	Worker func() *exec.Cmd
	// Progress is as Config.Progress.
	Progress func(string)
}

func (c *WaitingConfig) withDefaults() error {
	c.WakeSamples = min(cmp.Or(c.WakeSamples, DefaultWaitingWakeSamples), c.Sessions)
	c.Callers = cmp.Or(c.Callers, DefaultWaitingCallers)
	c.ApproveVia = cmp.Or(c.ApproveVia, ApproveViaClient)
	c.Progress = serialProgress(c.Progress)
	switch {
	case c.DatabaseURL == "":
		return errors.New("bench: WaitingConfig.DatabaseURL is empty: give the URL of a scratch database")
	case c.Sessions < 1:
		return fmt.Errorf("bench: the waiting sessions must be >= 1 (--waiting N), got %d", c.Sessions)
	case c.Callers < 1:
		return fmt.Errorf("bench: the waiting-sessions callers must be >= 1 (--waiting-callers), got %d", c.Callers)
	case c.MaxConns < 0:
		return fmt.Errorf("bench: MaxConns must be >= 0 (0 for the pool's default), got %d", c.MaxConns)
	case c.ApproveVia != ApproveViaClient && c.ApproveVia != ApproveViaEngine:
		return fmt.Errorf("bench: the approvals' route (--waiting-approve-via) must be %q or %q, got %q", ApproveViaClient, ApproveViaEngine, c.ApproveVia)
	case c.Worker == nil:
		return errors.New("bench: WaitingConfig.Worker is nil: give the command that runs ServeWaitingWorker (helix-dbos bench-waiting-worker)")
	}
	c.WakeSamples = max(c.WakeSamples, 0)
	if c.HibernateAfter <= 0 {
		c.HibernateAfter = -1 // engine.Config's "never" (zero is its default)
	}
	return nil
}

// hibernates reports whether the sessions hibernate.
func (c *WaitingConfig) hibernates() bool { return c.HibernateAfter > 0 }

// phaseTimeout bounds a phase over n sessions (all of them suspending,
// recovering or completing): generous for a busy 2-CPU machine (35 min
// for 100,000).
func phaseTimeout(n int) time.Duration { return 2*time.Minute + time.Duration(n)*20*time.Millisecond }

// pollEvery is the time between two counts over n sessions, at least
// floor: each count reads every session, so many sessions are counted less
// often (1 s for 100,000), lest the counts load the database under
// measure.
func pollEvery(floor time.Duration, n int) time.Duration {
	return max(floor, time.Duration(n)*10*time.Microsecond)
}

// waitingRun is one run of the waiting-sessions mode.
type waitingRun struct {
	cfg        WaitingConfig
	pool       *pgxpool.Pool // the parent's: the client, sizes and counts
	client     *engine.Client
	wakes      *wakeLog
	executorID string
	prefix     string
	workers    []*workerProc // every worker started, for cleanup
	a, b       *workerProc   // the killed worker and the one that recovers
	relBefore  relationSizes // the tables before the sessions
	r          *WaitingReport
}

// Waiting measures what sessions waiting for a person cost: an engine in a
// worker process (cfg.Worker) starts cfg.Sessions sessions of an agent
// whose first step calls a tool that needs approval; with all of them
// waiting it reads the worker's resident set, goroutines and heap and the
// database's size; it kills the worker and starts another with the same
// executor ID, which recovers them, and times that; then it answers
// cfg.WakeSamples sessions one at a time (the wake latency) and the rest
// with cfg.Callers concurrent callers (the drain rates), and checks that
// every session woke once and completed. It asserts no timing.
//
// With cfg.HibernateAfter positive the runs hibernate: once every session
// suspended, Waiting waits until every run hibernated and reads the
// worker's footprint and the database's size again (the report's
// Hibernation); the restarted worker recovers none of them (its
// Restart.Replayed is 0), and the answers wake them: each continuation is
// started by the worker's engine, which hears of the wake.
//
// With cfg.ApproveVia ApproveViaEngine worker B's own engine submits the
// approvals, asked over its pipes, and starts the continuations it wakes
// itself. With cfg.NoDrain the sessions are not answered: worker B stops
// after the restart and they are left waiting in the database. With
// [WorkerCPUProfileEnv] set each worker writes a CPU profile.
func Waiting(ctx context.Context, cfg WaitingConfig) (_ *WaitingReport, err error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	began := time.Now()
	pc, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("bench: parse the database URL: %w", err)
	}
	pc.MaxConns = int32(cfg.Callers + 2)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("bench: open the database: %w", err)
	}
	defer pool.Close()
	id := uuid.NewString()[:8]
	w := &waitingRun{cfg: cfg, pool: pool, wakes: newWakeLog(), executorID: "helix-bench-wait-" + id, prefix: "bench-wait-" + id,
		r: &WaitingReport{Config: WaitingReportConfig{Sessions: cfg.Sessions, WakeSamples: cfg.WakeSamples, Callers: cfg.Callers,
			Starters: waitingStarters, HibernateAfter: "never", ApproveVia: cfg.ApproveVia}, Drained: !cfg.NoDrain}}
	if cfg.hibernates() {
		w.r.Config.HibernateAfter = cfg.HibernateAfter.String()
		w.r.Hibernation = &WaitingHibernation{}
	}
	defer w.cleanup()
	if w.r.Machine, err = describeMachine(ctx, pool); err != nil {
		return nil, fmt.Errorf("bench: describe the database: %w", err)
	}
	phases := []func(context.Context) error{w.idle, w.start, w.hibernate, w.restart, w.wake, w.drain, w.stop}
	if cfg.NoDrain {
		phases = []func(context.Context) error{w.idle, w.start, w.hibernate, w.restart, w.leave, w.stop}
	}
	for _, phase := range phases {
		if err := phase(ctx); err != nil {
			return nil, err
		}
	}
	w.r.DurationS = round3(time.Since(began).Seconds())
	return w.r, nil
}

// cleanup kills the workers still running (after an error) and closes the
// client.
func (w *waitingRun) cleanup() {
	for _, p := range w.workers {
		_ = p.kill()
	}
	if w.client != nil {
		_ = w.client.Close()
	}
}

// launchWorker starts a worker process of role (migrate, A or B: the
// name of its CPU profile) and launches its engine with executor ID
// executorID; it returns the worker and its Launch time.
func (w *waitingRun) launchWorker(ctx context.Context, role, executorID string, timeout time.Duration) (*workerProc, time.Duration, error) {
	cfg := w.cfg
	cmd := cfg.Worker()
	cmd.Env = append(cmd.Environ(), waitingWorkerRoleEnv+"="+role)
	p, err := startWorker(cmd, func(l workerLine) {
		if l.Event == eventProgress {
			cfg.Progress(l.Message)
			return
		}
		w.wakes.record(l)
	})
	if err != nil {
		return nil, 0, err
	}
	w.workers = append(w.workers, p)
	l, err := p.call(ctx, workerRequest{Op: opLaunch, DatabaseURL: cfg.DatabaseURL, ExecutorID: executorID,
		MaxConns: cfg.MaxConns, HibernateAfter: cfg.HibernateAfter}, timeout)
	if err != nil {
		return nil, 0, err
	}
	w.r.Machine.PoolMaxConns = l.PoolMaxConns
	return p, time.Duration(l.LaunchNS), nil
}

// footprint reads a worker's footprint after its forced GC.
func footprint(ctx context.Context, p *workerProc) (WorkerFootprint, *workerStats, error) {
	l, err := p.call(ctx, workerRequest{Op: opStats}, requestTimeout)
	if err != nil {
		return WorkerFootprint{}, nil, err
	}
	rss, err := p.rss()
	if err != nil {
		return WorkerFootprint{}, nil, err
	}
	s := l.Stats
	return WorkerFootprint{RSSBytes: rss, Goroutines: s.Goroutines, HeapInuseBytes: s.HeapInuse, StackInuseBytes: s.StackInuse}, s, nil
}

// idle starts worker A and reads its footprint and the database's size
// before any session. A first worker, of another executor ID, launches and
// stops before it: on a new database its Launch runs the migrations, whose
// memory would stay in an idle footprint for a while; worker B, like any
// restarted process, finds the database migrated.
func (w *waitingRun) idle(ctx context.Context) error {
	w.cfg.Progress("migrate: a first worker launches (and migrates the database), then stops")
	m, _, err := w.launchWorker(ctx, "migrate", w.executorID+"-migrate", phaseTimeout(0))
	if err != nil {
		return err
	}
	if err := m.stop(ctx, requestTimeout); err != nil {
		return err
	}
	w.cfg.Progress("idle: worker A launched, no session")
	var launch time.Duration
	if w.a, launch, err = w.launchWorker(ctx, "A", w.executorID, requestTimeout); err != nil {
		return err
	}
	w.r.Restart.IdleLaunchMS = ms(launch)
	if err := sleep(ctx, waitingSettle); err != nil {
		return err
	}
	if w.r.Idle, _, err = footprint(ctx, w.a); err != nil {
		return err
	}
	mark, err := markStorage(ctx, w.pool)
	if err != nil {
		return err
	}
	w.r.Database.BytesBefore = mark.tables
	w.relBefore, err = readRelations(ctx, w.pool)
	return err
}

// relations records each table's growth since before the sessions, per
// session.
func (w *waitingRun) relations(ctx context.Context) error {
	after, err := readRelations(ctx, w.pool)
	if err != nil {
		return err
	}
	w.r.Database.Relations = relationGrowth(w.relBefore, after, w.cfg.Sessions)
	return nil
}

// start starts the sessions in worker A, waits until each waits for its
// approval, and reads the footprint and the database's size with them
// waiting. When the sessions hibernate it returns once each suspended
// (some may have hibernated already), reading the footprint only if all
// of them still waited live.
func (w *waitingRun) start(ctx context.Context) error {
	n, a := w.cfg.Sessions, w.a
	w.cfg.Progress(fmt.Sprintf("start: %d sessions, %d at a time, each to its approval wait", n, waitingStarters))
	began := time.Now()
	if _, err := a.call(ctx, workerRequest{Op: opStart, Prefix: w.prefix, Sessions: n}, phaseTimeout(n)); err != nil {
		return err
	}
	var err error
	if w.cfg.hibernates() {
		err = w.awaitSuspended(ctx, began)
	} else {
		err = w.awaitLive(ctx, began)
	}
	if err != nil {
		return err
	}
	m, err := markStorage(ctx, w.pool)
	if err != nil {
		return err
	}
	w.r.Database.BytesWaiting = m.tables
	w.r.PerSession.DatabaseBytes = w.perSessionBytes(m.tables)
	if w.cfg.hibernates() {
		return nil // read once they hibernated
	}
	return w.relations(ctx)
}

// startTook records the time from began to every session waiting.
func (w *waitingRun) startTook(began time.Time) {
	wall := time.Since(began)
	w.r.Start = WaitingStart{WallS: round3(wall.Seconds()), SessionsPerSecond: round3(float64(w.cfg.Sessions) / wall.Seconds())}
}

// awaitLive waits until every session waits live in worker A and reads
// A's footprint.
func (w *waitingRun) awaitLive(ctx context.Context, began time.Time) error {
	if err := w.awaitWaiting(ctx, w.a, "start"); err != nil {
		return err
	}
	w.startTook(began)
	if err := sleep(ctx, waitingSettle); err != nil {
		return err
	}
	var err error
	if w.r.Waiting, _, err = footprint(ctx, w.a); err != nil {
		return err
	}
	w.r.PerSession = perSession(w.r.Idle, w.r.Waiting, w.cfg.Sessions)
	return nil
}

// awaitSuspended waits until every session suspended on its approval
// (its call pending and unanswered), waiting live in worker A or
// hibernated. If all of them then wait live, it reads A's footprint at
// once (no settling: they are about to hibernate) and keeps it if they
// still all wait live after the reading.
func (w *waitingRun) awaitSuspended(ctx context.Context, began time.Time) error {
	n := w.cfg.Sessions
	if err := w.awaitAll(ctx, "start", "suspended on their approval", phaseTimeout(n), pollEvery(pollInterval, n), w.countSuspended, w.a); err != nil {
		return err
	}
	w.startTook(began)
	live, err := w.liveWaits(ctx, w.a)
	if err != nil || live < n {
		return err
	}
	f, _, err := footprint(ctx, w.a)
	if err != nil {
		return err
	}
	if live, err = w.liveWaits(ctx, w.a); err != nil || live < n {
		return err
	}
	w.r.Waiting, w.r.PerSession = f, perSession(w.r.Idle, f, n)
	w.r.Hibernation.LiveCaught = true
	return nil
}

// hibernate waits until every session's run hibernated (its workflow
// ended), then reads worker A's footprint and the database's size again;
// a no-op unless the sessions hibernate.
func (w *waitingRun) hibernate(ctx context.Context) error {
	if !w.cfg.hibernates() {
		return nil
	}
	n, h := w.cfg.Sessions, w.r.Hibernation
	w.cfg.Progress(fmt.Sprintf("hibernate: until all %d runs hibernated (after %s of waiting) and their workflows ended", n, w.cfg.HibernateAfter))
	began := time.Now()
	if err := w.awaitAll(ctx, "hibernate", "hibernated", phaseTimeout(n)+w.cfg.HibernateAfter, pollEvery(pollInterval, n), w.countHibernated, w.a); err != nil {
		return err
	}
	h.Hibernated, h.WallS = n, round3(time.Since(began).Seconds())
	if err := sleep(ctx, waitingSettle); err != nil {
		return err
	}
	var err error
	if h.Footprint, _, err = footprint(ctx, w.a); err != nil {
		return err
	}
	if h.LiveWaits, err = w.liveWaits(ctx, w.a); err != nil {
		return err
	}
	m, err := markStorage(ctx, w.pool)
	if err != nil {
		return err
	}
	w.r.Database.BytesHibernated = m.tables
	h.PerSession = perSession(w.r.Idle, h.Footprint, n)
	h.PerSession.DatabaseBytes = w.perSessionBytes(m.tables)
	return w.relations(ctx)
}

// perSessionBytes is the database's growth from before the sessions to
// tables bytes, per session.
func (w *waitingRun) perSessionBytes(tables int64) float64 {
	return round3(float64(tables-w.r.Database.BytesBefore) / float64(w.cfg.Sessions))
}

// awaitWaiting returns once every session waits for its approval in p.
func (w *waitingRun) awaitWaiting(ctx context.Context, p *workerProc, label string) error {
	n := w.cfg.Sessions
	return w.awaitAll(ctx, label, "wait for their approval", phaseTimeout(n), pollEvery(pollInterval, n),
		func(ctx context.Context) (int, error) { return w.liveWaits(ctx, p) }, p)
}

// awaitAll returns once count reaches every session, polling it every
// interval and telling the progress every 2 s ("label: count/n sessions
// what"); after timeout it fails, with the end of p's stderr.
func (w *waitingRun) awaitAll(ctx context.Context, label, what string, timeout, interval time.Duration,
	count func(context.Context) (int, error), p *workerProc) error {
	n := w.cfg.Sessions
	deadline, last := time.Now().Add(timeout), time.Now()
	for {
		c, err := count(ctx)
		if err != nil {
			return err
		}
		if c >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: %s: %d of %d sessions %s after %s: the worker is too slow or stuck "+
				"(try fewer sessions, or a larger pool with --max-conns)%s", label, c, n, what, timeout, p.stderrTail())
		}
		if time.Since(last) >= 2*time.Second {
			last = time.Now()
			w.cfg.Progress(fmt.Sprintf("%s: %d/%d sessions %s", label, c, n, what))
		}
		if err := sleep(ctx, interval); err != nil {
			return err
		}
	}
}

// liveWaits asks worker p how many sessions wait for their approval in
// it now (Engine.WaitsForAnswer).
func (w *waitingRun) liveWaits(ctx context.Context, p *workerProc) (int, error) {
	l, err := p.call(ctx, workerRequest{Op: opWaiting}, requestTimeout)
	return l.Waiting, err
}

// countSuspended counts the sessions whose approval call is pending and
// unanswered, whether their run waits live or hibernated.
func (w *waitingRun) countSuspended(ctx context.Context) (int, error) {
	var n int
	err := w.pool.QueryRow(ctx, `SELECT count(*) FROM helix.sessions s, jsonb_each(s.pending_client_tool_calls) p
		WHERE s.session_id LIKE $1 AND NOT p.value ? 'submission'`, w.prefix+"-%").Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("bench: count the suspended sessions: %w", err)
	}
	return n, nil
}

// countHibernated counts the sessions whose run is hibernated and whose
// workflow ended (DBOS: SUCCESS): no process holds them.
func (w *waitingRun) countHibernated(ctx context.Context) (int, error) {
	var n int
	err := w.pool.QueryRow(ctx, `SELECT count(*) FROM helix.runs r JOIN dbos.workflow_status w ON w.workflow_uuid = r.workflow_id
		WHERE r.session_id LIKE $1 AND r.hibernated_at IS NOT NULL AND w.status = 'SUCCESS'`, w.prefix+"-%").Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("bench: count the hibernated sessions: %w", err)
	}
	return n, nil
}

// restart kills worker A and starts worker B with its executor ID: B's
// Launch recovers the waiting sessions, as a restarted process does; it
// replays none of the hibernated ones.
func (w *waitingRun) restart(ctx context.Context) error {
	n, hib := w.cfg.Sessions, w.cfg.hibernates()
	if hib {
		w.cfg.Progress(fmt.Sprintf("restart: SIGKILL worker A, worker B launches with its executor ID; the %d hibernated sessions must stay so", n))
	} else {
		w.cfg.Progress(fmt.Sprintf("restart: SIGKILL worker A, worker B launches with its executor ID and recovers the %d sessions", n))
	}
	if err := w.a.kill(); err != nil {
		return err
	}
	b, launch, err := w.launchWorker(ctx, "B", w.executorID, phaseTimeout(n))
	if err != nil {
		return err
	}
	w.b = b
	rs := &w.r.Restart
	rs.LaunchMS = ms(launch)
	if !hib {
		began := time.Now()
		if err := w.awaitWaiting(ctx, b, "recovery"); err != nil {
			return err
		}
		rs.Recovered, rs.RecoveredS = n, round3(time.Since(began).Seconds())
	}
	// Settled once the goroutine count holds still, within 1%, over a
	// second.
	settleBegan := time.Now()
	prev := -1
	var st *workerStats
	for {
		if err := sleep(ctx, waitingSettle); err != nil {
			return err
		}
		if rs.Footprint, st, err = footprint(ctx, b); err != nil {
			return err
		}
		g := rs.Footprint.Goroutines
		if (prev >= 0 && abs(g-prev) <= max(1, prev/100)) || time.Since(settleBegan) > settleLimit {
			break
		}
		prev = g
	}
	rs.SettledS = round3(time.Since(settleBegan).Seconds())
	rs.PerSession = perSession(w.r.Idle, rs.Footprint, n)
	rs.ReplayedModelCalls = st.ModelCalls[0]
	if rs.Replayed, err = w.liveWaits(ctx, b); err != nil {
		return err
	}
	if hib {
		rs.Hibernated, err = w.countHibernated(ctx)
	}
	return err
}

// wake answers the first WakeSamples sessions one at a time: each sample
// runs from just before the approval (SubmitToolResult, or the request to
// worker B) to the worker's stamp of the approved tool's run and of the
// model's call for step 2.
func (w *waitingRun) wake(ctx context.Context) (err error) {
	if w.cfg.ApproveVia == ApproveViaClient {
		if w.client, err = engine.NewClient(ctx, engine.ClientConfig{Pool: w.pool}); err != nil {
			return err
		}
	}
	n := w.cfg.WakeSamples
	if n == 0 {
		return nil
	}
	w.cfg.Progress(fmt.Sprintf("wake: %d sessions approved one at a time", n))
	toTool, toStep, submit := make([]time.Duration, n), make([]time.Duration, n), make([]time.Duration, n)
	last := time.Now()
	for i := range n {
		id := w.sessionID(i + 1)
		t0 := time.Now()
		if err := w.approve(ctx, id); err != nil {
			return err
		}
		submit[i] = time.Since(t0)
		tool, step, err := w.wakes.await(ctx, id, wakeTimeout)
		if err != nil {
			return err
		}
		toTool[i], toStep[i] = time.Duration(tool-t0.UnixNano()), time.Duration(step-t0.UnixNano())
		if w.cfg.WakeIsolated {
			if err := w.awaitIdle(ctx, id); err != nil {
				return err
			}
		}
		if time.Since(last) >= 2*time.Second {
			last = time.Now()
			w.cfg.Progress(fmt.Sprintf("wake: %d/%d sessions", i+1, n))
		}
	}
	w.r.Wake = WaitingWake{Samples: n, Isolated: w.cfg.WakeIsolated, SubmitToTool: distribution(toTool),
		SubmitToNextStep: distribution(toStep), Submit: distribution(submit)}
	return nil
}

// awaitIdle returns once session id completed and its run's workflows
// ended (its own, and the continuation that ran it): the worker is idle
// again (the other sessions wait, hibernated or in their workflows).
func (w *waitingRun) awaitIdle(ctx context.Context, id string) error {
	deadline := time.Now().Add(wakeTimeout)
	for {
		var idle bool
		if err := w.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM helix.sessions WHERE session_id = $1 AND status = 'completed')
			AND NOT EXISTS (SELECT 1 FROM helix.runs r JOIN dbos.workflow_status w
				ON w.workflow_uuid IN (r.workflow_id, helix.current_workflow_id(r.workflow_id, r.wakes))
				WHERE r.session_id = $1 AND w.status = 'PENDING')`, id).Scan(&idle); err != nil {
			return fmt.Errorf("bench: wait for session %s to complete: %w", id, err)
		}
		if idle {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: session %s did not complete, or workflows stayed pending, within %s of its approval", id, wakeTimeout)
		}
		if err := sleep(ctx, time.Millisecond); err != nil {
			return err
		}
	}
}

// approve approves the waiting call of session id, by the configured
// route.
func (w *waitingRun) approve(ctx context.Context, id string) error {
	if w.cfg.ApproveVia == ApproveViaEngine {
		_, err := w.b.call(ctx, workerRequest{Op: opApprove, Session: id}, requestTimeout)
		return err
	}
	return approveSession(ctx, w.client.SubmitToolResult, id)
}

// approveSession approves the waiting call of session id with submit (a
// Client's or an Engine's SubmitToolResult) and checks it was delivered
// with nothing left to answer.
func approveSession(ctx context.Context, submit func(context.Context, string, helix.ToolSubmission) (helix.SubmitResult, error), id string) error {
	res, err := submit(ctx, id, helix.Approve(approvalCallID, "bench"))
	if err != nil {
		return fmt.Errorf("bench: approve session %s: %w", id, err)
	}
	if res.AlreadyCompleted || len(res.Remaining) > 0 {
		return fmt.Errorf("bench: approve session %s: submission %+v, want delivered with nothing remaining", id, res)
	}
	return nil
}

// drain answers the other sessions with Callers concurrent callers and
// waits until every session completed.
func (w *waitingRun) drain(ctx context.Context) error {
	n, from := w.cfg.Sessions, w.cfg.WakeSamples+1
	d := &w.r.Drain
	d.Sessions, d.Callers = n-from+1, w.cfg.Callers
	w.cfg.Progress(fmt.Sprintf("drain: %d sessions approved by %d concurrent callers", d.Sessions, d.Callers))
	began := time.Now()
	var next atomic.Int64
	next.Store(int64(from) - 1)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, w.cfg.Callers)
	var wg sync.WaitGroup
	for c := range w.cfg.Callers {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n) && cctx.Err() == nil; i = next.Add(1) {
				if errs[c] = w.approve(cctx, w.sessionID(int(i))); errs[c] != nil {
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	submitted := time.Since(began)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := w.awaitCompleted(ctx); err != nil {
		return err
	}
	completed := time.Since(began)
	if d.Sessions > 0 {
		d.SubmitWallS, d.ApprovalsPerSecond = round3(submitted.Seconds()), round3(float64(d.Sessions)/submitted.Seconds())
		d.CompleteWallS, d.CompletedPerSecond = round3(completed.Seconds()), round3(float64(d.Sessions)/completed.Seconds())
	}
	return nil
}

// awaitCompleted returns once every session completed and the workflows
// of its runs ended (a run's last commit completes its session; its
// workflow records its outcome just after: worker B, stopped next, must
// not cut that short), and records the outcome.
func (w *waitingRun) awaitCompleted(ctx context.Context) error {
	o, n := &w.r.Outcome, w.cfg.Sessions
	count := func(ctx context.Context) (int, error) {
		var ended int
		if err := w.pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(step_count), 0),
				count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM helix.runs r JOIN dbos.workflow_status w
					ON w.workflow_uuid IN (r.workflow_id, helix.current_workflow_id(r.workflow_id, r.wakes))
					WHERE r.session_id = s.session_id AND w.status = 'PENDING'))
			FROM helix.sessions s WHERE agent_type = $1 AND status = 'completed'`, WaitingAgentName).Scan(&o.Completed, &o.Steps, &ended); err != nil {
			return 0, fmt.Errorf("bench: count the completed sessions: %w", err)
		}
		return ended, nil
	}
	if err := w.awaitAll(ctx, "drain", "completed", phaseTimeout(n), pollEvery(50*time.Millisecond, n/5), count, w.b); err != nil {
		return err
	}
	if err := w.pool.QueryRow(ctx, `SELECT coalesce(sum(wakes), 0) FROM helix.runs WHERE session_id LIKE $1`,
		w.prefix+"-%").Scan(&o.HibernationWakes); err != nil {
		return fmt.Errorf("bench: count the runs' wakes: %w", err)
	}
	o.WokeOnce, o.ToolRuns, o.NextStepCalls = w.wakes.counts()
	return nil
}

// leave replaces the wake and drain phases when the sessions are not to be
// answered: it counts the sessions left waiting for their approval.
func (w *waitingRun) leave(ctx context.Context) (err error) {
	state := "waiting"
	if w.cfg.hibernates() {
		state = "hibernated"
	}
	if w.r.Outcome.LeftWaiting, err = w.countSuspended(ctx); err != nil {
		return err
	}
	w.cfg.Progress(fmt.Sprintf("wake and drain skipped (--waiting-drain=false): %d sessions are left %s in the scratch database, unanswered",
		w.r.Outcome.LeftWaiting, state))
	return nil
}

// stop stops worker B cleanly and records what its agent did.
func (w *waitingRun) stop(ctx context.Context) error {
	b := w.b
	_, st, err := footprint(ctx, b)
	if err != nil {
		return err
	}
	w.r.Outcome.Failures = st.Failures
	w.cfg.Progress("stop: worker B shuts down")
	return b.stop(ctx, requestTimeout)
}

// sessionID is the ID of the i-th session (1-based).
func (w *waitingRun) sessionID(i int) string { return waitingSessionID(w.prefix, i) }

// perSession is the growth from idle to with, per session of n.
func perSession(idle, with WorkerFootprint, n int) PerWaitingSession {
	per := func(a, b int64) float64 { return round3(float64(b-a) / float64(n)) }
	return PerWaitingSession{
		RSSBytes:   per(idle.RSSBytes, with.RSSBytes),
		Goroutines: per(int64(idle.Goroutines), int64(with.Goroutines)),
		HeapBytes:  per(int64(idle.HeapInuseBytes), int64(with.HeapInuseBytes)),
		StackBytes: per(int64(idle.StackInuseBytes), int64(with.StackInuseBytes)),
	}
}

// sleep waits d, or returns ctx's error.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func abs(x int) int { return max(x, -x) }
