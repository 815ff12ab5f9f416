package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/llm/scripted"
	"github.com/helix-agents/helix-dbos/server"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

const wantCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// requireInspectorHeaders checks the security headers of an inspector
// response.
func requireInspectorHeaders(t *testing.T, res response, what string) {
	t.Helper()
	require.Equal(t, wantCSP, res.header.Get("Content-Security-Policy"), what)
	require.Equal(t, "nosniff", res.header.Get("X-Content-Type-Options"), what)
	require.Equal(t, "no-referrer", res.header.Get("Referrer-Policy"), what)
}

// get sends a GET without following redirects.
func (h *harness) get(path, user string) response {
	h.t.Helper()
	req, err := http.NewRequestWithContext(h.t.Context(), http.MethodGet, h.ts.URL+path, nil)
	require.NoError(h.t, err)
	if user != "" {
		req.Header.Set("Authorization", "Bearer "+user)
	}
	client := *h.ts.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	res, err := client.Do(req)
	require.NoError(h.t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(h.t, err)
	return response{status: res.StatusCode, header: res.Header, raw: raw}
}

// GET / leads to the inspector; its pages (deep links included) serve the
// shell and its assets with their types, without credentials (they hold no
// data), with the security headers; other paths under /inspector/ are 404.
func TestInspectorShellAndDeepLinks(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{echoAgent()}})

	for _, p := range []string{"/", "/inspector"} {
		res := h.get(p, "")
		require.Equal(t, http.StatusFound, res.status, p)
		loc, err := url.Parse(h.ts.URL + p)
		require.NoError(t, err)
		require.Equal(t, "/inspector/", loc.ResolveReference(&url.URL{Path: res.header.Get("Location")}).Path, p)
		requireInspectorHeaders(t, res, p)
	}
	pages := map[string]string{ // page -> how its assets are reached
		"/inspector/":                  "./assets/app.js",
		"/inspector/cluster":           "./assets/app.js",
		"/inspector/sessions/abc-123":  "./../assets/app.js",
		"/inspector/sessions/x%3Ay.z_": "./../assets/app.js",
	}
	for p, script := range pages {
		res := h.get(p, "")
		require.Equal(t, http.StatusOK, res.status, p)
		require.Equal(t, "text/html; charset=utf-8", res.header.Get("Content-Type"), p)
		require.Contains(t, string(res.raw), `<script src="`+script+`" defer></script>`, p)
		require.Contains(t, string(res.raw), `id="nav-sessions"`, p)
		requireInspectorHeaders(t, res, p)
		// The script resolves from the page to the asset route.
		base, err := url.Parse(h.ts.URL + p)
		require.NoError(t, err)
		require.Equal(t, "/inspector/assets/app.js", base.ResolveReference(&url.URL{Path: script}).Path, p)
	}
	for p, ctype := range map[string]string{
		"/inspector/assets/app.js":  "text/javascript; charset=utf-8",
		"/inspector/assets/app.css": "text/css; charset=utf-8",
	} {
		res := h.get(p, "")
		require.Equal(t, http.StatusOK, res.status, p)
		require.Equal(t, ctype, res.header.Get("Content-Type"), p)
		require.NotEmpty(t, res.raw, p)
		requireInspectorHeaders(t, res, p)
	}
	for _, p := range []string{"/inspector/assets/nope.js", "/inspector/assets/index.html", "/inspector/assets/../server.go",
		"/inspector/other", "/inspector/sessions/", "/inspector/sessions/a/b"} {
		res := h.get(p, "")
		require.Equal(t, http.StatusNotFound, res.status, p)
		requireInspectorHeaders(t, res, p)
	}
	res := h.do(http.MethodPost, "/inspector/", "alice", nil)
	require.Equal(t, http.StatusMethodNotAllowed, res.status)
	requireInspectorHeaders(t, res, "POST /inspector/")
	// Routes outside the inspector keep their own headers.
	res = h.get("/healthz", "")
	require.Empty(t, res.header.Get("Content-Security-Policy"))
}

