package aisdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/traceparent"
	"github.com/helix-agents/helix-dbos/server/internal/pgtext"
	"github.com/helix-agents/helix-dbos/server/internal/principal"
	"github.com/helix-agents/helix-dbos/store"
)

// Defaults of Options.
const (
	// DefaultMaxBodyBytes is larger than a plain API's limit because
	// useChat posts the whole conversation with every message.
	DefaultMaxBodyBytes int64 = 4 << 20
	// DefaultPathPrefix is where the routes are served.
	DefaultPathPrefix = "/chat"
	// DefaultHeartbeatInterval is the pause between keep-alive comments
	// on an idle stream.
	DefaultHeartbeatInterval = 15 * time.Second
	// DefaultPollInterval is how soon after its last chunk a stream first
	// checks whether its run suspended or ended (chunks themselves arrive
	// at once, woken by the database's notifications; a run's suspension
	// writes no chunk, so it is polled for). A run suspends right after
	// the chunk that announces the call it waits for, so the first check
	// usually finds it.
	DefaultPollInterval = 100 * time.Millisecond
	// DefaultMaxPollInterval bounds the checks of an idle stream: each
	// check that finds the run still going doubles the pause, up to this.
	DefaultMaxPollInterval = 2 * time.Second
	// DefaultWriteTimeout bounds one write (and flush) of a stream: a
	// client that stops reading is dropped after it instead of pinning its
	// handler (and Shutdown) for good.
	DefaultWriteTimeout = 30 * time.Second
	// DefaultOperationTimeout bounds one state-changing engine call (a
	// chat's run start, a tool answer's submission). Those calls are
	// detached from the request's context, so a client that hangs up (or a
	// shutdown) cannot leave one half done.
	DefaultOperationTimeout = 30 * time.Second
)

// Options configure the chat handler. Every field documents its default.
type Options struct {
	// Agents are the agents a chat may run. A new chat runs the one its
	// request names in the body's "agent" field, or the first; an existing
	// chat runs its session's agent. NewHandler registers them with the
	// engine. At least one is required; names must be unique.
	Agents []*helix.Agent

	// Authenticate identifies the caller (the principal). A new chat's
	// session is stored with UserID = principal, and every route answers
	// 404 session_not_found for a chat whose root session has another
	// UserID. An error, or an empty principal, answers 401
	// unauthenticated (the error is logged at debug level, never sent).
	// Mounted as package server's Config.Chat, use ServerPrincipal: the
	// principal the server authenticated, and "" (accepted then) when the
	// server runs with AllowUnauthenticated. It must be safe for
	// concurrent use.
	Authenticate func(r *http.Request) (string, error)
	// AllowUnauthenticated must be true to build a handler without
	// Authenticate; every caller is then principal "" (and sees the chats
	// started by principal ""). Leaving both unset is an error (fail
	// closed).
	AllowUnauthenticated bool

	// MaxBodyBytes bounds request bodies (413 body_too_large). Default
	// DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// PathPrefix is the path the routes live under, served as is (mount
	// the handler at PathPrefix and PathPrefix+"/" without stripping).
	// Default DefaultPathPrefix.
	PathPrefix string
	// HeartbeatInterval is the pause between SSE keep-alive comments on
	// an idle stream. Default DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// PollInterval is how soon after its last chunk a stream checks its
	// run's status, to end the response when the run suspends on a tool
	// call or ends without a closing chunk. While nothing arrives the
	// pause doubles after each check, up to MaxPollInterval; every chunk
	// starts over. Default DefaultPollInterval.
	PollInterval time.Duration
	// MaxPollInterval bounds the pause between two status checks of an
	// idle stream. Default DefaultMaxPollInterval (at least PollInterval).
	MaxPollInterval time.Duration
	// WriteTimeout bounds each write of a stream response: a write that
	// does not complete within it (the client stopped reading) ends the
	// response. Default DefaultWriteTimeout.
	WriteTimeout time.Duration
	// OperationTimeout bounds each state-changing engine call. Default
	// DefaultOperationTimeout.
	OperationTimeout time.Duration

	// ErrorText writes the errorText of a failed run's error chunk.
	// Default DefaultErrorText (the error code only: messages may carry
	// a provider's words). The message of an internal failure (code
	// internal_error: the engine's own error, possibly SQL) is replaced
	// with a generic one before ErrorText sees it.
	ErrorText func(*helix.ErrorChunk) string

	// Logger receives internal errors and stream lifecycle events. nil is
	// silent.
	Logger *zerolog.Logger
}

