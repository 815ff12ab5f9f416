package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/helix-agents/helix-dbos/steps"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// Defaults and limits of RetentionPolicy and GCOptions.
const (
	// DefaultRetentionInterval is how often the retention job runs a pass.
	DefaultRetentionInterval = 10 * time.Minute
	// MinRetentionInterval is the shortest interval accepted.
	MinRetentionInterval = time.Second
	// DefaultGCBatchSize is how many session trees a pass deletes per
	// transaction.
	DefaultGCBatchSize = 100
	// MaxGCBatchSize bounds the batch: its transaction holds the row locks
	// of every session of the batch's trees.
	MaxGCBatchSize = 1000
	// GCBatchPause is the pause between two batches of a pass, so a long
	// pass leaves room to other writers and to autovacuum.
	GCBatchPause = 50 * time.Millisecond
)

// GCLockKey is the key of the Postgres session-level advisory lock
// (pg_try_advisory_lock(GCLockKey)) held by whoever runs a deleting pass:
// an engine's retention job or `helix-dbos gc`. One pass runs at a time in
// a database; a pass that finds the lock taken skips (the job) or fails
// with ErrGCBusy (CollectGarbage). The value is "helixgc" in ASCII.
const GCLockKey int64 = 0x68656c69786763

// ErrGCBusy is returned by CollectGarbage when another pass (an engine's
// retention job or another `helix-dbos gc`) holds GCLockKey.
var ErrGCBusy = errors.New("engine: another garbage-collection pass is running (an engine's retention job or helix-dbos gc); try again when it ends")

// RetentionPolicy is how long ended sessions are kept (Config.Retention).
// A session tree (a root with its sub-agents and companions) is deleted
// whole, never a part of it; its age is the time since its last activity,
// the latest change of its sessions (their UpdatedAt). A tree in which a session is
// active (running, queued, or waiting for a person) is never deleted.
// Interrupted and paused sessions are kept whatever their age (they can be
// resumed), unless they expired.
type RetentionPolicy struct {
	// Completed is how long a completed tree is kept; 0 keeps it forever.
	Completed time.Duration
	// Failed is how long a failed tree (not aborted) is kept; 0 keeps it
	// forever.
	Failed time.Duration
	// Aborted is how long an aborted tree is kept (a root failed by Abort
	// or by a workflow cancelled with DBOS's tools: its last run's error
	// code is "aborted"); 0 keeps it forever.
	Aborted time.Duration
	// KeepExpired keeps sessions past their expiresAt. Default false: a
	// tree whose root's expires_at has passed is deleted, whatever its
	// status and age, once no run of it is in progress.
	KeepExpired bool
	// Interval is the time between two passes of the job; default
	// DefaultRetentionInterval, at least MinRetentionInterval. The first
	// pass runs at Launch.
	Interval time.Duration
	// BatchSize is how many trees a pass deletes per transaction; default
	// DefaultGCBatchSize, at most MaxGCBatchSize.
	BatchSize int
}

// withDefaults validates p and applies its defaults.
func (p *RetentionPolicy) withDefaults(field string) error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Completed", p.Completed}, {"Failed", p.Failed}, {"Aborted", p.Aborted}, {"Interval", p.Interval}} {
		if d.v < 0 {
			return fmt.Errorf("engine: %s.%s must not be negative (0 means %s), got %s", field, d.name,
				map[bool]string{true: "the default", false: "keep forever"}[d.name == "Interval"], d.v)
		}
	}
	switch {
	case p.Interval != 0 && p.Interval < MinRetentionInterval:
		return fmt.Errorf("engine: %s.Interval must be at least %s (0 means the default %s), got %s", field, MinRetentionInterval, DefaultRetentionInterval, p.Interval)
	case p.BatchSize < 0 || p.BatchSize > MaxGCBatchSize:
		return fmt.Errorf("engine: %s.BatchSize must be between 1 and %d (0 means the default %d), got %d", field, MaxGCBatchSize, DefaultGCBatchSize, p.BatchSize)
	case p.Completed == 0 && p.Failed == 0 && p.Aborted == 0 && p.KeepExpired:
		return fmt.Errorf("engine: %s deletes nothing: set Completed, Failed or Aborted, or leave KeepExpired false (or leave %s nil)", field, field)
	}
	if p.Interval == 0 {
		p.Interval = DefaultRetentionInterval
	}
	if p.BatchSize == 0 {
		p.BatchSize = DefaultGCBatchSize
	}
	return nil
}