// The shell and the script follow the rules the CSP enforces: no inline
// script, style or event handler in the shell, and no HTML parsing of
// data in the script (model and tool text is untrusted).
func TestInspectorAssetsHaveNoInlineCode(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{echoAgent()}})
	shell := string(h.get("/inspector/", "").raw)
	require.NotRegexp(t, `(?i)<script(\s[^>]*)?>[^<]`, shell, "inline script")
	require.NotRegexp(t, `(?i)<script(?:\s(?:[^>](?:[^s]|s[^r]|sr[^c]))*)?>`, shell[:0]) // (the next check is the one that matters)
	for _, tag := range regexp.MustCompile(`(?i)<script[^>]*>`).FindAllString(shell, -1) {
		require.Contains(t, tag, "src=", "every script is a file: %s", tag)
	}
	require.NotRegexp(t, `(?i)<style`, shell)
	require.NotRegexp(t, `(?i)\sstyle=`, shell)
	require.NotRegexp(t, `(?i)\son[a-z]+=`, shell, "inline event handler")
	script := string(h.get("/inspector/assets/app.js", "").raw)
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "setAttribute('on"} {
		require.NotContains(t, script, sink)
	}
}

// With DisableInspector, / and everything under /inspector/ are 404.
func TestInspectorDisabled(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{echoAgent()}, DisableInspector: true})
	for _, p := range []string{"/", "/inspector/", "/inspector/cluster", "/inspector/assets/app.js", "/inspector/api/sessions", "/inspector/api/cluster"} {
		res := h.get(p, "alice")
		require.Equal(t, http.StatusNotFound, res.status, p)
	}
}

// seedSessions inserts n root sessions straight into helix.sessions, one
// second apart (the newest last): session s-000 ... with agents a/b,
// statuses completed/failed/active, principals alice/bob by turns.
func seedSessions(t *testing.T, db string, n int, start time.Time) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), db)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(t.Context(), `INSERT INTO helix.sessions (session_id, agent_type, stream_id, root_session_id, status, user_id, created_at)
		SELECT 's-' || lpad(i::text, 3, '0'), (ARRAY['a','b'])[1 + i % 2], 's-' || lpad(i::text, 3, '0'), 's-' || lpad(i::text, 3, '0'),
		       (ARRAY['completed','failed','active'])[1 + i % 3], (ARRAY['alice','bob'])[1 + (i / 2) % 2], $1::timestamptz + i * interval '1 second'
		FROM generate_series(0, $2 - 1) i`, start, n)
	require.NoError(t, err)
	// A sub-agent session of s-000 (alice's): listed only with roots=false.
	_, err = conn.Exec(t.Context(), `INSERT INTO helix.sessions (session_id, agent_type, stream_id, parent_session_id, root_session_id, created_at)
		VALUES ('s-000-sub-c1', 'child', 's-000', 's-000', 's-000', $1)`, start.Add(500*time.Millisecond))
	require.NoError(t, err)
}

// listIDs lists sessions through the API and returns their IDs and the
// cursors.
func (h *harness) listIDs(user, query string) (ids []string, next, prev string) {
	h.t.Helper()
	res := h.do(http.MethodGet, "/inspector/api/sessions?"+query, user, nil)
	require.Equal(h.t, http.StatusOK, res.status, "query %s: %s", query, res.raw)
	requireInspectorHeaders(h.t, res, query)
	for _, s := range res.body["sessions"].([]any) {
		ids = append(ids, s.(map[string]any)["sessionId"].(string))
	}
	next, _ = res.body["nextCursor"].(string)
	prev, _ = res.body["prevCursor"].(string)
	return ids, next, prev
}

// expected lists the seeded sessions newest first that keep says to keep.
func expected(n int, keep func(i int) bool) []string {
	var out []string
	for i := n - 1; i >= 0; i-- {
		if keep(i) {
			out = append(out, fmt.Sprintf("s-%03d", i))
		}
	}
	return out
}

