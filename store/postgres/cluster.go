package postgres

import (
	"context"
	"time"
)

// ClusterOptions refine ReadCluster.
type ClusterOptions struct {
	// UserID, when set, limits Executor.Sessions to the sessions whose
	// root session that user owns; empty lists every session. The counts
	// are the whole cluster's either way.
	UserID string
	// SessionsPerExecutor bounds Executor.Sessions; default
	// DefaultSessionsPerExecutor.
	SessionsPerExecutor int
}

// DefaultSessionsPerExecutor is the default of
// ClusterOptions.SessionsPerExecutor.
const DefaultSessionsPerExecutor = 50

// Cluster is the state of the engines sharing the database and of their
// DBOS queues, as ReadCluster reads it. Its slices, and each executor's
// Sessions, are empty rather than nil when there is nothing to list.
type Cluster struct {
	// Executors are the rows of helix.executors, alive ones first, then by
	// ID (byte-wise).
	Executors []Executor
	// Queues are the DBOS queues with work in them, by name.
	Queues []QueueLoad
	// FormatLevel is the lowest storage format level the alive executors
	// read (FormatLevelNewest when none is alive): the level the engines
	// write at.
	FormatLevel FormatLevel
}

// Executor is one engine of the cluster: a row of helix.executors (each
// launched engine records its executor ID there and renews its lease with
// a heartbeat), with the sessions it owns now.
type Executor struct {
	ExecutorID         string    `json:"executorId"`
	ApplicationVersion string    `json:"applicationVersion"`
	Hostname           string    `json:"hostname,omitempty"`
	PID                int       `json:"pid,omitempty"`
	StartedAt          time.Time `json:"startedAt"`
	HeartbeatAt        time.Time `json:"heartbeatAt"`
	LeaseExpiresAt     time.Time `json:"leaseExpiresAt"`
	// Alive is true when the executor neither stopped nor was taken over,
	// and its lease has not expired (by the database's clock).
	Alive       bool       `json:"alive"`
	StoppedAt   *time.Time `json:"stoppedAt,omitempty"`
	TakenOverBy string     `json:"takenOverBy,omitempty"`
	// FormatLevel is the storage format level the executor reads
	// (FormatLevelBaseline while a row just claimed has none written): an
	// alive executor below FormatLevelNewest holds every engine at its
	// level.
	FormatLevel FormatLevel `json:"formatLevel"`
	// SessionsOwned counts the sessions whose current run's workflow (the
	// latest run's) is pending under the executor: those it runs or waits
	// in, and those whoever takes it over resumes.
	SessionsOwned int `json:"sessionsOwned"`
	// Sessions are the first of those (by ID) that ClusterOptions.UserID
	// may see, at most ClusterOptions.SessionsPerExecutor.
	Sessions []string `json:"sessions"`
}

// QueueLoad is one DBOS queue with work in it.
type QueueLoad struct {
	Queue string `json:"queue"`
	// Depth counts the workflows waiting for a slot (ENQUEUED), Running
	// those holding one (PENDING).
	Depth   int64 `json:"depth"`
	Running int64 `json:"running"`
	// OldestWaitSeconds is the wait of the oldest workflow waiting for a
	// slot (0 when none waits).
	OldestWaitSeconds float64 `json:"oldestWaitSeconds"`
}

// ReadCluster reads the executors, the sessions each owns, and the DBOS
// queues with work. It reads only what is live: the executors' rows (which
// takeovers prune), DBOS's pending and enqueued workflows (through its
// partial indexes on them), and the runs and sessions of the pending
// workflows (through the index of runs by workflow), so
// its cost follows the work in flight, not the history of runs. Reads only.
func (s *Store) ReadCluster(ctx context.Context, opts *ClusterOptions) (*Cluster, error) {
	var o ClusterOptions
	if opts != nil {
		o = *opts
	}
	perExecutor := o.SessionsPerExecutor
	if perExecutor <= 0 {
		perExecutor = DefaultSessionsPerExecutor
	}
	executors, err := s.readExecutors(ctx, o.UserID, perExecutor)
	if err != nil {
		return nil, wrap(err, "read the cluster's executors")
	}
	queues, err := s.readQueues(ctx)
	if err != nil {
		return nil, wrap(err, "read the cluster's queues")
	}
	c := &Cluster{Executors: executors, Queues: queues, FormatLevel: FormatLevelNewest}
	for _, e := range executors {
		if e.Alive {
			c.FormatLevel = min(c.FormatLevel, e.FormatLevel)
		}
	}
	return c, nil
}

