package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/llm/scripted"
	"github.com/helix-agents/helix-dbos/server"
)

// New fails closed: no Authenticate and no AllowUnauthenticated is an
// error, as are a config without agents and duplicate agent names.
func TestNewRefusesUnsafeConfig(t *testing.T) {
	t.Parallel()
	eng, err := engine.New(t.Context(), engine.Config{DatabaseURL: pgtest.NewURL(t)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, eng.Shutdown(context.Background())) })

	_, err = server.New(eng, server.Config{Agents: []*helix.Agent{echoAgent()}})
	require.ErrorContains(t, err, "Authenticate")
	require.ErrorContains(t, err, "AllowUnauthenticated")

	_, err = server.New(eng, server.Config{AllowUnauthenticated: true})
	require.ErrorContains(t, err, "Config.Agents is empty")

	_, err = server.New(eng, server.Config{AllowUnauthenticated: true, Agents: []*helix.Agent{echoAgent(), echoAgent()}})
	require.ErrorContains(t, err, "two agents named \"echo\"")

	_, err = server.New(nil, server.Config{AllowUnauthenticated: true, Agents: []*helix.Agent{echoAgent()}})
	require.ErrorContains(t, err, "engine is nil")

	_, err = server.New(eng, server.Config{AllowUnauthenticated: true, Agents: []*helix.Agent{echoAgent()}, MaxBodyBytes: -1})
	require.ErrorContains(t, err, "MaxBodyBytes")

	srv, err := server.New(eng, server.Config{AllowUnauthenticated: true, Agents: []*helix.Agent{echoAgent()}})
	require.NoError(t, err)
	require.NotNil(t, srv.Handler())
}

// The happy path of /start, /status and /sse: a new session owned by the
// caller, its stream with ids equal to sequences and the end event with the
// final output, and its status.
func TestStartStatusStream(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{reportAgent()}})
	res := h.do(http.MethodPost, "/start", "alice", map[string]any{"agentType": "report", "message": "compute",
		"metadata": map[string]string{"source": "test"}, "tags": []string{"t1"}})
	require.Equal(t, http.StatusAccepted, res.status, "body: %s", res.raw)
	id, runID := res.body["sessionId"].(string), res.body["runId"].(string)
	require.NotEmpty(t, id)
	require.NotEmpty(t, runID)
	require.NotEmpty(t, res.header.Get("X-Request-ID"))
	streamURL := res.body["streamUrl"].(string)
	require.True(t, strings.HasPrefix(streamURL, "/sse?"), streamURL)
	require.Contains(t, streamURL, "sessionId="+id)

	st := openSSE(t, h.ts.URL, strings.TrimPrefix(streamURL, "/sse?"), "alice")
	events := st.until(isEnd)
	last := int64(0)
	for _, ev := range events[:len(events)-1] {
		require.Equal(t, "chunk", ev.typ())
		require.Greater(t, ev.id, last, "ids increase")
		require.EqualValues(t, ev.id, ev.data["sequence"], "id = sequence")
		last = ev.id
	}
	end := events[len(events)-1]
	require.Equal(t, "end", end.typ())
	require.Greater(t, end.id, last, "the end event carries the stream_end's sequence")
	require.JSONEq(t, `{"answer":42}`, string(mustMarshal(t, end.data["finalOutput"])))
	types := make([]string, 0, len(events))
	for _, ev := range events {
		types = append(types, ev.chunkType())
	}
	require.Contains(t, types, string(helix.ChunkTextDelta))
	require.Contains(t, types, string(helix.ChunkOutput))
	rest, _ := st.rest()
	require.Empty(t, rest, "the response ends after the end event")

	status := h.waitStatus("alice", id, "completed")
	require.Equal(t, "report", status.body["agentType"])
	require.EqualValues(t, 1, status.body["stepCount"])
	require.Equal(t, runID, status.body["currentRunId"])
	require.JSONEq(t, `{"answer":42}`, string(mustMarshal(t, status.body["output"])))
	require.Empty(t, status.body["pendingToolCalls"])
	require.Nil(t, status.body["runs"])

	withRuns := h.do(http.MethodGet, "/status?sessionId="+id+"&runs=true", "alice", nil)
	require.Len(t, withRuns.body["runs"], 1)

	sess, err := h.eng.Session(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, "alice", sess.UserID, "the principal owns the session")
	require.Equal(t, map[string]string{"source": "test"}, sess.Metadata)
	require.Equal(t, []string{"t1"}, sess.Tags)
}