// The list pages by keyset, newest first, forward and back without a gap
// or a repeat; filters by status, agent, time and ID prefix; and shows an
// authenticated principal its own sessions only, whatever its principal
// filter says.
func TestInspectorListFiltersAndPaging(t *testing.T) {
	t.Parallel()
	db := pgtest.NewURL(t)
	h := newHarness(t, db, "", server.Config{Agents: []*helix.Agent{echoAgent()}})
	const n = 60
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	seedSessions(t, db, n, start)
	alice := func(i int) bool { return (i/2)%2 == 0 }

	// Paging forward through alice's 30 sessions, 7 at a time, then back.
	var pages [][]string
	var seen []string
	ids, next, prev := h.listIDs("alice", "limit=7")
	require.Empty(t, prev, "the first page has no newer page")
	for {
		pages = append(pages, ids)
		seen = append(seen, ids...)
		if next == "" {
			break
		}
		ids, next, prev = h.listIDs("alice", "limit=7&after="+next)
		require.NotEmpty(t, prev)
	}
	require.Equal(t, expected(n, alice), seen)
	require.Len(t, pages, 5)
	for i := len(pages) - 2; i >= 0; i-- {
		ids, _, prev = h.listIDs("alice", "limit=7&before="+prev)
		require.Equal(t, pages[i], ids, "page %d, going back", i)
	}
	require.Empty(t, prev, "back on the first page")

	// Filters, alone and together; the principal filter cannot widen.
	cases := map[string]func(i int) bool{
		"status=failed":         func(i int) bool { return alice(i) && i%3 == 1 },
		"agent=b":               func(i int) bool { return alice(i) && i%2 == 1 },
		"status=active&agent=a": func(i int) bool { return alice(i) && i%3 == 2 && i%2 == 0 },
		"q=s-01":                func(i int) bool { return alice(i) && i >= 10 && i < 20 },
		"q=s-013":               func(i int) bool { return alice(i) && i == 13 },
		"q=s_01":                func(int) bool { return false }, // _ is not a wildcard
		"principal=bob":         alice,
		"from=" + start.Add(40*time.Second).Format(time.RFC3339): func(i int) bool { return alice(i) && i >= 40 },
		"to=" + start.Add(9*time.Second).Format(time.RFC3339):    func(i int) bool { return alice(i) && i < 9 },
	}
	for query, keep := range cases {
		ids, _, _ := h.listIDs("alice", query+"&limit=200")
		require.Equal(t, expected(n, keep), ids, query)
	}
	// roots=false adds the sub-agent session, still the owner's only.
	ids, _, _ = h.listIDs("alice", "roots=false&q=s-000")
	require.Equal(t, []string{"s-000-sub-c1", "s-000"}, ids)
	ids, _, _ = h.listIDs("bob", "roots=false&q=s-000")
	require.Empty(t, ids)

	for _, bad := range []string{"status=running", "limit=0", "limit=201", "from=yesterday", "after=zz", "after=a&before=b", "roots=maybe"} {
		res := h.do(http.MethodGet, "/inspector/api/sessions?"+bad, "alice", nil)
		require.Equal(t, http.StatusBadRequest, res.status, bad)
		require.Equal(t, "invalid_request", res.errCode(), bad)
	}
}

