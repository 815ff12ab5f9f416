package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/process"
)

// Every launched engine records itself in helix.executors and refreshes
// its heartbeat there (engine.HeartbeatInterval). The CLI's engines with a
// stable executor ID (serve, resume, retry) also claim the row before
// launching: DBOS recovers an executor's workflows in whichever process
// launches with its ID, so two live processes must never share one, and a
// second CLI process that tries is refused. `doctor` reads the rows to
// tell live executors from dead ones. A clean exit deletes the row; a
// crash leaves it, stale.

// heartbeatStale is when a silent executor counts as dead (three missed
// beats): its ID may be claimed again.
const heartbeatStale = engine.ExecutorStale

// executorHeartbeat is a claimed executor ID: the engine refreshes the row;
// stop deletes it.
type executorHeartbeat struct {
	pool     *pgxpool.Pool
	id, host string
	pid      int
	once     sync.Once
}

// executorInUseError says another live process holds an executor ID.
type executorInUseError struct {
	id, host        string
	pid             int
	since, lastBeat time.Time
}

func (e *executorInUseError) Error() string {
	return fmt.Sprintf("executor ID %q is in use by process %d on %s (started %s, heartbeat %s ago): "+
		"two live processes must never share an executor ID (both would recover the same workflows); "+
		"pass another --executor-id, or stop that process first "+
		"(if it died on another machine, its ID is free %s after its last heartbeat)",
		e.id, e.pid, e.host, fmtTime(e.since), time.Since(e.lastBeat).Round(time.Second), heartbeatStale)
}

// claimExecutor records this process as executor id, refusing when another
// process holds it with a fresh heartbeat; the engine keeps the row fresh
// once launched. The claim has a connection of its own: it outlives the
// engine's pool, so the row goes only after the engine has stopped.
func claimExecutor(ctx context.Context, url, id, appVersion string) (_ *executorHeartbeat, err error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, errUnparsableURL
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer func() {
		if err != nil {
			pool.Close()
		}
	}()
	host, _ := os.Hostname()
	h := &executorHeartbeat{pool: pool, id: id, host: host, pid: os.Getpid()}
	var got string
	err = pool.QueryRow(ctx, `
INSERT INTO helix.executors AS x (executor_id, application_version, hostname, pid, started_at, heartbeat_at)
VALUES ($1, $2, $3, $4, now(), now())
ON CONFLICT (executor_id) DO UPDATE
SET application_version = EXCLUDED.application_version, hostname = EXCLUDED.hostname, pid = EXCLUDED.pid,
    started_at = now(), heartbeat_at = now()
WHERE x.heartbeat_at < now() - make_interval(secs => $5) OR (x.hostname = EXCLUDED.hostname AND x.pid = EXCLUDED.pid)
RETURNING executor_id`, id, appVersion, host, h.pid, heartbeatStale.Seconds()).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		inUse := &executorInUseError{id: id}
		if err := pool.QueryRow(ctx, `SELECT coalesce(hostname, ''), coalesce(pid, 0), started_at, heartbeat_at
			FROM helix.executors WHERE executor_id = $1`, id).Scan(&inUse.host, &inUse.pid, &inUse.since, &inUse.lastBeat); err != nil {
			return nil, fmt.Errorf("executor ID %q is in use by another process: pass another --executor-id (%w)", id, err)
		}
		// A holder on this machine that no longer exists died without
		// cleaning up (SIGKILL, a crash): a restart takes its ID over at
		// once instead of waiting for its heartbeat to go stale.
		if inUse.host != host || process.Alive(inUse.pid) {
			return nil, inUse
		}
		tag, uerr := pool.Exec(ctx, `UPDATE helix.executors SET application_version = $2, pid = $4, started_at = now(), heartbeat_at = now()
			WHERE executor_id = $1 AND hostname = $3 AND pid = $5`, id, appVersion, host, h.pid, inUse.pid)
		if uerr != nil {
			return nil, explain(fmt.Errorf("take over executor %s in helix.executors: %w", id, uerr))
		}
		if tag.RowsAffected() == 0 {
			return nil, fmt.Errorf("executor ID %q was just claimed by another process: pass another --executor-id", id)
		}
		err = nil
	}
	if err != nil {
		return nil, explain(fmt.Errorf("record executor %s in helix.executors: %w", id, err))
	}
	return h, nil
}

// stop ends the heartbeat and deletes the row (a clean exit frees the ID
// at once). Call it after the engine has shut down.
func (h *executorHeartbeat) stop(ctx context.Context) {
	if h == nil {
		return
	}
	h.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = h.pool.Exec(ctx, `DELETE FROM helix.executors WHERE executor_id = $1 AND hostname = $2 AND pid = $3`, h.id, h.host, h.pid)
		h.pool.Close()
	})
}