func (s *Store) readExecutors(ctx context.Context, userID string, perExecutor int) ([]Executor, error) {
	rows, err := s.q.Query(ctx, clusterExecutorsSQL, userID, perExecutor)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Executor{}
	for rows.Next() {
		var e Executor
		if err := rows.Scan(&e.ExecutorID, &e.ApplicationVersion, &e.Hostname, &e.PID, &e.StartedAt, &e.HeartbeatAt,
			&e.LeaseExpiresAt, &e.Alive, &e.StoppedAt, &e.TakenOverBy, &e.FormatLevel, &e.SessionsOwned, &e.Sessions); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

func (s *Store) readQueues(ctx context.Context) ([]QueueLoad, error) {
	rows, err := s.q.Query(ctx, clusterQueuesSQL)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []QueueLoad{}
	for rows.Next() {
		var q QueueLoad
		if err := rows.Scan(&q.Queue, &q.Depth, &q.Running, &q.OldestWaitSeconds); err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	return out, rows.Err()
}

// clusterExecutorsSQL reads every executor with the sessions it owns: per
// executor, the sessions whose current run's workflow (the latest run's)
// is pending under it, and the first $2 of those whose root session user
// $1 owns (every one when $1 is empty). It starts from DBOS's pending
// workflows (idx_workflow_status_pending) and finds each one's run by
// workflow ID (runs_workflow_idx), its session's current run (currentRun:
// the newest by turn, through the runs' (session_id, turn) key), and the
// sessions by ID: index lookups per pending workflow, none per past run.
// Alive is executorAlive.
// Executors known only from their workflows (no row) are not listed.
var clusterExecutorsSQL = `WITH owned AS (
		SELECT w.executor_id, count(DISTINCT r.session_id) AS sessions,
			coalesce((array_agg(DISTINCT r.session_id) FILTER (WHERE $1::text = '' OR root.user_id = $1))[1:$2::int], '{}') AS visible
		FROM dbos.workflow_status w
		JOIN helix.runs r ON r.workflow_id = w.workflow_uuid
		JOIN helix.sessions s ON s.session_id = r.session_id
		JOIN helix.sessions root ON root.session_id = s.root_session_id
		WHERE w.status = 'PENDING' AND w.executor_id IS NOT NULL
		  AND r.run_id = (` + currentRun("run_id", "r.session_id") + `)
		GROUP BY w.executor_id
	)
	SELECT x.executor_id, x.application_version, coalesce(x.hostname, ''), coalesce(x.pid, 0), x.started_at, x.heartbeat_at,
		x.heartbeat_at + x.lease_ms * interval '1 millisecond' AS lease_expires_at,
		` + executorAlive("x") + ` AS alive,
		x.stopped_at, coalesce(x.taken_over_by, ''), coalesce(x.format_level, 1), coalesce(o.sessions, 0), coalesce(o.visible, '{}')
	FROM helix.executors x LEFT JOIN owned o ON o.executor_id = x.executor_id
	ORDER BY alive DESC, x.executor_id COLLATE "C"`

// clusterQueuesSQL reads the DBOS queues with work, from DBOS's index of
// in-flight (ENQUEUED or PENDING) workflows by queue.
const clusterQueuesSQL = `SELECT queue_name, count(*) FILTER (WHERE status = 'ENQUEUED'), count(*) FILTER (WHERE status = 'PENDING'),
		coalesce(extract(epoch FROM now()) - min(created_at) FILTER (WHERE status = 'ENQUEUED') / 1000.0, 0)::float8
	FROM dbos.workflow_status WHERE status IN ('ENQUEUED', 'PENDING') AND queue_name IS NOT NULL
	GROUP BY queue_name ORDER BY queue_name`
