package postgres

import (
	"context"
	"time"
)

// The statements of helix.executors that a launched engine runs on its own
// row: the claim of its executor ID at Launch, the heartbeat that renews
// its lease, the rejoin after a takeover, the clean stop, and the storage
// format level it records. The takeover of other executors' rows is in
// executor_takeover.go; ReadCluster (cluster.go) reads them all for
// operators. Every statement runs on the Querier it is given (the engine's
// pool, or the connection it keeps for its last statement) and returns the
// driver's errors unwrapped: the engine says what it was doing.

// ExecutorHolder is the process recorded under an executor ID.
type ExecutorHolder struct {
	Host         string
	PID          int
	PIDNamespace string // process.Namespace of the holder; "" when unknown
	HeartbeatAt  time.Time
	Lease        time.Duration
	// Alive reports the row alive (executorAlive): in service with a
	// fresh lease.
	Alive bool
}

// ReadExecutorHolder reads who holds executorID; found is false when no
// process ever recorded it (or its row was pruned). Reads only.
func ReadExecutorHolder(ctx context.Context, q Querier, executorID string) (h ExecutorHolder, found bool, err error) {
	var leaseMS int64
	err = q.QueryRow(ctx, readExecutorHolderSQL, executorID).Scan(&h.Host, &h.PID, &h.PIDNamespace, &h.HeartbeatAt, &leaseMS, &h.Alive)
	if isNoRows(err) {
		return ExecutorHolder{}, false, nil
	}
	h.Lease = time.Duration(leaseMS) * time.Millisecond
	return h, err == nil, err
}

var readExecutorHolderSQL = `SELECT COALESCE(hostname, ''), COALESCE(pid, 0), COALESCE(pid_namespace, ''), heartbeat_at, lease_ms,
			` + executorAlive("") + `
		FROM helix.executors WHERE executor_id = $1`

// ExecutorClaim is the process that claims an executor ID at its Launch.
type ExecutorClaim struct {
	ExecutorID         string
	AppName            string
	ApplicationVersion string
	Host               string
	PID                int
	PIDNamespace       string
	Lease              time.Duration
}

// ClaimExecutorID records c as the holder of its executor ID, in service
// with a fresh heartbeat, and clears any takeover of the row. It is a
// compare and set on the holder read by ReadExecutorHolder (prev, found):
// the row is taken only as it was read, so of two processes claiming a
// dead holder's ID at once, one wins; claimed is false for the other.
// Idempotent for the winner only as long as nobody else claims the row.
func ClaimExecutorID(ctx context.Context, q Querier, c ExecutorClaim, prev ExecutorHolder, found bool) (claimed bool, err error) {
	err = q.QueryRow(ctx, claimExecutorIDSQL, c.ExecutorID, c.AppName, c.ApplicationVersion, c.Host, c.PID, c.Lease.Milliseconds(),
		found, prev.Host, prev.PID, prev.HeartbeatAt, c.PIDNamespace).Scan(&claimed)
	if isNoRows(err) {
		return false, nil
	}
	return claimed, err
}

const claimExecutorIDSQL = `
INSERT INTO helix.executors AS x (executor_id, app_name, application_version, hostname, pid, pid_namespace, lease_ms, started_at, heartbeat_at)
VALUES ($1, $2, $3, $4, $5, $11, $6, now(), now())
ON CONFLICT (executor_id) DO UPDATE SET app_name = EXCLUDED.app_name, application_version = EXCLUDED.application_version,
	hostname = EXCLUDED.hostname, pid = EXCLUDED.pid, pid_namespace = EXCLUDED.pid_namespace, lease_ms = EXCLUDED.lease_ms,
	started_at = now(), heartbeat_at = now(),
	stopped_at = NULL, taken_over_by = NULL, taken_over_at = NULL, recovered_at = NULL, recovered_workflows = NULL, recovery_error = NULL
WHERE $7 AND COALESCE(x.hostname, '') = $8 AND COALESCE(x.pid, 0) = $9 AND x.heartbeat_at = $10
RETURNING true`

// RecordExecutorFormatLevel records on the row of executorID, while
// host's process pid holds it, the storage format level the executor
// reads, in the statement after a claim or a rejoin (a trigger clears it
// at both, so a process that takes the row over reads as the baseline
// until it records its own). Idempotent.
func RecordExecutorFormatLevel(ctx context.Context, q Querier, executorID, host string, pid int, level FormatLevel) error {
	_, err := q.Exec(ctx, recordFormatLevelSQL, executorID, host, pid, level)
	return err
}

const recordFormatLevelSQL = `UPDATE helix.executors SET format_level = $4 WHERE executor_id = $1 AND hostname = $2 AND pid = $3`

// LeaseRenewal is what a heartbeat found.
type LeaseRenewal struct {
	// Renewed reports the lease renewed: the row is host's process pid's
	// and in service.
	Renewed bool
	// Missing reports that the row is gone (an operator deleted it).
	Missing bool
	// TakenOverBy is the executor that took the row over, if one did.
	TakenOverBy *string
	// Host and PID are the row's holder (another process's when the ID
	// was claimed meanwhile).
	Host string
	PID  int
	// Recovered reports that the takeover recorded on the row finished:
	// the taker re-enqueued the executor's pending workflows.
	Recovered bool
}

