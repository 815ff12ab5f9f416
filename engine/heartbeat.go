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
	db := postgres.PgxQuerier(pool)
	holder, exists, err := postgres.ReadExecutorHolder(ctx, db, id)
	if err != nil {
		return nil, err
	}
	prev := ExecutorInUseError{ExecutorID: id, Host: holder.Host, PID: holder.PID, LastHeartbeat: holder.HeartbeatAt, Lease: holder.Lease}
	// A holder whose process this one can see (same boot, same pid
	// namespace) is checked; any other is alive while its lease is fresh.
	visible := h.ns != "" && holder.PIDNamespace == h.ns
	if exists && holder.Alive && (!visible || (prev.PID != h.pid && process.Alive(prev.PID))) {
		return nil, &prev
	}
	// Compare and set: the row is taken only as it was read, so of two
	// processes claiming a dead holder's ID at once, one wins.
	sent := time.Now()
	claimed, err := postgres.ClaimExecutorID(ctx, db, h.claim(), holder, exists)
	if err != nil {
		return nil, err
	}
	if !claimed {
		return nil, fmt.Errorf("engine: executor ID %q was claimed by another process at the same moment: give each process its own Config.ExecutorID", id)
	}
	if err := postgres.RecordExecutorFormatLevel(ctx, db, id, host, h.pid, postgres.FormatLevelNewest); err != nil {
		return nil, fmt.Errorf("engine: record the storage format level of executor %s: %w", id, err)
	}
	l.renewed(sent)
	return h, nil
}

// claim is this process's claim of its executor ID.
func (h *heartbeat) claim() postgres.ExecutorClaim {
	return postgres.ExecutorClaim{ExecutorID: h.id, AppName: h.app, ApplicationVersion: h.version, Host: h.host, PID: h.pid,
		PIDNamespace: h.ns, Lease: h.lease.length}
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
	db := postgres.PgxQuerier(h.pool)
	r, err := postgres.RenewExecutorLease(ctx, db, h.id, h.host, h.pid)
	switch {
	case err == nil && (r.Renewed || r.Missing):
		if r.Missing {
			// An operator deleted the row: record this live executor again.
			if err := h.recreate(ctx); err != nil {
				return err
			}
		}
		h.lease.renewed(sent)
		if h.levelUnrecorded {
			if err := postgres.RecordExecutorFormatLevel(ctx, db, h.id, h.host, h.pid, postgres.FormatLevelNewest); err == nil {
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
	case r.Host != h.host || r.PID != h.pid:
		err := fmt.Errorf("engine: executor ID %q is now held by process %d on %s: this process was unresponsive for longer than its "+
			"lease (%s) and the ID was claimed by another process; this engine stops running workflows: stop this process "+
			"(and give each process its own executor ID)", h.id, r.PID, r.Host, h.lease.length)
		h.log.Error().Str("event", "executor.evicted").Str("executorId", h.id).Str("holderHost", r.Host).Int("holderPid", r.PID).Msg(err.Error())
		h.lease.evict(err)
		if h.onEvicted != nil {
			h.onEvicted(err)
		}
		return nil
	default:
		return h.rejoin(ctx, r.TakenOverBy, r.Recovered)
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
	db := postgres.PgxQuerier(h.pool)
	rejoined, err := postgres.RejoinExecutor(ctx, db, h.id, h.host, h.pid)
	if err != nil {
		return err
	}
	if !rejoined {
		return errAwaitingTaker // claimed again meanwhile
	}
	if err := postgres.RecordExecutorFormatLevel(ctx, db, h.id, h.host, h.pid, postgres.FormatLevelNewest); err != nil && ctx.Err() == nil {
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
	return postgres.RecreateExecutor(ctx, postgres.PgxQuerier(h.pool), h.claim(), postgres.FormatLevelNewest)
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
	if err := postgres.MarkExecutorStopped(ctx, postgres.PgxQuerier(conn), h.id, h.host, h.pid); err != nil {
		h.log.Warn().Err(err).Str("event", "executor.unregister_failed").Str("executorId", h.id).
			Msg("could not mark this executor stopped; peers take its pending sessions over once its lease expires")
	}
}
