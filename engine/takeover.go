package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/helix-agents/helix-dbos/steps"
)

// TakeoverSweepInterval bounds how often a launched engine looks for
// executors to take over (a tenth of its lease when that is shorter): a
// dead executor's sessions resume elsewhere within its lease plus this
// interval plus DBOS's queue polling (about a second).
const TakeoverSweepInterval = 2 * time.Second

// TakenOverRetention is how long the row of an executor that is gone
// (taken over, stopped or dead, with nothing pending) stays in
// helix.executors for operators (`helix-dbos doctor`) before the sweep
// deletes it.
const TakenOverRetention = 7 * 24 * time.Hour

// takeover is a launched engine's side of cluster takeover: it claims
// executors that stopped, died or let their lease expire, and recovers
// their pending workflows (DBOS re-enqueues them, and whichever engine of
// the same application dequeues each one resumes it from its last step).
type takeover struct {
	pool    *pgxpool.Pool
	id      string
	app     string
	version string
	// adopt are the earlier versions whose executors and queued workflows
	// this engine takes (Config.AdoptVersions).
	adopt []string
	ns    string // process.Namespace: whose pids this process can check
	lease time.Duration
	log   *zerolog.Logger
	// metrics count the takeovers (nil in tests that need none).
	metrics *steps.Metrics
	// formats reads the executors for the cluster's format level, and
	// this machine's dead ones for the sweep.
	formats *formats
}

// claimSQL claims, in one statement, every executor of this application
// that left pending workflows and may be taken over: stopped, silent for
// longer than its own lease, dead on this machine ($5), claimed earlier by
// an engine that did not finish recovering it (this one, to retry, or one
// silent for a lease), or taken over and recovered more than a lease ago
// but pending again: a straggler the dead executor dequeued after its
// takeover (a draining or frozen process, before it stopped for good).
// Two engines sweeping at once lock the same rows; the second re-checks
// each row after the first commits and skips it: one wins.
const claimSQL = `
UPDATE helix.executors x SET taken_over_by = $1, taken_over_at = now(), recovered_at = NULL, recovered_workflows = NULL
WHERE x.executor_id <> $1 AND x.application_version = ANY($2::text[]) AND COALESCE(x.app_name, $3) = $3
  AND CASE WHEN x.taken_over_by IS NULL
      THEN x.stopped_at IS NOT NULL OR x.heartbeat_at < now() - x.lease_ms * interval '1 millisecond' OR x.executor_id = ANY($5)
      WHEN x.recovered_at IS NULL
      THEN x.taken_over_by = $1 OR x.taken_over_at < now() - make_interval(secs => $4)
      ELSE x.recovered_at < now() - make_interval(secs => $4)
      END
  AND EXISTS (SELECT 1 FROM dbos.workflow_status w
              WHERE w.executor_id = x.executor_id AND w.status = 'PENDING' AND w.application_version = ANY($2::text[]))
RETURNING x.executor_id, x.stopped_at IS NOT NULL, extract(epoch FROM now() - x.heartbeat_at)::float8`

// adoptSQL claims the executor IDs that own pending workflows of this
// application but have no row (a process from before this version, which
// deleted its row at a clean exit): it records each as stopped and taken
// over by this engine, once (the primary key decides between sweepers).
const adoptSQL = `
INSERT INTO helix.executors (executor_id, app_name, application_version, started_at, heartbeat_at, stopped_at, taken_over_by, taken_over_at)
SELECT DISTINCT w.executor_id, $3, $2, now(), now(), now(), $1, now()
FROM dbos.workflow_status w
WHERE w.status = 'PENDING' AND w.application_version = $2 AND (w.application_name = $3 OR w.application_name IS NULL)
  AND w.executor_id IS NOT NULL AND w.executor_id <> $1
  AND NOT EXISTS (SELECT 1 FROM helix.executors x WHERE x.executor_id = w.executor_id)
ON CONFLICT (executor_id) DO NOTHING
RETURNING executor_id, true, 0::float8`

