package engine

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/helix-agents/helix-dbos/steps"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// Defaults of Config.
const (
	// DefaultAppName names the DBOS application.
	DefaultAppName = "helix-dbos"
	// DefaultExecutorLease is how long an executor may go without a
	// heartbeat before a live one takes its sessions over.
	DefaultExecutorLease = 30 * time.Second
	// MinExecutorLease is the shortest lease accepted: heartbeats every
	// lease/3 must fit comfortably in it.
	MinExecutorLease = time.Second
	// DefaultApplicationVersion is a constant, not a binary hash, so a
	// rebuild does not strand pending or waiting sessions. Change it only
	// with an incompatible change of your agents' tools or workflow code.
	DefaultApplicationVersion = "helix-dbos-v1"
	// DefaultShutdownTimeout bounds Shutdown's wait for running steps.
	DefaultShutdownTimeout = 10 * time.Second
	// DefaultHibernateAfter is Config.HibernateAfter's default.
	DefaultHibernateAfter = steps.DefaultHibernateAfter
	// DefaultRecordedRunSweepInterval is how often a launched engine
	// looks for recorded runs that no engine started (see
	// Config.RecordedRunSweepInterval).
	DefaultRecordedRunSweepInterval = 5 * time.Second
)

// Config configures an Engine. Set exactly one of DatabaseURL and Pool.
type Config struct {
	// DatabaseURL is the Postgres URL of the database holding the helix
	// schema and DBOS's system schema. The engine owns the pool it opens.
	DatabaseURL string
	// Pool is a pool to share with your application. DBOS uses it as its
	// system pool, so step commits and your own writes can share
	// transactions. Note: Shutdown closes it (DBOS closes its system pool).
	Pool *pgxpool.Pool
	// Logger receives the engine's and DBOS's logs (DBOS through a slog
	// handler). nil means silent.
	Logger *zerolog.Logger
	// AppName names the DBOS application (3–256 of [a-z0-9-_]); default
	// DefaultAppName.
	AppName string
	// ExecutorID identifies this process in the cluster. Default: a new ID
	// per process, "<hostname>-<pid>-<random>" (DefaultExecutorID), so
	// replicas started with a zero Config never collide. A stable ID (a
	// StatefulSet's pod name) lets a restarted process resume its own
	// sessions at once; with either kind, a live engine takes over the
	// sessions of one that stopped or died (ExecutorLease). Two live
	// processes with one ID are refused: Launch returns
	// *ExecutorInUseError (see docs/operations.md).
	ExecutorID string
	// ExecutorLease is how long this engine's sessions stay its own without
	// a heartbeat: it heartbeats every lease/3, and once its last heartbeat
	// is older than the lease, a live engine takes its sessions over. A
	// process that cannot renew its lease pauses its steps before that
	// (see docs/operations.md, zombies). Default DefaultExecutorLease;
	// at least MinExecutorLease.
	ExecutorLease time.Duration
	// ApplicationVersion tags workflows: DBOS recovers and dequeues a
	// workflow only in an engine of its version, and an engine takes over
	// only executors of its version. Default DefaultApplicationVersion, a
	// constant: keep it across deploys (see docs/operations.md, rolling
	// deploys), and change it only to keep two incompatible deployments of
	// one application apart.
	ApplicationVersion string
	// AdoptVersions are earlier application versions whose sessions this
	// engine continues: it takes over their stopped and dead executors,
	// and their queued workflows become its version's. List the version
	// you deploy over when you changed ApplicationVersion; helix's loop is
	// compatible across versions (docs/operations.md says what is).
	AdoptVersions []string
	// DisableTakeover keeps this engine from taking over the sessions of
	// executors that stopped or died (peers still take over its own). For
	// short-lived engines of tools and scripts; a replica leaves it false.
	// DBOS may still hand the engine a workflow another engine re-enqueued.
	DisableTakeover bool
	// SkipMigrations disables running the helix migrations at Launch (run
	// `helix-dbos migrate up` or migrations.Up yourself).
	SkipMigrations bool
	// StoreOptions tune the Postgres store (stream flush interval, ...).
	StoreOptions []postgres.Option
	// ShutdownTimeout bounds Shutdown; default DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// RecordedRunSweepInterval is how often the engine starts the recorded
	// runs whose workflow no engine started: a run ExecuteTx recorded whose
	// commit's announcement no engine heard (none was listening, or none
	// registered its agent then), or a run whose process died between
	// recording and starting it. The announcement starts a run at once;
	// this bounds the wait when it is lost. Default
	// DefaultRecordedRunSweepInterval; one cheap query per sweep
	// (postgres.ListOrphanRuns).
	RecordedRunSweepInterval time.Duration
	// HibernateAfter is how long a run waits for people (an approval, a
	// client tool) in its workflow before it hibernates: it records what
	// it waits for and ends its workflow, holding no goroutine and no
	// memory in any process, and an answer, an interrupt or the call's
	// deadline wakes it in a continuation workflow, on whichever engine
	// hears of it first (see docs/engine.md, "Hibernation"). Answers
	// within it wake the run as a live wait does. 0 means
	// DefaultHibernateAfter; negative never hibernates. Runs hibernate,
	// whether they start at once or through Queue (a queued run's driver
	// hibernates, and its continuation admits the run's next segment
	// through the queue), sub-agents' and companions' that start at once
	// included (a parent waiting for a child that hibernated hibernates
	// too, and the child's end wakes it). A sub-agent's queued run, and a
	// queued run's driver while it waits for its sub-agents' runs, wait in
	// their workflow.
	HibernateAfter time.Duration
	// Clock, for tests, is the time of the deadlines of calls that wait for
	// people (helix.ClientTimeout): when a call started waiting, when its
	// deadline passes, when it was answered. helixtest sets one that a test
	// moves forward (helixtest.Clock), so a 24-hour deadline passes at
	// once. nil (the default) is the real time, at no cost. The deadline
	// is stored as an absolute time: every engine that may run a session
	// (a replacement after a crash) must be given the same clock. Not with
	// Queue: a queued run's driver waits in real time (recv.Wait).
	Clock Clock
	// Queue, when set, admits the runs Execute, Resume and Retry start
	// through a durable DBOS queue with these limits (see QueueConfig);
	// ExecuteOptions.Direct runs one outside it. nil (the default) runs
	// every run at once, in the calling process.
	Queue *QueueConfig
	// TracerProvider receives the engine's OpenTelemetry spans: one per
	// execution of a run, agent step, model call, tool call and wait for a
	// person, one trace per session across runs, processes and days (see
	// docs/observability.md). nil means otel.GetTracerProvider(), a no-op
	// unless the application installs a provider: tracing off costs no
	// attribute, allocation of note or database round trip.
	TracerProvider trace.TracerProvider
	// Probe, when set, is called at the agent loop's probe points
	// (ProbeAfterModelCall, ProbeAfterTool, ProbeAfterCommit); an error
	// (ProbeStop) ends the run's execution there, unrecorded, as a crash
	// of the process would. For test kits (helixtest's crash points);
	// leave it nil in production.
	Probe func(ctx context.Context, at ProbeInfo) error
	// Retention, when set, runs the retention job in this engine: every
	// Interval, one pass (one engine of the cluster at a time, GCLockKey)
	// deletes the session trees the policy picks (see RetentionPolicy and
	// docs/operations.md, data lifecycle). nil (the default) deletes
	// nothing: sessions are kept forever.
	Retention *RetentionPolicy

	// gcHook, for tests, sees the retention job's lock events (gc.hook).
	gcHook func(ctx context.Context, event string)
}

