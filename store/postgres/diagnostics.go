package postgres

import (
	"context"
	"time"
)

// Diagnostics are the read-only queries of the operator's tools
// (`helix-dbos doctor`, `executors`, `submit`, `loadtest`, the demo): what
// they read about the schemas, the executors, DBOS's workflows and the
// sessions, over any Querier (a pool, one connection, a transaction), so
// that a tool can bound each query and tell a lost connection from a
// failed query. None of them writes.
type Diagnostics struct{ q Querier }

// NewDiagnostics returns the diagnostic queries over q (PgxQuerier adapts a
// pool, a connection or a transaction).
func NewDiagnostics(q Querier) *Diagnostics { return &Diagnostics{q: q} }

// Diagnostics returns the diagnostic queries over the store's querier.
func (s *Store) Diagnostics() *Diagnostics { return &Diagnostics{q: s.q} }

// RelationsExist reports, for each relation name (schema-qualified:
// "helix.sessions", "dbos.workflow_status"), whether it exists, in the
// order given: how a tool tells a database that was never migrated, or on
// which no engine has run, from a broken one.
func (d *Diagnostics) RelationsExist(ctx context.Context, names ...string) ([]bool, error) {
	rows, err := d.q.Query(ctx, `SELECT to_regclass(n) IS NOT NULL FROM unnest($1::text[]) WITH ORDINALITY AS t(n, i) ORDER BY i`, names)
	if err != nil {
		return nil, wrap(err, "look for %v", names)
	}
	defer rows.Close()
	out := make([]bool, 0, len(names))
	for rows.Next() {
		var ok bool
		if err := rows.Scan(&ok); err != nil {
			return nil, wrap(err, "look for %v", names)
		}
		out = append(out, ok)
	}
	return out, wrap(rows.Err(), "look for %v", names)
}

// ServerVersion returns the server's version string, as Postgres reports
// it ("15.18 (Debian 15.18-0+deb12u1)").
func (d *Diagnostics) ServerVersion(ctx context.Context) (string, error) {
	var v string
	err := d.q.QueryRow(ctx, `SELECT current_setting('server_version')`).Scan(&v)
	return v, wrap(err, "read the server version")
}

// AppliedMigrations returns the versions recorded in goose's version table
// versionTable (migrations.VersionTable), each once.
func (d *Diagnostics) AppliedMigrations(ctx context.Context, versionTable string) ([]int64, error) {
	rows, err := d.q.Query(ctx, `SELECT DISTINCT version_id FROM `+versionTable+` WHERE version_id > 0`)
	if err != nil {
		return nil, wrap(err, "read the applied migrations")
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			return nil, wrap(err, "read the applied migrations")
		}
		out = append(out, v)
	}
	return out, wrap(rows.Err(), "read the applied migrations")
}

// ReadCluster reads the executors, the sessions each owns, and the DBOS
// queues with work, as Store.ReadCluster does, over the diagnostics'
// querier.
func (d *Diagnostics) ReadCluster(ctx context.Context, opts *ClusterOptions) (*Cluster, error) {
	return (&Store{q: d.q, shared: &shared{}}).ReadCluster(ctx, opts)
}

// ExecutorTakeover is what the takeover of an executor recorded on its row.
type ExecutorTakeover struct {
	ExecutorID  string
	TakenOverAt *time.Time
	// RecoveredAt is when the engine that took it over re-enqueued its
	// RecoveredWorkflows; RecoveryError is its last failed attempt.
	RecoveredAt        *time.Time
	RecoveredWorkflows int
	RecoveryError      string
	// HeartbeatAge is the time since the executor's last heartbeat, and
	// Lease its lease, both by the database's clock.
	HeartbeatAge time.Duration
	Lease        time.Duration
}

