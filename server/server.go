package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/server/internal/principal"
)

// Server is the HTTP agent server: the routes of the package documentation
// over one engine. Build it with New, serve Handler, stop it with Shutdown.
// It keeps no session state in memory: every route reads and writes
// Postgres through the engine, so any number of Servers (in any processes)
// serve the same sessions.
type Server struct {
	eng     *engine.Engine
	cfg     Config
	log     zerolog.Logger
	agents  map[string]*helix.Agent
	names   []string // sorted agent names, for unknown_agent
	metrics *metrics
	handler http.Handler
	shell   http.Handler // the inspector's page shell

	mu       sync.Mutex
	closed   bool
	shutdown chan struct{} // closed by Shutdown: SSE responses end
	streams  sync.WaitGroup
}

// New builds a Server for eng. It refuses to build without
// Config.Authenticate unless Config.AllowUnauthenticated is set, registers
// Config.Agents with the engine, and registers the metrics collectors.
func New(eng *engine.Engine, cfg Config) (*Server, error) {
	if eng == nil {
		return nil, errors.New("server: the engine is nil: pass the *engine.Engine that runs the agents")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	log := zerolog.Nop()
	if cfg.Logger != nil {
		log = cfg.Logger.With().Str("component", "server").Logger()
	}
	s := &Server{eng: eng, cfg: cfg, log: log, agents: make(map[string]*helix.Agent, len(cfg.Agents)),
		shutdown: make(chan struct{})}
	for _, a := range cfg.Agents {
		s.agents[a.Name] = a
		s.names = append(s.names, a.Name)
	}
	slices.Sort(s.names)
	if err := eng.Register(cfg.Agents...); err != nil {
		return nil, fmt.Errorf("server: register Config.Agents: %w", err)
	}
	reg, gatherer := cfg.Metrics, prometheus.Gatherer(nil)
	if reg == nil {
		r := prometheus.NewRegistry()
		reg, gatherer = r, r
	} else if g, ok := reg.(prometheus.Gatherer); ok {
		gatherer = g
	}
	// The engine's own instruments (steps, model and tool calls, waits,
	// recoveries): /metrics shows them with no wiring. A registry the
	// application already gave them to keeps them.
	if err := reg.Register(eng.Metrics()); err != nil {
		if _, dup := errors.AsType[prometheus.AlreadyRegisteredError](err); !dup {
			return nil, fmt.Errorf("server: register the engine's metrics: %w", err)
		}
	}
	if s.metrics, err = newMetrics(reg, eng.DatabaseStats, cfg.DatabaseMetricsMaxAge, log); err != nil {
		return nil, err
	}
	s.shell = inspectorShell()
	s.handler = s.routes(gatherer)
	return s, nil
}

// Handler returns the server's HTTP handler. Mount it at the root, or
// under a prefix with http.StripPrefix (stream URLs follow the prefix).
//
// Stream responses (GET /sse) set their own write deadline before each
// write (Config.StreamWriteTimeout), so the http.Server's WriteTimeout does
// not cut them; proxies in front of the server must not buffer
// text/event-stream either (the responses carry X-Accel-Buffering: no for
// nginx).
func (s *Server) Handler() http.Handler { return s.handler }

// Shutdown stops the server gracefully: new requests are answered 503
// shutting_down (health checks included, so a load balancer drains the
// instance), open SSE responses end cleanly at once (their clients
// reconnect, to another instance, with Last-Event-ID and lose nothing),
// and so do the Chat handler's requests (see Config.Chat: the chat streams
// of server/aisdk end without their finish chunk, and the client
// reconnects with GET /chat/{id}/stream). Shutdown waits until they have
// returned or ctx ends. It does not touch sessions: runs go on in the
// engine until Engine.Shutdown, and the engine recovers them at the next
// Launch.
//
// Call it before http.Server.Shutdown, which otherwise waits for the
// stream connections (they are never idle) until its own deadline:
//
//	_ = srv.Shutdown(ctx)     // this server: SSE and chat streams end
//	_ = httpSrv.Shutdown(ctx) // net/http: in-flight requests finish
//	_ = eng.Shutdown(ctx)     // the engine: runs stop at a step boundary
//
// or let http.Server.Shutdown call it:
//
//	httpSrv.RegisterOnShutdown(func() { _ = srv.Shutdown(context.Background()) })
//
// Shutdown is idempotent.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.shutdown)
		s.log.Info().Str("event", "server.shutdown").Msg("server shutting down: new requests are refused, streams end")
	}
	s.mu.Unlock()
	var chatErr error
	if c, ok := s.cfg.Chat.(interface{ Shutdown(context.Context) error }); ok {
		if err := c.Shutdown(ctx); err != nil {
			chatErr = fmt.Errorf("server: shutdown: the Chat handler: %w", err)
		}
	}
	done := make(chan struct{})
	go func() {
		s.streams.Wait()
		close(done)
	}()
	select {
	case <-done:
		return chatErr
	case <-ctx.Done():
		return errors.Join(chatErr, fmt.Errorf("server: shutdown: stream responses still open: %w", ctx.Err()))
	}
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// route is one path of the server.
type route struct {
	name    string                  // the metrics label
	methods map[string]http.Handler // by method
	auth    bool                    // run Authenticate first
	stream  bool                    // long-lived: no latency histogram
	// mounted: a handler the server does not own (Config.Chat): Shutdown
	// cancels its requests' context and waits for them.
	mounted bool
}

