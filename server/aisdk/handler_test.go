package aisdk_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/internal/aisdktest"
	"github.com/helix-agents/helix-dbos/server/aisdk"
)

func TestNewHandlerFailsClosed(t *testing.T) {
	t.Parallel()
	a := &helix.Agent{Name: "a", Model: helix.ModelFunc(nil)}
	_, err := aisdk.NewHandler(nil, aisdk.Options{Agents: []*helix.Agent{a}})
	require.ErrorContains(t, err, "Authenticate is nil")
	_, err = aisdk.NewHandler(nil, aisdk.Options{AllowUnauthenticated: true})
	require.ErrorContains(t, err, "Agents is empty")
	_, err = aisdk.NewHandler(nil, aisdk.Options{AllowUnauthenticated: true, Agents: []*helix.Agent{a, {Name: "a"}}})
	require.ErrorContains(t, err, `two agents named "a"`)
	_, err = aisdk.NewHandler(nil, aisdk.Options{AllowUnauthenticated: true, Agents: []*helix.Agent{a}})
	require.ErrorContains(t, err, "engine is nil")
}

// A first message creates the chat's session for its principal and streams
// the answer: a step with text and a server tool (providerExecuted, its
// output), a second step with text, finish with the run's position. A
// follow-up message continues the completed session, and once the turn is
// over there is nothing to reconnect to (204).
func TestChatTurnAndFollowUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	evs := readAll(t, e.chat("alice", "chat-1", userMsg("u1", "Weather in Paris?")))
	require.Equal(t, []string{"start", "start-step", "text-start", "text-delta", "text-delta", "text-delta", "text-end",
		"tool-input-available", "tool-output-available", "finish-step",
		"start-step", "text-start", "text-delta", "text-delta", "text-delta", "text-delta", "text-delta", "text-end", "finish-step", "finish"},
		types(evs))
	start := evs[0].chunk
	runID := start["messageId"].(string)
	require.Equal(t, map[string]any{"sessionId": "chat-1", "runId": runID}, start["messageMetadata"].(map[string]any)["helix"])
	require.Equal(t, "Let me check.It is {\"forecast\":\"sunny in Paris\"}", text(evs))
	call := find(evs, "tool-input-available")[0]
	require.Equal(t, map[string]any{"type": "tool-input-available", "toolCallId": "w1", "toolName": "get_weather",
		"input": map[string]any{"city": "Paris"}, "providerExecuted": true}, call)
	require.Equal(t, map[string]any{"forecast": "sunny in Paris"}, find(evs, "tool-output-available")[0]["output"])
	reason, meta := finish(t, evs)
	require.Equal(t, "stop", reason)
	require.Equal(t, "completed", meta["status"])
	require.Equal(t, runID, meta["runId"])
	for _, ev := range evs[1 : len(evs)-1] {
		if ev.chunk["type"] == "tool-input-available" || ev.chunk["type"] == "finish-step" || ev.chunk["type"] == "tool-output-available" {
			require.Positive(t, ev.id, "events of stored chunks carry their sequence: %v", ev.chunk)
		}
	}

	st, err := e.eng.Session(t.Context(), "chat-1")
	require.NoError(t, err)
	require.Equal(t, "alice", st.UserID)
	require.Equal(t, "weather", st.AgentType)

	first := assistant(t, evs)
	evs = readAll(t, e.chat("alice", "chat-1", userMsg("u1", "Weather in Paris?"), first, userMsg("u2", "Thanks!")))
	require.Equal(t, "You are welcome.", text(evs))
	require.NotEqual(t, runID, evs[0].chunk["messageId"], "a new turn is a new assistant message")
	runs, err := e.eng.Runs(t.Context(), "chat-1")
	require.NoError(t, err)
	require.Len(t, runs, 2)

	resp := e.do(http.MethodGet, "/chat/chat-1/stream", "alice", nil, nil)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
}