// adoptQueuedSQL makes the queued workflows of the adopted versions ($2)
// of this application ($3) this engine's version's ($1): DBOS dequeues a
// workflow only in an engine of its version.
const adoptQueuedSQL = `
UPDATE dbos.workflow_status SET application_version = $1
WHERE status IN ('ENQUEUED', 'DELAYED') AND application_version = ANY($2::text[]) AND (application_name = $3 OR application_name IS NULL)`

// versions are the application versions this engine takes over: its own,
// then those it adopts.
func (t *takeover) versions() []string { return append([]string{t.version}, t.adopt...) }

// startTakeover starts the sweep; stop the returned loop at Shutdown.
func startTakeover(ctx context.Context, t *takeover) *loop {
	interval := min(TakeoverSweepInterval, t.lease/10)
	var sweeps int
	return every(ctx, interval, func(ctx context.Context) {
		// Executors without a row are a migration leftover: look for them
		// at the first sweep, then every minute or so.
		adopt := sweeps%int(max(1, time.Minute/interval)) == 0
		sweeps++
		if err := t.sweep(ctx, adopt); err != nil && ctx.Err() == nil {
			t.log.Warn().Err(err).Str("event", "executor.takeover_failed").
				Msg("takeover sweep failed; retrying at the next sweep (claimed executors are recovered then)")
		}
	})
}

// sweep claims the executors that may be taken over and recovers their
// pending workflows.
func (t *takeover) sweep(ctx context.Context, adopt bool) error {
	dead, err := t.formats.survey(ctx)
	if err != nil {
		return err
	}
	type claim struct {
		id      string
		stopped bool
		silent  float64
	}
	var claims []claim
	read := func(sql string, args ...any) error {
		rows, err := t.pool.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var c claim
			if err := rows.Scan(&c.id, &c.stopped, &c.silent); err != nil {
				return err
			}
			claims = append(claims, c)
		}
		return rows.Err()
	}
	if err := read(claimSQL, t.id, t.versions(), t.app, t.lease.Seconds(), dead); err != nil {
		return fmt.Errorf("claim executors: %w", err)
	}
	if len(t.adopt) > 0 {
		tag, err := t.pool.Exec(ctx, adoptQueuedSQL, t.version, t.adopt, t.app)
		if err != nil {
			return fmt.Errorf("adopt the queued workflows of versions %v: %w", t.adopt, err)
		}
		if n := tag.RowsAffected(); n > 0 {
			t.log.Info().Str("event", "version.adopted_queued").Strs("versions", t.adopt).Int64("workflows", n).
				Msg("queued workflows of an earlier application version become this version's: engines of this version run them")
		}
	}
	if adopt {
		if err := read(adoptSQL, t.id, t.version, t.app); err != nil {
			return fmt.Errorf("adopt executors without a row: %w", err)
		}
		if _, err := t.pool.Exec(ctx, `DELETE FROM helix.executors x
			WHERE GREATEST(x.heartbeat_at, x.recovered_at) < now() - make_interval(secs => $1)
			  AND NOT EXISTS (SELECT 1 FROM dbos.workflow_status w WHERE w.executor_id = x.executor_id AND w.status = 'PENDING')`,
			TakenOverRetention.Seconds()); err != nil {
			return fmt.Errorf("prune executors taken over: %w", err)
		}
	}
	var errs []error
	for _, c := range claims {
		n, err := t.recover(ctx, c.id)
		if errors.Is(err, errClaimLost) {
			t.log.Info().Str("event", "executor.takeover_lost").Str("executorId", c.id).
				Msg("another engine finished taking this executor over first: " + err.Error())
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if t.metrics != nil {
			t.metrics.Takeovers.Inc()
			t.metrics.TakenWorkflows.Add(float64(n))
		}
		t.log.Info().Str("event", "executor.took_over").Str("executorId", c.id).Bool("stopped", c.stopped).
			Float64("silentSeconds", c.silent).Int("workflows", n).
			Msg("took over an executor that stopped or died: its pending sessions resume in this cluster")
	}
	if len(errs) > 0 {
		return fmt.Errorf("recover executors (retried at the next sweep): %w", errors.Join(errs...))
	}
	return nil
}