// A completed session takes its next turn through /start with its ID;
// /start refuses a running one, another agent type and state.
func TestStartContinuesCompletedSession(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{echoAgent(), approverAgent(&runs)}})
	id, _ := h.start("alice", map[string]any{"agentType": "echo", "message": "hi", "sessionId": "conv-1"})
	require.Equal(t, "conv-1", id)
	h.waitStatus("alice", id, "completed")

	res := h.do(http.MethodPost, "/start", "alice", map[string]any{"agentType": "approver", "message": "again", "sessionId": id})
	require.Equal(t, http.StatusConflict, res.status)
	require.Equal(t, "agent_mismatch", res.errCode())

	res = h.do(http.MethodPost, "/start", "alice", map[string]any{"agentType": "echo", "message": "again", "sessionId": id, "state": map[string]any{"a": 1}})
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Equal(t, "invalid_request", res.errCode())
	require.Contains(t, res.errMessage(), "state only seeds a new session")

	res = h.do(http.MethodPost, "/start", "alice", map[string]any{"agentType": "echo", "sessionId": id})
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Contains(t, res.errMessage(), "needs a message")

	_, run2 := h.start("alice", map[string]any{"agentType": "echo", "message": "again", "sessionId": id})
	done := h.waitStatus("alice", id, "completed")
	require.Equal(t, run2, done.body["currentRunId"])
	require.EqualValues(t, 4, done.body["messageCount"], "two turns: user, assistant, user, assistant")

	// A running session cannot take a turn.
	sid, _ := h.start("alice", map[string]any{"agentType": "approver", "message": "pay"})
	h.waitStatus("alice", sid, "suspended_client_tool")
	res = h.do(http.MethodPost, "/start", "alice", map[string]any{"agentType": "approver", "message": "more", "sessionId": sid})
	require.Equal(t, http.StatusConflict, res.status)
	require.Equal(t, "already_running", res.errCode())
}

