package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
)

// Every engine this CLI starts with a stable executor ID (serve, resume,
// retry) records itself in helix.executors and refreshes its heartbeat
// there. The row says the ID is taken: DBOS recovers an executor's
// workflows in whichever process launches with its ID, so two live
// processes must never share one, and a second CLI process that tries is
// refused. `doctor` reads the rows to tell live executors from dead ones.
// A clean exit deletes the row; a crash leaves it, stale.
const (
	heartbeatInterval = 10 * time.Second
	// heartbeatStale is when a silent executor counts as dead (three
	// missed beats): its ID may be claimed again.
	heartbeatStale = 3 * heartbeatInterval
)

// executorHeartbeat keeps an executor's row fresh until stop.
type executorHeartbeat struct {
	pool     *pgxpool.Pool
	id, host string
	pid      int
	cancel   context.CancelFunc
	wg       sync.WaitGroup
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
		"pass another --executor-id (or HELIX_EXECUTOR_ID), or stop that process first "+
		"(if it died on another machine, its ID is free %s after its last heartbeat)",
		e.id, e.pid, e.host, fmtTime(e.since), time.Since(e.lastBeat).Round(time.Second), heartbeatStale)
}

// processAlive reports whether a process with this ID runs on this
// machine (signal 0 checks without sending anything; EPERM means it runs
// as another user).
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	err = p.Signal(syscall.Signal(0))
	return err == nil || errors.Is(err, syscall.EPERM)
}

// claimExecutor records this process as executor id, refusing when another
// process holds it with a fresh heartbeat, and starts the heartbeat. The
// heartbeat has a connection of its own: it outlives the engine's pool, so
// the row goes only after the engine has stopped.
func claimExecutor(ctx context.Context, url, id, appVersion string, log *zerolog.Logger) (_ *executorHeartbeat, err error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %w", err)
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
		if inUse.host != host || processAlive(inUse.pid) {
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
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	h.cancel = cancel
	h.wg.Go(func() {
		t := time.NewTicker(heartbeatInterval)
		defer t.Stop()
		for {
			select {
			case <-bctx.Done():
				return
			case <-t.C:
			}
			if _, err := pool.Exec(bctx, `UPDATE helix.executors SET heartbeat_at = now()
				WHERE executor_id = $1 AND hostname = $2 AND pid = $3`, id, host, h.pid); err != nil && bctx.Err() == nil && log != nil {
				log.Warn().Err(err).Str("executorId", id).Msg("executor heartbeat failed")
			}
		}
	})
	return h, nil
}

// stop ends the heartbeat and deletes the row (a clean exit frees the ID
// at once). Call it after the engine has shut down.
func (h *executorHeartbeat) stop(ctx context.Context) {
	if h == nil {
		return
	}
	h.once.Do(func() {
		h.cancel()
		h.wg.Wait()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = h.pool.Exec(ctx, `DELETE FROM helix.executors WHERE executor_id = $1 AND hostname = $2 AND pid = $3`, h.id, h.host, h.pid)
		h.pool.Close()
	})
}

// orphanRun is a recorded run whose workflow was never started.
type orphanRun struct {
	SessionID, RunID, AgentType string
}

// checkOrphans refuses to launch an engine that would start runs of agents
// it does not define. Launch starts every run recorded without a workflow
// (a process died between recording a run and starting it), whatever its
// agent; an agent this engine lacks would fail that session.
func checkOrphans(ctx context.Context, pool *pgxpool.Pool, known map[string]bool) error {
	var dbosRan bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('dbos.workflow_status') IS NOT NULL`).Scan(&dbosRan); err != nil || !dbosRan {
		return err // no engine ever ran here: nothing was started, so nothing is orphaned
	}
	rows, err := pool.Query(ctx, `
SELECT r.session_id, r.run_id, s.agent_type FROM helix.runs r JOIN helix.sessions s USING (session_id)
WHERE r.status = 'running' AND r.workflow_id IS NOT NULL AND r.workflow_id <> ''
  AND NOT EXISTS (SELECT 1 FROM dbos.workflow_status w WHERE w.workflow_uuid = r.workflow_id)
ORDER BY r.session_id`)
	if err != nil {
		return explain(err)
	}
	orphans, err := pgx.CollectRows(rows, pgx.RowToStructByPos[orphanRun])
	if err != nil {
		return explain(err)
	}
	var foreign []string
	for _, o := range orphans {
		if !known[o.AgentType] {
			foreign = append(foreign, fmt.Sprintf("session %s (agent %s)", o.SessionID, o.AgentType))
		}
	}
	if len(foreign) == 0 {
		return nil
	}
	return fmt.Errorf("not starting an engine: %d recorded run(s) have no workflow yet (a process died while starting them): %s; "+
		"launching an engine starts them, and this command does not define their agents, so they would fail. "+
		"Start the process that defines those agents first (its engine starts them), or give this command their agent file (--agents FILE)",
		len(foreign), strings.Join(foreign, ", "))
}
