package postgres

import (
	"context"
	"time"
)

// The statements of the takeover sweep: a launched engine claims the rows
// of helix.executors whose executor is not alive (executorAlive) and left
// pending DBOS workflows, and re-enqueues those workflows. Each runs on
// the Querier it is given and returns the driver's errors unwrapped.

// TakeoverScope is the engine that sweeps and what it may take.
type TakeoverScope struct {
	// ExecutorID is the sweeping engine's.
	ExecutorID string
	// AppName is the application it runs.
	AppName string
	// Versions are the application versions it takes over: its own first,
	// then those it adopts.
	Versions []string
}

// ClaimedExecutor is an executor a sweep claimed.
type ClaimedExecutor struct {
	ExecutorID string
	// Stopped reports a clean stop (else it died or went silent).
	Stopped bool
	// SilentSeconds is the time since its last heartbeat.
	SilentSeconds float64
}

// ClaimExecutors claims, in one statement, every executor of the scope's
// application and versions that left pending workflows and may be taken
// over: not alive (executorAlive: stopped, or silent for longer than its
// own lease), dead on this machine (deadHere), claimed earlier by an
// engine that did not finish recovering it (this one, to retry, or one
// silent for lease), or taken over and recovered more than lease ago but
// pending again: a straggler the dead executor dequeued after its takeover
// (a draining or frozen process, before it stopped for good). Two engines
// sweeping at once lock the same rows; the second re-checks each row after
// the first commits and skips it: one wins. Idempotent for the claimer:
// its own open claims are claimed again.
func ClaimExecutors(ctx context.Context, q Querier, s TakeoverScope, lease time.Duration, deadHere []string) ([]ClaimedExecutor, error) {
	return readClaims(ctx, q, claimSQL, s.ExecutorID, s.Versions, s.AppName, lease.Seconds(), deadHere)
}

// claimSQL: $1 the sweeping engine, $2 its versions, $3 its application,
// $4 the lease in seconds, $5 the dead executors of its machine. The
// first arm of the CASE is an executor nobody took over yet: taken over
// when it is not alive.
var claimSQL = `
UPDATE helix.executors x SET taken_over_by = $1, taken_over_at = now(), recovered_at = NULL, recovered_workflows = NULL
WHERE x.executor_id <> $1 AND x.application_version = ANY($2::text[]) AND COALESCE(x.app_name, $3) = $3
  AND CASE WHEN x.taken_over_by IS NULL
      THEN NOT (` + executorAlive("x") + `) OR x.executor_id = ANY($5)
      WHEN x.recovered_at IS NULL
      THEN x.taken_over_by = $1 OR x.taken_over_at < now() - make_interval(secs => $4)
      ELSE x.recovered_at < now() - make_interval(secs => $4)
      END
  AND EXISTS (SELECT 1 FROM dbos.workflow_status w
              WHERE w.executor_id = x.executor_id AND w.status = 'PENDING' AND w.application_version = ANY($2::text[]))
RETURNING x.executor_id, x.stopped_at IS NOT NULL, extract(epoch FROM now() - x.heartbeat_at)::float8`

// AdoptExecutors claims the executor IDs that own pending workflows of
// the scope's application at version (the sweeping engine's own) but have
// no row (a process from before this version, which deleted its row at a
// clean exit): it records each as stopped and taken over by the sweeping
// engine, once (the primary key decides between sweepers).
func AdoptExecutors(ctx context.Context, q Querier, s TakeoverScope, version string) ([]ClaimedExecutor, error) {
	return readClaims(ctx, q, adoptSQL, s.ExecutorID, version, s.AppName)
}