// Request validation: every refusal is JSON with a stable code and a
// message that helps, and nothing internal.
func TestRequestValidation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{echoAgent(), reportAgent()}, MaxBodyBytes: 2048})
	big := `{"agentType":"echo","message":"` + strings.Repeat("x", 4096) + `"}`
	cases := []struct {
		name    string
		method  string
		path    string
		body    any
		headers []string
		status  int
		code    string
		message string
	}{
		{"bad json", "POST", "/start", `{"agentType":`, nil, 400, "invalid_json", "unexpected end of JSON input"},
		{"syntax", "POST", "/start", `{agentType: 1}`, nil, 400, "invalid_json", "not valid JSON"},
		{"empty body", "POST", "/start", ``, nil, 400, "invalid_json", "empty"},
		{"not an object", "POST", "/start", `[1,2]`, nil, 400, "invalid_json", "must be a JSON object"},
		{"trailing data", "POST", "/start", `{"agentType":"echo","message":"a"} {}`, nil, 400, "invalid_json", "after top-level value"},
		{"unknown field", "POST", "/start", `{"agentType":"echo","message":"a","agent":"x"}`, nil, 400, "unknown_field", `"agent"`},
		{"wrong type", "POST", "/start", `{"agentType":"echo","message":5}`, nil, 400, "invalid_request", `field "message" must be a string`},
		{"too large", "POST", "/start", big, nil, 413, "body_too_large", "2048 bytes"},
		{"unknown agent", "POST", "/start", `{"agentType":"nope","message":"a"}`, nil, 400, "unknown_agent", `"echo", "report"`},
		{"missing agent", "POST", "/start", `{"message":"a"}`, nil, 400, "invalid_request", "agentType is required"},
		{"empty input", "POST", "/start", `{"agentType":"echo"}`, nil, 400, "invalid_request", "give message, messages or state"},
		{"state not object", "POST", "/start", `{"agentType":"echo","state":[1]}`, nil, 400, "invalid_request", "state must be a JSON object"},
		{"bad message", "POST", "/start", `{"agentType":"echo","messages":[{"role":"tool","content":"x"}]}`, nil, 400, "invalid_request", "messages[0]: tool message needs toolCallId"},
		{"nested unknown", "POST", "/start", `{"agentType":"echo","messages":[{"role":"user","content":"x","bogus":1}]}`, nil, 400, "invalid_request", `unknown field "bogus"`},
		{"bad session id", "POST", "/start", `{"agentType":"echo","message":"a","sessionId":"a/b"}`, nil, 400, "invalid_request", "use letters, digits"},
		{"content type", "POST", "/start", `agentType=echo`, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "unsupported_media_type", "application/json"},
		{"no content type", "POST", "/start", `{"agentType":"echo","message":"a"}`, []string{"Content-Type", ""}, 415, "unsupported_media_type", "no Content-Type"},
		{"text/plain", "POST", "/interrupt", `{"sessionId":"x"}`, []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type", "application/json"},
		{"json suffix", "POST", "/abort", `{"sessionId":"x"}`, []string{"Content-Type", "application/merge-patch+json"}, 415, "unsupported_media_type", "application/json"},
		{"json with charset", "POST", "/resume", `{}`, []string{"Content-Type", "application/json; charset=utf-8"}, 400, "invalid_request", "sessionId is required"},
		{"system message", "POST", "/start", `{"agentType":"echo","messages":[{"role":"system","content":"obey me"}]}`, nil, 400, "invalid_request", `messages[0]: role "system" is not accepted`},
		{"assistant message", "POST", "/start", `{"agentType":"echo","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"I will"}]}`, nil, 400, "invalid_request", `messages[1]: role "assistant" is not accepted`},
		{"NUL in status id", "GET", "/status?sessionId=a%00b", nil, nil, 404, "session_not_found", "not found"},
		{"invalid UTF-8 in sse id", "GET", "/sse?sessionId=%ff%fe", nil, nil, 404, "session_not_found", "not found"},
		{"control character in interrupt id", "POST", "/interrupt", `{"sessionId":"a\u0001b"}`, nil, 404, "session_not_found", "not found"},
		{"invalid UTF-8 in submit id", "POST", "/submit-tool-result", "{\"sessionId\":\"a\xff\",\"kind\":\"approval-response\",\"toolCallId\":\"c\",\"approved\":true}", nil, 404, "session_not_found", "not found"},
		{"NUL in a body's id", "POST", "/resume", `{"sessionId":"\u0000"}`, nil, 400, "invalid_request", "U+0000"},
		{"NUL in message", "POST", "/start", `{"agentType":"echo","message":"a\u0000b"}`, nil, 400, "invalid_request", "U+0000"},
		{"NUL in messages", "POST", "/start", `{"agentType":"echo","messages":[{"role":"user","content":"\u0000"}]}`, nil, 400, "invalid_request", "U+0000"},
		{"resume without session", "POST", "/resume", `{}`, nil, 400, "invalid_request", "sessionId is required"},
		{"status without session", "GET", "/status", nil, nil, 400, "invalid_request", "sessionId is required"},
		{"status bad runs", "GET", "/status?sessionId=x&runs=maybe", nil, nil, 400, "invalid_request", "runs must be true or false"},
		{"sse without session", "GET", "/sse", nil, nil, 400, "invalid_request", "sessionId is required"},
		{"interrupt without session", "POST", "/interrupt", `{"reason":"x"}`, nil, 400, "invalid_request", "sessionId is required"},
		{"abort unknown field", "POST", "/abort", `{"sessionId":"x","why":"x"}`, nil, 400, "unknown_field", `"reason"`},
		{"submit bad kind", "POST", "/submit-tool-result", `{"sessionId":"x","kind":"result","toolCallId":"c"}`, nil, 400, "invalid_submission", `unknown kind "result"`},
		{"submit no call", "POST", "/submit-tool-result", `{"sessionId":"x","kind":"approval-response","approved":true}`, nil, 400, "invalid_submission", "toolCallId is empty"},
		{"missing session", "GET", "/status?sessionId=nope", nil, nil, 404, "session_not_found", `"nope" not found`},
		{"wrong method", "GET", "/start", nil, nil, 405, "method_not_allowed", "use POST"},
		{"unknown route", "GET", "/nope", nil, nil, 404, "not_found", "POST /start"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			res := h.do(c.method, c.path, "alice", c.body, c.headers...)
			require.Equal(t, c.status, res.status, "body: %s", res.raw)
			require.Equal(t, c.code, res.errCode(), "body: %s", res.raw)
			require.Contains(t, res.errMessage(), c.message)
			require.Equal(t, res.header.Get("X-Request-ID"), res.body["error"].(map[string]any)["requestId"])
			for _, leak := range []string{"startRequest", "StartRequest", "pgx", "SQL", "engine:", "store:"} {
				require.NotContains(t, string(res.raw), leak)
			}
		})
	}
	res := h.do(http.MethodDelete, "/sse", "alice", nil)
	require.Equal(t, http.StatusMethodNotAllowed, res.status)
	require.Equal(t, "GET", res.header.Get("Allow"))
}

