package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/helix-agents/helix-dbos/internal/process"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// heartbeat records a launched engine in helix.executors (executor ID,
// application, host, pid, lease) and renews its lease every lease/3, so
// peers see it alive and a second live process cannot take the same ID. A
// clean Shutdown marks the row stopped: its sessions are taken over at once.
type heartbeat struct {
	pool    *pgxpool.Pool
	id      string
	app     string
	version string
	host    string
	ns      string // process.Namespace
	pid     int
	lease   *lease
	log     *zerolog.Logger
	beats   *loop
	// quiet silences failed renewals while the engine shuts down (DBOS
	// closes the pool before the heartbeat stops).
	quiet atomic.Bool
	// onEvicted runs when another process holds the ID.
	onEvicted func(err error)
	// takenOver is set while this executor, found taken over, waits for
	// its taker to re-enqueue its workflows before it rejoins.
	takenOver bool
	// levelUnrecorded is set when a rejoin could not record the storage
	// format level (its row reads level 0): the next renewals retry.
	levelUnrecorded bool
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
	// Lease is the holder's lease: the ID is free once its last heartbeat
	// is older than that.
	Lease time.Duration
}

func (e *ExecutorInUseError) Error() string {
	return fmt.Sprintf("engine: executor ID %q is in use by process %d on %s (heartbeat %s ago): two live processes must never "+
		"share an executor ID (both would recover the same workflows); give this process another executor ID (Config.ExecutorID, "+
		"or --executor-id for helix-dbos; by default each process gets a new one), or stop that one (a holder that died on another machine frees the ID %s after its "+
		"last heartbeat; on this machine at once)",
		e.ExecutorID, e.PID, e.Host, time.Since(e.LastHeartbeat).Round(time.Second), e.Lease)
}

// claimExecutor records this process in helix.executors under id before
// DBOS launches (and recovers id's workflows), with the storage format
// level it reads (postgres.FormatLevelNewest). It refuses with
// *ExecutorInUseError when another live process holds the ID: its lease
// is fresh and it runs on another machine, or on this one. A holder that
// stopped, was taken over, or died on this machine (SIGKILL, a crash) is
// replaced at once; elsewhere, once its lease expired.
func claimExecutor(ctx context.Context, pool *pgxpool.Pool, id, app, version string, l *lease) (*heartbeat, error) {
	host, _ := os.Hostname()
	h := &heartbeat{pool: pool, id: id, app: app, version: version, host: host, ns: process.Namespace(), pid: os.Getpid(), lease: l}
	prev := ExecutorInUseError{ExecutorID: id}
	var fresh bool
	var leaseMS int64
	var prevNS string
	err := pool.QueryRow(ctx, `SELECT COALESCE(hostname, ''), COALESCE(pid, 0), COALESCE(pid_namespace, ''), heartbeat_at, lease_ms,
			stopped_at IS NULL AND taken_over_by IS NULL AND heartbeat_at > now() - lease_ms * interval '1 millisecond'
		FROM helix.executors WHERE executor_id = $1`, id).Scan(&prev.Host, &prev.PID, &prevNS, &prev.LastHeartbeat, &leaseMS, &fresh)
	exists := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, err
	}
	prev.Lease = time.Duration(leaseMS) * time.Millisecond
	// A holder whose process this one can see (same boot, same pid
	// namespace) is checked; any other is alive while its lease is fresh.
	visible := h.ns != "" && prevNS == h.ns
	if exists && fresh && (!visible || (prev.PID != h.pid && process.Alive(prev.PID))) {
		return nil, &prev
	}
	// Compare and set: the row is taken only as it was read, so of two
	// processes claiming a dead holder's ID at once, one wins.
	sent := time.Now()
	var claimed bool
	err = pool.QueryRow(ctx, `
INSERT INTO helix.executors AS x (executor_id, app_name, application_version, hostname, pid, pid_namespace, lease_ms, started_at, heartbeat_at)
VALUES ($1, $2, $3, $4, $5, $11, $6, now(), now())
ON CONFLICT (executor_id) DO UPDATE SET app_name = EXCLUDED.app_name, application_version = EXCLUDED.application_version,
	hostname = EXCLUDED.hostname, pid = EXCLUDED.pid, pid_namespace = EXCLUDED.pid_namespace, lease_ms = EXCLUDED.lease_ms,
	started_at = now(), heartbeat_at = now(),
	stopped_at = NULL, taken_over_by = NULL, taken_over_at = NULL, recovered_at = NULL, recovered_workflows = NULL, recovery_error = NULL
WHERE $7 AND COALESCE(x.hostname, '') = $8 AND COALESCE(x.pid, 0) = $9 AND x.heartbeat_at = $10
RETURNING true`, id, app, version, host, h.pid, l.length.Milliseconds(), exists, prev.Host, prev.PID, prev.LastHeartbeat, h.ns).Scan(&claimed)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("engine: executor ID %q was claimed by another process at the same moment: give each process its own Config.ExecutorID", id)
	}
	if err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, recordFormatLevelSQL, id, host, h.pid, postgres.FormatLevelNewest); err != nil {
		return nil, fmt.Errorf("engine: record the storage format level of executor %s: %w", id, err)
	}
	l.renewed(sent)
	return h, nil
}