// A client-executed tool ends the response with finish "tool-calls" while
// the run waits; the continuation request (the assistant message with the
// tool part's output) submits it and streams the rest into the same
// message. A user message meanwhile, a continuation without the answer,
// an answer of the wrong kind or one the tool's schema rejects are
// refused; once the turn is over, a repeated continuation has nothing to
// continue.
func TestChatClientToolContinuation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	req := aisdk.ChatRequest{ID: "chat-2", Agent: "asker", Messages: []aisdk.UIMessage{userMsg("u1", "Ask me")}}
	evs := readAll(t, e.do(http.MethodPost, "/chat", "alice", req, nil))
	require.Equal(t, []string{"start", "start-step", "tool-input-available", "finish"}, types(evs))
	call := find(evs, "tool-input-available")[0]
	require.Equal(t, map[string]any{"type": "tool-input-available", "toolCallId": "ask0", "toolName": "ask_user",
		"input": map[string]any{"question": "favourite colour?"}}, call, "no providerExecuted: the client runs it")
	reason, meta := finish(t, evs)
	require.Equal(t, "tool-calls", reason)
	require.Equal(t, "suspended_client_tool", meta["status"])

	user := userMsg("u1", "Ask me")
	code, _ := apiErr(t, e.chat("alice", "chat-2", user, assistant(t, evs), userMsg("u2", "hello?")), http.StatusConflict)
	require.Equal(t, "awaiting_tool_results", code)
	pending := aisdk.UIPart{Type: "tool-ask_user", ToolCallID: "ask0", State: "input-available", Input: json.RawMessage(`{"question":"favourite colour?"}`)}
	code, body := apiErr(t, e.chat("alice", "chat-2", user, assistant(t, evs, pending)), http.StatusConflict)
	require.Equal(t, "awaiting_tool_results", code)
	require.Equal(t, []any{"ask0"}, body["details"].(map[string]any)["toolCallIds"])
	wrongKind := pending
	wrongKind.State, wrongKind.Approval = "approval-responded", &aisdk.UIApproval{ID: "x", Approved: new(true)}
	code, _ = apiErr(t, e.chat("alice", "chat-2", user, assistant(t, evs, wrongKind)), http.StatusBadRequest)
	require.Equal(t, "kind_mismatch", code)
	invalid := pending
	invalid.State, invalid.Output = "output-available", json.RawMessage(`{"answer":""}`)
	code, body = apiErr(t, e.chat("alice", "chat-2", user, assistant(t, evs, invalid)), http.StatusBadRequest)
	require.Equal(t, "invalid_result", code)
	require.NotEmpty(t, body["details"].(map[string]any)["violations"])

	answered := pending
	answered.State, answered.Output = "output-available", json.RawMessage(`{"answer":"blue"}`)
	msg := assistant(t, evs, aisdk.UIPart{Type: "step-start"}, answered)
	more := readAll(t, e.chat("alice", "chat-2", user, msg))
	require.Equal(t, msg.ID, more[0].chunk["messageId"], "the continuation writes into the client's assistant message")
	require.Equal(t, []string{"start", "tool-output-available", "finish-step", "start-step", "text-start", "text-delta", "text-delta", "text-delta", "text-end", "finish-step", "finish"}, types(more))
	require.Equal(t, map[string]any{"answer": "blue"}, find(more, "tool-output-available")[0]["output"])
	require.Equal(t, `You said {"answer":"blue"}`, text(more))
	reason, _ = finish(t, more)
	require.Equal(t, "stop", reason)

	code, _ = apiErr(t, e.chat("alice", "chat-2", user, assistant(t, more, answered)), http.StatusConflict)
	require.Equal(t, "no_pending_tool_calls", code)
}