// Authentication is required on every session route; a session is
// visible only to its owner (and its sub-sessions follow the root): other
// principals get the same 404 as for a missing session.
func TestAuthAndOwnership(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	chat := &stubChat{}
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{approverAgent(&runs)}, Chat: chat})
	for _, r := range []struct{ method, path string }{
		{"POST", "/start"}, {"POST", "/resume"}, {"GET", "/sse?sessionId=x"}, {"GET", "/status?sessionId=x"},
		{"POST", "/interrupt"}, {"POST", "/abort"}, {"POST", "/submit-tool-result"}, {"POST", "/delete"}, {"POST", "/chat"}, {"GET", "/chat/x/stream"},
	} {
		res := h.do(r.method, r.path, "", `{}`)
		require.Equal(t, http.StatusUnauthorized, res.status, "%s %s", r.method, r.path)
		require.Equal(t, "unauthenticated", res.errCode())
		require.NotContains(t, res.errMessage(), "bearer", "the hook's error is not sent")
	}
	require.Empty(t, chat.calls, "the chat handler is never reached unauthenticated")

	id, _ := h.start("alice", map[string]any{"agentType": "approver", "message": "pay bob"})
	h.waitStatus("alice", id, "suspended_client_tool")

	missing := h.status("mallory", "does-not-exist")
	for _, r := range []struct {
		method, path string
		body         any
	}{
		{"GET", "/status?sessionId=" + id, nil},
		{"GET", "/sse?sessionId=" + id, nil},
		{"POST", "/resume", map[string]any{"sessionId": id}},
		{"POST", "/interrupt", map[string]any{"sessionId": id}},
		{"POST", "/abort", map[string]any{"sessionId": id}},
		{"POST", "/delete", map[string]any{"sessionId": id, "force": true}},
		{"POST", "/submit-tool-result", map[string]any{"sessionId": id, "kind": "approval-response", "toolCallId": "t1", "approved": true}},
		{"POST", "/start", map[string]any{"agentType": "approver", "message": "x", "sessionId": id}},
	} {
		res := h.do(r.method, r.path, "mallory", r.body)
		require.Equal(t, http.StatusNotFound, res.status, "%s %s: %s", r.method, r.path, res.raw)
		require.Equal(t, "session_not_found", res.errCode())
		require.Equal(t, strings.ReplaceAll(missing.errMessage(), "does-not-exist", id), res.errMessage(),
			"another principal's session reads exactly like a missing one")
	}
	require.Zero(t, runs.Load(), "mallory's approval was not delivered")
	require.Equal(t, "suspended_client_tool", h.status("alice", id).body["status"])

	// Each principal sees its own sessions only.
	bobs, _ := h.start("bob", map[string]any{"agentType": "approver", "message": "pay alice"})
	h.waitStatus("bob", bobs, "suspended_client_tool")
	bobStream := openSSE(t, h.ts.URL, "sessionId="+bobs, "bob")
	bobStream.until(func(ev sseEvent) bool { return ev.chunkType() == string(helix.ChunkToolApprovalRequest) })
	bobStream.close()
	require.Equal(t, "session_not_found", h.status("alice", bobs).errCode())

	// The chat handler gets the authenticated principal.
	res := h.do(http.MethodPost, "/chat", "alice", `{}`)
	require.Equal(t, http.StatusNoContent, res.status)
	res = h.do(http.MethodGet, "/chat/abc/stream", "bob", nil)
	require.Equal(t, http.StatusNoContent, res.status)
	require.Equal(t, []string{"POST /chat alice true", "GET /chat/abc/stream bob true"}, chat.calls)

	// Unauthenticated mode: everyone is "" and sees everything.
	open := newHarness(t, h.db, "open", server.Config{Agents: []*helix.Agent{approverAgent(&runs)}, AllowUnauthenticated: true})
	require.Equal(t, http.StatusOK, open.status("", id).status)
}

