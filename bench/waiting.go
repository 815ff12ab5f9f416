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
	case c.Worker == nil:
		return errors.New("bench: WaitingConfig.Worker is nil: give the command that runs ServeWaitingWorker (helix-dbos bench-waiting-worker)")
	}
	c.WakeSamples = max(c.WakeSamples, 0)
	return nil
}

// phaseTimeout bounds a phase over n sessions (all of them suspending,
// recovering or completing): generous for a busy 2-CPU machine.
func phaseTimeout(n int) time.Duration { return 2*time.Minute + time.Duration(n)*20*time.Millisecond }

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
			Starters: waitingStarters}}}
	defer w.cleanup()
	if w.r.Machine, err = describeMachine(ctx, pool); err != nil {
		return nil, fmt.Errorf("bench: describe the database: %w", err)
	}
	for _, phase := range []func(context.Context) error{w.idle, w.start, w.restart, w.wake, w.drain, w.stop} {
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

// launchWorker starts a worker process and launches its engine with
// executor ID executorID; it returns the worker and its Launch time.
func (w *waitingRun) launchWorker(ctx context.Context, executorID string, timeout time.Duration) (*workerProc, time.Duration, error) {
	cfg := w.cfg
	p, err := startWorker(cfg.Worker(), func(l workerLine) {
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
	l, err := p.call(ctx, workerRequest{Op: opLaunch, DatabaseURL: cfg.DatabaseURL, ExecutorID: executorID, MaxConns: cfg.MaxConns}, timeout)
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
	m, _, err := w.launchWorker(ctx, w.executorID+"-migrate", phaseTimeout(0))
	if err != nil {
		return err
	}
	if err := m.stop(ctx, requestTimeout); err != nil {
		return err
	}
	w.cfg.Progress("idle: worker A launched, no session")
	var launch time.Duration
	if w.a, launch, err = w.launchWorker(ctx, w.executorID, requestTimeout); err != nil {
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
	w.r.Database.BytesBefore = mark.tables
	return err
}

// start starts the sessions in worker A, waits until each waits for its
// approval, and reads the footprint and the database's size with them
// waiting.
func (w *waitingRun) start(ctx context.Context) error {
	n, a := w.cfg.Sessions, w.a
	w.cfg.Progress(fmt.Sprintf("start: %d sessions, %d at a time, each to its approval wait", n, waitingStarters))
	began := time.Now()
	if _, err := a.call(ctx, workerRequest{Op: opStart, Prefix: w.prefix, Sessions: n}, phaseTimeout(n)); err != nil {
		return err
	}
	if _, err := w.awaitWaiting(ctx, a, began, "start"); err != nil {
		return err
	}
	wall := time.Since(began)
	w.r.Start = WaitingStart{WallS: round3(wall.Seconds()), SessionsPerSecond: round3(float64(n) / wall.Seconds())}
	if err := sleep(ctx, waitingSettle); err != nil {
		return err
	}
	var err error
	if w.r.Waiting, _, err = footprint(ctx, a); err != nil {
		return err
	}
	m, err := markStorage(ctx, w.pool)
	if err != nil {
		return err
	}
	w.r.Database.BytesWaiting = m.tables
	w.r.PerSession = perSession(w.r.Idle, w.r.Waiting, n)
	w.r.PerSession.DatabaseBytes = round3(float64(m.tables-w.r.Database.BytesBefore) / float64(n))
	return nil
}

// awaitWaiting returns once every session waits for its approval in p,
// with how long that took from began.
func (w *waitingRun) awaitWaiting(ctx context.Context, p *workerProc, began time.Time, label string) (time.Duration, error) {
	n := w.cfg.Sessions
	deadline, last := time.Now().Add(phaseTimeout(n)), time.Now()
	for {
		l, err := p.call(ctx, workerRequest{Op: opWaiting}, requestTimeout)
		if err != nil {
			return 0, err
		}
		if l.Waiting >= n {
			return time.Since(began), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("bench: %s: %d of %d sessions wait for their approval after %s: the worker is too slow or stuck "+
				"(try fewer sessions, or a larger pool with --max-conns)%s", label, l.Waiting, n, phaseTimeout(n), p.stderrTail())
		}
		if time.Since(last) >= 2*time.Second {
			last = time.Now()
			w.cfg.Progress(fmt.Sprintf("%s: %d/%d sessions wait for their approval", label, l.Waiting, n))
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return 0, err
		}
	}
}

// restart kills worker A and starts worker B with its executor ID: B's
// Launch recovers the waiting sessions, as a restarted process does.
func (w *waitingRun) restart(ctx context.Context) error {
	n := w.cfg.Sessions
	w.cfg.Progress(fmt.Sprintf("restart: SIGKILL worker A, worker B launches with its executor ID and recovers the %d sessions", n))
	if err := w.a.kill(); err != nil {
		return err
	}
	b, launch, err := w.launchWorker(ctx, w.executorID, phaseTimeout(n))
	if err != nil {
		return err
	}
	w.b = b
	rs := &w.r.Restart
	rs.LaunchMS = ms(launch)
	recovered, err := w.awaitWaiting(ctx, b, time.Now(), "recovery")
	if err != nil {
		return err
	}
	rs.Recovered, rs.RecoveredS = n, round3(recovered.Seconds())
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
	return nil
}

// wake answers the first WakeSamples sessions one at a time: each sample
// runs from just before SubmitToolResult to the worker's stamp of the
// approved tool's run and of the model's call for step 2.
func (w *waitingRun) wake(ctx context.Context) (err error) {
	if w.client, err = engine.NewClient(ctx, engine.ClientConfig{Pool: w.pool}); err != nil {
		return err
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
		if time.Since(last) >= 2*time.Second {
			last = time.Now()
			w.cfg.Progress(fmt.Sprintf("wake: %d/%d sessions", i+1, n))
		}
	}
	w.r.Wake = WaitingWake{Samples: n, SubmitToTool: distribution(toTool), SubmitToNextStep: distribution(toStep), Submit: distribution(submit)}
	return nil
}

// approve approves the waiting call of session id.
func (w *waitingRun) approve(ctx context.Context, id string) error {
	res, err := w.client.SubmitToolResult(ctx, id, helix.Approve(approvalCallID, "bench"))
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

// awaitCompleted returns once every session completed, and records the
// outcome.
func (w *waitingRun) awaitCompleted(ctx context.Context) error {
	n, o := w.cfg.Sessions, &w.r.Outcome
	deadline, last := time.Now().Add(phaseTimeout(n)), time.Now()
	for {
		if err := w.pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(step_count), 0) FROM helix.sessions
			WHERE agent_type = $1 AND status = 'completed'`, WaitingAgentName).Scan(&o.Completed, &o.Steps); err != nil {
			return fmt.Errorf("bench: count the completed sessions: %w", err)
		}
		if o.Completed >= n {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: %d of %d sessions completed %s after their approval: the worker is too slow or stuck%s",
				o.Completed, n, phaseTimeout(n), w.b.stderrTail())
		}
		if time.Since(last) >= 2*time.Second {
			last = time.Now()
			w.cfg.Progress(fmt.Sprintf("drain: %d/%d sessions completed", o.Completed, n))
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	o.WokeOnce, o.ToolRuns, o.NextStepCalls = w.wakes.counts()
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