// start renews the lease every lease/3 until stop; a failed renewal is
// retried every second (the lease must not lapse for a transient error).
func (h *heartbeat) start(ctx context.Context, log *zerolog.Logger) {
	h.log = log
	interval := h.lease.length / 3
	last, failing := time.Now(), false
	h.beats = every(ctx, min(time.Second, interval), func(ctx context.Context) {
		if !failing && time.Since(last) < interval {
			return
		}
		last = time.Now()
		failing = h.beat(ctx) != nil
	})
}

// beat renews the lease once (and records the storage format level a
// rejoin failed to record).
func (h *heartbeat) beat(ctx context.Context) error {
	sent := time.Now()
	var renewed, missing, recovered bool
	var by *string
	var host string
	var pid int
	err := h.pool.QueryRow(ctx, `
WITH renewed AS (
	UPDATE helix.executors SET heartbeat_at = now()
	WHERE executor_id = $1 AND hostname = $2 AND pid = $3 AND taken_over_by IS NULL AND stopped_at IS NULL
	RETURNING executor_id)
SELECT EXISTS (SELECT 1 FROM renewed), x.executor_id IS NULL, x.taken_over_by, COALESCE(x.hostname, ''), COALESCE(x.pid, 0),
	x.recovered_at IS NOT NULL
FROM (SELECT 1) one LEFT JOIN helix.executors x ON x.executor_id = $1`, h.id, h.host, h.pid).Scan(&renewed, &missing, &by, &host, &pid, &recovered)
	switch {
	case err == nil && (renewed || missing):
		if missing {
			// An operator deleted the row: record this live executor again.
			if err := h.recreate(ctx); err != nil {
				return err
			}
		}
		h.lease.renewed(sent)
		if h.levelUnrecorded {
			if _, err := h.pool.Exec(ctx, recordFormatLevelSQL, h.id, h.host, h.pid, postgres.FormatLevelNewest); err == nil {
				h.levelUnrecorded = false
			}
		}
		return nil
	case err != nil:
		if ctx.Err() == nil && !h.quiet.Load() {
			h.log.Warn().Err(err).Str("event", "executor.heartbeat_failed").Str("executorId", h.id).
				Dur("leaseLeft", time.Until(h.lease.deadline())).
				Msg("executor heartbeat failed; retrying every second (steps pause if the lease runs out)")
		}
		return err
	case host != h.host || pid != h.pid:
		err := fmt.Errorf("engine: executor ID %q is now held by process %d on %s: this process was unresponsive for longer than its "+
			"lease (%s) and the ID was claimed by another process; this engine stops running workflows: stop this process "+
			"(and give each process its own executor ID)", h.id, pid, host, h.lease.length)
		h.log.Error().Str("event", "executor.evicted").Str("executorId", h.id).Str("holderHost", host).Int("holderPid", pid).Msg(err.Error())
		h.lease.evict(err)
		if h.onEvicted != nil {
			h.onEvicted(err)
		}
		return nil
	default:
		return h.rejoin(ctx, by, recovered)
	}
}