// dbosRecoveryQueue is the queue DBOS re-enqueues recovered workflows on
// when they were not on a queue of their own (DBOS's internal queue, which
// every launched engine polls; models.InternalQueueName in DBOS Transact).
const dbosRecoveryQueue = "_dbos_internal_queue"

// recoverSQL re-enqueues a claimed executor's pending workflows and
// records the takeover as recovered, in one statement and only while the
// claim is still this engine's and not yet recovered. The re-enqueue is
// DBOS's own (ReenqueueForRecovery in DBOS Transact v1.8.0: status
// ENQUEUED, the owner token cleared, non-queued workflows on DBOS's
// internal queue); doing it here rather than through
// RecoverPendingWorkflows ties it to the claim. A recovery that ran late
// (this engine stalled, or DBOS retried it through a database restart)
// after another engine re-claimed the executor, recovered it, and the
// executor rejoined the cluster, would otherwise re-enqueue workflows the
// rejoined executor runs again legitimately: two executions of one
// workflow. $1 the executor, $2 this engine, $3 the application version,
// $4 the application name, $5 DBOS's recovery queue, $6 the versions it
// takes (its own first, then those it adopts): the workflows become its
// own version's.
const recoverSQL = `
WITH pending AS (
	SELECT w.workflow_uuid FROM dbos.workflow_status w
	WHERE w.executor_id = $1 AND w.status = 'PENDING' AND w.application_version = ANY($6::text[])
	  AND (w.application_name = $4 OR w.application_name IS NULL)
), claim AS (
	UPDATE helix.executors SET recovered_at = now(), recovery_error = NULL,
		recovered_workflows = (SELECT count(*) FROM pending)
	WHERE executor_id = $1 AND taken_over_by = $2 AND recovered_at IS NULL
	RETURNING executor_id
), requeued AS (
	UPDATE dbos.workflow_status w SET status = 'ENQUEUED', started_at_epoch_ms = NULL,
		updated_at = (EXTRACT(EPOCH FROM now()) * 1000)::bigint, owner_xid = NULL,
		queue_name = COALESCE(NULLIF(w.queue_name, ''), $5), application_version = $3
	FROM claim
	WHERE w.executor_id = claim.executor_id AND w.status = 'PENDING' AND w.application_version = ANY($6::text[])
	  AND (w.application_name = $4 OR w.application_name IS NULL)
	RETURNING w.workflow_uuid
)
SELECT EXISTS (SELECT 1 FROM claim), (SELECT count(*) FROM requeued)`

// errClaimLost reports a recovery that found its claim gone: another
// engine re-claimed the executor (this one was too slow) or it was
// already recovered. Nothing was re-enqueued.
var errClaimLost = errors.New("the claim is no longer this engine's (another engine re-claimed the executor, or it was recovered): nothing re-enqueued")

// recover re-enqueues dead's pending workflows and records the takeover as
// complete (recoverSQL); on failure it records the error and leaves the
// claim open, to be retried.
func (t *takeover) recover(ctx context.Context, dead string) (int, error) {
	var held bool
	var n int
	err := t.pool.QueryRow(ctx, recoverSQL, dead, t.id, t.version, t.app, dbosRecoveryQueue, t.versions()).Scan(&held, &n)
	if err == nil && !held {
		return 0, errClaimLost
	}
	if err != nil {
		err = fmt.Errorf("recover the pending workflows of executor %s: %w", dead, err)
		if _, uerr := t.pool.Exec(ctx, `UPDATE helix.executors SET recovery_error = $3 WHERE executor_id = $1 AND taken_over_by = $2`,
			dead, t.id, err.Error()); uerr != nil && ctx.Err() == nil {
			t.log.Warn().Err(uerr).Str("executorId", dead).Msg("could not record a failed takeover")
		}
		return 0, err
	}
	return n, nil
}