// An approval-gated call: the response shows the call and the approval
// request and ends while the run waits; a reconnect replays the same; the
// explicit route approves; a reconnect from the last sequence the client
// has streams only the rest (the tool's output and the final text), even
// when the run has ended meanwhile. Submitting again is reported, not
// delivered.
func TestChatApprovalThroughSubmitRoute(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	req := aisdk.ChatRequest{ID: "chat-3", Agent: "banker", Messages: []aisdk.UIMessage{userMsg("u1", "Pay bob")}}
	evs := readAll(t, e.do(http.MethodPost, "/chat", "alice", req, nil))
	require.Equal(t, []string{"start", "start-step", "text-start", "text-delta", "text-delta", "text-delta", "text-end",
		"tool-input-available", "tool-approval-request", "finish"}, types(evs))
	runID := evs[0].chunk["messageId"].(string)
	require.Equal(t, map[string]any{"type": "tool-approval-request", "toolCallId": "t1", "approvalId": runID + "::t1"},
		find(evs, "tool-approval-request")[0])
	require.Equal(t, true, find(evs, "tool-input-available")[0]["providerExecuted"])

	replay := readAll(t, e.do(http.MethodGet, "/chat/chat-3/stream", "alice", nil, nil))
	require.Equal(t, types(evs), types(replay), "a reconnect without position replays the waiting run")
	_, meta := finish(t, evs)
	seq := int64(meta["sequence"].(float64))

	resp := e.do(http.MethodPost, "/chat/chat-3/submit-tool-result", "alice", map[string]any{"toolCallId": "t1", "approved": true, "reason": "fine"}, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var sr helix.SubmitResult
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&sr))
	require.Equal(t, helix.SubmitResult{ToolCallID: "t1", OwnerSessionID: "chat-3", RunID: runID, ToolName: "transfer", Kind: helix.SubmissionApprovalResponse}, sr)

	h, err := e.eng.Run(t.Context(), "chat-3", runID)
	require.NoError(t, err)
	res, err := h.Await(t.Context())
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, res.Status)

	rest := readAll(t, e.do(http.MethodGet, "/chat/chat-3/stream", "alice", nil,
		http.Header{"Last-Event-Id": {strconv.FormatInt(seq, 10)}, "X-Existing-Message-Id": {"msg-from-client"}}))
	require.Equal(t, "msg-from-client", rest[0].chunk["messageId"])
	require.Equal(t, []string{"start", "tool-output-available", "finish-step", "start-step", "text-start"}, types(rest)[:5])
	require.Equal(t, map[string]any{"sent": float64(5), "to": "bob"}, find(rest, "tool-output-available")[0]["output"])
	require.Equal(t, `Result: {"sent":5,"to":"bob"}`, text(rest))
	require.Empty(t, find(rest, "tool-input-available"), "nothing the client had is sent again")
	reason, _ := finish(t, rest)
	require.Equal(t, "stop", reason)

	resp = e.do(http.MethodGet, "/chat/chat-3/stream", "alice", nil, nil)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	_, meta = finish(t, rest)
	resp = e.do(http.MethodGet, "/chat/chat-3/stream", "alice", nil,
		http.Header{"X-Resume-From-Sequence": {strconv.FormatInt(int64(meta["sequence"].(float64)), 10)}})
	require.Equal(t, http.StatusNoContent, resp.StatusCode, "a client with everything has nothing to resume")

	resp = e.do(http.MethodPost, "/chat/chat-3/submit-tool-result", "alice", map[string]any{"toolCallId": "t1", "approved": false}, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&sr))
	require.True(t, sr.AlreadyCompleted)
}

// A denial through the continuation request (addToolApprovalResponse with
// approved false): the tool never runs and its part ends denied. The
// message carries no metadata here: the continuation starts where the run
// waited.
func TestChatApprovalDeniedThroughContinuation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	req := aisdk.ChatRequest{ID: "chat-4", Agent: "banker", Messages: []aisdk.UIMessage{userMsg("u1", "Pay bob")}}
	evs := readAll(t, e.do(http.MethodPost, "/chat", "alice", req, nil))
	approvalID := find(evs, "tool-approval-request")[0]["approvalId"].(string)
	denied := aisdk.UIPart{Type: "tool-transfer", ToolCallID: "t1", State: "approval-responded", ProviderExecuted: new(true),
		Input: json.RawMessage(`{"to":"bob","amount":5}`), Approval: &aisdk.UIApproval{ID: approvalID, Approved: new(false), Reason: "no"}}
	msg := assistant(t, evs, denied)
	msg.Metadata = nil // without the position the server stamped, the continuation starts at the stream's end
	more := readAll(t, e.chat("alice", "chat-4", userMsg("u1", "Pay bob"), msg))
	require.Equal(t, []string{"start", "tool-output-denied", "finish-step", "start-step"}, types(more)[:4])
	require.Equal(t, []map[string]any{{"type": "tool-output-denied", "toolCallId": "t1"}}, find(more, "tool-output-denied"))
	require.Empty(t, find(more, "tool-output-available"))
	require.Contains(t, text(more), helix.NotApprovedMessage)
}