// routes builds the server's handler.
func (s *Server) routes(gatherer prometheus.Gatherer) http.Handler {
	api := func(h func(http.ResponseWriter, *http.Request) *apiError) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := h(w, r); err != nil {
				s.writeError(w, r, err)
			}
		})
	}
	table := map[string]*route{
		"/start":              {name: "start", auth: true, methods: map[string]http.Handler{http.MethodPost: api(s.handleStart)}},
		"/resume":             {name: "resume", auth: true, methods: map[string]http.Handler{http.MethodPost: api(s.handleResume)}},
		"/sse":                {name: "sse", auth: true, stream: true, methods: map[string]http.Handler{http.MethodGet: api(s.handleSSE)}},
		"/status":             {name: "status", auth: true, methods: map[string]http.Handler{http.MethodGet: api(s.handleStatus)}},
		"/interrupt":          {name: "interrupt", auth: true, methods: map[string]http.Handler{http.MethodPost: api(s.handleInterrupt)}},
		"/abort":              {name: "abort", auth: true, methods: map[string]http.Handler{http.MethodPost: api(s.handleAbort)}},
		"/submit-tool-result": {name: "submit_tool_result", auth: true, methods: map[string]http.Handler{http.MethodPost: api(s.handleSubmit)}},
		"/retry":              {name: "retry", auth: true, methods: map[string]http.Handler{http.MethodPost: api(s.handleRetry)}},
		"/branch":             {name: "branch", auth: true, methods: map[string]http.Handler{http.MethodPost: api(s.handleBranch)}},
		"/delete":             {name: "delete", auth: true, methods: map[string]http.Handler{http.MethodPost: api(s.handleDelete)}},
		"/healthz":            {name: "healthz", methods: map[string]http.Handler{http.MethodGet: api(s.handleHealth)}},
	}
	if !s.cfg.DisableInspector {
		table[inspectorAPI+"sessions"] = &route{name: "inspector_sessions", auth: true,
			methods: map[string]http.Handler{http.MethodGet: api(s.handleInspectorSessions)}}
		table[inspectorAPI+"session"] = &route{name: "inspector_session", auth: true,
			methods: map[string]http.Handler{http.MethodGet: api(s.handleInspectorSession)}}
		table[inspectorAPI+"cluster"] = &route{name: "inspector_cluster", auth: true,
			methods: map[string]http.Handler{http.MethodGet: api(s.handleInspectorCluster)}}
	}
	if gatherer != nil {
		table["/metrics"] = &route{name: "metrics", methods: map[string]http.Handler{
			http.MethodGet: promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{ErrorLog: promLogger{s.log}}),
		}}
	}
	var chat *route
	if s.cfg.Chat != nil {
		chat = &route{name: "chat", auth: true, stream: true, mounted: true}
		table["/chat"] = &route{name: "chat", auth: true, stream: true, mounted: true, methods: map[string]http.Handler{http.MethodPost: s.cfg.Chat}}
	}
	notFound := &route{name: "not_found"}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isInspectorPath(r.URL.Path) {
			setInspectorHeaders(w.Header())
		}
		rt, ok := table[r.URL.Path]
		if !ok {
			rt = s.inspectorRoute(r.URL.Path)
			ok = rt != nil
		}
		var h http.Handler
		switch {
		case ok:
			h = rt.methods[r.Method]
		case chat != nil && strings.HasPrefix(r.URL.Path, "/chat/"):
			rt, h = chat, s.cfg.Chat // the chat handler routes its subpaths and methods itself
		default:
			rt = notFound
		}
		s.serve(w, r, rt, h)
	})
}