func (o Options) withDefaults() (Options, error) {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.PathPrefix == "" {
		o.PathPrefix = DefaultPathPrefix
	}
	o.PathPrefix = "/" + strings.Trim(o.PathPrefix, "/")
	if o.HeartbeatInterval <= 0 {
		o.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.MaxPollInterval <= 0 {
		o.MaxPollInterval = DefaultMaxPollInterval
	}
	o.MaxPollInterval = max(o.MaxPollInterval, o.PollInterval)
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.OperationTimeout <= 0 {
		o.OperationTimeout = DefaultOperationTimeout
	}
	if o.ErrorText == nil {
		o.ErrorText = DefaultErrorText
	}
	if o.Logger == nil {
		nop := zerolog.Nop()
		o.Logger = &nop
	}
	return o, o.validate()
}

func (o Options) validate() error {
	if o.Authenticate == nil && !o.AllowUnauthenticated {
		return errors.New("aisdk: Options.Authenticate is nil: set it, or set AllowUnauthenticated to serve every caller as principal \"\"")
	}
	if len(o.Agents) == 0 {
		return errors.New("aisdk: Options.Agents is empty: give at least one agent")
	}
	seen := map[string]bool{}
	for i, a := range o.Agents {
		if a == nil {
			return fmt.Errorf("aisdk: Options.Agents[%d] is nil", i)
		}
		if seen[a.Name] {
			return fmt.Errorf("aisdk: Options.Agents has two agents named %q", a.Name)
		}
		seen[a.Name] = true
	}
	return nil
}

// Handler serves the chat routes (see NewHandler). Stop it with Shutdown.
type Handler struct {
	eng      *engine.Engine
	opts     Options
	agents   map[string]*helix.Agent
	log      zerolog.Logger
	pollWarn *rateLimiter // status-check failures, shared by every stream

	mu       sync.Mutex
	closed   bool
	shutdown chan struct{} // closed by Shutdown: streams end
	inflight sync.WaitGroup
}

var _ http.Handler = (*Handler)(nil)

// NewHandler returns the chat routes for eng:
//
//	POST {prefix}                                   a message or tool answers; streams the response
//	GET  {prefix}/{sessionId}/stream                reconnect to the active response (204 when none)
//	POST {prefix}/{sessionId}/submit-tool-result    answer one tool call (JSON)
//
// It registers Options.Agents with the engine. It refuses to build without
// Options.Authenticate unless Options.AllowUnauthenticated is set.
func NewHandler(eng *engine.Engine, opts Options) (*Handler, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if eng == nil {
		return nil, errors.New("aisdk: engine is nil")
	}
	if err := eng.Register(opts.Agents...); err != nil {
		return nil, fmt.Errorf("aisdk: register agents: %w", err)
	}
	h := &Handler{eng: eng, opts: opts, agents: map[string]*helix.Agent{}, log: opts.Logger.With().Str("component", "aisdk").Logger(),
		pollWarn: newRateLimiter(pollWarnEvery, time.Now), shutdown: make(chan struct{})}
	for _, a := range opts.Agents {
		h.agents[a.Name] = a
	}
	return h, nil
}

// Shutdown stops the handler gracefully: new requests are answered 503
// shutting_down, open streams end at once without their finish chunk (the
// client reconnects, to another instance, with GET {prefix}/{id}/stream
// and loses nothing), and Shutdown waits until every request has returned
// or ctx ends. Runs go on in the engine. Package server calls it from its
// own Shutdown when the handler is its Config.Chat; a handler mounted on
// another mux needs the call before http.Server.Shutdown, which otherwise
// waits for the streams (they are never idle) until its deadline.
// Shutdown is idempotent.
func (h *Handler) Shutdown(ctx context.Context) error {
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		close(h.shutdown)
		h.log.Info().Str("event", "chat.shutdown").Msg("chat handler shutting down: new requests are refused, streams end")
	}
	h.mu.Unlock()
	done := make(chan struct{})
	go func() {
		h.inflight.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("aisdk: shutdown: chat requests still running: %w", ctx.Err())
	}
}