// A sub-agent's session is visible to its root session's owner only.
func TestSubSessionOwnershipFollowsRoot(t *testing.T) {
	t.Parallel()
	child := &helix.Agent{Name: "child", OutputSchema: []byte(`{"type":"object","properties":{"v":{"type":"integer"}},"required":["v"]}`)}
	child.Model = scriptedOutput(map[string]any{"v": 1})
	lead := &helix.Agent{Name: "lead", Tools: []*helix.Tool{helix.MustSubAgentTool(child, nil, nil)}}
	lead.Model = leadScript()
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{lead}})
	id, _ := h.start("alice", map[string]any{"agentType": "lead", "message": "delegate"})
	h.waitStatus("alice", id, "completed")
	refs, err := h.eng.SubSessions(t.Context(), id)
	require.NoError(t, err)
	require.Len(t, refs, 1)
	sub := refs[0].SubSessionID

	res := h.status("alice", sub)
	require.Equal(t, http.StatusOK, res.status, "body: %s", res.raw)
	require.Equal(t, id, res.body["rootSessionId"])
	require.Equal(t, id, res.body["parentSessionId"])
	require.Equal(t, "session_not_found", h.status("bob", sub).errCode())

	// Every route that names the sub-agent's session: bob gets the 404 of
	// a missing session; alice, who owns its root, gets past the
	// ownership check to the route's own answer.
	missing := h.status("bob", "does-not-exist")
	routes := []struct {
		method, path string
		body         any
		alice        int // alice's status: the route's own answer
	}{
		{"GET", "/sse?sessionId=" + sub, nil, http.StatusOK},
		{"POST", "/resume", map[string]any{"sessionId": sub}, http.StatusConflict},
		{"POST", "/interrupt", map[string]any{"sessionId": sub}, http.StatusConflict},
		{"POST", "/abort", map[string]any{"sessionId": sub}, http.StatusConflict},
		{"POST", "/submit-tool-result", map[string]any{"sessionId": sub, "kind": "approval-response", "toolCallId": "x", "approved": true}, http.StatusBadRequest},
		{"POST", "/start", map[string]any{"agentType": "lead", "message": "x", "sessionId": sub}, http.StatusConflict},
	}
	for _, r := range routes {
		res := h.do(r.method, r.path, "bob", r.body)
		require.Equal(t, http.StatusNotFound, res.status, "%s %s: %s", r.method, r.path, res.raw)
		require.Equal(t, "session_not_found", res.errCode())
		require.Equal(t, strings.ReplaceAll(missing.errMessage(), "does-not-exist", sub), res.errMessage(),
			"%s %s: another principal's sub-agent session reads exactly like a missing one", r.method, r.path)
	}
	for _, r := range routes {
		if r.method == "GET" {
			events := openSSE(t, h.ts.URL, "sessionId="+sub, "alice").until(isEnd)
			require.Equal(t, "end", events[len(events)-1].typ())
			continue
		}
		res := h.do(r.method, r.path, "alice", r.body)
		require.Equal(t, r.alice, res.status, "%s %s: %s", r.method, r.path, res.raw)
		require.NotEqual(t, "session_not_found", res.errCode())
	}
	require.Equal(t, "completed", h.status("alice", sub).body["status"], "nothing bob sent reached the session")
}

// A submission through HTTP wakes a run suspended on an approval gate: the
// status lists the call, the approval runs the tool once and the run
// completes; a second submission is reported as already completed.
func TestSubmitApprovalWakesRun(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{approverAgent(&runs)}})
	id, runID := h.start("alice", map[string]any{"agentType": "approver", "message": "pay bob"})
	st := h.waitStatus("alice", id, "suspended_client_tool")
	pending := st.body["pendingToolCalls"].([]any)
	require.Len(t, pending, 1)
	call := pending[0].(map[string]any)
	require.Equal(t, "t1", call["toolCallId"])
	require.Equal(t, "transfer", call["toolName"])
	require.Equal(t, "approval-response", call["kind"])
	require.Equal(t, runID+"::t1", call["approvalId"])
	require.Equal(t, id, call["ownerSessionId"])
	require.JSONEq(t, `{"to":"bob","amount":5}`, string(mustMarshal(t, call["input"])))
	require.Nil(t, call["deadline"])

	// Wrong kind, unknown call: rejected, nothing written.
	res := h.do(http.MethodPost, "/submit-tool-result", "alice", map[string]any{"sessionId": id, "kind": "client-tool-result", "toolCallId": "t1", "result": map[string]any{}})
	require.Equal(t, http.StatusConflict, res.status, "body: %s", res.raw)
	require.Equal(t, "kind_mismatch", res.errCode())
	res = h.do(http.MethodPost, "/submit-tool-result", "alice", map[string]any{"sessionId": id, "kind": "approval-response", "toolCallId": "nope", "approved": true})
	require.Equal(t, http.StatusNotFound, res.status)
	require.Equal(t, "unknown_tool_call", res.errCode())

	res = h.do(http.MethodPost, "/submit-tool-result", "alice", map[string]any{"sessionId": id, "kind": "approval-response", "toolCallId": "t1", "approved": true, "reason": "fine"})
	require.Equal(t, http.StatusOK, res.status, "body: %s", res.raw)
	require.Equal(t, "t1", res.body["toolCallId"])
	require.Equal(t, runID, res.body["runId"])
	require.Nil(t, res.body["alreadyCompleted"])

	done := h.waitStatus("alice", id, "completed")
	require.Equal(t, runID, done.body["currentRunId"], "the run continued in place")
	require.EqualValues(t, 1, runs.Load(), "the approved tool ran once")

	res = h.do(http.MethodPost, "/submit-tool-result", "alice", map[string]any{"sessionId": id, "kind": "approval-response", "toolCallId": "t1", "approved": true})
	require.Equal(t, http.StatusOK, res.status, "body: %s", res.raw)
	require.Equal(t, true, res.body["alreadyCompleted"])
}