// Without Authenticate (--allow-unauthenticated) the principal filter
// selects the sessions of that principal.
func TestInspectorListPrincipalFilterUnauthenticated(t *testing.T) {
	t.Parallel()
	db := pgtest.NewURL(t)
	h := newHarness(t, db, "", server.Config{Agents: []*helix.Agent{echoAgent()}, AllowUnauthenticated: true})
	seedSessions(t, db, 12, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ids, _, _ := h.listIDs("", "principal=bob")
	require.Equal(t, expected(12, func(i int) bool { return (i/2)%2 == 1 }), ids)
	ids, _, _ = h.listIDs("", "")
	require.Len(t, ids, 12)
}

// Every inspector data route authenticates, and a principal reads only its
// own sessions: another principal's session, and its sub-agent sessions,
// are 404 session_not_found and not listed.
func TestInspectorScoping(t *testing.T) {
	t.Parallel()
	child := &helix.Agent{Name: "child", OutputSchema: []byte(`{"type":"object","properties":{"v":{"type":"integer"}},"required":["v"]}`)}
	child.Model = scriptedOutput(map[string]any{"v": 1})
	lead := &helix.Agent{Name: "lead", Tools: []*helix.Tool{helix.MustSubAgentTool(child, nil, nil)}, Model: leadScript()}
	h := newHarness(t, "", "exec-scoping", server.Config{Agents: []*helix.Agent{lead}})
	bobs, _ := h.start("bob", map[string]any{"agentType": "lead", "message": "delegate"})
	alices, _ := h.start("alice", map[string]any{"agentType": "lead", "message": "delegate"})
	h.waitStatus("bob", bobs, "completed")
	h.waitStatus("alice", alices, "completed")
	refs, err := h.eng.SubSessions(t.Context(), bobs)
	require.NoError(t, err)
	require.Len(t, refs, 1)

	for _, p := range []string{"/inspector/api/sessions", "/inspector/api/session?sessionId=" + bobs, "/inspector/api/cluster"} {
		res := h.do(http.MethodGet, p, "", nil)
		require.Equal(t, http.StatusUnauthorized, res.status, p)
		require.Equal(t, "unauthenticated", res.errCode(), p)
		requireInspectorHeaders(t, res, p)
	}
	for _, id := range []string{bobs, refs[0].SubSessionID, "no-such-session"} {
		res := h.do(http.MethodGet, "/inspector/api/session?sessionId="+id, "alice", nil)
		require.Equal(t, http.StatusNotFound, res.status, id)
		require.Equal(t, "session_not_found", res.errCode(), id)
		requireInspectorHeaders(t, res, id)
	}
	ids, _, _ := h.listIDs("alice", "principal=bob&roots=false")
	require.NotContains(t, ids, bobs)
	require.NotContains(t, ids, refs[0].SubSessionID)
	require.Contains(t, ids, alices)
	ids, _, _ = h.listIDs("alice", "q="+bobs)
	require.Empty(t, ids)

	// The owner reads both, the sub-agent session through its root.
	res := h.do(http.MethodGet, "/inspector/api/session?sessionId="+refs[0].SubSessionID, "bob", nil)
	require.Equal(t, http.StatusOK, res.status, "body: %s", res.raw)
	require.Equal(t, bobs, res.body["session"].(map[string]any)["rootSessionId"])
	res = h.do(http.MethodGet, "/inspector/api/session?sessionId="+bobs, "bob", nil)
	require.Equal(t, http.StatusOK, res.status, "body: %s", res.raw)
	children := res.body["children"].([]any)
	require.Len(t, children, 1)
	require.Equal(t, refs[0].SubSessionID, children[0].(map[string]any)["subSessionId"])

	// The cluster: this server's executor, alive.
	res = h.do(http.MethodGet, "/inspector/api/cluster", "alice", nil)
	require.Equal(t, http.StatusOK, res.status, "body: %s", res.raw)
	var mine map[string]any
	for _, e := range res.body["executors"].([]any) {
		if e.(map[string]any)["executorId"] == "exec-scoping" {
			mine = e.(map[string]any)
		}
	}
	require.NotNil(t, mine, "executors: %s", res.raw)
	require.Equal(t, true, mine["alive"])
	require.InDelta(t, float64(postgres.FormatLevelNewest), mine["formatLevel"], 0, "the format level it reads")
	require.InDelta(t, float64(postgres.FormatLevelNewest), res.body["formatLevel"], 0, "the cluster's: no older executor is alive")
	require.InDelta(t, float64(postgres.FormatLevelNewest), res.body["newestFormatLevel"], 0)
	require.NotNil(t, res.body["queues"])
}

// The session page's data: the transcript with the tool call, its
// arguments and (after the approval, given through the API as the page
// does) its result; the pending call while it waits; the runs and
// checkpoints of the timeline; the structured output.
func TestInspectorSessionPage(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{approverAgent(&runs), reportAgent()}})
	id, _ := h.start("alice", map[string]any{"agentType": "approver", "message": "pay bob <script>alert(1)</script>"})
	h.waitStatus("alice", id, "suspended_client_tool")

	page := h.do(http.MethodGet, "/inspector/api/session?sessionId="+id, "alice", nil)
	require.Equal(t, http.StatusOK, page.status, "body: %s", page.raw)
	sess := page.body["session"].(map[string]any)
	require.Equal(t, "suspended_client_tool", sess["status"])
	pending := sess["pendingToolCalls"].([]any)
	require.Len(t, pending, 1)
	require.Equal(t, "t1", pending[0].(map[string]any)["toolCallId"])
	require.Equal(t, "approval-response", pending[0].(map[string]any)["kind"])
	require.JSONEq(t, `{"to":"bob","amount":5}`, string(mustMarshal(t, pending[0].(map[string]any)["input"])))
	msgs := page.body["messages"].([]any)
	require.Equal(t, "pay bob <script>alert(1)</script>", msgs[0].(map[string]any)["content"], "text is returned as it is, for the page to render as text")

	res := h.do(http.MethodPost, "/submit-tool-result", "alice", map[string]any{"sessionId": id, "kind": "approval-response", "toolCallId": "t1", "approved": true})
	require.Equal(t, http.StatusOK, res.status, "body: %s", res.raw)
	h.waitStatus("alice", id, "completed")
	require.Equal(t, int32(1), runs.Load())

	page = h.do(http.MethodGet, "/inspector/api/session?sessionId="+id, "alice", nil)
	require.Equal(t, http.StatusOK, page.status)
	sess = page.body["session"].(map[string]any)
	require.Empty(t, sess["pendingToolCalls"])
	var result map[string]any
	var calls []any
	for _, m := range page.body["messages"].([]any) {
		if m.(map[string]any)["toolCallId"] == "t1" {
			result = m.(map[string]any)
		}
		if c, ok := m.(map[string]any)["toolCalls"].([]any); ok {
			calls = c
		}
	}
	require.Len(t, calls, 1)
	require.Equal(t, "t1", calls[0].(map[string]any)["id"])
	require.JSONEq(t, `{"to":"bob","amount":5}`, string(mustMarshal(t, calls[0].(map[string]any)["arguments"])))
	require.NotNil(t, result, "the tool's result is in the transcript")
	require.JSONEq(t, `{"sent":5}`, result["content"].(string))
	runList := sess["runs"].([]any)
	require.Len(t, runList, 1)
	runID := runList[0].(map[string]any)["runId"]
	cps := page.body["checkpoints"].([]any)
	require.Len(t, cps, 2)
	for i, c := range cps {
		require.Equal(t, runID, c.(map[string]any)["runId"])
		require.InDelta(t, i+1, c.(map[string]any)["stepCount"], 0)
	}

	rid, _ := h.start("alice", map[string]any{"agentType": "report", "message": "compute"})
	h.waitStatus("alice", rid, "completed")
	page = h.do(http.MethodGet, "/inspector/api/session?sessionId="+rid, "alice", nil)
	require.JSONEq(t, `{"answer":42}`, string(mustMarshal(t, page.body["session"].(map[string]any)["output"])))
}

