package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
	"github.com/helix-agents/helix-dbos/workflows"
)

// Defaults of QueueConfig.
const (
	// DefaultQueueName names the admission queue.
	DefaultQueueName = "helix-sessions"
	// DefaultWorkerConcurrency is how many queued runs a process runs at
	// once.
	DefaultWorkerConcurrency = 32
	// DefaultQueuePollingInterval is how often each process polls the
	// queue for runs to start. DBOS's own default is a second; a queue
	// that admits chat sessions needs a shorter start delay.
	DefaultQueuePollingInterval = 100 * time.Millisecond
	// DefaultPartitionKey is the partition of a run with no partition key
	// and no user.
	DefaultPartitionKey = "default"
)

// QueueConfig admits runs through a durable DBOS queue (Config.Queue).
//
// A queued run holds a slot of the queue only while it works: its active
// stretches (segments) wait on the queue for a slot; its waits for people
// (approvals, client tools) hold none, and its answer queues the next
// segment. Sub-agents are queued runs of their own, and a parent's segment
// ends while they run, so a parent never holds a slot its child needs (a
// step that also calls a companion runs its sub-agents and companions in its
// slot). The queue's limits live in
// DBOS's system database and apply to every engine of the application;
// the latest application version's engine writes them at Launch.
//
// Every queue is partitioned: a run's partition is ExecuteOptions.PartitionKey,
// else its session's user ID, else DefaultPartitionKey. Each poll serves the
// partitions in a random order, so a tenant with a long backlog cannot starve
// another; the partition limits cap what one tenant may hold.
type QueueConfig struct {
	// Name names the DBOS queue; default DefaultQueueName.
	Name string
	// WorkerConcurrency caps the queued runs one process runs at once;
	// default DefaultWorkerConcurrency.
	WorkerConcurrency int
	// GlobalConcurrency caps them across the cluster; 0 for no cap. At
	// least WorkerConcurrency when set.
	GlobalConcurrency int
	// PartitionConcurrency caps the runs of one partition across the
	// cluster; 0 for no cap.
	PartitionConcurrency int
	// PartitionWorkerConcurrency caps the runs of one partition in one
	// process; default WorkerConcurrency (no cap of its own).
	PartitionWorkerConcurrency int
	// RateLimit, with RatePeriod, caps how many segments the queue starts
	// per period across the cluster (a model provider's limit): both set,
	// or neither.
	RateLimit  int
	RatePeriod time.Duration
	// PollingInterval is how often each process polls the queue; default
	// DefaultQueuePollingInterval.
	PollingInterval time.Duration
}