// selection is the store's form of p.
func (p *RetentionPolicy) selection() postgres.GCSelection {
	age := func(d time.Duration) *time.Duration {
		if d == 0 {
			return nil
		}
		return &d
	}
	return postgres.GCSelection{Completed: age(p.Completed), Failed: age(p.Failed), Aborted: age(p.Aborted), Expired: !p.KeepExpired}
}

// GCOptions refine one CollectGarbage pass; nil means the defaults.
type GCOptions struct {
	// DryRun deletes nothing: the result counts the trees the pass would
	// delete, their rows and bytes. It takes no lock.
	DryRun bool
	// Progress, when set, is called after every batch with the totals so
	// far.
	Progress func(GCResult)
}

// GCResult is what a garbage-collection pass deleted (or, in a dry run,
// would delete).
type GCResult struct {
	// DryRun is set when nothing was deleted.
	DryRun bool `json:"dryRun"`
	// Trees counts the root sessions deleted with their trees.
	Trees int `json:"trees"`
	// Skipped are the roots picked but left in place because a run started
	// on their tree meanwhile; the next pass picks them again.
	Skipped []string `json:"skipped"`
	// Batches counts the batches (transactions) of the pass.
	Batches int `json:"batches"`
	// TreeSize counts the sessions, workflows, rows per table and bytes per
	// table (an estimate: pg_column_size of each row, measured before the
	// delete) freed.
	TreeSize
	// Duration is how long the pass took.
	Duration time.Duration `json:"durationNs"`
}

// TotalRows sums Rows.
func (r *GCResult) TotalRows() int64 {
	var n int64
	for _, v := range r.Rows {
		n += v
	}
	return n
}

// TotalBytes sums Bytes.
func (r *GCResult) TotalBytes() int64 {
	var n int64
	for _, v := range r.Bytes {
		n += v
	}
	return n
}

// CollectGarbage runs one garbage-collection pass now: it deletes (see
// DeleteSessions) the session trees policy picks, in batches of
// policy.BatchSize trees, one transaction each, holding GCLockKey for the
// pass (ErrGCBusy when another pass holds it). A tree on which a run
// starts meanwhile is skipped, not an error. On an error (ctx ended, the
// database) the result counts what the batches committed before it. The
// engine need not be launched, nor have a Retention of its own;
// `helix-dbos gc` calls Client.CollectGarbage.
func (e *Engine) CollectGarbage(ctx context.Context, policy RetentionPolicy, opts *GCOptions) (*GCResult, error) {
	return e.gc().collect(ctx, policy, opts)
}

// CollectGarbage runs one garbage-collection pass, as Engine.CollectGarbage.
func (c *Client) CollectGarbage(ctx context.Context, policy RetentionPolicy, opts *GCOptions) (*GCResult, error) {
	return gc{pool: c.c.pool, store: c.c.store}.collect(ctx, policy, opts)
}

// gc runs garbage-collection passes on a database.
type gc struct {
	pool    *pgxpool.Pool
	store   *postgres.Store
	log     *zerolog.Logger
	metrics *steps.Metrics // nil outside a launched engine
	// hook, for tests, is called with "started" once a pass holds the
	// lock, "finished" when it is about to release it and "busy" when the
	// lock was held elsewhere.
	hook func(ctx context.Context, event string)
}

func (e *Engine) gc() gc {
	return gc{pool: e.pool, store: e.store, log: &e.log, metrics: e.env.Telemetry.Metrics, hook: e.cfg.gcHook}
}

func (g gc) collect(ctx context.Context, policy RetentionPolicy, opts *GCOptions) (*GCResult, error) {
	if err := policy.withDefaults("RetentionPolicy"); err != nil {
		return nil, err
	}
	if opts == nil {
		opts = &GCOptions{}
	}
	if opts.DryRun {
		return g.pass(ctx, nil, &policy, opts)
	}
	conn, unlock, err := g.lock(ctx)
	if err != nil {
		return nil, err
	}
	if conn == nil {
		return nil, ErrGCBusy
	}
	defer unlock()
	return g.pass(ctx, conn, &policy, opts)
}

// lock takes GCLockKey on a connection of its own, held until unlock; a
// nil conn (and no error) when another pass holds it. The pass runs all
// its statements on that connection, so it needs no other one from the
// pool (an engine's pool may have only two, one being DBOS's listener).
func (g gc) lock(ctx context.Context) (_ *pgxpool.Conn, unlock func(), err error) {
	conn, err := g.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("engine: gc: acquire a connection for the lock: %w", err)
	}
	ok, err := postgres.TryAdvisoryLock(ctx, postgres.PgxQuerier(conn), GCLockKey)
	if err != nil || !ok {
		conn.Release()
		if err != nil {
			return nil, nil, fmt.Errorf("engine: gc: take the lock %d: %w", GCLockKey, err)
		}
		g.event(ctx, "busy")
		return nil, nil, nil
	}
	g.event(ctx, "started")
	return conn, func() {
		g.event(ctx, "finished")
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := postgres.AdvisoryUnlock(uctx, postgres.PgxQuerier(conn), GCLockKey); err != nil {
			// A connection that may still hold the lock never returns to
			// the pool: closing it releases the lock.
			_ = conn.Hijack().Close(uctx)
			return
		}
		conn.Release()
	}, nil
}