// enter registers a request with Shutdown; false once Shutdown was called.
func (h *Handler) enter() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.inflight.Add(1) // under mu: never after Shutdown started waiting
	return true
}

// ServeHTTP routes a request. Paths are matched on their escaped form, so
// a chat ID may contain anything the client percent-encodes.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.enter() {
		w.Header().Set("Retry-After", "1")
		writeError(w, errShuttingDown)
		return
	}
	defer h.inflight.Done()
	principal, err := h.authenticate(r)
	if err != nil {
		h.log.Debug().Err(err).Str("path", r.URL.Path).Msg("authentication failed")
		writeError(w, &apiError{Status: http.StatusUnauthorized, Code: CodeUnauthenticated, Message: "authentication required"})
		return
	}
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), h.opts.PathPrefix)
	if !ok || (rest != "" && !strings.HasPrefix(rest, "/")) {
		writeError(w, errNotFound)
		return
	}
	rest = strings.Trim(rest, "/")
	if rest == "" {
		h.route(w, r, http.MethodPost, func() *apiError { return h.postChat(w, r, principal) })
		return
	}
	segs := strings.Split(rest, "/")
	if len(segs) != 2 {
		writeError(w, errNotFound)
		return
	}
	id, err := url.PathUnescape(segs[0])
	if err != nil || !validChatID(id) {
		writeError(w, errNotFound)
		return
	}
	switch segs[1] {
	case "stream":
		h.route(w, r, http.MethodGet, func() *apiError { return h.getStream(w, r, principal, id) })
	case "submit-tool-result":
		h.route(w, r, http.MethodPost, func() *apiError { return h.postSubmit(w, r, principal, id) })
	default:
		writeError(w, errNotFound)
	}
}

// route runs fn for the allowed method and writes the error it returns
// (fn returns nil once it has written the response itself).
func (h *Handler) route(w http.ResponseWriter, r *http.Request, method string, fn func() *apiError) {
	if r.Method != method {
		w.Header().Set("Allow", method)
		writeError(w, &apiError{Status: http.StatusMethodNotAllowed, Code: CodeMethodNotAllowed,
			Message: fmt.Sprintf("use %s for this route", method)})
		return
	}
	e := fn()
	switch {
	case e == nil:
	case e.cause != nil && r.Context().Err() != nil:
		// The client left, or package server's Shutdown cancelled the
		// request, while it was being served: the error is the
		// cancellation's, and the only client that may still read the
		// answer is told to retry elsewhere.
		h.log.Debug().Err(e.cause).Str("method", r.Method).Str("path", r.URL.Path).Msg("chat request cancelled")
		w.Header().Set("Retry-After", "1")
		writeError(w, errShuttingDown)
	default:
		if e.cause != nil {
			h.log.Error().Err(e.cause).Str("method", r.Method).Str("path", r.URL.Path).Str("code", e.Code).Msg("chat request failed")
		}
		writeError(w, e)
	}
}