// errAwaitingTaker makes the heartbeat try again in a second: the engine
// that took this executor over has not re-enqueued its workflows yet.
var errAwaitingTaker = errors.New("engine: waiting for the engine that took this executor over to re-enqueue its workflows")

// rejoin handles a beat that found this executor taken over (or marked
// stopped) while the process was unresponsive. Steps pause at once. Once
// the taker has re-enqueued this executor's pending workflows (DBOS then
// refuses every checkpoint of the executions this process was running),
// the row is renewed and a new lease epoch starts: the old executions'
// steps are refused, new work runs.
func (h *heartbeat) rejoin(ctx context.Context, by *string, recovered bool) error {
	taker := "(stopped)"
	if by != nil {
		taker = *by
	}
	if !h.takenOver {
		h.takenOver = true
		h.log.Error().Str("event", "executor.taken_over").Str("executorId", h.id).Str("takenOverBy", taker).
			Msg("this executor's lease expired while the process was unresponsive and its sessions were taken over; the loops it was " +
				"running are fenced (they record nothing more), and it rejoins the cluster to serve new work")
	}
	h.lease.suspend()
	if by != nil && !recovered {
		return errAwaitingTaker
	}
	sent := time.Now()
	tag, err := h.pool.Exec(ctx, `UPDATE helix.executors SET heartbeat_at = now(), started_at = now(), stopped_at = NULL,
			taken_over_by = NULL, taken_over_at = NULL, recovered_at = NULL, recovered_workflows = NULL, recovery_error = NULL
		WHERE executor_id = $1 AND hostname = $2 AND pid = $3 AND (taken_over_by IS NULL OR recovered_at IS NOT NULL)`, h.id, h.host, h.pid)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return errAwaitingTaker // claimed again meanwhile
	}
	if _, err := h.pool.Exec(ctx, recordFormatLevelSQL, h.id, h.host, h.pid, postgres.FormatLevelNewest); err != nil && ctx.Err() == nil {
		// The rejoin stands; the row reads level 0 (safe) until a later
		// renewal records the level.
		h.levelUnrecorded = true
		h.log.Warn().Err(err).Str("event", "executor.format_level_failed").Str("executorId", h.id).
			Msg("could not record this executor's storage format level after its rejoin; the next heartbeat records it")
	}
	h.takenOver = false
	h.lease.rejoined(sent)
	h.log.Warn().Str("event", "executor.rejoined").Str("executorId", h.id).Msg("executor rejoined the cluster after a takeover")
	return nil
}

// recreate inserts this executor's row again if it is missing.
func (h *heartbeat) recreate(ctx context.Context) error {
	_, err := h.pool.Exec(ctx, `
INSERT INTO helix.executors (executor_id, app_name, application_version, hostname, pid, pid_namespace, lease_ms, started_at, heartbeat_at,
	format_level)
VALUES ($1, $2, $3, $4, $5, $6, $7, now(), now(), $8) ON CONFLICT (executor_id) DO NOTHING`,
		h.id, h.app, h.version, h.host, h.pid, h.ns, h.lease.length.Milliseconds(), postgres.FormatLevelNewest)
	return err
}

// draining marks the engine shutting down: renewals go on, their failures
// are not logged.
func (h *heartbeat) draining() {
	if h != nil {
		h.quiet.Store(true)
	}
}

// stop ends the renewals.
func (h *heartbeat) stop() {
	if h != nil {
		h.beats.stop()
	}
}

// markStopped records a clean stop on conn (taken from the pool before
// DBOS closed it), so peers take over what this executor left pending at
// once, and closes conn.
func (h *heartbeat) markStopped(ctx context.Context, conn *pgx.Conn) {
	if h == nil || conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `UPDATE helix.executors SET stopped_at = now()
		WHERE executor_id = $1 AND hostname = $2 AND pid = $3 AND taken_over_by IS NULL`, h.id, h.host, h.pid); err != nil {
		h.log.Warn().Err(err).Str("event", "executor.unregister_failed").Str("executorId", h.id).
			Msg("could not mark this executor stopped; peers take its pending sessions over once its lease expires")
	}
}
