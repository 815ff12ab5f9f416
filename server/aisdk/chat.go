package aisdk

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/store"
)

// CodeNoPendingToolCalls answers a continuation (the last message is the
// assistant's) when the chat waits for nothing and has nothing unseen: the
// client should send a user message. Answering with an empty stream instead
// would let a client whose sendAutomaticallyWhen still holds resubmit
// forever.
const CodeNoPendingToolCalls = "no_pending_tool_calls"

// postChat serves POST {prefix}: the useChat request. The last message
// decides: a user message starts a turn (creating the chat's session on
// its first message), an assistant message carries tool answers to submit
// before streaming the continuation.
func (h *Handler) postChat(w http.ResponseWriter, r *http.Request, principal string) *apiError {
	body, e := h.readBody(w, r)
	if e != nil {
		return e
	}
	req, err := ParseChatRequest(body)
	if err != nil {
		return requestErr(err)
	}
	st, err := h.eng.Session(r.Context(), req.ID)
	if errors.Is(err, helix.ErrNotFound) {
		return h.newChat(w, r, principal, req)
	}
	if err != nil {
		return internalError(err)
	}
	if st.UserID != principal || !st.IsRoot() {
		return errSessionNotFound
	}
	agent, ok := h.agents[st.AgentType]
	if !ok || (req.Agent != "" && req.Agent != st.AgentType) {
		return &apiError{Status: http.StatusConflict, Code: CodeAgentMismatch,
			Message: fmt.Sprintf("this chat belongs to agent %q, which this endpoint does not run for it", st.AgentType)}
	}
	if req.last().Role == string(helix.RoleAssistant) {
		return h.continueChat(w, r, st, req)
	}
	return h.nextTurn(w, r, st, agent, req, principal)
}

// newChat creates the chat's session, owned by principal, with its first
// message.
func (h *Handler) newChat(w http.ResponseWriter, r *http.Request, principal string, req *ChatRequest) *apiError {
	agent := h.opts.Agents[0]
	if req.Agent != "" {
		a, ok := h.agents[req.Agent]
		if !ok {
			return &apiError{Status: http.StatusBadRequest, Code: CodeUnknownAgent, Message: fmt.Sprintf("no agent named %q", req.Agent)}
		}
		agent = a
	}
	if req.last().Role != string(helix.RoleUser) {
		return errSessionNotFound // tool answers for a chat that does not exist
	}
	text, err := userText(req.last())
	if err != nil {
		return requestErr(err)
	}
	// An initial state makes Execute create-only: were the ID taken since
	// the lookup (by anyone), it refuses instead of continuing that
	// session.
	state := agent.InitialState
	if len(state) == 0 {
		state = json.RawMessage("{}")
	}
	ctx, cancel := h.operationContext(r)
	defer cancel()
	hd, err := h.eng.Execute(ctx, agent, engine.Input{Message: text, State: state},
		&engine.ExecuteOptions{SessionID: req.ID, UserID: principal})
	if err != nil {
		if e := executeErr(err); e.cause == nil {
			return e
		}
		if _, lookup := h.eng.Session(ctx, req.ID); lookup == nil {
			return errAlreadyRunning // created concurrently
		}
		return internalError(err)
	}
	return h.streamHandle(w, r, hd)
}

// executeErr maps an error of engine.Execute: its refusals are written for
// the caller and carry a code; anything else is internal.
func executeErr(err error) *apiError {
	if _, ok := errors.AsType[*helix.AgentAlreadyRunningError](err); ok {
		return errAlreadyRunning
	}
	refused, ok := errors.AsType[*engine.RefusedError](err)
	if !ok {
		return internalError(err)
	}
	switch refused.Code {
	case engine.RefusedOwnerMismatch:
		return errSessionNotFound // another principal's chat does not exist for this one
	case engine.RefusedSessionExists:
		return errAlreadyRunning
	case engine.RefusedNotContinuable:
		return &apiError{Status: http.StatusConflict, Code: CodeNotContinuable, Message: refused.Message}
	case engine.RefusedAgentMismatch:
		return &apiError{Status: http.StatusConflict, Code: CodeAgentMismatch, Message: refused.Message}
	case engine.RefusedAwaitingToolResults:
		return &apiError{Status: http.StatusConflict, Code: CodeAwaitingToolResults, Message: refused.Message}
	case engine.RefusedNotLaunched:
		return errShuttingDown
	}
	// reserved_session_id, message_required, state_not_allowed, and any
	// new code: the request cannot be served as it is.
	return &apiError{Status: http.StatusBadRequest, Code: CodeInvalidRequest, Message: refused.Message}
}

