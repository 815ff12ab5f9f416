package engine

import (
	"context"
	"os"
	"sync"
	"time"

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
// see which executors are alive. A row left by a process that died is
// taken over; a clean Shutdown deletes it.
type heartbeat struct {
	pool   *pgxpool.Pool
	id     string
	host   string
	pid    int
	log    *zerolog.Logger
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startHeartbeat writes the row and starts refreshing it. Another live
// process with the same executor ID is a configuration error worth a
// warning (both would recover the same workflows), not a refusal: the
// process that took over after a crash must start at once.
func startHeartbeat(ctx context.Context, pool *pgxpool.Pool, id, version string, log *zerolog.Logger) (*heartbeat, error) {
	host, _ := os.Hostname()
	h := &heartbeat{pool: pool, id: id, host: host, pid: os.Getpid(), log: log}
	var prevHost string
	var prevPID int
	var fresh bool
	err := pool.QueryRow(ctx, `
WITH prev AS (SELECT hostname, pid, heartbeat_at FROM helix.executors WHERE executor_id = $1)
INSERT INTO helix.executors (executor_id, application_version, hostname, pid, started_at, heartbeat_at)
VALUES ($1, $2, $3, $4, now(), now())
ON CONFLICT (executor_id) DO UPDATE SET application_version = EXCLUDED.application_version,
	hostname = EXCLUDED.hostname, pid = EXCLUDED.pid, started_at = now(), heartbeat_at = now()
RETURNING COALESCE((SELECT hostname FROM prev), ''), COALESCE((SELECT pid FROM prev), 0),
	COALESCE((SELECT heartbeat_at > now() - make_interval(secs => $5) FROM prev), false)`,
		id, version, host, h.pid, (3*HeartbeatInterval).Seconds()).Scan(&prevHost, &prevPID, &fresh)
	if err != nil {
		return nil, err
	}
	// A fresh row of a process on this machine that is gone is what a crash
	// leaves: taking it over is the point of recovery.
	if fresh && (prevHost != host || prevPID != h.pid) && (prevHost != host || process.Alive(prevPID)) {
		log.Warn().Str("event", "executor.shared").Str("executorId", id).Str("otherHost", prevHost).Int("otherPid", prevPID).
			Msg("another live process recorded this executor ID: two processes with one executor ID recover the same workflows; give each process its own Config.ExecutorID")
	}
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	h.cancel = cancel
	h.wg.Go(func() {
		t := time.NewTicker(HeartbeatInterval)
		defer t.Stop()
		for {
			select {
			case <-bctx.Done():
				return
			case <-t.C:
			}
			if _, err := pool.Exec(bctx, `UPDATE helix.executors SET heartbeat_at = now()
				WHERE executor_id = $1 AND hostname = $2 AND pid = $3`, id, host, h.pid); err != nil && bctx.Err() == nil {
				log.Warn().Err(err).Str("event", "executor.heartbeat_failed").Str("executorId", id).Msg("executor heartbeat failed; retrying")
			}
		}
	})
	return h, nil
}

// stop ends the refresh and deletes the row (this process's only).
func (h *heartbeat) stop(ctx context.Context) {
	if h == nil {
		return
	}
	h.cancel()
	h.wg.Wait()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := h.pool.Exec(ctx, `DELETE FROM helix.executors WHERE executor_id = $1 AND hostname = $2 AND pid = $3`,
		h.id, h.host, h.pid); err != nil {
		h.log.Warn().Err(err).Str("event", "executor.unregister_failed").Str("executorId", h.id).
			Msg("could not delete this executor's heartbeat row; doctor reports it gone once it is stale")
	}
}