// serve runs one request through the middleware: request ID, metrics,
// logging, panic recovery, shutdown, method check, authentication.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, rt *route, h http.Handler) {
	start := time.Now()
	reqID := requestID(r)
	w.Header().Set("X-Request-ID", reqID)
	rec := &recorder{ResponseWriter: w}
	ctx := context.WithValue(r.Context(), requestIDKey{}, reqID)
	r = r.WithContext(ctx)
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler { //nolint:errorlint // net/http's sentinel panic value, compared as net/http does
				panic(p)
			}
			s.log.Error().Str("event", "http.panic").Str("requestId", reqID).Str("route", rt.name).
				Interface("panic", p).Msg("handler panicked")
			if !rec.wrote {
				s.writeError(rec, r, internalError(fmt.Errorf("panic: %v", p)))
			}
		}
		status := rec.statusCode()
		s.metrics.observeRequest(rt.name, r.Method, status, time.Since(start), rt.stream)
		s.log.Debug().Str("event", "http.request").Str("requestId", reqID).Str("method", r.Method).
			Str("route", rt.name).Int("status", status).Dur("duration", time.Since(start)).Msg("request")
	}()
	switch {
	case s.isClosed():
		rec.Header().Set("Retry-After", "1")
		s.writeError(rec, r, newError(http.StatusServiceUnavailable, CodeShuttingDown,
			"the server is shutting down: retry on another instance"))
		return
	case rt.name == "not_found":
		s.writeError(rec, r, newError(http.StatusNotFound, CodeNotFound,
			"no route %s: the routes are POST /start, POST /resume, GET /sse, GET /status, POST /interrupt, POST /abort, POST /submit-tool-result, POST /retry, POST /branch, POST /delete, GET /healthz and the inspector under /inspector/", r.URL.Path))
		return
	case h == nil:
		allow := slices.Sorted(maps.Keys(rt.methods))
		e := newError(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "%s does not accept %s: use %s", r.URL.Path, r.Method, strings.Join(allow, ", "))
		e.Allow = strings.Join(allow, ", ")
		s.writeError(rec, r, e)
		return
	}
	if rt.auth {
		p, err := s.authenticate(r)
		if err != nil {
			s.writeError(rec, r, err)
			return
		}
		r = r.WithContext(principal.With(r.Context(), string(p), s.cfg.Authenticate == nil))
	}
	if rt.mounted {
		ctx, done, ok := s.track(r.Context())
		if !ok {
			rec.Header().Set("Retry-After", "1")
			s.writeError(rec, r, newError(http.StatusServiceUnavailable, CodeShuttingDown,
				"the server is shutting down: retry on another instance"))
			return
		}
		defer done()
		r = r.WithContext(ctx)
	}
	h.ServeHTTP(rec, r)
}

// track registers a request of a mounted handler with Shutdown: it returns
// the request's context, cancelled when Shutdown is called, and done, to
// call when the handler returned. ok is false once Shutdown was called.
func (s *Server) track(parent context.Context) (ctx context.Context, done func(), ok bool) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, nil, false
	}
	s.streams.Add(1) // under mu: never after Shutdown started waiting
	s.mu.Unlock()
	ctx, cancel := context.WithCancel(parent)
	go func() {
		select {
		case <-s.shutdown:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		cancel()
		s.streams.Done()
	}, true
}