var errAlreadyRunning = &apiError{Status: http.StatusConflict, Code: CodeAlreadyRunning,
	Message: "the chat is answering a message: wait for it, or reconnect to its stream"}

// nextTurn starts the next turn of principal's existing chat with its new
// user message. The engine checks the owner again in the transaction that
// continues the session (ExecuteOptions.UserID), so the check of postChat
// cannot be raced.
func (h *Handler) nextTurn(w http.ResponseWriter, r *http.Request, st *store.SessionState, agent *helix.Agent, req *ChatRequest, principal string) *apiError {
	text, err := userText(req.last())
	if err != nil {
		return requestErr(err)
	}
	switch st.Status {
	case helix.SessionCompleted:
	case helix.SessionActive:
		waiting, e := h.unanswered(r, st)
		if e != nil {
			return e
		}
		if len(waiting) > 0 {
			return awaitingToolResults(waiting)
		}
		return errAlreadyRunning
	default:
		return &apiError{Status: http.StatusConflict, Code: CodeNotContinuable,
			Message: fmt.Sprintf("the chat's session is %s: resume or retry it before sending a message", st.Status)}
	}
	ctx, cancel := h.operationContext(r)
	defer cancel()
	hd, err := h.eng.Execute(ctx, agent, engine.Input{Message: text}, &engine.ExecuteOptions{SessionID: st.SessionID, UserID: principal})
	if err != nil {
		return executeErr(err)
	}
	return h.streamHandle(w, r, hd)
}

// streamHandle streams a run that was just started, from its beginning.
func (h *Handler) streamHandle(w http.ResponseWriter, r *http.Request, hd *engine.Handle) *apiError {
	st, err := h.eng.Session(r.Context(), hd.SessionID)
	if err != nil {
		return internalError(err)
	}
	run, err := h.eng.RunInfo(r.Context(), hd.RunID)
	if err != nil {
		return internalError(err)
	}
	return h.streamRun(w, r, streamSpec{st: st, run: run, from: run.StartSequence, messageID: run.RunID})
}

// continueChat submits the tool answers the assistant message carries for
// calls the chat waits for, then streams the continuation of the run from
// where the client's last response ended.
func (h *Handler) continueChat(w http.ResponseWriter, r *http.Request, st *store.SessionState, req *ChatRequest) *apiError {
	ctx := r.Context()
	last := req.last()
	answers := toolAnswers(last)
	pending, err := h.eng.PendingToolCalls(ctx, st.SessionID)
	if err != nil {
		return internalError(err)
	}
	run, err := h.eng.CurrentRun(ctx, st.SessionID)
	if err != nil {
		return internalError(err)
	}
	// The position before any submission: while the run waits, nothing
	// is written after it.
	info, err := h.eng.StreamInfo(ctx, st.SessionID)
	if err != nil {
		return internalError(err)
	}
	latest := info.LatestSequence
	// Every answer is checked against its call's kind before any is
	// submitted; the engine's own rejection of one (a result its schema
	// refuses) stops at it, and the answers before it stand: they are
	// durable, and a retry skips them.
	var waiting []string
	var subs []helix.ToolSubmission
	for _, p := range pending {
		if p.Resolved() {
			continue
		}
		a, ok := answers[p.ToolCallID]
		if !ok {
			waiting = append(waiting, p.ToolCallID)
			continue
		}
		sub, ok := a.submission(p.Kind)
		if !ok {
			want := "an output or an error (addToolOutput)"
			if p.Kind == helix.SubmissionApprovalResponse {
				want = "an approval decision (addToolApprovalResponse)"
			}
			return &apiError{Status: http.StatusBadRequest, Code: helix.SubmissionKindMismatch,
				Message: fmt.Sprintf("tool call %s waits for %s", p.ToolCallID, want), Details: map[string]any{"toolCallId": p.ToolCallID}}
		}
		subs = append(subs, sub)
	}
	opCtx, cancel := h.operationContext(r)
	defer cancel()
	for _, sub := range subs {
		if _, err := h.eng.SubmitToolResult(opCtx, st.SessionID, sub); err != nil {
			return submissionErr(err)
		}
	}
	submitted := len(subs)
	if submitted == 0 && len(waiting) > 0 {
		return awaitingToolResults(waiting)
	}
	from := latest
	if hnt, ok := hint(last); ok && hnt.RunID == run.RunID && hnt.Sequence != nil &&
		*hnt.Sequence >= run.StartSequence && *hnt.Sequence <= latest {
		from = *hnt.Sequence
	}
	if submitted == 0 && run.Status.Final() && from >= latest {
		return &apiError{Status: http.StatusConflict, Code: CodeNoPendingToolCalls,
			Message: "the chat waits for no tool result or approval: send a user message"}
	}
	return h.streamRun(w, r, streamSpec{st: st, run: run, from: from, messageID: last.ID})
}