// ServerPrincipal is the Options.Authenticate of a handler mounted as
// package server's Config.Chat: it returns the principal the server
// authenticated for the request (server.PrincipalFromContext). When the
// server runs with AllowUnauthenticated that principal is "", which the
// handler accepts then (every caller is "", as on the server's own
// routes). A request that did not pass through the server's
// authentication (the handler mounted elsewhere) is refused.
//
//	chat, err := aisdk.NewHandler(eng, aisdk.Options{Agents: agents, Authenticate: aisdk.ServerPrincipal})
//	srv, err := server.New(eng, server.Config{Agents: agents, Authenticate: auth, Chat: chat})
func ServerPrincipal(r *http.Request) (string, error) {
	p, _, ok := principal.From(r.Context())
	if !ok {
		return "", errors.New("aisdk: ServerPrincipal: the request did not pass through package server's authentication (mount the handler as server.Config.Chat)")
	}
	return p, nil
}

// authenticate runs Options.Authenticate. An empty principal is refused,
// except in a request package server authenticated in its unauthenticated
// mode (AllowUnauthenticated): there every caller is "" by the server's
// configuration, and the chat routes follow it.
func (h *Handler) authenticate(r *http.Request) (string, error) {
	if h.opts.Authenticate == nil {
		return "", nil
	}
	p, err := h.opts.Authenticate(r)
	if err == nil && p == "" {
		if _, unauthenticated, ok := principal.From(r.Context()); !ok || !unauthenticated {
			err = errors.New("the Authenticate hook returned an empty principal")
		}
	}
	return p, err
}

// readBody reads a request body within MaxBodyBytes. A body must be
// declared application/json (parameters such as charset allowed): besides
// telling clients what the routes read, this makes a browser ask the
// server before a cross-origin POST (a CORS preflight), which it does not
// for the content types of HTML forms (or none), so a page on another
// origin cannot post to the chat with a visitor's cookies.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	if r.ContentLength != 0 { // a body, or one of unknown length
		mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || mt != "application/json" {
			return nil, &apiError{Status: http.StatusUnsupportedMediaType, Code: CodeUnsupportedMediaType,
				Message: "send the body with Content-Type application/json"}
		}
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return nil, &apiError{Status: http.StatusRequestEntityTooLarge, Code: CodeBodyTooLarge,
			Message: fmt.Sprintf("the body exceeds %d bytes", h.opts.MaxBodyBytes)}
	case err != nil:
		return nil, &apiError{Status: http.StatusBadRequest, Code: CodeInvalidRequest, Message: "the body could not be read"}
	case pgtext.JSONHasNUL(b):
		return nil, &apiError{Status: http.StatusBadRequest, Code: CodeInvalidRequest,
			Message: `the body has a string with the character U+0000 ("\u0000"), which cannot be stored: remove it`}
	}
	return b, nil
}

// ownedSession loads a chat's root session for its principal: a missing
// session, another principal's, or a sub-agent's is not found.
func (h *Handler) ownedSession(r *http.Request, principal, id string) (*store.SessionState, *apiError) {
	st, err := h.eng.Session(r.Context(), id)
	switch {
	case errors.Is(err, helix.ErrNotFound):
		return nil, errSessionNotFound
	case err != nil:
		return nil, internalError(err)
	case st.UserID != principal || !st.IsRoot():
		return nil, errSessionNotFound
	}
	return st, nil
}

