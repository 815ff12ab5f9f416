package aisdk

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/rs/zerolog"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
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
	// DefaultPollInterval is how often a stream checks whether its run
	// suspended or ended (chunks themselves arrive at once).
	DefaultPollInterval = 100 * time.Millisecond
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
	// Inside package server, return the principal the server
	// authenticated (server.PrincipalFromContext). It must be safe for
	// concurrent use.
	Authenticate func(r *http.Request) (string, error)
	// AllowUnauthenticated must be true to build a handler without
	// Authenticate; every caller is then principal "". Leaving both unset
	// is an error (fail closed).
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
	// PollInterval is how often a stream checks its run's status to end
	// the response when the run suspends on a tool call or ends without a
	// closing chunk. Default DefaultPollInterval.
	PollInterval time.Duration

	// ErrorText writes the errorText of a failed run's error chunk.
	// Default DefaultErrorText (the error code only: messages may carry
	// a provider's or the database's words).
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

// handler serves the chat routes.
type handler struct {
	eng    *engine.Engine
	opts   Options
	agents map[string]*helix.Agent
	log    zerolog.Logger
}

// NewHandler returns the chat routes for eng:
//
//	POST {prefix}                                   a message or tool answers; streams the response
//	GET  {prefix}/{sessionId}/stream                reconnect to the active response (204 when none)
//	POST {prefix}/{sessionId}/submit-tool-result    answer one tool call (JSON)
//
// It registers Options.Agents with the engine. It refuses to build without
// Options.Authenticate unless Options.AllowUnauthenticated is set.
func NewHandler(eng *engine.Engine, opts Options) (http.Handler, error) {
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
	h := &handler{eng: eng, opts: opts, agents: map[string]*helix.Agent{}, log: opts.Logger.With().Str("component", "aisdk").Logger()}
	for _, a := range opts.Agents {
		h.agents[a.Name] = a
	}
	return h, nil
}

// ServeHTTP routes a request. Paths are matched on their escaped form, so
// a chat ID may contain anything the client percent-encodes.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
func (h *handler) route(w http.ResponseWriter, r *http.Request, method string, fn func() *apiError) {
	if r.Method != method {
		w.Header().Set("Allow", method)
		writeError(w, &apiError{Status: http.StatusMethodNotAllowed, Code: CodeMethodNotAllowed,
			Message: fmt.Sprintf("use %s for this route", method)})
		return
	}
	if e := fn(); e != nil {
		if e.cause != nil {
			h.log.Error().Err(e.cause).Str("method", r.Method).Str("path", r.URL.Path).Str("code", e.Code).Msg("chat request failed")
		}
		writeError(w, e)
	}
}

func (h *handler) authenticate(r *http.Request) (string, error) {
	if h.opts.Authenticate == nil {
		return "", nil
	}
	p, err := h.opts.Authenticate(r)
	if err == nil && p == "" {
		err = errors.New("the Authenticate hook returned an empty principal")
	}
	return p, err
}

// readBody reads a request body within MaxBodyBytes.
func (h *handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return nil, &apiError{Status: http.StatusRequestEntityTooLarge, Code: CodeBodyTooLarge,
			Message: fmt.Sprintf("the body exceeds %d bytes", h.opts.MaxBodyBytes)}
	case err != nil:
		return nil, &apiError{Status: http.StatusBadRequest, Code: CodeInvalidRequest, Message: "the body could not be read"}
	}
	return b, nil
}

// ownedSession loads a chat's root session for its principal: a missing
// session, another principal's, or a sub-agent's is not found.
func (h *handler) ownedSession(r *http.Request, principal, id string) (*store.SessionState, *apiError) {
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
func (h *handler) postSubmit(w http.ResponseWriter, r *http.Request, principal, id string) *apiError {
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
	res, err := h.eng.SubmitToolResult(r.Context(), st.SessionID, sub)
	if err != nil {
		return submissionErr(err)
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// Error codes of the JSON error body {"error": {"code", "message"}}. They
// are stable, and the same as package server's where the meaning is the
// same. Submission rejections keep the engine's codes (helix.Submission*).
const (
	CodeUnauthenticated     = "unauthenticated"
	CodeInvalidJSON         = "invalid_json"
	CodeInvalidRequest      = "invalid_request"
	CodeBodyTooLarge        = "body_too_large"
	CodeUnknownAgent        = "unknown_agent"
	CodeAgentMismatch       = "agent_mismatch"
	CodeInvalidResume       = "invalid_resume_position"
	CodeSessionNotFound     = "session_not_found"
	CodeNotFound            = "not_found"
	CodeMethodNotAllowed    = "method_not_allowed"
	CodeAlreadyRunning      = "already_running"
	CodeNotContinuable      = "session_not_continuable"
	CodeAwaitingToolResults = "awaiting_tool_results"
	CodeInternal            = "internal_error"
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