// POST /retry runs a failed session again and POST /branch starts a new
// session of the caller from a checkpoint; both are scoped like every
// session route and check that the checkpoint is the session's.
func TestRetryAndBranchRoutes(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{approverAgent(&runs), echoAgent()}})
	id, _ := h.start("alice", map[string]any{"agentType": "approver", "message": "pay"})
	h.waitStatus("alice", id, "suspended_client_tool")
	res := h.do(http.MethodPost, "/retry", "alice", map[string]any{"sessionId": id})
	require.Equal(t, http.StatusConflict, res.status, "a running session is not retried: %s", res.raw)
	require.Equal(t, "already_running", res.errCode())
	res = h.do(http.MethodPost, "/abort", "alice", map[string]any{"sessionId": id})
	require.Equal(t, http.StatusOK, res.status, "body: %s", res.raw)
	h.waitStatus("alice", id, "failed")

	other, _ := h.start("bob", map[string]any{"agentType": "echo", "message": "x"})
	h.waitStatus("bob", other, "completed")
	page := h.do(http.MethodGet, "/inspector/api/session?sessionId="+other, "bob", nil)
	bobsCheckpoint := page.body["checkpoints"].([]any)[0].(map[string]any)["id"].(string)

	for _, c := range []struct {
		user   string
		body   map[string]any
		status int
		code   string
	}{
		{"bob", map[string]any{"sessionId": id}, http.StatusNotFound, "session_not_found"},
		{"", map[string]any{"sessionId": id}, http.StatusUnauthorized, "unauthenticated"},
		{"alice", map[string]any{"sessionId": id, "checkpointId": bobsCheckpoint}, http.StatusNotFound, "checkpoint_not_found"},
		{"alice", map[string]any{"sessionId": id, "checkpointId": "cpv1-nope"}, http.StatusNotFound, "checkpoint_not_found"},
		{"alice", map[string]any{"sessionId": id, "checkpointId": "x", "fromStart": true}, http.StatusBadRequest, "invalid_request"},
		{"alice", map[string]any{"sessionId": id, "mode": "x"}, http.StatusBadRequest, "unknown_field"},
	} {
		res := h.do(http.MethodPost, "/retry", c.user, c.body)
		require.Equal(t, c.status, res.status, "%v: %s", c.body, res.raw)
		require.Equal(t, c.code, res.errCode(), "%v", c.body)
	}
	res = h.do(http.MethodPost, "/retry", "alice", map[string]any{"sessionId": id})
	require.Equal(t, http.StatusAccepted, res.status, "body: %s", res.raw)
	require.Equal(t, id, res.body["sessionId"])
	h.waitStatus("alice", id, "suspended_client_tool") // the retried step asks again
	res = h.do(http.MethodPost, "/submit-tool-result", "alice", map[string]any{"sessionId": id, "kind": "approval-response", "toolCallId": "t1", "approved": true})
	require.Equal(t, http.StatusOK, res.status, "body: %s", res.raw)
	h.waitStatus("alice", id, "completed")
	require.Equal(t, int32(1), runs.Load())

	// Branch bob's completed session from its first checkpoint.
	for _, c := range []struct {
		user   string
		body   map[string]any
		status int
		code   string
	}{
		{"alice", map[string]any{"sessionId": other}, http.StatusNotFound, "session_not_found"},
		{"bob", map[string]any{"sessionId": other, "checkpointId": "cpv1-nope"}, http.StatusNotFound, "checkpoint_not_found"},
		{"bob", map[string]any{"sessionId": other, "newSessionId": id}, http.StatusConflict, "already_running"},
		{"bob", map[string]any{"sessionId": other, "newSessionId": "bad id"}, http.StatusBadRequest, "invalid_request"},
	} {
		res := h.do(http.MethodPost, "/branch", c.user, c.body)
		require.Equal(t, c.status, res.status, "%v: %s", c.body, res.raw)
		require.Equal(t, c.code, res.errCode(), "%v", c.body)
	}
	res = h.do(http.MethodPost, "/branch", "bob", map[string]any{"sessionId": other, "checkpointId": bobsCheckpoint,
		"newSessionId": "bobs-branch", "message": "again"})
	require.Equal(t, http.StatusAccepted, res.status, "body: %s", res.raw)
	require.Equal(t, "bobs-branch", res.body["sessionId"])
	require.True(t, strings.HasPrefix(res.body["streamUrl"].(string), "/sse?"))
	h.waitStatus("bob", "bobs-branch", "completed")
	branch := h.do(http.MethodGet, "/inspector/api/session?sessionId=bobs-branch", "bob", nil)
	var texts []string
	for _, m := range branch.body["messages"].([]any) {
		texts = append(texts, m.(map[string]any)["content"].(string))
	}
	require.Equal(t, []string{"x", "first answer", "again", "second answer"}, texts, "the branch goes on from the checkpoint")
	require.Equal(t, http.StatusNotFound, h.status("alice", "bobs-branch").status, "the branch is its creator's")
	ids, _, _ := h.listIDs("bob", "q=bobs-")
	require.Equal(t, []string{"bobs-branch"}, ids)
}