// postSubmit answers one tool call: POST {prefix}/{id}/submit-tool-result.
func (h *Handler) postSubmit(w http.ResponseWriter, r *http.Request, principal, id string) *apiError {
	body, e := h.readBody(w, r)
	if e != nil {
		return e
	}
	sub, err := parseSubmitRequest(body)
	if err != nil {
		return requestErr(err)
	}
	st, e := h.ownedSession(r, principal, id)
	if e != nil {
		return e
	}
	ctx, cancel := h.operationContext(r)
	defer cancel()
	res, err := h.eng.SubmitToolResult(ctx, st.SessionID, sub)
	if err != nil {
		return submissionErr(err)
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// operationContext detaches a state-changing engine call from the request
// (a client that hangs up, or a shutdown, must not leave it half done)
// and bounds it.
func (h *Handler) operationContext(r *http.Request) (context.Context, context.CancelFunc) {
	// A caller's W3C traceparent: a session started here continues its
	// trace.
	return context.WithTimeout(context.WithoutCancel(traceparent.Extract(r.Context(), r)), h.opts.OperationTimeout)
}

// Error codes of the JSON error body {"error": {"code", "message"}}. They
// are stable, and the same as package server's where the meaning is the
// same. Submission rejections keep the engine's codes (helix.Submission*).
const (
	CodeUnauthenticated      = "unauthenticated"
	CodeInvalidJSON          = "invalid_json"
	CodeInvalidRequest       = "invalid_request"
	CodeBodyTooLarge         = "body_too_large"
	CodeUnsupportedMediaType = "unsupported_media_type"
	CodeUnknownAgent         = "unknown_agent"
	CodeAgentMismatch        = "agent_mismatch"
	CodeInvalidResume        = "invalid_resume_position"
	CodeSessionNotFound      = "session_not_found"
	CodeNotFound             = "not_found"
	CodeMethodNotAllowed     = "method_not_allowed"
	CodeAlreadyRunning       = "already_running"
	CodeNotContinuable       = "session_not_continuable"
	CodeAwaitingToolResults  = "awaiting_tool_results"
	CodeShuttingDown         = "shutting_down"
	CodeInternal             = "internal_error"
)

// apiError is an error answered to the client; Message never carries
// internal error text (cause is logged instead).
type apiError struct {
	Status  int
	Code    string
	Message string
	Details any
	cause   error
}

var (
	errNotFound        = &apiError{Status: http.StatusNotFound, Code: CodeNotFound, Message: "no such route"}
	errSessionNotFound = &apiError{Status: http.StatusNotFound, Code: CodeSessionNotFound, Message: "no such chat"}
	errShuttingDown    = &apiError{Status: http.StatusServiceUnavailable, Code: CodeShuttingDown,
		Message: "the server is shutting down: retry on another instance"}
)

func internalError(err error) *apiError {
	return &apiError{Status: http.StatusInternalServerError, Code: CodeInternal,
		Message: "the server failed to handle the request; retry later", cause: err}
}

// requestErr maps a parse error.
func requestErr(err error) *apiError {
	var re *requestError
	switch {
	case errors.Is(err, errInvalidJSON):
		return &apiError{Status: http.StatusBadRequest, Code: CodeInvalidJSON, Message: "the body must be one JSON object"}
	case errors.As(err, &re):
		return &apiError{Status: http.StatusBadRequest, Code: CodeInvalidRequest, Message: re.msg}
	}
	return internalError(err)
}

// submissionErr maps an engine submission error: a rejection keeps its
// code and reason (written for the client); anything else is internal.
func submissionErr(err error) *apiError {
	var se *helix.SubmissionError
	if !errors.As(err, &se) {
		return internalError(err)
	}
	status := http.StatusConflict
	switch se.Code {
	case helix.SubmissionInvalid, helix.SubmissionInvalidResult, helix.SubmissionKindMismatch, helix.SubmissionNotRoot:
		status = http.StatusBadRequest
	case helix.SubmissionUnknownToolCall:
		status = http.StatusNotFound
	}
	e := &apiError{Status: status, Code: se.Code, Message: se.Reason}
	if len(se.Violations) > 0 {
		e.Details = map[string]any{"toolCallId": se.ToolCallID, "violations": se.Violations}
	} else {
		e.Details = map[string]any{"toolCallId": se.ToolCallID}
	}
	return e
}

type errorBody struct {
	Error errorPayload `json:"error"`
}

type errorPayload struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Details any    `json:"details,omitempty"`
}

func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.Status, errorBody{Error: errorPayload{Code: e.Code, Message: e.Message, Details: e.Details}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"code":"internal_error","message":"the server failed to encode its answer"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
