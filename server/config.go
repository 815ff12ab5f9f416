package server

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	helix "github.com/helix-agents/helix-dbos"
)

// Defaults of Config.
const (
	// DefaultMaxBodyBytes bounds a request body: 1 MiB holds a long
	// conversation history and stops a client from exhausting memory.
	DefaultMaxBodyBytes int64 = 1 << 20
	// DefaultHeartbeatInterval is the pause between two SSE comment lines
	// (": ping") on an idle stream. 15 s stays under the idle timeouts of
	// common proxies and load balancers (30–60 s).
	DefaultHeartbeatInterval = 15 * time.Second
	// DefaultOperationTimeout bounds one engine call of a state-changing
	// route (start, resume, interrupt, abort, submit-tool-result). Those
	// calls are detached from the request's context, so a client that
	// hangs up half-way cannot leave an operation half done (an abort that
	// cancelled the workflow but did not fail the session).
	DefaultOperationTimeout = 30 * time.Second
	// DefaultStreamWriteTimeout bounds one write (and flush) of a stream
	// response: a client that stops reading is dropped after it instead of
	// pinning its handler (and Shutdown) for good. 30 s is far beyond what
	// a reading client needs for one event, even over a slow link.
	DefaultStreamWriteTimeout = 30 * time.Second
	// DefaultDatabaseMetricsMaxAge is how long GET /metrics reuses the
	// figures it read from the database: /metrics is not authenticated,
	// and its queries count whole tables, so scrapes (however frequent, from
	// however many scrapers) cost the database one round trip per 15 s at
	// most. Prometheus's default scrape interval is 15 s too.
	DefaultDatabaseMetricsMaxAge = 15 * time.Second
	// HealthTimeout is how long /healthz waits for the database.
	HealthTimeout = 2 * time.Second
	// MetricsQueryTimeout bounds the database queries of one /metrics
	// scrape.
	MetricsQueryTimeout = 2 * time.Second
)

// Principal identifies the caller of a request, as told by
// Config.Authenticate: a user ID, a tenant ID, an API key's owner. A session
// started by principal P is stored with UserID string(P) and is visible to
// P only.
type Principal string

// Config configures a Server. Every field documents its default.
type Config struct {
	// Agents are the agents POST /start may run, by Agent.Name (the
	// request's agentType). New registers them (and their sub-agents and
	// companions) with the engine. Build the Server before Engine.Launch,
	// so that Launch can recover their sessions; registering again later is
	// harmless. At least one is required, names must be unique.
	Agents []*helix.Agent

	// Authenticate identifies the caller of every session route (and of
	// the Chat handler). A non-nil error answers 401 unauthenticated with a
	// generic message; the error itself is only logged, at debug level, so
	// a hook may return details. An empty Principal with a nil error is
	// refused the same way: return a stable, non-empty ID ("anonymous" if
	// you mean it). Authenticate must be safe for concurrent use.
	Authenticate func(r *http.Request) (Principal, error)
	// AllowUnauthenticated must be true to build a Server without
	// Authenticate: every caller is then Principal "" and every session is
	// visible to every caller. Leaving both unset is an error (fail
	// closed). It has no effect when Authenticate is set.
	AllowUnauthenticated bool

	// MaxBodyBytes bounds request bodies; larger ones are answered 413
	// body_too_large. Default DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// HeartbeatInterval is the pause between SSE keep-alive comments.
	// Default DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// OperationTimeout bounds the engine call of a state-changing route.
	// Default DefaultOperationTimeout.
	OperationTimeout time.Duration
	// StreamWriteTimeout bounds each write of a GET /sse response: a write
	// that does not complete within it (the client stopped reading) ends
	// the response. Default DefaultStreamWriteTimeout.
	StreamWriteTimeout time.Duration
	// DatabaseMetricsMaxAge is how long GET /metrics serves the database
	// figures of its last query before it queries again (concurrent
	// scrapes share one query). Default DefaultDatabaseMetricsMaxAge.
	DatabaseMetricsMaxAge time.Duration

	// AllowAnyMessageRole lets POST /start take messages of every role
	// (system, assistant, tool) in its messages field. By default only
	// user messages are accepted: a caller who may write the system prompt
	// or the assistant's past answers can steer the agent past its
	// instructions. Set it when your callers are trusted to seed a whole
	// conversation.
	AllowAnyMessageRole bool

	// Logger receives request logs (debug), client errors (debug),
	// internal errors with their request ID (error) and SSE lifecycle
	// events. nil is silent.
	Logger *zerolog.Logger

	// Metrics receives the server's collectors (see the package
	// documentation for the list). nil means a private registry, served
	// at GET /metrics. When set, /metrics serves it only if it is also a
	// prometheus.Gatherer (a *prometheus.Registry is both); otherwise
	// expose it yourself. Two Servers cannot share a Registerer (their
	// collectors would collide): give each its own, or wrap it with
	// prometheus.WrapRegistererWith.
	Metrics prometheus.Registerer

	// DisableInspector turns off the web inspector (see the package
	// documentation): GET / and everything under /inspector/ answer 404.
	// By default the inspector is served; its pages and assets hold no
	// data, and its data routes authenticate like every session route.
	DisableInspector bool

	// Chat, when set, is mounted at POST /chat and under /chat/ (the AI
	// SDK chat routes of package server/aisdk). Requests reach it only
	// after authentication; it reads the caller with PrincipalFromContext
	// (the handler of server/aisdk does with Options.Authenticate set to
	// aisdk.ServerPrincipal) and must apply the ownership rule itself (a
	// session is visible to the principal stored as its root session's
	// UserID). Shutdown ends its requests too: their context is cancelled
	// (a handler sees the client leave), Chat's own Shutdown method is
	// called when it has one (func(context.Context) error, as the handler
	// of server/aisdk has), and Shutdown waits for them to return. nil: no
	// /chat routes (404).
	Chat http.Handler
}