// Mounted under a prefix with http.StripPrefix, the inspector's relative
// links reach its pages and assets under that prefix.
func TestInspectorUnderPrefix(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{echoAgent()}})
	mux := http.NewServeMux()
	mux.Handle("/p/", http.StripPrefix("/p", h.srv.Handler()))
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	client := *ts.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	get := func(u *url.URL) *http.Response {
		res, err := client.Get(u.String())
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		require.NoError(t, res.Body.Close())
		return res
	}
	root, err := url.Parse(ts.URL + "/p/")
	require.NoError(t, err)
	res := get(root)
	require.Equal(t, http.StatusFound, res.StatusCode)
	list := root.ResolveReference(&url.URL{Path: res.Header.Get("Location")})
	require.Equal(t, "/p/inspector/", list.Path)
	require.Equal(t, http.StatusOK, get(list).StatusCode)
	page := root.ResolveReference(&url.URL{Path: "inspector/sessions/s-1"})
	require.Equal(t, http.StatusOK, get(page).StatusCode)
	require.Equal(t, http.StatusOK, get(page.ResolveReference(&url.URL{Path: "./../assets/app.js"})).StatusCode)
}

// The session page's tree holds the sub-agents of sub-agents.
func TestInspectorTree(t *testing.T) {
	t.Parallel()
	schema := []byte(`{"type":"object","properties":{"v":{"type":"integer"}},"required":["v"]}`)
	leaf := &helix.Agent{Name: "leaf", OutputSchema: schema, Model: scriptedOutput(map[string]any{"v": 2})}
	mid := &helix.Agent{Name: "mid", OutputSchema: schema, Tools: []*helix.Tool{helix.MustSubAgentTool(leaf, nil, nil)},
		Model: scripted.New(
			scripted.Step{ToolCalls: []scripted.Call{{ID: "m1", Name: helix.SubAgentToolPrefix + "leaf", Args: map[string]any{"task": "deeper"}}}},
			scripted.Step{Output: map[string]any{"v": 1}},
		)}
	lead := &helix.Agent{Name: "lead", Tools: []*helix.Tool{helix.MustSubAgentTool(mid, nil, nil)}, Model: scripted.New(
		scripted.Step{ToolCalls: []scripted.Call{{ID: "s1", Name: helix.SubAgentToolPrefix + "mid", Args: map[string]any{"task": "check"}}}},
		scripted.Step{Text: "ok"},
	)}
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{lead}})
	id, _ := h.start("alice", map[string]any{"agentType": "lead", "message": "delegate"})
	h.waitStatus("alice", id, "completed")
	page := h.do(http.MethodGet, "/inspector/api/session?sessionId="+id, "alice", nil)
	require.Equal(t, http.StatusOK, page.status, "body: %s", page.raw)
	children := page.body["children"].([]any)
	require.Len(t, children, 1)
	midNode := children[0].(map[string]any)
	require.Equal(t, "mid", midNode["agentType"])
	grand := midNode["children"].([]any)
	require.Len(t, grand, 1)
	require.Equal(t, "leaf", grand[0].(map[string]any)["agentType"])
	require.Empty(t, grand[0].(map[string]any)["children"])
	require.Nil(t, page.body["childrenTruncated"])
}