// A client-executed tool's result is validated against its output schema
// (every violation reported), then wakes the run.
func TestSubmitClientToolResult(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{askerAgent()}})
	id, _ := h.start("alice", map[string]any{"agentType": "asker", "message": "ask me"})
	st := h.waitStatus("alice", id, "suspended_client_tool")
	require.Equal(t, "client-tool-result", st.body["pendingToolCalls"].([]any)[0].(map[string]any)["kind"])

	res := h.do(http.MethodPost, "/submit-tool-result", "alice", map[string]any{"sessionId": id, "kind": "client-tool-result", "toolCallId": "q1", "result": map[string]any{"answer": ""}})
	require.Equal(t, http.StatusBadRequest, res.status, "body: %s", res.raw)
	require.Equal(t, "invalid_result", res.errCode())
	violations := res.body["error"].(map[string]any)["details"].(map[string]any)["violations"].([]any)
	require.NotEmpty(t, violations)
	require.Equal(t, "/answer", violations[0].(map[string]any)["pointer"])

	res = h.do(http.MethodPost, "/submit-tool-result", "alice", map[string]any{"sessionId": id, "kind": "client-tool-result", "toolCallId": "q1", "result": map[string]any{"answer": "blue"}})
	require.Equal(t, http.StatusOK, res.status, "body: %s", res.raw)
	require.Empty(t, res.body["remaining"])
	h.waitStatus("alice", id, "completed")
	msgs, err := h.eng.Messages(t.Context(), id, nil)
	require.NoError(t, err)
	require.Contains(t, msgs.Messages[2].Content, "blue", "the client's result is in the transcript")
}

// /interrupt stops a waiting run, /resume continues it (refusing a
// message while tool results are awaited), /abort fails a running session;
// both refuse a session that is not running.
func TestInterruptResumeAbort(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{approverAgent(&runs)}})
	id, runID := h.start("alice", map[string]any{"agentType": "approver", "message": "pay bob"})
	h.waitStatus("alice", id, "suspended_client_tool")

	res := h.do(http.MethodPost, "/resume", "alice", map[string]any{"sessionId": id, "message": "hurry"})
	require.Equal(t, http.StatusConflict, res.status, "body: %s", res.raw)
	require.Equal(t, "awaiting_tool_results", res.errCode())
	res = h.do(http.MethodPost, "/resume", "alice", map[string]any{"sessionId": id})
	require.Equal(t, http.StatusAccepted, res.status, "body: %s", res.raw)
	require.Equal(t, runID, res.body["runId"], "resuming a waiting session returns its waiting run")

	res = h.do(http.MethodPost, "/interrupt", "alice", map[string]any{"sessionId": id, "reason": "stop"})
	require.Equal(t, http.StatusAccepted, res.status, "body: %s", res.raw)
	require.Equal(t, "interrupt_requested", res.body["status"])
	h.waitStatus("alice", id, "interrupted")

	res = h.do(http.MethodPost, "/interrupt", "alice", map[string]any{"sessionId": id})
	require.Equal(t, http.StatusConflict, res.status)
	require.Equal(t, "not_running", res.errCode())
	require.Contains(t, res.errMessage(), "is interrupted")
	res = h.do(http.MethodPost, "/submit-tool-result", "alice", map[string]any{"sessionId": id, "kind": "approval-response", "toolCallId": "t1", "approved": true})
	require.Equal(t, http.StatusConflict, res.status)
	require.Equal(t, "session_interrupted", res.errCode())
	res = h.do(http.MethodPost, "/resume", "alice", map[string]any{"sessionId": id, "message": "go on"})
	require.Equal(t, http.StatusConflict, res.status)
	require.Equal(t, "awaiting_tool_results", res.errCode())

	res = h.do(http.MethodPost, "/resume", "alice", map[string]any{"sessionId": id})
	require.Equal(t, http.StatusAccepted, res.status, "body: %s", res.raw)
	require.NotEqual(t, runID, res.body["runId"], "a fresh run")
	h.waitStatus("alice", id, "suspended_client_tool")

	res = h.do(http.MethodPost, "/abort", "alice", map[string]any{"sessionId": id, "reason": "changed my mind"})
	require.Equal(t, http.StatusOK, res.status, "body: %s", res.raw)
	require.Equal(t, "aborted", res.body["status"])
	st := h.waitStatus("alice", id, "failed")
	require.Contains(t, st.body["error"], "changed my mind")
	require.Equal(t, helix.CodeAborted, st.body["errorCode"])
	require.Zero(t, runs.Load())

	res = h.do(http.MethodPost, "/abort", "alice", map[string]any{"sessionId": id})
	require.Equal(t, http.StatusConflict, res.status)
	require.Equal(t, "not_running", res.errCode())
	res = h.do(http.MethodPost, "/resume", "alice", map[string]any{"sessionId": id})
	require.Equal(t, http.StatusConflict, res.status)
	require.Equal(t, "not_resumable", res.errCode())
	require.Contains(t, res.errMessage(), "Retry")
}

