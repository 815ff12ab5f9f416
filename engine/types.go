package engine

import (
	"time"

	"github.com/helix-agents/helix-dbos/store/postgres"
)

// DeleteStats reports what DeleteSession and DeleteSessions deleted.
type DeleteStats struct {
	// Deleted are the roots whose trees were deleted, in the order given.
	Deleted []string `json:"deleted"`
	// NotFound are the roots that had no session (already deleted, or
	// never created): not an error.
	NotFound []string `json:"notFound"`
	// Running are the roots left in place because a run was in progress.
	Running []string `json:"running"`
	// Sessions counts the sessions deleted: roots, sub-agents, companions.
	Sessions int64 `json:"sessions"`
	// Workflows counts the DBOS workflows whose rows were deleted.
	Workflows int `json:"workflows"`
	// Rows counts the rows deleted per table ("helix.messages",
	// "dbos.workflow_status", …); tables with none are left out.
	Rows map[string]int64 `json:"rows"`
}

func deleteStatsOf(s *postgres.DeleteStats) *DeleteStats {
	if s == nil {
		return nil
	}
	return &DeleteStats{Deleted: s.Deleted, NotFound: s.NotFound, Running: s.Running,
		Sessions: s.Sessions, Workflows: s.Workflows, Rows: s.Rows}
}

// FormatLevel is a storage format level: the numbers of the store's levels
// (package store/postgres documents what each one writes). An engine writes
// at the lowest level a live executor of the cluster reads, so that a
// rolling deploy never writes what an older engine cannot read.
type FormatLevel int

// Storage format levels (postgres.FormatLevel).
const (
	// FormatLevelBaseline is the level of the baseline schema: the one
	// level of this release.
	FormatLevelBaseline = FormatLevel(postgres.FormatLevelBaseline)
	// FormatLevelNewest is the newest storage format level this release
	// reads and writes.
	FormatLevelNewest = FormatLevel(postgres.FormatLevelNewest)
)

// String names the level for logs and tools.
func (l FormatLevel) String() string { return postgres.FormatLevel(l).String() }

// ClusterOptions refine Engine.Cluster. nil means the defaults.
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
const DefaultSessionsPerExecutor = postgres.DefaultSessionsPerExecutor

// Cluster is the state of the engines sharing the database and of their
// DBOS queues. Its slices, and each executor's Sessions, are empty rather
// than nil when there is nothing to list.
type Cluster struct {
	// Executors are the engines that recorded themselves, alive ones
	// first, then by ID (byte-wise).
	Executors []Executor `json:"executors"`
	// Queues are the DBOS queues with work in them, by name.
	Queues []QueueLoad `json:"queues"`
	// FormatLevel is the lowest storage format level the alive executors
	// read (the newest when none is alive): the level the engines write at.
	FormatLevel FormatLevel `json:"formatLevel"`
}

// Executor is one engine of the cluster (each launched engine records its
// executor ID and renews its lease with a heartbeat), with the sessions it
// owns now.
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
	// FormatLevel is the storage format level the executor reads: an alive
	// executor below the newest holds every engine at its level.
	FormatLevel FormatLevel `json:"formatLevel"`
	// SessionsOwned counts the sessions whose current run's workflow is
	// pending under the executor: those it runs or waits in, and those
	// whoever takes it over resumes.
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

func clusterOf(c *postgres.Cluster) *Cluster {
	out := &Cluster{Executors: make([]Executor, 0, len(c.Executors)), Queues: make([]QueueLoad, 0, len(c.Queues)),
		FormatLevel: FormatLevel(c.FormatLevel)}
	for _, x := range c.Executors {
		out.Executors = append(out.Executors, Executor{ExecutorID: x.ExecutorID, ApplicationVersion: x.ApplicationVersion,
			Hostname: x.Hostname, PID: x.PID, StartedAt: x.StartedAt, HeartbeatAt: x.HeartbeatAt, LeaseExpiresAt: x.LeaseExpiresAt,
			Alive: x.Alive, StoppedAt: x.StoppedAt, TakenOverBy: x.TakenOverBy, FormatLevel: FormatLevel(x.FormatLevel),
			SessionsOwned: x.SessionsOwned, Sessions: x.Sessions})
	}
	for _, q := range c.Queues {
		out.Queues = append(out.Queues, QueueLoad(q))
	}
	return out
}

func (o *ClusterOptions) store() *postgres.ClusterOptions {
	if o == nil {
		return nil
	}
	return &postgres.ClusterOptions{UserID: o.UserID, SessionsPerExecutor: o.SessionsPerExecutor}
}

// TreeSize is what deleting session trees removes (or, in a dry run, would
// remove): rows and their bytes per table (pg_column_size of each row,
// measured before the delete: an estimate of the space freed once
// vacuumed).
type TreeSize struct {
	// Sessions counts the trees' sessions.
	Sessions int64 `json:"sessions"`
	// Workflows counts the DBOS workflows of their runs.
	Workflows int `json:"workflows"`
	// Rows counts rows per table, as DeleteStats.Rows; empty tables are
	// left out.
	Rows map[string]int64 `json:"rows"`
	// Bytes estimates the bytes of those rows per table.
	Bytes map[string]int64 `json:"bytes"`
}

// add adds the store's count o.
func (z *TreeSize) add(o *postgres.TreeSize) {
	z.Sessions += o.Sessions
	z.Workflows += o.Workflows
	for k, v := range o.Rows {
		z.Rows[k] += v
	}
	for k, v := range o.Bytes {
		z.Bytes[k] += v
	}
}
