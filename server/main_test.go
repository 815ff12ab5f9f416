package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/llm/scripted"
	"github.com/helix-agents/helix-dbos/server"
	"github.com/helix-agents/helix-dbos/server/aisdk"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The agents of the tests, built per test (scripted models are immutable,
// tools count their executions).

// echoAgent answers each turn with text.
func echoAgent() *helix.Agent {
	return &helix.Agent{Name: "echo", Model: scripted.New(
		scripted.Step{Text: "first answer"},
		scripted.Step{Text: "second answer"},
	)}
}

// reportAgent answers with a structured output.
func reportAgent() *helix.Agent {
	return &helix.Agent{Name: "report", Model: scripted.New(scripted.Step{Text: "done", Output: map[string]any{"answer": 42}}),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"answer":{"type":"integer"}},"required":["answer"]}`)}
}

type transferIn struct {
	To     string `json:"to"`
	Amount int    `json:"amount"`
}

// approverAgent calls an approval-gated tool, then answers; runs counts
// the tool's executions.
func approverAgent(runs *atomic.Int32) *helix.Agent {
	transfer := helix.MustNewTool("transfer", "Move money", func(ctx context.Context, in transferIn, tc helix.ToolContext) (map[string]any, error) {
		runs.Add(1)
		return map[string]any{"sent": in.Amount}, nil
	}, helix.RequireApproval())
	return &helix.Agent{Name: "approver", Tools: []*helix.Tool{transfer}, Model: scripted.New(
		scripted.Step{Text: "Sending the money.", ToolCalls: []scripted.Call{{ID: "t1", Name: "transfer", Args: map[string]any{"to": "bob", "amount": 5}}}},
		scripted.Step{Text: "The transfer is done."},
	)}
}

type question struct {
	Question string `json:"question"`
}

type answer struct {
	Answer string `json:"answer" jsonschema:"minLength=1"`
}

// askerAgent calls a client-executed tool, then answers.
func askerAgent() *helix.Agent {
	ask := helix.MustNewClientTool[question, answer]("ask_user", "Ask the user a question")
	return &helix.Agent{Name: "asker", Tools: []*helix.Tool{ask}, Model: scripted.New(
		scripted.Step{ToolCalls: []scripted.Call{{ID: "q1", Name: "ask_user", Args: map[string]any{"question": "colour?"}}}},
		scripted.Step{Text: "Thanks."},
	)}
}

// bearerAuth takes the principal from "Authorization: Bearer <name>".
func bearerAuth(r *http.Request) (server.Principal, error) {
	name, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || name == "" {
		return "", errors.New("no bearer token")
	}
	return server.Principal(name), nil
}

// harness is one server over one engine, behind an httptest server.
type harness struct {
	t   *testing.T
	db  string
	eng *engine.Engine
	srv *server.Server
	ts  *httptest.Server
}

// newHarness builds an engine on db (a fresh database when empty), a
// server with cfg (bearerAuth when cfg has no auth), and an HTTP server.
func newHarness(t *testing.T, db, executorID string, cfg server.Config) *harness {
	t.Helper()
	return newHarnessWith(t, db, executorID, cfg, nil)
}

// newHarnessWith is newHarness with, when chat is not nil, the Chat
// handler chat builds over the harness's engine (an aisdk handler).
func newHarnessWith(t *testing.T, db, executorID string, cfg server.Config, chat func(*engine.Engine) http.Handler) *harness {
	t.Helper()
	return newHarnessQueued(t, db, executorID, cfg, chat, nil)
}

// newHarnessQueued is newHarnessWith with an engine that admits its runs
// through queue (nil: none).
func newHarnessQueued(t *testing.T, db, executorID string, cfg server.Config, chat func(*engine.Engine) http.Handler, queue *engine.QueueConfig) *harness {
	t.Helper()
	return newHarnessConfigured(t, db, cfg, chat, func(c *engine.Config) { c.ExecutorID, c.Queue = executorID, queue })
}

// newHarnessConfigured is newHarnessWith with an engine configured by
// configure.
func newHarnessConfigured(t *testing.T, db string, cfg server.Config, chat func(*engine.Engine) http.Handler, configure func(*engine.Config)) *harness {
	t.Helper()
	if db == "" {
		db = pgtest.NewURL(t)
	}
	ecfg := engine.Config{DatabaseURL: db, ShutdownTimeout: 2 * time.Second}
	configure(&ecfg)
	eng, err := engine.New(t.Context(), ecfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, eng.Shutdown(context.Background())) })
	if cfg.Authenticate == nil && !cfg.AllowUnauthenticated {
		cfg.Authenticate = bearerAuth
	}
	if chat != nil {
		cfg.Chat = chat(eng)
	}
	srv, err := server.New(eng, cfg)
	require.NoError(t, err)
	require.NoError(t, eng.Launch(t.Context()))
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, srv.Shutdown(ctx))
		ts.Close()
	})
	return &harness{t: t, db: db, eng: eng, srv: srv, ts: ts}
}

// response is an HTTP answer with its JSON body decoded.
type response struct {
	status int
	header http.Header
	raw    []byte
	body   map[string]any
}

// errCode returns the error code of an error body.
func (r response) errCode() string {
	e, _ := r.body["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}

func (r response) errMessage() string {
	e, _ := r.body["error"].(map[string]any)
	msg, _ := e["message"].(string)
	return msg
}

// do sends a request as user ("" sends no credentials). body is sent as
// is when it is a string or []byte, else marshalled.
func (h *harness) do(method, path, user string, body any, headers ...string) response {
	h.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		require.NoError(h.t, err)
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(h.t.Context(), method, h.ts.URL+path, rd)
	require.NoError(h.t, err)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if user != "" {
		req.Header.Set("Authorization", "Bearer "+user)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := h.ts.Client().Do(req)
	require.NoError(h.t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(h.t, err)
	out := response{status: res.StatusCode, header: res.Header, raw: raw}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		require.NoError(h.t, json.Unmarshal(raw, &out.body), "body: %s", raw)
	}
	return out
}

// start starts a session of agent as user and returns its ID and run ID.
func (h *harness) start(user string, body map[string]any) (sessionID, runID string) {
	h.t.Helper()
	res := h.do(http.MethodPost, "/start", user, body)
	require.Equal(h.t, http.StatusAccepted, res.status, "body: %s", res.raw)
	return res.body["sessionId"].(string), res.body["runId"].(string)
}

// status returns GET /status of a session.
func (h *harness) status(user, sessionID string) response {
	h.t.Helper()
	return h.do(http.MethodGet, "/status?sessionId="+sessionID, user, nil)
}

// waitStatus polls /status until the session's status is want.
func (h *harness) waitStatus(user, sessionID, want string) response {
	h.t.Helper()
	var res response
	require.Eventually(h.t, func() bool {
		res = h.status(user, sessionID)
		require.Equal(h.t, http.StatusOK, res.status, "body: %s", res.raw)
		return res.body["status"] == want
	}, 30*time.Second, 10*time.Millisecond, "session %s never became %s", sessionID, want)
	return res
}

// sseEvent is one parsed SSE event, or a comment line.
type sseEvent struct {
	id      int64 // -1 without an id line
	data    map[string]any
	raw     string
	comment string
}

func (e sseEvent) typ() string {
	t, _ := e.data["type"].(string)
	return t
}

// chunkType is the type of a chunk event's chunk.
func (e sseEvent) chunkType() string {
	c, _ := e.data["chunk"].(map[string]any)
	t, _ := c["type"].(string)
	return t
}

// sseStream is an open GET /sse response.
type sseStream struct {
	t      *testing.T
	resp   *http.Response
	cancel context.CancelFunc
	events chan sseEvent
	done   chan struct{}
}

// openSSE opens GET /sse on base as user with headers (name, value pairs).
func openSSE(t *testing.T, base, query, user string, headers ...string) *sseStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/sse?"+query, nil)
	require.NoError(t, err)
	if user != "" {
		req.Header.Set("Authorization", "Bearer "+user)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		t.Fatalf("GET /sse: %d %s", resp.StatusCode, b)
	}
	s := &sseStream{t: t, resp: resp, cancel: cancel, events: make(chan sseEvent, 1024), done: make(chan struct{})}
	go s.read()
	t.Cleanup(s.close)
	return s
}

func (s *sseStream) read() {
	defer close(s.done)
	defer close(s.events)
	sc := bufio.NewScanner(s.resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	ev := sseEvent{id: -1}
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev.raw != "" || ev.comment != "" {
				if ev.raw != "" {
					_ = json.Unmarshal([]byte(ev.raw), &ev.data)
				}
				s.events <- ev
			}
			ev = sseEvent{id: -1}
		case strings.HasPrefix(line, ":"):
			ev.comment = strings.TrimSpace(line[1:])
		case strings.HasPrefix(line, "id: "):
			n, err := strconv.ParseInt(line[4:], 10, 64)
			if err == nil {
				ev.id = n
			}
		case strings.HasPrefix(line, "data: "):
			ev.raw += line[6:]
		}
	}
}

// next returns the next event (comments included), failing after 30 s.
// ok is false when the response ended.
func (s *sseStream) next() (sseEvent, bool) {
	s.t.Helper()
	select {
	case ev, ok := <-s.events:
		return ev, ok
	case <-time.After(30 * time.Second):
		s.t.Fatal("no SSE event within 30s")
		return sseEvent{}, false
	}
}

// until returns the data events up to and including the first one
// satisfying stop (comments skipped).
func (s *sseStream) until(stop func(sseEvent) bool) []sseEvent {
	s.t.Helper()
	var out []sseEvent
	for {
		ev, ok := s.next()
		if !ok {
			s.t.Fatalf("the SSE response ended after %d events without the expected one", len(out))
		}
		if ev.comment != "" && ev.raw == "" {
			continue
		}
		out = append(out, ev)
		if stop(ev) {
			return out
		}
	}
}

// rest returns the remaining data events until the response ends.
func (s *sseStream) rest() (events []sseEvent, comments []string) {
	s.t.Helper()
	for {
		ev, ok := s.next()
		if !ok {
			return events, comments
		}
		if ev.raw == "" {
			comments = append(comments, ev.comment)
			continue
		}
		events = append(events, ev)
	}
}

func (s *sseStream) close() {
	s.cancel()
	<-s.done
	s.resp.Body.Close()
}

func isEnd(ev sseEvent) bool { return ev.typ() == "end" || ev.typ() == "fail" }

// metricLines returns the lines of GET /metrics that start with name.
func (h *harness) metricLines(name string) []string {
	h.t.Helper()
	res := h.do(http.MethodGet, "/metrics", "", nil)
	require.Equal(h.t, http.StatusOK, res.status)
	var out []string
	for l := range strings.SplitSeq(string(res.raw), "\n") {
		if strings.HasPrefix(l, name) {
			out = append(out, l)
		}
	}
	return out
}

// metricValue returns the value of the sample line exactly matching
// series (name with labels), or fails.
func (h *harness) metricValue(series string) float64 {
	h.t.Helper()
	for _, l := range h.metricLines(series) {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(h.t, err)
			return f
		}
	}
	h.t.Fatalf("no metric %s", series)
	return 0
}

// requireMetric checks a sample's value (counts: exact).
func (h *harness) requireMetric(series string, want float64, msgAndArgs ...any) {
	h.t.Helper()
	require.InDelta(h.t, want, h.metricValue(series), 0, msgAndArgs...)
}

// eventually polls cond every 10 ms for up to 30 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 30*time.Second, 10*time.Millisecond, "timed out waiting for %s", what)
}

// stubChat records the principal of the requests it gets.
type stubChat struct {
	mu    sync.Mutex
	calls []string
}

func (c *stubChat) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p, ok := server.PrincipalFromContext(r.Context())
	c.mu.Lock()
	c.calls = append(c.calls, fmt.Sprintf("%s %s %s %v", r.Method, r.URL.Path, p, ok))
	c.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// scriptedOutput answers with a structured output at once.
func scriptedOutput(v any) helix.Model { return scripted.New(scripted.Step{Output: v}) }

// leadScript delegates to the child sub-agent, then answers.
func leadScript() helix.Model {
	return scripted.New(
		scripted.Step{ToolCalls: []scripted.Call{{ID: "s1", Name: helix.SubAgentToolPrefix + "child", Args: map[string]any{"task": "check"}}}},
		scripted.Step{Text: "ok"},
	)
}

// aisdkChat returns a builder of the AI SDK chat handler over agents,
// taking the server's principal (aisdk.ServerPrincipal).
func aisdkChat(t *testing.T, agents ...*helix.Agent) func(*engine.Engine) http.Handler {
	return func(eng *engine.Engine) http.Handler {
		h, err := aisdk.NewHandler(eng, aisdk.Options{Agents: agents, Authenticate: aisdk.ServerPrincipal,
			PollInterval: 20 * time.Millisecond})
		require.NoError(t, err)
		return h
	}
}

// chatEvent is one event of a chat (UI message stream) response.
type chatEvent struct {
	id    int64
	chunk map[string]any
	done  bool // data: [DONE]
}

// chatStream reads a chat response's events as they arrive.
type chatStream struct {
	t    *testing.T
	resp *http.Response
	br   *bufio.Reader
}

// postChat posts a useChat request (one user message) to /chat as user
// and returns its open stream.
func (h *harness) postChat(user, chatID, text string) *chatStream {
	h.t.Helper()
	body := map[string]any{"id": chatID, "trigger": "submit-message", "messages": []any{
		map[string]any{"id": "u1", "role": "user", "parts": []any{map[string]any{"type": "text", "text": text}}}}}
	return h.openChat(http.MethodPost, "/chat", user, body)
}

// openChat sends a chat request and returns its open stream (200
// required).
func (h *harness) openChat(method, path, user string, body any, headers ...string) *chatStream {
	h.t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(mustMarshal(h.t, body))
	}
	ctx, cancel := context.WithTimeout(h.t.Context(), 60*time.Second)
	h.t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, method, h.ts.URL+path, rd)
	require.NoError(h.t, err)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if user != "" {
		req.Header.Set("Authorization", "Bearer "+user)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(h.t, err)
	h.t.Cleanup(func() { _ = resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		h.t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	require.Equal(h.t, "text/event-stream", resp.Header.Get("Content-Type"))
	return &chatStream{t: h.t, resp: resp, br: bufio.NewReader(resp.Body)}
}

// next returns the next event; ok is false when the response ended.
func (s *chatStream) next() (ev chatEvent, ok bool) {
	s.t.Helper()
	for {
		line, err := s.br.ReadString('\n')
		if err != nil {
			return ev, false
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			if ev.chunk != nil || ev.done {
				return ev, true
			}
		case strings.HasPrefix(line, "id: "):
			ev.id, err = strconv.ParseInt(line[4:], 10, 64)
			require.NoError(s.t, err)
		case line == "data: [DONE]":
			ev.done = true
		case strings.HasPrefix(line, "data: "):
			require.NoError(s.t, json.Unmarshal([]byte(line[6:]), &ev.chunk), line)
		}
	}
}

// until returns the events up to and including the first of type typ.
func (s *chatStream) until(typ string) []chatEvent {
	s.t.Helper()
	var out []chatEvent
	for {
		ev, ok := s.next()
		require.True(s.t, ok, "the chat response ended before a %s chunk (after %v)", typ, out)
		out = append(out, ev)
		if ev.chunk["type"] == typ {
			return out
		}
	}
}

// rest returns the remaining events until the response ends.
func (s *chatStream) rest() []chatEvent {
	s.t.Helper()
	var out []chatEvent
	for {
		ev, ok := s.next()
		if !ok {
			return out
		}
		out = append(out, ev)
	}
}

// chatTypes lists the chunk types of events ("[DONE]" for the end).
func chatTypes(evs []chatEvent) []string {
	out := make([]string, 0, len(evs))
	for _, ev := range evs {
		if ev.done {
			out = append(out, "[DONE]")
			continue
		}
		out = append(out, ev.chunk["type"].(string))
	}
	return out
}

// lastID is the id of the last event that has one.
func lastID(evs []chatEvent) int64 {
	var id int64
	for _, ev := range evs {
		id = max(id, ev.id)
	}
	return id
}

// pool opens a pool on the harness's database, for tests that check what
// the engine wrote in its tables; it closes with the test.
func (h *harness) pool() *pgxpool.Pool {
	h.t.Helper()
	p, err := pgxpool.New(h.t.Context(), h.db)
	require.NoError(h.t, err)
	h.t.Cleanup(p.Close)
	return p
}
