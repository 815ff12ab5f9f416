package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/helix-agents/helix-dbos/internal/process"
)

// HeartbeatInterval is how often a launched engine refreshes its row in
// helix.executors; `helix-dbos doctor` counts an executor whose heartbeat
// is older than three intervals as gone.
const HeartbeatInterval = 10 * time.Second

// heartbeat records a launched engine in helix.executors (executor ID,
// application version, host, pid) and keeps the row fresh, so operators
// see which executors are alive and a second live process cannot take the
// same ID. A row left by a process that died is taken over; a clean
// Shutdown deletes it.
type heartbeat struct {
	pool  *pgxpool.Pool
	id    string
	host  string
	pid   int
	log   *zerolog.Logger
	beats *loop
}

// ExecutorInUseError is Launch's refusal when another live process holds
// the engine's executor ID: DBOS recovers an executor's pending workflows in
// whichever process launches with its ID, so two live processes must never
// share one.
type ExecutorInUseError struct {
	ExecutorID    string
	Host          string
	PID           int
	LastHeartbeat time.Time
}

func (e *ExecutorInUseError) Error() string {
	return fmt.Sprintf("engine: executor ID %q is in use by process %d on %s (heartbeat %s ago): two live processes must never "+
		"share an executor ID (both would recover the same workflows); give this process another Config.ExecutorID, or stop that one "+
		"(a holder that died on another machine frees the ID %s after its last heartbeat; on this machine at once)",
		e.ExecutorID, e.PID, e.Host, time.Since(e.LastHeartbeat).Round(time.Second), ExecutorStale)
}

// ExecutorStale is when an executor whose heartbeat stopped counts as dead:
// three missed heartbeats.
const ExecutorStale = 3 * HeartbeatInterval

// claimExecutor records this process in helix.executors under id before
// DBOS launches (and recovers id's workflows). It refuses with
// *ExecutorInUseError when another live process holds the ID: its
// heartbeat is fresh and it runs on another machine, or on this one. A
// holder on this machine whose process is gone (SIGKILL, a crash) is taken
// over at once; elsewhere, once its heartbeat is stale.
func claimExecutor(ctx context.Context, pool *pgxpool.Pool, id, version string) (*heartbeat, error) {
	host, _ := os.Hostname()
	h := &heartbeat{pool: pool, id: id, host: host, pid: os.Getpid()}
	prev := ExecutorInUseError{ExecutorID: id}
	var fresh bool
	err := pool.QueryRow(ctx, `SELECT COALESCE(hostname, ''), COALESCE(pid, 0), heartbeat_at,
			heartbeat_at > now() - make_interval(secs => $2)
		FROM helix.executors WHERE executor_id = $1`, id, ExecutorStale.Seconds()).Scan(&prev.Host, &prev.PID, &prev.LastHeartbeat, &fresh)
	exists := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, err
	}
	self := prev.Host == host && prev.PID == h.pid // the CLI claims the row before it launches the engine
	if exists && fresh && !self && (prev.Host != host || process.Alive(prev.PID)) {
		return nil, &prev
	}
	// Compare and set: the row is taken only as it was read, so of two
	// processes claiming a dead holder's ID at once, one wins.
	var claimed bool
	err = pool.QueryRow(ctx, `
INSERT INTO helix.executors AS x (executor_id, application_version, hostname, pid, started_at, heartbeat_at)
VALUES ($1, $2, $3, $4, now(), now())
ON CONFLICT (executor_id) DO UPDATE SET application_version = EXCLUDED.application_version,
	hostname = EXCLUDED.hostname, pid = EXCLUDED.pid, started_at = now(), heartbeat_at = now()
WHERE $5 AND COALESCE(x.hostname, '') = $6 AND COALESCE(x.pid, 0) = $7 AND x.heartbeat_at = $8
RETURNING true`, id, version, host, h.pid, exists, prev.Host, prev.PID, prev.LastHeartbeat).Scan(&claimed)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("engine: executor ID %q was claimed by another process at the same moment: give each process its own Config.ExecutorID", id)
	}
	if err != nil {
		return nil, err
	}
	return h, nil
}

// start refreshes the row every HeartbeatInterval until stop.
func (h *heartbeat) start(ctx context.Context, log *zerolog.Logger) {
	h.log = log
	h.beats = every(ctx, HeartbeatInterval, func(ctx context.Context) {
		if _, err := h.pool.Exec(ctx, `UPDATE helix.executors SET heartbeat_at = now()
			WHERE executor_id = $1 AND hostname = $2 AND pid = $3`, h.id, h.host, h.pid); err != nil && ctx.Err() == nil {
			log.Warn().Err(err).Str("event", "executor.heartbeat_failed").Str("executorId", h.id).Msg("executor heartbeat failed; retrying")
		}
	})
}

// stop ends the refresh and deletes the row (this process's only).
func (h *heartbeat) stop(ctx context.Context) {
	if h == nil {
		return
	}
	h.beats.stop()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := h.pool.Exec(ctx, `DELETE FROM helix.executors WHERE executor_id = $1 AND hostname = $2 AND pid = $3`,
		h.id, h.host, h.pid); err != nil {
		h.log.Warn().Err(err).Str("event", "executor.unregister_failed").Str("executorId", h.id).
			Msg("could not delete this executor's heartbeat row; doctor reports it gone once it is stale")
	}
}