// ExecutorTakeovers returns, for every executor row, its heartbeat's age
// and lease by the database's clock, and what a takeover of it recorded
// (zero values when none did).
func (d *Diagnostics) ExecutorTakeovers(ctx context.Context) ([]ExecutorTakeover, error) {
	rows, err := d.q.Query(ctx, `SELECT executor_id, taken_over_at, recovered_at, coalesce(recovered_workflows, 0), coalesce(recovery_error, ''),
		extract(epoch FROM now() - heartbeat_at)::float8, lease_ms / 1000.0
		FROM helix.executors`)
	if err != nil {
		return nil, wrap(err, "read helix.executors")
	}
	defer rows.Close()
	var out []ExecutorTakeover
	for rows.Next() {
		var t ExecutorTakeover
		var age, lease float64
		if err := rows.Scan(&t.ExecutorID, &t.TakenOverAt, &t.RecoveredAt, &t.RecoveredWorkflows, &t.RecoveryError, &age, &lease); err != nil {
			return nil, wrap(err, "read helix.executors")
		}
		t.HeartbeatAge, t.Lease = seconds(age), seconds(lease)
		out = append(out, t)
	}
	return out, wrap(rows.Err(), "read helix.executors")
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// ExecutorWorkflows are the pending DBOS workflows of one executor ID
// taken from one queue ("" for none).
type ExecutorWorkflows struct {
	ExecutorID string
	Queue      string
	// Pending counts the workflows DBOS would recover for the executor
	// (PENDING, ENQUEUED or DELAYED); Running those PENDING.
	Pending int
	Running int
	// Sessions counts the helix sessions whose current run's workflow is
	// among the PENDING ones.
	Sessions int
}

// PendingWorkflows returns the pending DBOS workflows per executor ID and
// queue, including executor IDs without a row in helix.executors. A
// session's current run has one workflow, so its session is counted in
// one row only and the rows of an executor add up. The runs are found by
// workflow ID (runs_workflow_idx).
func (d *Diagnostics) PendingWorkflows(ctx context.Context) ([]ExecutorWorkflows, error) {
	rows, err := d.q.Query(ctx, `
SELECT coalesce(w.executor_id, ''), coalesce(w.queue_name, ''), count(DISTINCT w.workflow_uuid),
       count(DISTINCT w.workflow_uuid) FILTER (WHERE w.status = 'PENDING'),
       count(DISTINCT r.session_id) FILTER (WHERE w.status = 'PENDING')
FROM dbos.workflow_status w
LEFT JOIN helix.runs r ON r.workflow_id = w.workflow_uuid
     AND r.run_id = (`+currentRun("run_id", "r.session_id")+`)
WHERE w.status IN ('PENDING', 'ENQUEUED', 'DELAYED')
GROUP BY 1, 2`)
	if err != nil {
		return nil, wrap(err, "count the pending workflows in dbos.workflow_status")
	}
	defer rows.Close()
	var out []ExecutorWorkflows
	for rows.Next() {
		var w ExecutorWorkflows
		if err := rows.Scan(&w.ExecutorID, &w.Queue, &w.Pending, &w.Running, &w.Sessions); err != nil {
			return nil, wrap(err, "count the pending workflows in dbos.workflow_status")
		}
		out = append(out, w)
	}
	return out, wrap(rows.Err(), "count the pending workflows in dbos.workflow_status")
}

// QueuedWorkflows are the workflows waiting in one DBOS queue for an
// engine of one application version.
type QueuedWorkflows struct {
	Queue   string
	Version string
	Count   int
	// OldestWaitSeconds is the wait of the oldest of them.
	OldestWaitSeconds float64
}

// QueuedWorkflows returns what waits in DBOS's queues (ENQUEUED or
// DELAYED), per queue and application version, by queue then version.
func (d *Diagnostics) QueuedWorkflows(ctx context.Context) ([]QueuedWorkflows, error) {
	rows, err := d.q.Query(ctx, `SELECT queue_name, coalesce(application_version, ''), count(*),
		(extract(epoch FROM now()) * 1000 - min(created_at)) / 1000.0
		FROM dbos.workflow_status WHERE status IN ('ENQUEUED', 'DELAYED') AND queue_name IS NOT NULL
		GROUP BY 1, 2 ORDER BY 1, 2`)
	if err != nil {
		return nil, wrap(err, "count the queued workflows in dbos.workflow_status")
	}
	defer rows.Close()
	var out []QueuedWorkflows
	for rows.Next() {
		var q QueuedWorkflows
		if err := rows.Scan(&q.Queue, &q.Version, &q.Count, &q.OldestWaitSeconds); err != nil {
			return nil, wrap(err, "count the queued workflows in dbos.workflow_status")
		}
		out = append(out, q)
	}
	return out, wrap(rows.Err(), "count the queued workflows in dbos.workflow_status")
}

// ActiveSession is an active session with its current run and that run's
// workflow, as a health check reads them.
type ActiveSession struct {
	SessionID string
	AgentType string
	// RunID, RunStatus and WorkflowID are the current run's ("" without
	// one); WorkflowStatus and ExecutorID its workflow's in DBOS ("" when
	// DBOS has no such workflow). For a run woken from hibernation,
	// WorkflowID is its latest continuation (workflows.WakeID): the run's
	// own workflow ended when it hibernated.
	RunID          string
	RunStatus      string
	WorkflowID     string
	WorkflowStatus string
	ExecutorID     string
	// Quiet is true when neither the session nor its run changed within
	// the grace period.
	Quiet bool
	// HibernatedAt is set while the run is hibernated (its workflow
	// ended, no process holds it: not stuck), and WakeAt then is its
	// earliest deadline (nil for none).
	HibernatedAt *time.Time
	WakeAt       *time.Time
	// Wakes counts the run's wakes from hibernation; WokenAt is set while
	// its latest continuation has not begun (an engine starts it within
	// its sweep interval), and WokenQuiet is true when that has lasted
	// longer than the grace period.
	Wakes      int
	WokenAt    *time.Time
	WokenQuiet bool
	// OverdueCalls lists the tool calls it waits for past their deadline
	// by more than the grace period ("call-1 (tool), …"); "" when none.
	OverdueCalls string
}

// ActiveSessions returns every active session with its current run, that
// run's current workflow (its latest continuation when it was woken from
// hibernation), its hibernation and the calls it waits for past their
// deadline by more than grace, least recently active first.
func (d *Diagnostics) ActiveSessions(ctx context.Context, grace time.Duration) ([]ActiveSession, error) {
	rows, err := d.q.Query(ctx, `
SELECT s.session_id, s.agent_type, coalesce(r.run_id, ''), coalesce(r.status, ''), coalesce(r.current_wf, ''),
       coalesce(greatest(r.updated_at, s.updated_at, s.checkpointed_at) < now() - make_interval(secs => $1), true),
       coalesce(w.status, ''), coalesce(w.executor_id, ''),
       r.hibernated_at, to_timestamp(r.wake_at / 1000.0), coalesce(r.wakes, 0), r.woken_at,
       coalesce(r.woken_at < now() - make_interval(secs => $1), false),
       (SELECT string_agg(c.key || ' (' || coalesce(c.value->>'toolName', '?') || ')', ', ' ORDER BY c.key)
          FROM jsonb_each(s.pending_client_tool_calls) c
         WHERE coalesce((c.value->>'deadlineAt')::bigint, 0) > 0
           AND (c.value->>'deadlineAt')::bigint < (extract(epoch FROM now() - make_interval(secs => $1)) * 1000)::bigint
           AND c.value->'submission' IS NULL AND coalesce((c.value->>'timedOutAt')::bigint, 0) = 0
           AND coalesce((c.value->>'consumedAt')::bigint, 0) = 0)
FROM helix.sessions s
LEFT JOIN LATERAL (`+currentRun(`run_id, status, updated_at, hibernated_at, wake_at, wakes, woken_at,
	helix.current_workflow_id(workflow_id, wakes) AS current_wf`, "s.session_id")+`) r ON true
LEFT JOIN dbos.workflow_status w ON w.workflow_uuid = r.current_wf
WHERE s.status = 'active'
ORDER BY greatest(s.updated_at, s.checkpointed_at)`, grace.Seconds())
	if err != nil {
		return nil, wrap(err, "read the active sessions and their runs")
	}
	defer rows.Close()
	var out []ActiveSession
	for rows.Next() {
		var s ActiveSession
		var overdue *string
		if err := rows.Scan(&s.SessionID, &s.AgentType, &s.RunID, &s.RunStatus, &s.WorkflowID, &s.Quiet, &s.WorkflowStatus,
			&s.ExecutorID, &s.HibernatedAt, &s.WakeAt, &s.Wakes, &s.WokenAt, &s.WokenQuiet, &overdue); err != nil {
			return nil, wrap(err, "read the active sessions and their runs")
		}
		if overdue != nil {
			s.OverdueCalls = *overdue
		}
		out = append(out, s)
	}
	return out, wrap(rows.Err(), "read the active sessions and their runs")
}

// CountSessions counts the sessions with status.
func (d *Diagnostics) CountSessions(ctx context.Context, status string) (int64, error) {
	var n int64
	err := d.q.QueryRow(ctx, `SELECT count(*) FROM helix.sessions WHERE status = $1`, status).Scan(&n)
	return n, wrap(err, "count the %s sessions", status)
}

// CountSessionsWithPrefix counts the sessions whose ID starts with prefix
// (a load test's "load-").
func (d *Diagnostics) CountSessionsWithPrefix(ctx context.Context, prefix string) (int64, error) {
	var n int64
	err := d.q.QueryRow(ctx, `SELECT count(*) FROM helix.sessions WHERE starts_with(session_id, $1)`, prefix).Scan(&n)
	return n, wrap(err, "count the sessions %s…", prefix)
}

// SessionCounts counts a set of sessions by outcome, and the workflows
// waiting in a DBOS queue.
type SessionCounts struct {
	// Rows counts the sessions of the set that exist, Completed and
	// Failed those with that status.
	Rows, Completed, Failed int
	// Enqueued counts the workflows of the whole database waiting in a
	// DBOS queue (ENQUEUED).
	Enqueued int
}

// CountSessionOutcomes counts the sessions of ids by status, and the
// workflows waiting in a DBOS queue.
func (d *Diagnostics) CountSessionOutcomes(ctx context.Context, ids []string) (SessionCounts, error) {
	var c SessionCounts
	err := d.q.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status = 'completed'), count(*) FILTER (WHERE status = 'failed')
		FROM helix.sessions WHERE session_id = ANY($1)`, ids).Scan(&c.Rows, &c.Completed, &c.Failed)
	if err != nil {
		return c, wrap(err, "count the sessions")
	}
	if err := d.q.QueryRow(ctx, `SELECT count(*) FROM dbos.workflow_status WHERE status = 'ENQUEUED'`).Scan(&c.Enqueued); err != nil {
		return c, wrap(err, "count the queued workflows")
	}
	return c, nil
}

// SessionOutcome is a session's status, its creation and last activity,
// and the error code of its last run ("" unless it failed).
type SessionOutcome struct {
	Status     string
	CreatedAt  time.Time
	LastActive time.Time
	ErrorCode  string
}

// SessionOutcomes returns the outcome of each session of ids that exists,
// by session ID.
func (d *Diagnostics) SessionOutcomes(ctx context.Context, ids []string) (map[string]SessionOutcome, error) {
	rows, err := d.q.Query(ctx, `SELECT s.session_id, s.status, s.created_at, greatest(s.updated_at, s.checkpointed_at),
			COALESCE((`+currentRun("error_code", "s.session_id")+`), '')
		FROM helix.sessions s WHERE s.session_id = ANY($1)`, ids)
	if err != nil {
		return nil, wrap(err, "read the sessions")
	}
	defer rows.Close()
	out := map[string]SessionOutcome{}
	for rows.Next() {
		var id string
		var o SessionOutcome
		if err := rows.Scan(&id, &o.Status, &o.CreatedAt, &o.LastActive, &o.ErrorCode); err != nil {
			return nil, wrap(err, "read the sessions")
		}
		out[id] = o
	}
	return out, wrap(rows.Err(), "read the sessions")
}

// WorkflowStatus returns the status DBOS records for a workflow and the
// executor that owns it. It returns an error wrapping helix.ErrNotFound
// when DBOS has no such workflow.
func (d *Diagnostics) WorkflowStatus(ctx context.Context, workflowID string) (status, executorID string, err error) {
	err = d.q.QueryRow(ctx, `SELECT status, executor_id FROM dbos.workflow_status WHERE workflow_uuid = $1`, workflowID).
		Scan(&status, &executorID)
	if isNoRows(err) {
		err = notFound("workflow", workflowID)
	}
	return status, executorID, wrap(err, "read workflow %s", workflowID)
}