// Every route needs a principal, and a chat is visible only to its owner:
// another principal gets 404 wherever the chat ID appears.
func TestChatAuthAndOwnership(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, r := range []struct{ method, path string }{
		{http.MethodPost, "/chat"}, {http.MethodGet, "/chat/x/stream"}, {http.MethodPost, "/chat/x/submit-tool-result"}, {http.MethodGet, "/chat/nope"},
	} {
		code, _ := apiErr(t, e.do(r.method, r.path, "", `{}`, nil), http.StatusUnauthorized)
		require.Equal(t, "unauthenticated", code, r.path)
	}
	evs := readAll(t, e.chat("alice", "chat-5", userMsg("u1", "Weather?")))
	code, _ := apiErr(t, e.chat("bob", "chat-5", userMsg("u1", "Weather?"), assistant(t, evs), userMsg("u2", "mine now")), http.StatusNotFound)
	require.Equal(t, "session_not_found", code)
	code, _ = apiErr(t, e.do(http.MethodGet, "/chat/chat-5/stream", "bob", nil, nil), http.StatusNotFound)
	require.Equal(t, "session_not_found", code)
	code, _ = apiErr(t, e.do(http.MethodPost, "/chat/chat-5/submit-tool-result", "bob", map[string]any{"toolCallId": "w1", "output": 1}, nil), http.StatusNotFound)
	require.Equal(t, "session_not_found", code)
	msgs, err := e.eng.Messages(t.Context(), "chat-5", nil)
	require.NoError(t, err)
	require.Len(t, msgs.Messages, 4, "bob's message was not added")

	// A chat that does not exist: 404 too.
	code, _ = apiErr(t, e.do(http.MethodGet, "/chat/missing/stream", "alice", nil, nil), http.StatusNotFound)
	require.Equal(t, "session_not_found", code)

	// A sub-agent's session of alice's chat: not a chat, for bob nor for
	// alice (its conversation is the root's), on every route, and nothing
	// reaches it.
	evs = readAll(t, e.do(http.MethodPost, "/chat", "alice", aisdk.ChatRequest{ID: "chat-5b", Agent: "lead",
		Messages: []aisdk.UIMessage{userMsg("u1", "check it")}}, nil))
	sub := find(evs, "data-subagent")[0]["data"].(map[string]any)["sessionId"].(string)
	st, err := e.eng.Session(t.Context(), sub)
	require.NoError(t, err, "the data-subagent part names the sub-agent's session")
	require.False(t, st.IsRoot())
	for _, user := range []string{"bob", "alice"} {
		code, _ = apiErr(t, e.do(http.MethodGet, "/chat/"+sub+"/stream", user, nil, nil), http.StatusNotFound)
		require.Equal(t, "session_not_found", code, user)
		code, _ = apiErr(t, e.do(http.MethodPost, "/chat/"+sub+"/submit-tool-result", user,
			map[string]any{"toolCallId": "sub-ask", "output": map[string]any{"answer": "yes"}}, nil), http.StatusNotFound)
		require.Equal(t, "session_not_found", code, user)
		code, _ = apiErr(t, e.chat(user, sub, userMsg("u1", "take over")), http.StatusNotFound)
		require.Equal(t, "session_not_found", code, user)
		code, _ = apiErr(t, e.chat(user, sub, userMsg("u1", "check it"), assistant(t, evs, aisdk.UIPart{Type: "tool-ask_user",
			ToolCallID: "sub-ask", State: "output-available", Output: json.RawMessage(`{"answer":"yes"}`)})), http.StatusNotFound)
		require.Equal(t, "session_not_found", code, user)
	}
	pending, err := e.eng.PendingToolCalls(t.Context(), "chat-5b")
	require.NoError(t, err)
	require.Len(t, pending, 1)
	require.False(t, pending[0].Resolved(), "no answer reached the sub-agent's call")
}