func (c *Config) withDefaults() error {
	switch {
	case c.DatabaseURL == "" && c.Pool == nil:
		return errors.New("engine: no database: set Config.DatabaseURL or Config.Pool")
	case c.DatabaseURL != "" && c.Pool != nil:
		return errors.New("engine: set Config.DatabaseURL or Config.Pool, not both")
	case c.ExecutorLease != 0 && c.ExecutorLease < MinExecutorLease:
		return fmt.Errorf("engine: Config.ExecutorLease must be at least %s (0 means the default %s), got %s", MinExecutorLease, DefaultExecutorLease, c.ExecutorLease)
	case c.ShutdownTimeout < 0:
		return fmt.Errorf("engine: Config.ShutdownTimeout must not be negative, got %s", c.ShutdownTimeout)
	case c.RecordedRunSweepInterval < 0:
		return fmt.Errorf("engine: Config.RecordedRunSweepInterval must not be negative (0 means the default %s), got %s", DefaultRecordedRunSweepInterval, c.RecordedRunSweepInterval)
	case c.Clock != nil && c.Queue != nil:
		return errors.New("engine: Config.Clock cannot be combined with Config.Queue: a queued run's driver waits for a deadline in real time (a DBOS Recv timeout), so a clock moved forward would not reach it; test deadlines on an engine without a queue")
	}
	if c.Queue != nil {
		q := *c.Queue // the caller's value stays as given
		if err := q.withDefaults(); err != nil {
			return err
		}
		c.Queue = &q
	}
	if c.Retention != nil {
		r := *c.Retention // the caller's value stays as given
		if err := r.withDefaults("Config.Retention"); err != nil {
			return err
		}
		c.Retention = &r
	}
	if c.AppName == "" {
		c.AppName = DefaultAppName
	}
	if c.ExecutorID == "" {
		c.ExecutorID = DefaultExecutorID()
	}
	if c.ExecutorLease == 0 {
		c.ExecutorLease = DefaultExecutorLease
	}
	if c.ApplicationVersion == "" {
		c.ApplicationVersion = DefaultApplicationVersion
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	c.RecordedRunSweepInterval = cmp.Or(c.RecordedRunSweepInterval, DefaultRecordedRunSweepInterval)
	c.HibernateAfter = cmp.Or(c.HibernateAfter, DefaultHibernateAfter)
	for i, v := range c.AdoptVersions {
		switch {
		case v == "":
			return fmt.Errorf("engine: Config.AdoptVersions[%d] is empty: name an application version", i)
		case v == c.ApplicationVersion:
			return fmt.Errorf("engine: Config.AdoptVersions[%d] is this engine's own version %q: list earlier versions only", i, v)
		}
	}
	return nil
}

// tracerProvider is Config.TracerProvider or the global one.
func (c *Config) tracerProvider() trace.TracerProvider {
	if c.TracerProvider != nil {
		return c.TracerProvider
	}
	return otel.GetTracerProvider()
}

// DefaultExecutorID returns a new executor ID for this process,
// "<hostname>-<pid>-<6 hex digits>": distinct for every process, on one
// machine or many. Its sessions outlive it: when the process stops or dies,
// a live engine takes them over (Config.ExecutorLease).
func DefaultExecutorID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "host"
	}
	var b [3]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