// unanswered lists the calls a chat waits for that have no answer yet.
func (h *Handler) unanswered(r *http.Request, st *store.SessionState) ([]string, *apiError) {
	pending, err := h.eng.PendingToolCalls(r.Context(), st.SessionID)
	if err != nil {
		return nil, internalError(err)
	}
	var ids []string
	for _, p := range pending {
		if !p.Resolved() {
			ids = append(ids, p.ToolCallID)
		}
	}
	return ids, nil
}

func awaitingToolResults(ids []string) *apiError {
	return &apiError{Status: http.StatusConflict, Code: CodeAwaitingToolResults,
		Message: "the chat waits for tool results or approvals: answer them (addToolOutput, addToolApprovalResponse) first",
		Details: map[string]any{"toolCallIds": ids}}
}

// getStream serves GET {prefix}/{id}/stream: the reconnect of useChat's
// resumeStream. With no resume header it replays the active response from
// its beginning (the AI SDK's default, resumeStreamIsReplay); with
// X-Resume-From-Sequence or Last-Event-ID it continues after that
// sequence. 204 when the chat has no active response (its latest run
// ended), unless a resume position shows the client missed its end.
func (h *Handler) getStream(w http.ResponseWriter, r *http.Request, principal, id string) *apiError {
	st, e := h.ownedSession(r, principal, id)
	if e != nil {
		return e
	}
	from, hasFrom, err := resumePosition(r)
	if err != nil {
		return &apiError{Status: http.StatusBadRequest, Code: CodeInvalidResume, Message: err.Error()}
	}
	run, err := h.eng.CurrentRun(r.Context(), st.SessionID)
	if errors.Is(err, helix.ErrNotFound) {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	if err != nil {
		return internalError(err)
	}
	spec := streamSpec{st: st, run: run, from: run.StartSequence, messageID: run.RunID}
	if hasFrom {
		spec.from = max(from, run.StartSequence)
	}
	if run.Status.Final() {
		// Nothing is active. A client that says what it has still gets
		// what it missed (the run may have ended between its submission
		// and this reconnect).
		var rest []store.StoredChunk
		if hasFrom {
			if rest, err = h.eng.StreamChunks(r.Context(), st.SessionID, spec.from, 1); err != nil {
				return internalError(err)
			}
		}
		if len(rest) == 0 {
			w.WriteHeader(http.StatusNoContent)
			return nil
		}
	}
	if m := r.Header.Get(HeaderExistingMessageID); m != "" {
		if len(m) > 256 || !printable(m) {
			return &apiError{Status: http.StatusBadRequest, Code: CodeInvalidRequest,
				Message: HeaderExistingMessageID + " must be at most 256 printable ASCII characters"}
		}
		spec.messageID = m
	}
	return h.streamRun(w, r, spec)
}

// resumePosition reads X-Resume-From-Sequence, else Last-Event-ID: the last
// sequence the client has.
func resumePosition(r *http.Request) (int64, bool, error) {
	name, v := HeaderResumeFromSequence, r.Header.Get(HeaderResumeFromSequence)
	if v == "" {
		name, v = "Last-Event-ID", r.Header.Get("Last-Event-ID")
	}
	if v == "" {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 {
		return 0, false, fmt.Errorf("%s must be a stream sequence (a non-negative integer), got %q", name, v)
	}
	return n, true, nil
}

func printable(s string) bool {
	for i := range len(s) {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}