// RenewExecutorLease renews the lease of executorID while host's process
// pid holds it in service (executorInService), and reports what it found
// in the same statement. Idempotent (each call moves the heartbeat to now).
func RenewExecutorLease(ctx context.Context, q Querier, executorID, host string, pid int) (r LeaseRenewal, err error) {
	err = q.QueryRow(ctx, renewExecutorLeaseSQL, executorID, host, pid).Scan(&r.Renewed, &r.Missing, &r.TakenOverBy, &r.Host, &r.PID, &r.Recovered)
	return r, err
}

var renewExecutorLeaseSQL = `
WITH renewed AS (
	UPDATE helix.executors SET heartbeat_at = now()
	WHERE executor_id = $1 AND hostname = $2 AND pid = $3 AND ` + executorInService("") + `
	RETURNING executor_id)
SELECT EXISTS (SELECT 1 FROM renewed), x.executor_id IS NULL, x.taken_over_by, COALESCE(x.hostname, ''), COALESCE(x.pid, 0),
	x.recovered_at IS NOT NULL
FROM (SELECT 1) one LEFT JOIN helix.executors x ON x.executor_id = $1`

// RejoinExecutor puts the row of executorID, held by host's process pid,
// back in service with a fresh lease after a stop or a takeover, once the
// taker (if any) recovered its workflows; rejoined is false when the
// takeover is not recovered yet or the row is another process's.
// Idempotent.
func RejoinExecutor(ctx context.Context, q Querier, executorID, host string, pid int) (rejoined bool, err error) {
	n, err := q.Exec(ctx, `UPDATE helix.executors SET heartbeat_at = now(), started_at = now(), stopped_at = NULL,
			taken_over_by = NULL, taken_over_at = NULL, recovered_at = NULL, recovered_workflows = NULL, recovery_error = NULL
		WHERE executor_id = $1 AND hostname = $2 AND pid = $3 AND (taken_over_by IS NULL OR recovered_at IS NOT NULL)`, executorID, host, pid)
	return n > 0, err
}

// RecreateExecutor inserts the row of c again, at format level, when it
// is missing (an operator deleted it while the process lived). Idempotent:
// an existing row is left as it is.
func RecreateExecutor(ctx context.Context, q Querier, c ExecutorClaim, level FormatLevel) error {
	_, err := q.Exec(ctx, `
INSERT INTO helix.executors (executor_id, app_name, application_version, hostname, pid, pid_namespace, lease_ms, started_at, heartbeat_at,
	format_level)
VALUES ($1, $2, $3, $4, $5, $6, $7, now(), now(), $8) ON CONFLICT (executor_id) DO NOTHING`,
		c.ExecutorID, c.AppName, c.ApplicationVersion, c.Host, c.PID, c.PIDNamespace, c.Lease.Milliseconds(), level)
	return err
}

// MarkExecutorStopped records a clean stop of executorID by host's
// process pid, unless it was taken over meanwhile: peers take over what it
// left pending at once. Idempotent.
func MarkExecutorStopped(ctx context.Context, q Querier, executorID, host string, pid int) error {
	_, err := q.Exec(ctx, `UPDATE helix.executors SET stopped_at = now()
		WHERE executor_id = $1 AND hostname = $2 AND pid = $3 AND taken_over_by IS NULL`, executorID, host, pid)
	return err
}

// SurveyedExecutor is one executor SurveyExecutors read.
type SurveyedExecutor struct {
	ExecutorID string
	PID        int
	// Here reports the executor on this machine (its pid namespace is
	// the one asked about): whether its process lives can be checked.
	Here bool
	// Fresh reports its lease fresh (executorLeaseFresh).
	Fresh bool
	// FormatLevel is the level it recorded (FormatLevelBaseline while it
	// has recorded none).
	FormatLevel FormatLevel
}

// SurveyExecutors reads the executors in service (executorInService) that
// are alive (their lease is fresh), run on this machine (ns, a non-empty
// process.Namespace: their process may be gone, which the takeover sweep
// takes over at once), or are self, with the storage format level each
// recorded (NULL, an engine of a release before the
// levels, is 0). Executors of every application count: they share the
// stream and journal tables. Reads only.
func SurveyExecutors(ctx context.Context, q Querier, ns, self string) ([]SurveyedExecutor, error) {
	rows, err := q.Query(ctx, surveySQL, ns, self)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []SurveyedExecutor
	for rows.Next() {
		var e SurveyedExecutor
		var level int
		if err := rows.Scan(&e.ExecutorID, &e.PID, &e.Here, &e.Fresh, &level); err != nil {
			return nil, err
		}
		e.FormatLevel = FormatLevel(level)
		out = append(out, e)
	}
	return out, rows.Err()
}

var surveySQL = `
SELECT executor_id, COALESCE(pid, 0), $1 <> '' AND pid_namespace IS NOT DISTINCT FROM $1 AND pid IS NOT NULL,
	` + executorLeaseFresh("") + `, COALESCE(format_level, 1)
FROM helix.executors
WHERE ` + executorInService("") + `
  AND (` + executorLeaseFresh("") + ` OR executor_id = $2 OR ($1 <> '' AND pid_namespace = $1))`