// authenticate runs Config.Authenticate.
func (s *Server) authenticate(r *http.Request) (Principal, *apiError) {
	if s.cfg.Authenticate == nil {
		return "", nil // AllowUnauthenticated
	}
	p, err := s.cfg.Authenticate(r)
	if err == nil && p == "" {
		err = errors.New("the Authenticate hook returned an empty principal")
	}
	if err != nil {
		s.log.Debug().Str("event", "http.unauthenticated").Str("requestId", requestIDFrom(r.Context())).Err(err).
			Msg("authentication failed")
		return "", newError(http.StatusUnauthorized, CodeUnauthenticated,
			"missing or invalid credentials: authenticate the request as the server requires")
	}
	return p, nil
}

// writeError answers err as JSON and logs internal errors with the request
// ID.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err *apiError) {
	reqID := requestIDFrom(r.Context())
	if err.Status >= 500 && err.Code == CodeInternal {
		s.log.Error().Str("event", "http.internal_error").Str("requestId", reqID).Str("method", r.Method).
			Str("path", r.URL.Path).Err(err.cause).Msg("internal error")
	} else {
		s.log.Debug().Str("event", "http.client_error").Str("requestId", reqID).Str("code", err.Code).
			Int("status", err.Status).Msg(err.Message)
	}
	if err.Allow != "" {
		w.Header().Set("Allow", err.Allow)
	}
	writeJSON(w, err.Status, errorBody{Error: errorPayload{Code: err.Code, Message: err.Message, RequestID: reqID, Details: err.Details}})
}

// handleHealth answers 200 when the database answers within HealthTimeout.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) *apiError {
	ctx, cancel := context.WithTimeout(r.Context(), HealthTimeout)
	defer cancel()
	if err := s.eng.Ping(ctx); err != nil {
		s.log.Warn().Str("event", "health.database_unavailable").Str("requestId", requestIDFrom(r.Context())).Err(err).
			Msg("health check: the database did not answer")
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "unavailable",
			"error": errorPayload{Code: CodeDatabaseUnavailable, Message: "the database did not answer within " + HealthTimeout.String(),
				RequestID: requestIDFrom(r.Context())}})
		return nil
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

// requestIDKey is the context key of the request ID.
type requestIDKey struct{}

// PrincipalFromContext returns the principal the server authenticated for
// the request whose context ctx is (the Chat handler's requests, for
// instance). ok is false outside an authenticated route. Without
// Authenticate (AllowUnauthenticated) the principal is "" and ok is true.
func PrincipalFromContext(ctx context.Context) (p Principal, ok bool) {
	id, _, ok := principal.From(ctx)
	return Principal(id), ok
}

// RequestIDFromContext returns the request ID the server gave the request
// (the X-Request-ID response header; error bodies carry it too).
func RequestIDFromContext(ctx context.Context) string { return requestIDFrom(ctx) }

func requestIDFrom(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// requestID takes the client's X-Request-ID when it is a sane token (for
// tracing through proxies), else makes one.
func requestID(r *http.Request) string {
	if id := r.Header.Get("X-Request-ID"); id != "" && len(id) <= 128 && printableToken(id) {
		return id
	}
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

func printableToken(s string) bool {
	for _, c := range s {
		if c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}

// recorder remembers the status a handler wrote. It passes Flush and
// Unwrap through, so SSE works behind it (http.ResponseController).
type recorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if !r.wrote {
		r.status, r.wrote = http.StatusOK, true
	}
	return r.ResponseWriter.Write(b)
}

// Flush implements http.Flusher.
func (r *recorder) Flush() {
	if !r.wrote {
		r.status, r.wrote = http.StatusOK, true
	}
	_ = http.NewResponseController(r.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) statusCode() int {
	if !r.wrote {
		return http.StatusOK
	}
	return r.status
}

// promLogger adapts zerolog to promhttp's error log.
type promLogger struct{ log zerolog.Logger }

func (l promLogger) Println(v ...any) {
	l.log.Error().Str("event", "metrics.error").Msg(fmt.Sprint(v...))
}
