package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/helix-agents/helix-dbos/store/postgres"
)

// Defaults of Config.
const (
	// DefaultAppName names the DBOS application.
	DefaultAppName = "helix-dbos"
	// DefaultExecutorID is DBOS's own default: fine for one process. Give
	// every process of a cluster its own stable ID.
	DefaultExecutorID = "local"
	// DefaultApplicationVersion is a constant, not a binary hash, so a
	// rebuild does not strand pending or waiting sessions. Change it only
	// with an incompatible change of your agents' tools or workflow code.
	DefaultApplicationVersion = "helix-dbos-v1"
	// DefaultShutdownTimeout bounds Shutdown's wait for running steps.
	DefaultShutdownTimeout = 10 * time.Second
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
	// ExecutorID identifies this process; DBOS recovers only its own
	// executor's pending workflows at Launch. Default DefaultExecutorID.
	// Two live processes with one ID are refused: Launch returns
	// *ExecutorInUseError (see docs/engine.md, Launch).
	ExecutorID string
	// ApplicationVersion tags workflows; only workflows of the same version
	// are recovered. Default DefaultApplicationVersion.
	ApplicationVersion string
	// SkipMigrations disables running the helix migrations at Launch (run
	// `helix-dbos migrate up` or migrations.Up yourself).
	SkipMigrations bool
	// StoreOptions tune the Postgres store (stream flush interval, ...).
	StoreOptions []postgres.Option
	// ShutdownTimeout bounds Shutdown; default DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
}

func (c *Config) withDefaults() error {
	switch {
	case c.DatabaseURL == "" && c.Pool == nil:
		return errors.New("engine: no database: set Config.DatabaseURL or Config.Pool")
	case c.DatabaseURL != "" && c.Pool != nil:
		return errors.New("engine: set Config.DatabaseURL or Config.Pool, not both")
	case c.ShutdownTimeout < 0:
		return fmt.Errorf("engine: Config.ShutdownTimeout must not be negative, got %s", c.ShutdownTimeout)
	}
	if c.AppName == "" {
		c.AppName = DefaultAppName
	}
	if c.ExecutorID == "" {
		c.ExecutorID = DefaultExecutorID
	}
	if c.ApplicationVersion == "" {
		c.ApplicationVersion = DefaultApplicationVersion
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	return nil
}
