package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/traceparent"
	"github.com/helix-agents/helix-dbos/server/internal/redact"
	"github.com/helix-agents/helix-dbos/store"
)

// StartRequest is the body of POST /start.
type StartRequest struct {
	// AgentType names the agent to run (one of Config.Agents). Required.
	AgentType string `json:"agentType"`
	// Message is a user message; Messages are more messages (after it),
	// user messages only unless Config.AllowAnyMessageRole is set. A new
	// session needs a message, messages or a state; a session's next turn
	// needs a message or messages.
	Message  string          `json:"message,omitempty"`
	Messages []helix.Message `json:"messages,omitempty"`
	// SessionID continues a completed session (its next turn) or names the
	// new session (1–200 of [A-Za-z0-9-_.:]); empty: a new UUIDv7.
	SessionID string `json:"sessionId,omitempty"`
	// State is the custom state of a new session (a JSON object); default
	// the agent's InitialState. Not allowed when continuing a session.
	State json.RawMessage `json:"state,omitempty"`
	// Metadata and Tags are stored on a new session.
	Metadata map[string]string `json:"metadata,omitempty"`
	Tags     []string          `json:"tags,omitempty"`
}

// RunResponse answers POST /start and POST /resume (202 Accepted: the run
// goes on in the engine).
type RunResponse struct {
	SessionID string `json:"sessionId"`
	RunID     string `json:"runId"`
	// StreamURL is the run's GET /sse URL, positioned at the run's first
	// chunk (relative to the server's root, prefix included).
	StreamURL string `json:"streamUrl"`
}

// ResumeRequest is the body of POST /resume.
type ResumeRequest struct {
	SessionID string `json:"sessionId"`
	// Message, when set, is appended as a user message before the run
	// continues (not while the session waits for tool results).
	Message string `json:"message,omitempty"`
}

// ControlRequest is the body of POST /interrupt and POST /abort.
type ControlRequest struct {
	SessionID string `json:"sessionId"`
	// Reason is recorded with the interrupt or abort (at most 2000 bytes).
	Reason string `json:"reason,omitempty"`
}

// ControlResponse answers POST /interrupt (202, status
// "interrupt_requested": the run stops before its next step) and POST
// /abort (200, status "aborted": the session is failed with code aborted).
type ControlResponse struct {
	SessionID string `json:"sessionId"`
	Status    string `json:"status"`
}

// SubmitRequest is the body of POST /submit-tool-result: the
// specification's submission (helix.ToolSubmission) with the root
// session's ID.
type SubmitRequest struct {
	// SessionID is the conversation's root session (calls of sub-agents
	// are routed from it).
	SessionID string `json:"sessionId"`
	// Kind is "client-tool-result" (with result or error) or
	// "approval-response" (with approved and an optional reason).
	Kind       helix.SubmissionKind `json:"kind"`
	ToolCallID string               `json:"toolCallId"`
	Result     json.RawMessage      `json:"result,omitempty"`
	Error      string               `json:"error,omitempty"`
	Approved   *bool                `json:"approved,omitempty"`
	Reason     string               `json:"reason,omitempty"`
}