// An empty principal is refused (401), and so is aisdk.ServerPrincipal
// outside package server: the handler cannot tell who the caller is.
func TestChatRefusesUnknownPrincipal(t *testing.T) {
	t.Parallel()
	for name, auth := range map[string]func(*http.Request) (string, error){
		"empty principal": func(*http.Request) (string, error) { return "", nil },
		"ServerPrincipal": aisdk.ServerPrincipal,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, h := aisdktest.NewHandler(t, func(o *aisdk.Options) { o.Authenticate = auth }, aisdktest.WeatherAgent())
			e := &env{t: t, url: aisdktest.Serve(t, h).URL}
			code, _ := apiErr(t, e.chat("", "c1", userMsg("u1", "Weather?")), http.StatusUnauthorized)
			require.Equal(t, "unauthenticated", code)
		})
	}
}

// Malformed requests are refused with stable codes before anything runs.
func TestChatValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	t.Cleanup(func() { // after the parallel subtests
		_, err := e.eng.Session(context.Background(), "v1")
		require.ErrorIs(t, err, helix.ErrNotFound, "no refused request created the chat")
	})
	long := strings.Repeat("x", 5<<20)
	for _, tc := range []struct {
		name, method, path string
		body               any
		header             http.Header
		status             int
		code               string
	}{
		{"not JSON", "POST", "/chat", `{"id":`, nil, 400, "invalid_json"},
		{"two values", "POST", "/chat", `{"id":"a"} {}`, nil, 400, "invalid_json"},
		{"wrong type", "POST", "/chat", `{"id":7}`, nil, 400, "invalid_request"},
		{"bad id", "POST", "/chat", aisdk.ChatRequest{ID: "a/b", Messages: []aisdk.UIMessage{userMsg("u", "hi")}}, nil, 400, "invalid_request"},
		{"no messages", "POST", "/chat", aisdk.ChatRequest{ID: "v1"}, nil, 400, "invalid_request"},
		{"regenerate", "POST", "/chat", aisdk.ChatRequest{ID: "v1", Trigger: "regenerate-message", Messages: []aisdk.UIMessage{userMsg("u", "hi")}}, nil, 400, "invalid_request"},
		{"system last", "POST", "/chat", aisdk.ChatRequest{ID: "v1", Messages: []aisdk.UIMessage{{ID: "s", Role: "system"}}}, nil, 400, "invalid_request"},
		{"no text", "POST", "/chat", aisdk.ChatRequest{ID: "v1", Messages: []aisdk.UIMessage{{ID: "u", Role: "user", Parts: []aisdk.UIPart{{Type: "text", Text: "  "}}}}}, nil, 400, "invalid_request"},
		{"file part", "POST", "/chat", aisdk.ChatRequest{ID: "v1", Messages: []aisdk.UIMessage{{ID: "u", Role: "user", Parts: []aisdk.UIPart{{Type: "text", Text: "see"}, {Type: "file"}}}}}, nil, 400, "invalid_request"},
		{"unknown agent", "POST", "/chat", aisdk.ChatRequest{ID: "v1", Agent: "nobody", Messages: []aisdk.UIMessage{userMsg("u", "hi")}}, nil, 400, "unknown_agent"},
		{"answers for a missing chat", "POST", "/chat", aisdk.ChatRequest{ID: "v1", Messages: []aisdk.UIMessage{{ID: "a", Role: "assistant"}}}, nil, 404, "session_not_found"},
		{"too large", "POST", "/chat", `{"id":"v1","messages":[],"x":"` + long + `"}`, nil, 413, "body_too_large"},
		{"wrong method", "GET", "/chat", nil, nil, 405, "method_not_allowed"},
		{"wrong method stream", "POST", "/chat/v1/stream", nil, nil, 405, "method_not_allowed"},
		{"unknown route", "GET", "/chat/v1/other", nil, nil, 404, "not_found"},
		{"too deep", "GET", "/chat/v1/stream/x", nil, nil, 404, "not_found"},
		{"submit no id", "POST", "/chat/v1/submit-tool-result", map[string]any{"output": 1}, nil, 400, "invalid_request"},
		{"submit two answers", "POST", "/chat/v1/submit-tool-result", map[string]any{"toolCallId": "c", "output": 1, "approved": true}, nil, 400, "invalid_request"},
		{"submit nothing", "POST", "/chat/v1/submit-tool-result", map[string]any{"toolCallId": "c"}, nil, 400, "invalid_request"},
		{"no content type", "POST", "/chat", aisdk.ChatRequest{ID: "v1", Messages: []aisdk.UIMessage{userMsg("u", "hi")}}, http.Header{"Content-Type": {""}}, 415, "unsupported_media_type"},
		{"text/plain", "POST", "/chat", aisdk.ChatRequest{ID: "v1", Messages: []aisdk.UIMessage{userMsg("u", "hi")}}, http.Header{"Content-Type": {"text/plain"}}, 415, "unsupported_media_type"},
		{"form", "POST", "/chat/v1/submit-tool-result", map[string]any{"toolCallId": "c", "output": 1}, http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, 415, "unsupported_media_type"},
		{"json with charset", "POST", "/chat/v1/submit-tool-result", map[string]any{"output": 1}, http.Header{"Content-Type": {"application/json; charset=utf-8"}}, 400, "invalid_request"},
		{"NUL in text", "POST", "/chat", aisdk.ChatRequest{ID: "v1", Messages: []aisdk.UIMessage{userMsg("u", "a\x00b")}}, nil, 400, "invalid_request"},
		{"NUL in output", "POST", "/chat/v1/submit-tool-result", `{"toolCallId":"c","output":{"a":"\u0000"}}`, nil, 400, "invalid_request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, _ := apiErr(t, e.do(tc.method, tc.path, "alice", tc.body, tc.header), tc.status)
			require.Equal(t, tc.code, code)
		})
	}
}