// withDefaults returns the config with defaults applied, or an error naming
// the field to fix.
func (c Config) withDefaults() (Config, error) {
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.OperationTimeout == 0 {
		c.OperationTimeout = DefaultOperationTimeout
	}
	if c.StreamWriteTimeout == 0 {
		c.StreamWriteTimeout = DefaultStreamWriteTimeout
	}
	if c.DatabaseMetricsMaxAge == 0 {
		c.DatabaseMetricsMaxAge = DefaultDatabaseMetricsMaxAge
	}
	return c, c.validate()
}

func (c Config) validate() error {
	switch {
	case c.Authenticate == nil && !c.AllowUnauthenticated:
		return errors.New("server: no authentication: set Config.Authenticate, or set Config.AllowUnauthenticated to serve every session to every caller")
	case len(c.Agents) == 0:
		return errors.New("server: Config.Agents is empty: give the agents POST /start may run")
	case c.MaxBodyBytes < 0:
		return fmt.Errorf("server: Config.MaxBodyBytes must be > 0 (0 means the default %d), got %d", DefaultMaxBodyBytes, c.MaxBodyBytes)
	case c.HeartbeatInterval < 0:
		return fmt.Errorf("server: Config.HeartbeatInterval must be > 0 (0 means the default %s), got %s", DefaultHeartbeatInterval, c.HeartbeatInterval)
	case c.OperationTimeout < 0:
		return fmt.Errorf("server: Config.OperationTimeout must be > 0 (0 means the default %s), got %s", DefaultOperationTimeout, c.OperationTimeout)
	case c.StreamWriteTimeout < 0:
		return fmt.Errorf("server: Config.StreamWriteTimeout must be > 0 (0 means the default %s), got %s", DefaultStreamWriteTimeout, c.StreamWriteTimeout)
	case c.DatabaseMetricsMaxAge < 0:
		return fmt.Errorf("server: Config.DatabaseMetricsMaxAge must be > 0 (0 means the default %s), got %s", DefaultDatabaseMetricsMaxAge, c.DatabaseMetricsMaxAge)
	}
	seen := make(map[string]bool, len(c.Agents))
	for i, a := range c.Agents {
		if a == nil {
			return fmt.Errorf("server: Config.Agents[%d] is nil", i)
		}
		if seen[a.Name] {
			return fmt.Errorf("server: Config.Agents has two agents named %q: agent names must be unique", a.Name)
		}
		seen[a.Name] = true
	}
	return nil
}