func (g gc) event(ctx context.Context, event string) {
	if g.hook != nil {
		g.hook(ctx, event)
	}
}

// pass deletes (or measures) the trees policy picks, batch by batch, on
// conn, the connection holding the lock (nil in a dry run: the pool).
func (g gc) pass(ctx context.Context, conn *pgxpool.Conn, policy *RetentionPolicy, opts *GCOptions) (*GCResult, error) {
	st := g.store
	if conn != nil {
		st = g.store.WithQuerier(postgres.PgxQuerier(conn))
	}
	start := time.Now()
	res := &GCResult{DryRun: opts.DryRun, TreeSize: TreeSize{Rows: map[string]int64{}, Bytes: map[string]int64{}}, Skipped: []string{}}
	sel := policy.selection()
	var after string
	for {
		ids, err := st.SelectGCRoots(ctx, sel, after, policy.BatchSize)
		if err != nil {
			return res, err
		}
		if len(ids) == 0 {
			break
		}
		after = ids[len(ids)-1]
		size, err := st.MeasureSessionTrees(ctx, ids)
		if err != nil {
			return res, err
		}
		if opts.DryRun {
			res.Trees += len(ids)
			res.add(size)
		} else {
			// One transaction per batch, on the lock's connection.
			var stats *postgres.DeleteStats
			err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				var err error
				stats, err = g.store.WithQuerier(postgres.PgxQuerier(tx)).DeleteSessionTrees(ctx, ids,
					&postgres.DeleteTreesOptions{SkipRunning: true})
				return err
			})
			if err != nil {
				return res, err
			}
			if len(stats.Running) > 0 {
				// Still in place: not freed.
				left, err := st.MeasureSessionTrees(ctx, stats.Running)
				if err != nil {
					return res, err
				}
				size.Sub(left)
				res.Skipped = append(res.Skipped, stats.Running...)
			}
			// The delete's counts are exact; the bytes are measured.
			size.Sessions, size.Workflows, size.Rows = stats.Sessions, stats.Workflows, stats.Rows
			res.Trees += len(stats.Deleted)
			res.add(size)
			if g.metrics != nil {
				g.metrics.GCSessions.Add(float64(stats.Sessions))
			}
		}
		res.Batches++
		if opts.Progress != nil {
			opts.Progress(*res)
		}
		if len(ids) < policy.BatchSize {
			break
		}
		t := time.NewTimer(GCBatchPause)
		select {
		case <-ctx.Done():
			t.Stop()
			return res, ctx.Err()
		case <-t.C:
		}
	}
	res.Duration = time.Since(start)
	return res, nil
}

// startRetention starts the retention job; stop the returned loop at
// Shutdown. Every engine runs it; the lock lets one pass run at a time in
// the cluster, and an engine that finds it taken waits for its next tick.
func startRetention(ctx context.Context, g gc, policy RetentionPolicy) *loop {
	return every(ctx, policy.Interval, func(ctx context.Context) {
		conn, unlock, err := g.lock(ctx)
		if err != nil {
			if ctx.Err() == nil {
				g.log.Warn().Err(err).Str("event", "gc.failed").Msg("retention pass failed; retrying at the next interval")
			}
			return
		}
		if conn == nil {
			g.log.Debug().Str("event", "gc.busy").Msg("another engine runs the retention pass; skipped")
			return
		}
		defer unlock()
		if g.metrics != nil {
			g.metrics.GCPasses.Inc()
		}
		res, err := g.pass(ctx, conn, &policy, &GCOptions{})
		ev := g.log.Info()
		if err != nil {
			if ctx.Err() != nil {
				return // Shutdown: the batch in progress rolled back
			}
			ev = g.log.Warn().Err(err)
		}
		ev.Str("event", "gc.pass").Int("trees", res.Trees).Int64("sessions", res.Sessions).
			Int64("rows", res.TotalRows()).Int64("bytes", res.TotalBytes()).Int("skipped", len(res.Skipped)).
			Int("batches", res.Batches).Dur("took", res.Duration).
			Msg("retention pass")
	})
}