// Refusals on existing chats: an agent switch, a bad resume position, an
// unknown tool call, answers of the wrong kind or shape, a new message
// while the chat waits.
func TestChatValidationOnExistingChats(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	evs := readAll(t, e.chat("alice", "v2", userMsg("u", "Weather?")))
	code, _ := apiErr(t, e.do(http.MethodPost, "/chat", "alice", aisdk.ChatRequest{ID: "v2", Agent: "banker",
		Messages: []aisdk.UIMessage{userMsg("u", "Weather?"), assistant(t, evs), userMsg("u2", "pay")}}, nil), http.StatusConflict)
	require.Equal(t, "agent_mismatch", code)
	readAll(t, e.do(http.MethodPost, "/chat", "alice", aisdk.ChatRequest{ID: "v3", Agent: "asker", Messages: []aisdk.UIMessage{userMsg("u", "ask")}}, nil))
	code, _ = apiErr(t, e.do(http.MethodGet, "/chat/v3/stream", "alice", nil, http.Header{"X-Resume-From-Sequence": {"-1"}}), http.StatusBadRequest)
	require.Equal(t, "invalid_resume_position", code)
	code, _ = apiErr(t, e.do(http.MethodPost, "/chat/v3/submit-tool-result", "alice", map[string]any{"toolCallId": "nope", "output": 1}, nil), http.StatusNotFound)
	require.Equal(t, "unknown_tool_call", code)
	code, _ = apiErr(t, e.do(http.MethodPost, "/chat/v3/submit-tool-result", "alice", map[string]any{"toolCallId": "ask0", "approved": true}, nil), http.StatusBadRequest)
	require.Equal(t, "kind_mismatch", code)
	code, body := apiErr(t, e.do(http.MethodPost, "/chat/v3/submit-tool-result", "alice", `{"toolCallId":"ask0","output":null}`, nil), http.StatusBadRequest)
	require.Equal(t, "invalid_result", code, "an explicit null output is a result, checked against the tool's schema")
	require.Equal(t, "ask0", body["details"].(map[string]any)["toolCallId"])
	code, _ = apiErr(t, e.do(http.MethodPost, "/chat/v3/submit-tool-result", "alice", map[string]any{"toolCallId": "ask0", "error": "x", "reason": "y"}, nil), http.StatusBadRequest)
	require.Equal(t, "invalid_request", code)
	code, _ = apiErr(t, e.chat("alice", "v3", userMsg("u", "ask"), aisdk.UIMessage{ID: "m", Role: "assistant"}, userMsg("u2", "again")), http.StatusConflict)
	require.Equal(t, "awaiting_tool_results", code)
}