const adoptSQL = `
INSERT INTO helix.executors (executor_id, app_name, application_version, started_at, heartbeat_at, stopped_at, taken_over_by, taken_over_at)
SELECT DISTINCT w.executor_id, $3, $2, now(), now(), now(), $1, now()
FROM dbos.workflow_status w
WHERE w.status = 'PENDING' AND w.application_version = $2 AND (w.application_name = $3 OR w.application_name IS NULL)
  AND w.executor_id IS NOT NULL AND w.executor_id <> $1
  AND NOT EXISTS (SELECT 1 FROM helix.executors x WHERE x.executor_id = w.executor_id)
ON CONFLICT (executor_id) DO NOTHING
RETURNING executor_id, true, 0::float8`

func readClaims(ctx context.Context, q Querier, sql string, args ...any) ([]ClaimedExecutor, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var claims []ClaimedExecutor
	for rows.Next() {
		var c ClaimedExecutor
		if err := rows.Scan(&c.ExecutorID, &c.Stopped, &c.SilentSeconds); err != nil {
			return nil, err
		}
		claims = append(claims, c)
	}
	return claims, rows.Err()
}

// AdoptQueuedWorkflows makes the queued (ENQUEUED or DELAYED) workflows of
// the adopted versions of app version's (the adopting engine's): DBOS
// dequeues a workflow only in an engine of its version. It returns how
// many it moved. Idempotent.
func AdoptQueuedWorkflows(ctx context.Context, q Querier, version string, adopted []string, app string) (int64, error) {
	return q.Exec(ctx, `
UPDATE dbos.workflow_status SET application_version = $1
WHERE status IN ('ENQUEUED', 'DELAYED') AND application_version = ANY($2::text[]) AND (application_name = $3 OR application_name IS NULL)`,
		version, adopted, app)
}

// PruneExecutors deletes the rows of executors that are gone (no
// heartbeat and no recovery for retention) and own no pending workflow.
// Idempotent.
func PruneExecutors(ctx context.Context, q Querier, retention time.Duration) error {
	_, err := q.Exec(ctx, `DELETE FROM helix.executors x
			WHERE GREATEST(x.heartbeat_at, x.recovered_at) < now() - make_interval(secs => $1)
			  AND NOT EXISTS (SELECT 1 FROM dbos.workflow_status w WHERE w.executor_id = x.executor_id AND w.status = 'PENDING')`,
		retention.Seconds())
	return err
}

// RecoverExecutor re-enqueues the pending workflows of the claimed
// executor dead and records the takeover as recovered, in one statement
// and only while the claim is still the sweeping engine's and not yet
// recovered (held is false otherwise, and nothing was re-enqueued). The
// re-enqueue is DBOS's own (ReenqueueForRecovery in DBOS Transact v1.8.0:
// status ENQUEUED, the owner token cleared, non-queued workflows on
// recoveryQueue, DBOS's internal queue); doing it here rather than through
// RecoverPendingWorkflows ties it to the claim. A recovery that ran late
// (the engine stalled, or DBOS retried it through a database restart)
// after another engine re-claimed the executor, recovered it, and the
// executor rejoined the cluster, would otherwise re-enqueue workflows the
// rejoined executor runs again legitimately: two executions of one
// workflow. The workflows become the scope's first version's.
func RecoverExecutor(ctx context.Context, q Querier, s TakeoverScope, dead, recoveryQueue string) (held bool, requeued int, err error) {
	err = q.QueryRow(ctx, recoverSQL, dead, s.ExecutorID, s.Versions[0], s.AppName, recoveryQueue, s.Versions).Scan(&held, &requeued)
	return held, requeued, err
}

// recoverSQL: $1 the executor, $2 the sweeping engine, $3 its application
// version, $4 the application name, $5 DBOS's recovery queue, $6 the
// versions it takes.
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

// RecordRecoveryError records why the recovery of dead, claimed by taker,
// failed; the claim stays open, to be retried. Idempotent.
func RecordRecoveryError(ctx context.Context, q Querier, dead, taker, reason string) error {
	_, err := q.Exec(ctx, `UPDATE helix.executors SET recovery_error = $3 WHERE executor_id = $1 AND taken_over_by = $2`, dead, taker, reason)
	return err
}