// StatusResponse answers GET /status.
type StatusResponse struct {
	SessionID       string `json:"sessionId"`
	AgentType       string `json:"agentType"`
	ParentSessionID string `json:"parentSessionId,omitempty"`
	RootSessionID   string `json:"rootSessionId"`
	// Status is the runtime status: queued (waiting for a slot of the
	// server's queue; see Queue), running, completed, failed,
	// interrupted, paused, or suspended_client_tool /
	// suspended_awaiting_children / suspended_step_partial while the
	// current run waits for human input (see PendingToolCalls).
	Status       helix.AgentStatus `json:"status"`
	StepCount    int               `json:"stepCount"`
	MessageCount int               `json:"messageCount"`
	Output       json.RawMessage   `json:"output,omitempty"`
	// Error is the failure's message; for code internal_error a generic
	// message (the engine's error text stays in its logs).
	Error string `json:"error,omitempty"`
	// ErrorCode classifies a failed run's error (provider_rate_limited,
	// max_steps_exceeded, aborted, ...) when the engine knows it.
	ErrorCode string `json:"errorCode,omitempty"`
	// CurrentRunID is the session's latest run.
	CurrentRunID string `json:"currentRunId,omitempty"`
	// PendingToolCalls are the tool calls waiting for an answer in the
	// session and its sub-agents (submit them on the root session); empty
	// when nothing waits.
	PendingToolCalls []PendingToolCall `json:"pendingToolCalls"`
	// Queue, with Status queued, says where the current run waits in the
	// server's queue (serve --queue).
	Queue *engine.QueueState `json:"queue,omitempty"`
	// Runs are the session's runs by turn, with ?runs=true.
	Runs      []RunInfo `json:"runs,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// RunInfo describes one run of a session. (A run's error is not listed:
// the session's Error and ErrorCode describe the current failure.)
type RunInfo struct {
	RunID  string          `json:"runId"`
	Turn   int             `json:"turn"`
	Status helix.RunStatus `json:"status"`
	// StepCount is the run's committed steps.
	StepCount int `json:"stepCount"`
	// StartSequence is the stream position before the run's first chunk:
	// GET /sse with fromSequence=StartSequence streams the run.
	StartSequence int64      `json:"startSequence"`
	PreviousRunID string     `json:"previousRunId,omitempty"`
	StartedAt     time.Time  `json:"startedAt"`
	CompletedAt   *time.Time `json:"completedAt,omitempty"`
}

// PendingToolCall is a tool call that waits for a submission.
type PendingToolCall struct {
	ToolCallID string `json:"toolCallId"`
	ToolName   string `json:"toolName"`
	// Kind is the submission kind that answers it: "client-tool-result"
	// for a client-executed tool, "approval-response" for an approval gate.
	Kind helix.SubmissionKind `json:"kind"`
	// Input is the call's arguments, as the model gave them.
	Input      json.RawMessage `json:"input,omitempty"`
	ApprovalID string          `json:"approvalId,omitempty"`
	// Deadline is when an unanswered client tool call times out.
	Deadline *time.Time `json:"deadline,omitempty"`
	// OwnerSessionID is the session whose run waits (the root, or a
	// sub-agent).
	OwnerSessionID string    `json:"ownerSessionId"`
	Step           int       `json:"step"`
	CreatedAt      time.Time `json:"createdAt"`
}

// handleStart starts a new session or the next turn of a completed one.
func (s *Server) handleStart(w http.ResponseWriter, r *http.Request) *apiError {
	var req StartRequest
	if err := decodeBody(r, w, s.cfg.MaxBodyBytes, &req); err != nil {
		return err
	}
	agent, apiErr := s.agent(req.AgentType)
	if apiErr != nil {
		return apiErr
	}
	in := engine.Input{Message: req.Message, Messages: req.Messages}
	for i, m := range req.Messages {
		if err := m.Validate(); err != nil {
			return newError(http.StatusBadRequest, CodeInvalidRequest, "messages[%d]: %s", i, userMessage(err))
		}
		if m.Role != helix.RoleUser && !s.cfg.AllowAnyMessageRole {
			return newError(http.StatusBadRequest, CodeInvalidRequest,
				"messages[%d]: role %q is not accepted: send user messages (the server's Config.AllowAnyMessageRole accepts the other roles)", i, m.Role)
		}
	}
	hasInput := req.Message != "" || len(req.Messages) > 0
	if len(req.State) > 0 && string(req.State) != "null" {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(req.State, &obj); err != nil {
			return newError(http.StatusBadRequest, CodeInvalidRequest, "state must be a JSON object")
		}
		in.State = req.State
	}
	principal, _ := PrincipalFromContext(r.Context())
	newSession := true
	if req.SessionID != "" {
		if err := validSessionID(req.SessionID); err != nil {
			return newError(http.StatusBadRequest, CodeInvalidRequest, "%s", err.Error())
		}
		st, err := s.eng.Session(r.Context(), req.SessionID)
		switch {
		case errors.Is(err, helix.ErrNotFound): // a new session with the client's ID
		case err != nil:
			return internalError(err)
		default:
			if apiErr := s.authorize(r.Context(), st); apiErr != nil {
				return apiErr
			}
			if apiErr := continueCheck(st, agent, in, hasInput); apiErr != nil {
				return apiErr
			}
			newSession = false
		}
	}
	if newSession && !hasInput && in.State == nil {
		return newError(http.StatusBadRequest, CodeInvalidRequest, "empty input: give message, messages or state")
	}
	ctx, cancel := s.operationContext(r)
	defer cancel()
	h, err := s.eng.Execute(ctx, agent, in, &engine.ExecuteOptions{SessionID: req.SessionID, UserID: string(principal),
		Tags: req.Tags, Metadata: req.Metadata})
	if err != nil {
		return engineError(err, req.SessionID)
	}
	s.log.Info().Str("event", "session.started").Str("requestId", requestIDFrom(r.Context())).Str("sessionId", h.SessionID).
		Str("runId", h.RunID).Str("agentType", agent.Name).Msg("run started over HTTP")
	writeJSON(w, http.StatusAccepted, RunResponse{SessionID: h.SessionID, RunID: h.RunID, StreamURL: s.streamURL(r, h)})
	return nil
}

// continueCheck tells why Execute would refuse to continue st, in the
// client's terms (the engine's own refusals are not typed).
func continueCheck(st *store.SessionState, agent *helix.Agent, in engine.Input, hasInput bool) *apiError {
	switch {
	case st.AgentType != agent.Name:
		return newError(http.StatusConflict, CodeAgentMismatch,
			"session %q runs agent %q, not %q: continue it with agentType %q", st.SessionID, st.AgentType, agent.Name, st.AgentType)
	case !st.IsRoot():
		return newError(http.StatusConflict, CodeNotContinuable,
			"session %q is a sub-agent session: continue its root session %q instead", st.SessionID, st.RootSessionID)
	case st.Status == helix.SessionActive:
		return newError(http.StatusConflict, CodeAlreadyRunning,
			"session %q is running: wait for it to finish (GET /status, GET /sse) or interrupt it before starting its next turn", st.SessionID)
	case st.Status == helix.SessionInterrupted:
		return newError(http.StatusConflict, CodeNotContinuable,
			"session %q is interrupted: continue it with POST /resume", st.SessionID)
	case st.Status != helix.SessionCompleted:
		return newError(http.StatusConflict, CodeNotContinuable,
			"session %q is %s: only a completed session takes a new turn; start a new session", st.SessionID, st.Status)
	case in.State != nil:
		return newError(http.StatusBadRequest, CodeInvalidRequest,
			"state only seeds a new session: session %q exists; drop state to continue it", st.SessionID)
	case !hasInput:
		return newError(http.StatusBadRequest, CodeInvalidRequest,
			"continuing session %q needs a message (message or messages)", st.SessionID)
	}
	return nil
}

// handleResume continues an interrupted session, or returns the run of a
// session that waits for tool results.
func (s *Server) handleResume(w http.ResponseWriter, r *http.Request) *apiError {
	var req ResumeRequest
	if err := decodeBody(r, w, s.cfg.MaxBodyBytes, &req); err != nil {
		return err
	}
	st, apiErr := s.requestedSession(r, req.SessionID)
	if apiErr != nil {
		return apiErr
	}
	if st.IsRoot() && s.agents[st.AgentType] == nil {
		return s.unservedAgent(st, "resume it on a server configured with that agent")
	}
	if req.Message != "" {
		if err := s.resumeMessageCheck(r.Context(), st); err != nil {
			return err
		}
	}
	ctx, cancel := s.operationContext(r)
	defer cancel()
	h, err := s.eng.Resume(ctx, req.SessionID, &engine.ResumeOptions{Message: req.Message})
	if err != nil {
		return engineError(err, req.SessionID)
	}
	writeJSON(w, http.StatusAccepted, RunResponse{SessionID: h.SessionID, RunID: h.RunID, StreamURL: s.streamURL(r, h)})
	return nil
}

// resumeMessageCheck refuses a resume message while the session waits for
// tool results (the engine refuses it with an untyped error).
func (s *Server) resumeMessageCheck(ctx context.Context, st *store.SessionState) *apiError {
	waits := func() *apiError {
		return newError(http.StatusConflict, CodeAwaitingToolResults,
			"session %q waits for tool results: resume it without a message, and answer the calls listed by GET /status with POST /submit-tool-result", st.SessionID)
	}
	switch st.Status {
	case helix.SessionInterrupted:
		if len(st.SuspendedStep) > 0 {
			return waits()
		}
	case helix.SessionActive:
		run, err := s.eng.CurrentRun(ctx, st.SessionID)
		if errors.Is(err, helix.ErrNotFound) {
			return nil
		} else if err != nil {
			return internalError(err)
		}
		pending, err := s.eng.PendingToolCalls(ctx, st.SessionID)
		if err != nil {
			return internalError(err)
		}
		if run.Status.Suspended() || (!run.Status.Final() && len(pending) > 0) {
			return waits()
		}
	}
	return nil
}

// handleStatus describes a session.
func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) *apiError {
	q := r.URL.Query()
	id := q.Get("sessionId")
	if err := requireSessionID(id); err != nil {
		return err
	}
	withRuns := false
	if v := q.Get("runs"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return newError(http.StatusBadRequest, CodeInvalidRequest, "runs must be true or false, got %q", v)
		}
		withRuns = b
	}
	st, apiErr := s.session(r.Context(), id)
	if apiErr != nil {
		return apiErr
	}
	res, apiErr := s.describe(r.Context(), st, withRuns)
	if apiErr != nil {
		return apiErr
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// describe builds the StatusResponse of a session the caller may see.
func (s *Server) describe(ctx context.Context, st *store.SessionState, withRuns bool) (StatusResponse, *apiError) {
	id := st.SessionID
	res := StatusResponse{SessionID: st.SessionID, AgentType: st.AgentType, ParentSessionID: st.ParentSessionID,
		RootSessionID: st.RootSessionID, Status: helix.SessionStatusToAgentStatus(st.Status), StepCount: st.StepCount,
		MessageCount: st.MessageCount, Output: st.Output, Error: st.Error, PendingToolCalls: []PendingToolCall{},
		CreatedAt: st.CreatedAt, UpdatedAt: st.UpdatedAt}
	run, err := s.eng.CurrentRun(ctx, id)
	switch {
	case errors.Is(err, helix.ErrNotFound):
		run = nil
	case err != nil:
		return res, internalError(err)
	}
	if run != nil {
		res.CurrentRunID = run.RunID
		if st.Status == helix.SessionActive && run.Status.Suspended() {
			res.Status = helix.RunStatusToAgentStatus(run.Status)
		}
		if st.Status == helix.SessionActive && run.Status == helix.RunRunning {
			q, err := s.eng.Queued(ctx, id)
			if err != nil {
				return res, internalError(err)
			}
			if q != nil {
				res.Status, res.Queue = helix.AgentQueued, q
			}
		}
		if run.Status == helix.RunFailed {
			res.ErrorCode = run.ErrorCode
			if redact.Internal(res.ErrorCode) {
				res.Error = redact.RunFailure
			}
		}
	}
	pending, err := s.eng.PendingToolCalls(ctx, id)
	if err != nil {
		return res, internalError(err)
	}
	for _, c := range pending {
		if c.Resolved() {
			continue
		}
		p := PendingToolCall{ToolCallID: c.ToolCallID, ToolName: c.ToolName, Kind: c.Kind, Input: c.Arguments,
			ApprovalID: c.ApprovalID, OwnerSessionID: c.OwnerSessionID, Step: c.Step, CreatedAt: time.UnixMilli(c.CreatedAt).UTC()}
		if c.DeadlineAt != 0 {
			d := time.UnixMilli(c.DeadlineAt).UTC()
			p.Deadline = &d
		}
		res.PendingToolCalls = append(res.PendingToolCalls, p)
	}
	if withRuns {
		runs, err := s.eng.Runs(ctx, id)
		if err != nil {
			return res, internalError(err)
		}
		res.Runs = make([]RunInfo, len(runs))
		for i, r := range runs {
			res.Runs[i] = RunInfo{RunID: r.RunID, Turn: r.Turn, Status: r.Status, StepCount: r.StepCount,
				StartSequence: r.StartSequence, PreviousRunID: r.PreviousRunID, StartedAt: r.StartedAt, CompletedAt: r.CompletedAt}
		}
	}
	return res, nil
}

// handleInterrupt requests the durable interrupt of a running session.
func (s *Server) handleInterrupt(w http.ResponseWriter, r *http.Request) *apiError {
	req, st, apiErr := s.controlRequest(w, r, "interrupted")
	if apiErr != nil {
		return apiErr
	}
	ctx, cancel := s.operationContext(r)
	defer cancel()
	if err := s.eng.Interrupt(ctx, st.SessionID, req.Reason); err != nil {
		return engineError(err, st.SessionID)
	}
	writeJSON(w, http.StatusAccepted, ControlResponse{SessionID: st.SessionID, Status: "interrupt_requested"})
	return nil
}

// handleAbort aborts a running session.
func (s *Server) handleAbort(w http.ResponseWriter, r *http.Request) *apiError {
	req, st, apiErr := s.controlRequest(w, r, "aborted")
	if apiErr != nil {
		return apiErr
	}
	ctx, cancel := s.operationContext(r)
	defer cancel()
	if err := s.eng.Abort(ctx, st.SessionID, req.Reason); err != nil {
		return engineError(err, st.SessionID)
	}
	writeJSON(w, http.StatusOK, ControlResponse{SessionID: st.SessionID, Status: "aborted"})
	return nil
}

// controlRequest decodes and checks the body of /interrupt and /abort: the
// session must exist, be visible and be running.
func (s *Server) controlRequest(w http.ResponseWriter, r *http.Request, verb string) (ControlRequest, *store.SessionState, *apiError) {
	var req ControlRequest
	if err := decodeBody(r, w, s.cfg.MaxBodyBytes, &req); err != nil {
		return req, nil, err
	}
	if err := requireSessionID(req.SessionID); err != nil {
		return req, nil, err
	}
	if err := checkReason(req.Reason); err != nil {
		return req, nil, err
	}
	st, apiErr := s.session(r.Context(), req.SessionID)
	if apiErr != nil {
		return req, nil, apiErr
	}
	if st.Status != helix.SessionActive {
		return req, nil, newError(http.StatusConflict, CodeNotRunning,
			"session %q is %s: only a running session can be %s", st.SessionID, st.Status, verb)
	}
	return req, st, nil
}

// handleSubmit answers a tool call a run waits for.
func (s *Server) handleSubmit(w http.ResponseWriter, r *http.Request) *apiError {
	var req SubmitRequest
	if err := decodeBody(r, w, s.cfg.MaxBodyBytes, &req); err != nil {
		return err
	}
	if err := requireSessionID(req.SessionID); err != nil {
		return err
	}
	if err := checkReason(req.Reason); err != nil {
		return err
	}
	sub := helix.ToolSubmission{Kind: req.Kind, ToolCallID: req.ToolCallID, Result: req.Result, Error: req.Error,
		Approved: req.Approved, Reason: req.Reason}
	if err := sub.Validate(); err != nil {
		return engineError(err, req.SessionID)
	}
	if _, apiErr := s.session(r.Context(), req.SessionID); apiErr != nil {
		return apiErr
	}
	ctx, cancel := s.operationContext(r)
	defer cancel()
	res, err := s.eng.SubmitToolResult(ctx, req.SessionID, sub)
	if err != nil {
		return engineError(err, req.SessionID)
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// agent returns the agent named by a /start request.
func (s *Server) agent(name string) (*helix.Agent, *apiError) {
	if a := s.agents[name]; a != nil {
		return a, nil
	}
	code, msg := CodeUnknownAgent, "unknown agentType "+strconv.Quote(name)
	if name == "" {
		code, msg = CodeInvalidRequest, "agentType is required"
	}
	return nil, &apiError{Status: http.StatusBadRequest, Code: code,
		Message: msg + ": this server runs " + quoteList(s.names), Details: map[string]any{"knownAgents": s.names}}
}

// requestedSession loads the session a request names in its sessionId
// field: 400 when the field is missing or invalid, else as session.
func (s *Server) requestedSession(r *http.Request, id string) (*store.SessionState, *apiError) {
	if err := requireSessionID(id); err != nil {
		return nil, err
	}
	return s.session(r.Context(), id)
}

// unservedAgent is the 409 unknown_agent of a session whose agent this
// server does not run; todo says what to do instead.
func (s *Server) unservedAgent(st *store.SessionState, todo string) *apiError {
	return &apiError{Status: http.StatusConflict, Code: CodeUnknownAgent,
		Message: "session " + strconv.Quote(st.SessionID) + " runs agent " + strconv.Quote(st.AgentType) +
			", which this server does not serve: " + todo,
		Details: map[string]any{"knownAgents": s.names}}
}

// session loads a session the caller may see (see authorize). A missing
// session and another principal's session get the same 404.
func (s *Server) session(ctx context.Context, id string) (*store.SessionState, *apiError) {
	st, err := s.eng.Session(ctx, id)
	if errors.Is(err, helix.ErrNotFound) {
		return nil, sessionNotFound(id)
	} else if err != nil {
		return nil, internalError(err)
	}
	if apiErr := s.authorize(ctx, st); apiErr != nil {
		return nil, apiErr
	}
	return st, nil
}

// authorize lets the caller see st when its root session's UserID is the
// caller's principal; without Authenticate every session is visible. A
// session without a UserID (started outside the server) is visible to no
// authenticated caller.
func (s *Server) authorize(ctx context.Context, st *store.SessionState) *apiError {
	if s.cfg.Authenticate == nil {
		return nil
	}
	owner := st.UserID
	if st.RootSessionID != "" && st.RootSessionID != st.SessionID {
		root, err := s.eng.Session(ctx, st.RootSessionID)
		if errors.Is(err, helix.ErrNotFound) {
			return sessionNotFound(st.SessionID)
		} else if err != nil {
			return internalError(err)
		}
		owner = root.UserID
	}
	if p, _ := PrincipalFromContext(ctx); owner == "" || owner != string(p) {
		return sessionNotFound(st.SessionID)
	}
	return nil
}

// operationContext detaches a state-changing engine call from the request
// (a client that hangs up must not leave it half done) and bounds it.
func (s *Server) operationContext(r *http.Request) (context.Context, context.CancelFunc) {
	// A caller's W3C traceparent: a session started here continues its
	// trace.
	return context.WithTimeout(context.WithoutCancel(traceparent.Extract(r.Context(), r)), s.cfg.OperationTimeout)
}

// streamURL is the GET /sse URL of the handle's run, positioned at the
// run's first chunk, under the prefix the server is mounted at.
func (s *Server) streamURL(r *http.Request, h *engine.Handle) string {
	prefix := ""
	if u, err := url.ParseRequestURI(r.RequestURI); err == nil && strings.HasSuffix(u.Path, r.URL.Path) {
		prefix = strings.TrimSuffix(u.Path, r.URL.Path)
	}
	q := url.Values{"sessionId": {h.SessionID}}
	if run, err := s.eng.RunInfo(r.Context(), h.RunID); err == nil {
		q.Set("fromSequence", strconv.FormatInt(run.StartSequence, 10))
	}
	return prefix + "/sse?" + q.Encode()
}