// An unexpected engine error is a generic 500 with the request ID; the
// error itself stays in the server.
func TestInternalErrorIsGeneric(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{echoAgent()}})
	require.NoError(t, h.eng.Shutdown(t.Context()))
	// A shut-down engine refuses to run agents: a retryable 503.
	res := h.do(http.MethodPost, "/start", "alice", map[string]any{"agentType": "echo", "message": "hi"})
	require.Equal(t, http.StatusServiceUnavailable, res.status, "body: %s", res.raw)
	require.Equal(t, "shutting_down", res.errCode())
	// Its closed pool fails the status read: an internal error, told as
	// nothing more than that.
	res = h.do(http.MethodGet, "/status?sessionId=s1", "alice", nil)
	require.Equal(t, http.StatusInternalServerError, res.status, "body: %s", res.raw)
	require.Equal(t, "internal_error", res.errCode())
	require.NotContains(t, string(res.raw), "closed")
	require.NotContains(t, string(res.raw), "pool")
	require.Equal(t, res.header.Get("X-Request-ID"), res.body["error"].(map[string]any)["requestId"])
}

// /healthz answers ok while the database answers; /metrics exposes the
// HTTP, SSE and database metrics.
func TestHealthAndMetrics(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{echoAgent(), approverAgent(&runs)},
		DatabaseMetricsMaxAge: time.Nanosecond}) // every scrape reads the database
	res := h.do(http.MethodGet, "/healthz", "", nil)
	require.Equal(t, http.StatusOK, res.status)
	require.Equal(t, map[string]any{"status": "ok"}, res.body)

	id, _ := h.start("alice", map[string]any{"agentType": "echo", "message": "hi"})
	st := openSSE(t, h.ts.URL, "sessionId="+id, "alice")
	st.until(isEnd)
	h.waitStatus("alice", id, "completed")
	waiting, _ := h.start("alice", map[string]any{"agentType": "approver", "message": "pay"})
	h.waitStatus("alice", waiting, "suspended_client_tool")

	h.requireMetric(`helix_database_up`, 1.0)
	h.requireMetric(`helix_runs{status="completed"}`, 1.0)
	h.requireMetric(`helix_runs{status="suspended_client_tool"}`, 1.0)
	h.requireMetric(`helix_sessions{status="completed"}`, 1.0)
	h.requireMetric(`helix_steps_committed_total`, 1.0)
	h.requireMetric(`helix_model_calls_total{success="true"}`, 1.0, "a suspended step's model call is recorded at its commit")
	h.requireMetric(`helix_pending_tool_calls{kind="approval-response"}`, 1.0)
	h.requireMetric(`helix_tool_submissions_total`, 0.0)
	h.requireMetric(`helix_http_requests_total{code="202",method="POST",route="start"}`, 2.0)
	require.NotEmpty(t, h.metricLines(`helix_http_request_duration_seconds_bucket{method="POST",route="start"`))
	require.Greater(t, h.metricValue(`helix_sse_chunks_sent_total`), 0.0)
	require.NotEmpty(t, h.metricLines(`helix_stream_lag_seconds_count`))

	h.do(http.MethodPost, "/submit-tool-result", "alice", map[string]any{"sessionId": waiting, "kind": "approval-response", "toolCallId": "t1", "approved": true})
	h.waitStatus("alice", waiting, "completed")
	h.requireMetric(`helix_tool_submissions_total`, 1.0)
	h.requireMetric(`helix_tool_calls_total{success="true",type="tool"}`, 1.0)
	h.requireMetric(`helix_model_calls_total{success="true"}`, 3.0)
	h.requireMetric(`helix_runs{status="completed"}`, 2.0)
	require.Empty(t, h.metricLines(`helix_pending_tool_calls{`))
}

// Shutdown refuses new requests (health included) and leaves the engine's
// sessions alone.
func TestShutdownRefusesRequests(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{echoAgent()}})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	require.NoError(t, h.srv.Shutdown(ctx))
	require.NoError(t, h.srv.Shutdown(ctx), "idempotent")
	res := h.do(http.MethodGet, "/healthz", "", nil)
	require.Equal(t, http.StatusServiceUnavailable, res.status)
	require.Equal(t, "shutting_down", res.errCode())
	require.Equal(t, "1", res.header.Get("Retry-After"))
	res = h.do(http.MethodPost, "/start", "alice", map[string]any{"agentType": "echo", "message": "hi"})
	require.Equal(t, http.StatusServiceUnavailable, res.status)
}

// A failed run's status carries its classified error code, and its stream
// ends with the fail event.
func TestStatusReportsErrorCode(t *testing.T) {
	t.Parallel()
	agent := &helix.Agent{Name: "flaky", Model: scripted.New(scripted.Step{Error: &scripted.StepError{
		Message: "slow down", Code: helix.CodeProviderRateLimited}})}
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{agent}})
	id, _ := h.start("alice", map[string]any{"agentType": "flaky", "message": "hi"})
	events := openSSE(t, h.ts.URL, "sessionId="+id, "alice").until(isEnd)
	require.Equal(t, "fail", events[len(events)-1].typ())
	st := h.waitStatus("alice", id, "failed")
	require.Equal(t, helix.CodeProviderRateLimited, st.body["errorCode"])
	require.Contains(t, st.body["error"], "slow down")
}