// queueNameRE is what a queue name may be: printable, no spaces.
var queueNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$`)

func (q *QueueConfig) withDefaults() error {
	q.Name = cmp.Or(q.Name, DefaultQueueName)
	q.WorkerConcurrency = cmp.Or(q.WorkerConcurrency, DefaultWorkerConcurrency)
	q.PollingInterval = cmp.Or(q.PollingInterval, DefaultQueuePollingInterval)
	q.PartitionWorkerConcurrency = cmp.Or(q.PartitionWorkerConcurrency, q.WorkerConcurrency)
	bad := func(format string, args ...any) error {
		return fmt.Errorf("engine: Config.Queue: "+format, args...)
	}
	switch {
	case q.Name == dbosRecoveryQueue:
		return bad("Name %q is DBOS's own queue: choose another", q.Name)
	case !queueNameRE.MatchString(q.Name):
		return bad("Name %q is not a queue name (1–100 of letters, digits and ._:-, starting with a letter or digit)", q.Name)
	case q.WorkerConcurrency < 0, q.GlobalConcurrency < 0, q.PartitionConcurrency < 0, q.PartitionWorkerConcurrency < 0, q.RateLimit < 0:
		return bad("concurrency limits and RateLimit must not be negative (0 means the default, or no limit)")
	case q.GlobalConcurrency > 0 && q.GlobalConcurrency < q.WorkerConcurrency:
		return bad("GlobalConcurrency (%d) must be at least WorkerConcurrency (%d)", q.GlobalConcurrency, q.WorkerConcurrency)
	case q.PartitionWorkerConcurrency > q.WorkerConcurrency:
		return bad("PartitionWorkerConcurrency (%d) must be at most WorkerConcurrency (%d)", q.PartitionWorkerConcurrency, q.WorkerConcurrency)
	case q.PartitionConcurrency > 0 && q.PartitionConcurrency < q.PartitionWorkerConcurrency:
		return bad("PartitionConcurrency (%d) must be at least PartitionWorkerConcurrency (%d)", q.PartitionConcurrency, q.PartitionWorkerConcurrency)
	case q.GlobalConcurrency > 0 && q.PartitionConcurrency > q.GlobalConcurrency:
		return bad("PartitionConcurrency (%d) must be at most GlobalConcurrency (%d)", q.PartitionConcurrency, q.GlobalConcurrency)
	case (q.RateLimit > 0) != (q.RatePeriod > 0):
		return bad("set RateLimit and RatePeriod together (got %d per %s)", q.RateLimit, q.RatePeriod)
	case q.RatePeriod < 0, q.PollingInterval < 0:
		return bad("RatePeriod and PollingInterval must not be negative")
	}
	return nil
}

// options are the DBOS options of the queue.
func (q *QueueConfig) options() []dbos.QueueOption {
	opts := []dbos.QueueOption{
		dbos.WithWorkerConcurrency(q.WorkerConcurrency),
		dbos.WithPartitionWorkerConcurrency(q.PartitionWorkerConcurrency),
		dbos.WithQueueBasePollingInterval(q.PollingInterval),
	}
	if q.GlobalConcurrency > 0 {
		opts = append(opts, dbos.WithGlobalConcurrency(q.GlobalConcurrency))
	}
	if q.PartitionConcurrency > 0 {
		opts = append(opts, dbos.WithPartitionConcurrency(q.PartitionConcurrency))
	}
	if q.RateLimit > 0 {
		opts = append(opts, dbos.WithRateLimiter(&dbos.RateLimiter{Limit: q.RateLimit, Period: q.RatePeriod}))
	}
	return opts
}

// registerQueue records the queue's configuration in DBOS's system
// database (before DBOS launches: the drivers it recovers enqueue on it).
func (e *Engine) registerQueue(ctx context.Context) error {
	q := e.cfg.Queue
	if q == nil {
		return nil
	}
	handle, err := dbos.RegisterQueue(e.dbos, q.Name, q.options()...)
	if err != nil {
		return fmt.Errorf("engine: register queue %s: %w", q.Name, err)
	}
	if !handle.GetPartitionQueue() {
		return errors.New("engine: queue " + q.Name + " is recorded without partitions by another engine of a later application version: " +
			"give this engine's Config.Queue the same limits, or another Name")
	}
	e.env.SetQueue(handle)
	return nil
}

// admission is how a run of a session of userID is admitted: through the
// queue with partitionKey (default the user) and priority, or directly
// (nil) when the engine has no queue or the caller asked for direct.
func (e *Engine) admission(partitionKey, userID string, priority uint, direct bool) *workflows.Admission {
	return admit(e.recording().queue, partitionKey, userID, priority, direct)
}

// admit is admission through the queue named queue ("": none).
func admit(queue, partitionKey, userID string, priority uint, direct bool) *workflows.Admission {
	if queue == "" || direct {
		return nil
	}
	return &workflows.Admission{Queue: queue, PartitionKey: cmp.Or(partitionKey, userID, DefaultPartitionKey), Priority: priority}
}

// continuedAdmission is how a Resume or Retry of a session whose current
// run is prev is admitted: with prev's partition and priority when prev
// was queued, else as Execute admits the session's user. A sub-agent's or
// companion's session is run by its parent's workflow: never queued here.
func (e *Engine) continuedAdmission(st *store.SessionState, prev *store.Run) *workflows.Admission {
	switch {
	case st.ParentSessionID != "":
		return nil
	case prev.Admission != nil:
		return e.admission(prev.Admission.PartitionKey, st.UserID, uint(max(prev.Admission.Priority, 0)), false)
	}
	return e.admission("", st.UserID, 0, false)
}

// QueueState is where a run waits in its queue.
type QueueState struct {
	// Queue and PartitionKey name the queue and the run's partition.
	Queue        string `json:"queue"`
	PartitionKey string `json:"partitionKey,omitempty"`
	Priority     uint   `json:"priority,omitempty"`
	// Since is when the run (or, after an answer, its next segment) was
	// queued.
	Since time.Time `json:"since"`
	// Ahead counts the runs of its partition queued before it.
	Ahead int `json:"ahead"`
}

// Queued reports where the session's current run waits in a queue (a run
// admitted through Config.Queue waiting for a slot, at its start or after an
// answer), or nil when it does not: it runs, waits for a person, or ended.
func (e *Engine) Queued(ctx context.Context, sessionID string) (*QueueState, error) {
	return ReadQueueState(ctx, e.pool, sessionID)
}

// ReadQueueState is Engine.Queued for tools without an engine: db is a
// pool, connection or transaction on the database (helix and DBOS
// schemas). It reads postgres.ReadQueuePosition.
func ReadQueueState(ctx context.Context, db interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, sessionID string) (*QueueState, error) {
	p, found, err := postgres.ReadQueuePosition(ctx, postgres.PgxQuerier(db), sessionID)
	if err != nil {
		return nil, fmt.Errorf("engine: read the queue state of session %s: %w", sessionID, err)
	}
	if !found {
		return nil, nil
	}
	return &QueueState{Queue: p.Queue, PartitionKey: p.PartitionKey, Priority: p.Priority, Since: p.Since, Ahead: p.Ahead}, nil
}
