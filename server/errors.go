package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
)

// Error codes of the JSON error body {"error": {"code", "message",
// "requestId", "details"}}. They are stable: clients switch on them. The
// package documentation has the table with their HTTP statuses.
const (
	CodeUnauthenticated      = "unauthenticated"
	CodeInvalidJSON          = "invalid_json"
	CodeUnknownField         = "unknown_field"
	CodeInvalidRequest       = "invalid_request"
	CodeBodyTooLarge         = "body_too_large"
	CodeUnsupportedMediaType = "unsupported_media_type"
	CodeUnknownAgent         = "unknown_agent"
	CodeInvalidResume        = "invalid_resume_position"
	CodeSessionNotFound      = "session_not_found"
	CodeCheckpointNotFound   = "checkpoint_not_found"
	CodeNotFound             = "not_found"
	CodeMethodNotAllowed     = "method_not_allowed"
	CodeAlreadyRunning       = "already_running"
	CodeNotResumable         = "not_resumable"
	CodeNotRunning           = "not_running"
	CodeNotContinuable       = "session_not_continuable"
	CodeAgentMismatch        = "agent_mismatch"
	CodeAwaitingToolResults  = "awaiting_tool_results"
	CodeSessionRunning       = "session_running"
	CodeNotRootSession       = "not_root_session"
	CodeShuttingDown         = "shutting_down"
	CodeDatabaseUnavailable  = "database_unavailable"
	CodeInternal             = "internal_error"
	// Submission rejections keep the engine's codes (helix.Submission*):
	// invalid_submission, unknown_tool_call, not_root_session,
	// kind_mismatch, invalid_result, timed_out, session_interrupted,
	// session_not_waiting. (/retry and /branch answer not_root_session
	// for a sub-agent session too.)
)

// apiError is an error answered to the client. Message is written for the
// client: it says what went wrong and what to do, and never carries
// internal error text.
type apiError struct {
	Status  int
	Code    string
	Message string
	Details any
	// Allow is the Allow header of a 405.
	Allow string
	// cause is logged (with the request ID) for internal errors; never sent.
	cause error
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func newError(status int, code, format string, args ...any) *apiError {
	return &apiError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// errorBody is the JSON shape of every error response.
type errorBody struct {
	Error errorPayload `json:"error"`
}

type errorPayload struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	RequestID string `json:"requestId,omitempty"`
	Details   any    `json:"details,omitempty"`
}

// internalError wraps an unexpected error: the client gets a generic
// message with the request ID, the log gets the error.
func internalError(err error) *apiError {
	return &apiError{Status: http.StatusInternalServerError, Code: CodeInternal,
		Message: "the server failed to handle the request; retry later, and report the request ID if it persists", cause: err}
}

// sessionNotFound is the answer for a missing session and for another
// principal's session alike, so that existence is not revealed.
func sessionNotFound(sessionID string) *apiError {
	return newError(http.StatusNotFound, CodeSessionNotFound,
		"session %q not found: check the ID, and that it was started with your credentials", sessionID)
}

// userMessage strips the package prefix of a helix or engine error
// message meant for users ("helix: session … is already running …").
func userMessage(err error) string {
	msg := err.Error()
	for _, p := range []string{"helix: ", "engine: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	return msg
}

// submissionStatus maps a submission rejection code to its HTTP status.
func submissionStatus(code string) int {
	switch code {
	case helix.SubmissionUnknownToolCall:
		return http.StatusNotFound
	case helix.SubmissionInvalid, helix.SubmissionInvalidResult, helix.SubmissionNotRoot:
		return http.StatusBadRequest
	default: // kind_mismatch, timed_out, session_interrupted, session_not_waiting, and any new code
		return http.StatusConflict
	}
}

// engineError translates an error of an engine call into the client's
// answer. The typed errors of package helix carry messages written for
// users; anything else is internal.
func engineError(err error, sessionID string) *apiError {
	var (
		running   *helix.AgentAlreadyRunningError
		notResume *helix.AgentNotResumableError
		sub       *helix.SubmissionError
		def       *helix.DefinitionError
		valid     *helix.ValidationError
		refused   *engine.RefusedError
		busy      *helix.SessionRunningError
		notRoot   *helix.NotRootSessionError
	)
	switch {
	case errors.As(err, &sub):
		e := newError(submissionStatus(sub.Code), sub.Code, "submission for tool call %q rejected: %s", sub.ToolCallID, sub.Reason)
		if len(sub.Violations) > 0 {
			e.Details = map[string]any{"violations": sub.Violations}
		}
		return e
	case errors.As(err, &refused):
		return refusedError(refused, sessionID)
	case errors.As(err, &running):
		return newError(http.StatusConflict, CodeAlreadyRunning, "%s", userMessage(running))
	case errors.As(err, &busy):
		return newError(http.StatusConflict, CodeSessionRunning, "%s", userMessage(busy))
	case errors.As(err, &notRoot):
		return newError(http.StatusBadRequest, CodeNotRootSession, "%s", userMessage(notRoot))
	case errors.As(err, &notResume):
		return newError(http.StatusConflict, CodeNotResumable, "%s", userMessage(notResume))
	case errors.As(err, &valid):
		return &apiError{Status: http.StatusBadRequest, Code: CodeInvalidRequest, Message: userMessage(valid),
			Details: map[string]any{"violations": valid.Violations}}
	case errors.As(err, &def):
		return newError(http.StatusBadRequest, CodeInvalidRequest, "%s", userMessage(def))
	case errors.Is(err, helix.ErrNotFound):
		return sessionNotFound(sessionID)
	}
	return internalError(err)
}

// refusedError answers an engine refusal: its message is written for the
// caller; its code decides the status.
func refusedError(r *engine.RefusedError, sessionID string) *apiError {
	switch r.Code {
	case engine.RefusedOwnerMismatch:
		return sessionNotFound(sessionID) // another principal's session does not exist for this one
	case engine.RefusedNotRunning:
		return newError(http.StatusConflict, CodeNotRunning, "%s", r.Message)
	case engine.RefusedNotContinuable:
		return newError(http.StatusConflict, CodeNotContinuable, "%s", r.Message)
	case engine.RefusedAgentMismatch:
		return newError(http.StatusConflict, CodeAgentMismatch, "%s", r.Message)
	case engine.RefusedAwaitingToolResults:
		return newError(http.StatusConflict, CodeAwaitingToolResults, "%s", r.Message)
	case engine.RefusedSessionExists:
		return newError(http.StatusConflict, CodeAlreadyRunning, "%s", r.Message)
	case engine.RefusedNotLaunched:
		return newError(http.StatusServiceUnavailable, CodeShuttingDown, "the server is not running agents now; retry later")
	default: // state_not_allowed, message_required, and any new code
		return newError(http.StatusBadRequest, CodeInvalidRequest, "%s", r.Message)
	}
}

// writeJSON writes v with status. The values are the package's response
// types, which always marshal; should one not, the client gets a 500.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status, body = http.StatusInternalServerError, []byte(`{"error":{"code":"internal_error","message":"the server could not encode its answer; retry later"}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n')) // a client that is gone cannot be told
}