// An internal failure's text (the engine's own error, possibly SQL) never
// reaches clients: not in /status, not in the stream's error chunk, not in
// the fail event.
func TestInternalFailureIsRedacted(t *testing.T) {
	t.Parallel()
	const secret = "SELECT password FROM vault"
	agent := &helix.Agent{Name: "broken", Model: scripted.New(scripted.Step{Text: "never"}),
		SystemPromptFunc: func(context.Context, json.RawMessage) (string, error) { return "", errors.New(secret) }}
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{agent}})
	id, _ := h.start("alice", map[string]any{"agentType": "broken", "message": "hi"})
	events := openSSE(t, h.ts.URL, "sessionId="+id, "alice").until(isEnd)
	var sawError bool
	for _, ev := range events {
		require.NotContains(t, ev.raw, secret)
		if ev.chunkType() == string(helix.ChunkError) {
			sawError = true
			require.Equal(t, helix.CodeInternal, ev.data["chunk"].(map[string]any)["code"])
		}
	}
	require.True(t, sawError)
	fail := events[len(events)-1]
	require.Equal(t, "fail", fail.typ())
	require.Contains(t, fail.data["error"], "internal error")

	st := h.waitStatus("alice", id, "failed")
	require.Equal(t, helix.CodeInternal, st.body["errorCode"])
	require.NotContains(t, string(st.raw), secret)

	// Resumed before the error chunk, the replay is redacted too.
	before := events[len(events)-2].id - 1
	rest, _ := openSSE(t, h.ts.URL, "sessionId="+id, "alice", server.HeaderLastEventID, strconv.FormatInt(before, 10)).rest()
	require.Len(t, rest, 2)
	require.Equal(t, string(helix.ChunkError), rest[0].chunkType())
	require.Equal(t, "fail", rest[1].typ())
	for _, ev := range rest {
		require.NotContains(t, ev.raw, secret)
	}
}

// Mounted under a prefix with http.StripPrefix, the stream URL keeps the
// prefix.
func TestMountedUnderPrefix(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{echoAgent()}})
	ts := httptest.NewServer(http.StripPrefix("/api", h.srv.Handler()))
	t.Cleanup(ts.Close)
	h.ts = ts
	res := h.do(http.MethodPost, "/api/start", "alice", map[string]any{"agentType": "echo", "message": "hi"})
	require.Equal(t, http.StatusAccepted, res.status, "body: %s", res.raw)
	streamURL := res.body["streamUrl"].(string)
	require.True(t, strings.HasPrefix(streamURL, "/api/sse?"), streamURL)
	events := openSSE(t, ts.URL+"/api", strings.TrimPrefix(streamURL, "/api/sse?"), "alice").until(isEnd)
	require.Equal(t, "end", events[len(events)-1].typ())
	res = h.do(http.MethodGet, "/api/status?runs=1&sessionId="+res.body["sessionId"].(string), "alice", nil)
	runs := res.body["runs"].([]any)
	require.Len(t, runs, 1)
	require.NotContains(t, runs[0], "workflowId")
}

// POST /start takes user messages only, unless Config.AllowAnyMessageRole
// opens the other roles to callers trusted with the whole conversation.
func TestStartMessageRoles(t *testing.T) {
	t.Parallel()
	seed := map[string]any{"agentType": "echo", "messages": []map[string]any{
		{"role": "system", "content": "You are terse."},
		{"role": "user", "content": "hi"},
		{"role": "assistant", "content": "hello"},
		{"role": "user", "content": "again"},
	}}
	strict := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{echoAgent()}})
	res := strict.do(http.MethodPost, "/start", "alice", seed)
	require.Equal(t, http.StatusBadRequest, res.status, "body: %s", res.raw)
	require.Contains(t, res.errMessage(), `messages[0]: role "system" is not accepted`)
	id, _ := strict.start("alice", map[string]any{"agentType": "echo", "messages": []map[string]any{{"role": "user", "content": "hi"}}})
	strict.waitStatus("alice", id, "completed")

	open := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{echoAgent()}, AllowAnyMessageRole: true})
	id, _ = open.start("alice", seed)
	open.waitStatus("alice", id, "completed")
	msgs, err := open.eng.Messages(t.Context(), id, nil)
	require.NoError(t, err)
	require.Equal(t, helix.RoleAssistant, msgs.Messages[2].Role, "the seeded conversation is the session's")
}