// The cluster page lists, under the executor that holds them, the
// caller's waiting sessions and no other principal's.
func TestInspectorClusterOwnership(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	h := newHarness(t, "", "exec-owner", server.Config{Agents: []*helix.Agent{approverAgent(&runs)}})
	alices, _ := h.start("alice", map[string]any{"agentType": "approver", "message": "pay"})
	bobs, _ := h.start("bob", map[string]any{"agentType": "approver", "message": "pay"})
	h.waitStatus("alice", alices, "suspended_client_tool")
	h.waitStatus("bob", bobs, "suspended_client_tool")
	executor := func(user string) map[string]any {
		res := h.do(http.MethodGet, "/inspector/api/cluster", user, nil)
		require.Equal(t, http.StatusOK, res.status, "body: %s", res.raw)
		for _, e := range res.body["executors"].([]any) {
			if e.(map[string]any)["executorId"] == "exec-owner" {
				return e.(map[string]any)
			}
		}
		t.Fatalf("no executor exec-owner: %s", res.raw)
		return nil
	}
	for user, id := range map[string]string{"alice": alices, "bob": bobs} {
		e := executor(user)
		require.InDelta(t, 2, e["sessionsOwned"], 0, "the count is the cluster's")
		require.Equal(t, []any{id}, e["sessions"], "%s sees only its own session", user)
	}
}