// A client that loses its response mid-answer reconnects with the last
// sequence it has and gets exactly the rest: the text continues in a new
// part of the same message, nothing is repeated.
func TestChatResumeMidRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	resp := e.do(http.MethodPost, "/chat", "alice", aisdk.ChatRequest{ID: "chat-6", Agent: "slow", Messages: []aisdk.UIMessage{userMsg("u", "count")}}, nil)
	s := newSSE(t, resp)
	var first []event
	var seq int64
	for len(find(first, "text-delta")) < 3 {
		ev, ok := s.next()
		require.True(t, ok)
		first = append(first, ev)
		seq = max(seq, ev.id)
	}
	require.NoError(t, resp.Body.Close()) // the connection drops
	messageID := first[0].chunk["messageId"].(string)

	rest := readAll(t, e.do(http.MethodGet, "/chat/chat-6/stream", "alice", nil,
		http.Header{"X-Resume-From-Sequence": {strconv.FormatInt(seq, 10)}, "X-Existing-Message-Id": {messageID}}))
	require.Equal(t, messageID, rest[0].chunk["messageId"])
	require.Equal(t, "text-start", rest[1].chunk["type"], "the open text part is opened again")
	require.Equal(t, strings.Join(slowDeltas, ""), text(first)+text(rest))
	reason, meta := finish(t, rest)
	require.Equal(t, "stop", reason)
	require.Equal(t, "completed", meta["status"])
}

// A sub-agent's client tool: the sub-agent's own text stays inside it, its
// call is shown to the client, the response ends while the conversation
// waits for it, and the continuation (answered on the root chat, routed to
// the sub-agent) carries the sub-agent's result and the lead's answer.
func TestChatSubAgentClientTool(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	evs := readAll(t, e.do(http.MethodPost, "/chat", "alice", aisdk.ChatRequest{ID: "chat-7", Agent: "lead", Messages: []aisdk.UIMessage{userMsg("u", "check it")}}, nil))
	require.Equal(t, []string{"start", "start-step", "tool-input-available", "data-subagent", "tool-input-available", "finish"}, types(evs))
	calls := find(evs, "tool-input-available")
	require.Equal(t, "subagent__checker", calls[0]["toolName"])
	require.Equal(t, true, calls[0]["providerExecuted"])
	require.Equal(t, map[string]any{"type": "tool-input-available", "toolCallId": "sub-ask", "toolName": "ask_user",
		"input": map[string]any{"question": "is it true?"}}, calls[1])
	require.Empty(t, text(evs), "the sub-agent's text is not the lead's")
	reason, meta := finish(t, evs)
	require.Equal(t, "tool-calls", reason)
	require.Equal(t, "suspended_awaiting_children", meta["status"])

	answered := aisdk.UIPart{Type: "tool-ask_user", ToolCallID: "sub-ask", State: "output-available", Output: json.RawMessage(`{"answer":"yes"}`)}
	more := readAll(t, e.chat("alice", "chat-7", userMsg("u", "check it"), assistant(t, evs, answered)))
	require.Equal(t, map[string]any{"answer": "yes"}, find(more, "tool-output-available")[0]["output"])
	sub := find(more, "data-subagent")
	require.Len(t, sub, 1)
	require.Equal(t, "completed", sub[0]["data"].(map[string]any)["status"])
	require.Equal(t, `Verdict: {"verdict":"user says {\"answer\":\"yes\"}"}`, text(more))
	reason, _ = finish(t, more)
	require.Equal(t, "stop", reason)
}
