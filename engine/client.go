package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// ClientConfig configures a Client. Set exactly one of DatabaseURL and Pool.
type ClientConfig struct {
	// DatabaseURL is the database the engines use; the client owns the
	// pool it opens.
	DatabaseURL string
	// Pool is a pool to share with your application; Close leaves it open.
	Pool *pgxpool.Pool
	// Logger receives the client's logs (client_tool.submitted, ...); nil
	// is silent.
	Logger *zerolog.Logger
	// Queue names the queue through which ExecuteTx admits the runs it
	// records (unless ExecuteOptions.Direct): the Name of the engines'
	// Config.Queue. Empty (the default) records every run direct: the
	// engine that starts it runs it at once, outside any queue. The
	// client only names the queue; its limits are the engines'.
	Queue string
}

// Client drives sessions from a process that runs no agents: an HTTP
// handler that takes a user's approval, an operator's command line. It
// submits tool results, requests interrupts and reads sessions; the engines
// that run the sessions (in any process) do the rest. It needs no agent
// definitions, runs no workflows and recovers nothing. Safe for concurrent
// use.
type Client struct {
	c        control
	queue    string // ClientConfig.Queue
	ownsPool bool
	// levels keeps the store's format gate at the cluster's level: what
	// the client writes into streams (an abort's chunks, a resume's), the
	// engines' readers of every release alive must read.
	levels *loop
	once   sync.Once
	err    error
}

// clientShutdownTimeout bounds Close.
const clientShutdownTimeout = 5 * time.Second

// NewClient connects a Client. The database must be migrated (an engine's
// Launch or `helix-dbos migrate up` does it).
func NewClient(ctx context.Context, cfg ClientConfig) (*Client, error) {
	if (cfg.DatabaseURL == "") == (cfg.Pool == nil) {
		return nil, errors.New("engine: ClientConfig needs exactly one of DatabaseURL and Pool")
	}
	if cfg.Queue != "" && !queueNameRE.MatchString(cfg.Queue) {
		return nil, fmt.Errorf("engine: ClientConfig.Queue %q is not a queue name: give the Name of the engines' Config.Queue", cfg.Queue)
	}
	log := zerolog.Nop()
	if cfg.Logger != nil {
		log = *cfg.Logger
	}
	pool, owns := cfg.Pool, false
	if pool == nil {
		var err error
		if pool, err = openPool(ctx, cfg.DatabaseURL); err != nil {
			return nil, fmt.Errorf("engine: client: open database: %w (check ClientConfig.DatabaseURL)", err)
		}
		owns = true
	}
	fail := func(err error) (*Client, error) {
		if owns {
			pool.Close()
		}
		return nil, err
	}
	// DBOS's client closes its pool when it shuts down: give it its own,
	// small one, so a shared pool stays open.
	pc := pool.Config().Copy()
	pc.MaxConns = 2
	dpool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return fail(fmt.Errorf("engine: client: open database: %w", err))
	}
	dc, err := dbos.NewClient(ctx, dbos.ClientConfig{
		SystemDBPool: dpool, AppName: DefaultAppName,
		Logger: slog.New(zerolog.NewSlogHandler(log.With().Str("component", "dbos").Logger())),
	})
	if err != nil {
		dpool.Close()
		return fail(fmt.Errorf("engine: client: connect DBOS: %w (has an engine launched on this database?)", err))
	}
	gate := postgres.NewFormatGate(postgres.FormatLevelBaseline)
	st, err := postgres.New(pool, postgres.WithLogger(log), postgres.WithFormatGate(gate))
	if err != nil {
		_ = dbos.Shutdown(dc, clientShutdownTimeout)
		return fail(err)
	}
	fm := &formats{pool: pool, gate: gate, log: &log}
	if _, err := fm.survey(ctx); err != nil {
		_ = dbos.Shutdown(dc, clientShutdownTimeout)
		return fail(fmt.Errorf("engine: client: read the storage format level of the cluster: %w", err))
	}
	levels := every(ctx, TakeoverSweepInterval, func(ctx context.Context) {
		if _, err := fm.survey(ctx); err != nil && ctx.Err() == nil {
			log.Warn().Err(err).Str("event", "executor.format_level_failed").
				Msg("could not read the cluster's storage format level; the client keeps writing at its last one and retries")
		}
	})
	return &Client{c: control{pool: pool, store: st, dbos: dc, log: log}, queue: cfg.Queue, ownsPool: owns, levels: levels}, nil
}

// SubmitToolResult answers a tool call a run is suspended on; see
// Engine.SubmitToolResult.
func (c *Client) SubmitToolResult(ctx context.Context, rootSessionID string, sub helix.ToolSubmission) (helix.SubmitResult, error) {
	return c.c.submit(ctx, rootSessionID, sub)
}

// Interrupt asks a running session to stop; see Engine.Interrupt.
func (c *Client) Interrupt(ctx context.Context, sessionID, reason string) error {
	return c.c.interrupt(ctx, sessionID, reason)
}

// Abort stops a running session now (and its running sub-agents): its
// workflow is cancelled, wherever it runs, and the session fails with code
// aborted; see Engine.Abort.
func (c *Client) Abort(ctx context.Context, sessionID, reason string) error {
	return c.c.abort(ctx, sessionID, reason)
}

// DeleteSession deletes a root session with its whole tree, helix and DBOS
// rows; see Engine.DeleteSession. With opts.Force a run in progress is
// aborted, wherever it runs, and its workflows are waited for.
func (c *Client) DeleteSession(ctx context.Context, sessionID string, opts *DeleteOptions) (*DeleteStats, error) {
	return c.c.deleteSessions(ctx, []string{sessionID}, opts)
}

// DeleteSessions deletes root sessions with their trees in one
// transaction; see Engine.DeleteSessions.
func (c *Client) DeleteSessions(ctx context.Context, sessionIDs []string, opts *DeleteOptions) (*DeleteStats, error) {
	return c.c.deleteSessions(ctx, sessionIDs, opts)
}

// PendingToolCalls returns the tool calls waiting for an answer in a
// session and, for a root session, in its sub-agents; see
// Engine.PendingToolCalls.
func (c *Client) PendingToolCalls(ctx context.Context, sessionID string) ([]store.PendingClientToolCall, error) {
	return c.c.store.ListPendingCalls(ctx, sessionID)
}

// Session returns a session's stored state.
func (c *Client) Session(ctx context.Context, sessionID string) (*store.SessionState, error) {
	return c.c.store.LoadState(ctx, sessionID)
}

// Close releases the client (and the pool it opened). Idempotent.
func (c *Client) Close() error {
	c.once.Do(func() {
		c.levels.stop()
		c.err = errors.Join(c.c.store.Close(), dbos.Shutdown(c.c.dbos, clientShutdownTimeout))
		if c.ownsPool {
			c.c.pool.Close()
		}
	})
	return c.err
}
