package server_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/internal/browser"
	"github.com/helix-agents/helix-dbos/llm/scripted"
	"github.com/helix-agents/helix-dbos/server"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// The browser tests drive the inspector as a user does, in headless
// Chromium (internal/browser), over a real server and engine. The token
// is the principal's name (bearerAuth).
//
// HELIX_INSPECTOR_SCREENSHOTS=DIR writes the main pages' screenshots
// there (docs/img for docs/inspector.md):
//
//	HELIX_INSPECTOR_SCREENSHOTS=$PWD/docs/img go test ./server -run TestInspectorBrowser

// openAs opens a page of the inspector with user's token in sessionStorage,
// as the token form leaves it ("" for none).
func openAs(t *testing.T, h *harness, user, path string) context.Context {
	t.Helper()
	ctx := browser.New(t, nil)
	var opts *browser.NavigateOpts
	if user != "" {
		opts = &browser.NavigateOpts{SessionStorage: map[string]string{"helix.token": user}}
	}
	browser.Navigate(t, ctx, h.ts.URL+path, opts)
	return ctx
}

// screenshot writes the page to HELIX_INSPECTOR_SCREENSHOTS/name, when set.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if dir := os.Getenv("HELIX_INSPECTOR_SCREENSHOTS"); dir != "" {
		browser.Screenshot(t, ctx, filepath.Join(dir, name))
	}
}

// setValue sets an input's value as typing would.
func setValue(t *testing.T, ctx context.Context, selector, value string) {
	t.Helper()
	browser.WaitVisible(t, ctx, selector)
	browser.Do(t, ctx, chromedp.SetValue(chromedp.CSS(selector), value))
}

// The list shows the principal's sessions only, links each to its page,
// and filters by ID; without a token the page asks for one and keeps it.
func TestInspectorBrowserList(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{echoAgent()}})
	mine, _ := h.start("alice", map[string]any{"agentType": "echo", "message": "hi", "sessionId": "alice-one"})
	other, _ := h.start("alice", map[string]any{"agentType": "echo", "message": "hi", "sessionId": "alice-two"})
	bobs, _ := h.start("bob", map[string]any{"agentType": "echo", "message": "hi", "sessionId": "bob-one"})
	for _, id := range []string{mine, other} {
		h.waitStatus("alice", id, "completed")
	}
	h.waitStatus("bob", bobs, "completed")

	ctx := openAs(t, h, "", "/")
	browser.WaitVisible(t, ctx, "#token-form")
	setValue(t, ctx, "input#token", "alice")
	browser.Click(t, ctx, "button#token-save")
	browser.WaitVisible(t, ctx, `table#sessions tr[data-session-id="alice-two"]`)
	require.Equal(t, 2, browser.Eval[int](t, ctx, `document.querySelectorAll('table#sessions tr[data-session-id]').length`),
		"alice's two sessions, not bob's")
	require.Equal(t, "/inspector/sessions/alice-one",
		browser.Eval[string](t, ctx, `new URL(document.querySelector('tr[data-session-id="alice-one"] a.session-link').href).pathname`))
	screenshot(t, ctx, "inspector-sessions.png")

	setValue(t, ctx, "input#search", "alice-o")
	browser.Click(t, ctx, "button#apply-filters")
	browser.WaitText(t, ctx, "#main .pager", "1 shown")
	require.Equal(t, []string{"alice-one"}, browser.Eval[[]string](t, ctx,
		`[...document.querySelectorAll('tr[data-session-id]')].map(r => r.dataset.sessionId)`))

	browser.Click(t, ctx, `tr[data-session-id="alice-one"] a.session-link`)
	browser.WaitText(t, ctx, "#session-status", "completed")
	browser.RequireNoProblems(t, ctx)
}

// A running session's page shows its steps as they commit, from the
// stream, without a reload.
func TestInspectorBrowserLiveSteps(t *testing.T) {
	t.Parallel()
	started, release := make(chan string, 2), make(chan struct{})
	work := helix.MustNewTool("work", "Work a while", func(ctx context.Context, in struct {
		N int `json:"n"`
	}, tc helix.ToolContext) (map[string]int, error) {
		started <- tc.ToolCallID()
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return map[string]int{"done": in.N}, nil
	})
	agent := &helix.Agent{Name: "worker", Tools: []*helix.Tool{work}, Model: scripted.New(
		scripted.Step{ToolCalls: []scripted.Call{{ID: "w1", Name: "work", Args: map[string]any{"n": 1}}}},
		scripted.Step{ToolCalls: []scripted.Call{{ID: "w2", Name: "work", Args: map[string]any{"n": 2}}}},
		scripted.Step{Text: "all done"},
	)}
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{agent}})
	id, _ := h.start("alice", map[string]any{"agentType": "worker", "message": "go"})
	require.Equal(t, "w1", <-started)

	ctx := openAs(t, h, "alice", "/inspector/sessions/"+id)
	browser.WaitText(t, ctx, "#live", "live")
	browser.WaitText(t, ctx, "#session-status", "running")
	require.Zero(t, browser.Eval[int](t, ctx, `document.querySelectorAll('#timeline .step[data-step]').length`))

	release <- struct{}{}
	require.Equal(t, "w2", <-started)
	browser.WaitVisible(t, ctx, `#timeline .run .step[data-step="1"]`)
	browser.WaitText(t, ctx, `.tool-call[data-tool-call-id="w1"] .tool-result`, `"done": 1`)
	release <- struct{}{}
	browser.WaitText(t, ctx, "#session-status", "completed")
	browser.WaitVisible(t, ctx, `#timeline .step[data-step="3"]`)
	browser.WaitText(t, ctx, `#transcript .message[data-role="assistant"]:last-child`, "all done")
	browser.WaitText(t, ctx, "#live", "ended")
	browser.RequireNoProblems(t, ctx)
}

// Approving a waiting call from the page lets the run continue: the tool
// runs once and the session completes.
func TestInspectorBrowserApprove(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{approverAgent(&runs)}})
	id, _ := h.start("alice", map[string]any{"agentType": "approver", "message": "pay bob"})
	h.waitStatus("alice", id, "suspended_client_tool")

	ctx := openAs(t, h, "alice", "/inspector/sessions/"+id)
	browser.WaitText(t, ctx, `.pending-call[data-tool-call-id="t1"] .tool-args`, `"amount": 5`)
	screenshot(t, ctx, "inspector-session.png")
	browser.Click(t, ctx, `.pending-call[data-tool-call-id="t1"] button.approve`)
	browser.WaitText(t, ctx, "#session-status", "completed")
	browser.WaitText(t, ctx, `.tool-call[data-tool-call-id="t1"] .tool-result`, `"sent": 5`)
	require.Equal(t, int32(1), runs.Load())
	require.Zero(t, browser.Eval[int](t, ctx, `document.querySelectorAll('#pending .pending-call').length`))
	browser.RequireNoProblems(t, ctx)
}

// A client tool's result typed into the page is submitted; interrupt and
// resume ask for a confirmation, and Cancel does nothing.
func TestInspectorBrowserClientToolAndActions(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{askerAgent()}})
	id, _ := h.start("alice", map[string]any{"agentType": "asker", "message": "ask me"})
	h.waitStatus("alice", id, "suspended_client_tool")

	ctx := openAs(t, h, "alice", "/inspector/sessions/"+id)
	browser.WaitVisible(t, ctx, `.pending-call[data-tool-call-id="q1"] textarea.result-input`)
	require.True(t, browser.Eval[bool](t, ctx, `(window.resumeButton = document.querySelector('#action-resume')).disabled`))
	browser.Click(t, ctx, "button#action-interrupt")
	browser.WaitVisible(t, ctx, "dialog#confirm")
	browser.Click(t, ctx, "button#confirm-no")
	require.Equal(t, "suspended_client_tool", h.status("alice", id).body["status"], "cancelled: nothing sent")
	browser.Click(t, ctx, "button#action-interrupt")
	browser.WaitVisible(t, ctx, "dialog#confirm")
	browser.Click(t, ctx, "button#confirm-yes")
	browser.WaitText(t, ctx, "#session-status", "interrupted")
	// The page drew the session again (its status changed) with the same
	// buttons, their state updated: a refresh never replaces a button under
	// the user's pointer (a click on it would be lost).
	require.True(t, browser.Eval[bool](t, ctx, `document.querySelector('#action-resume') === window.resumeButton && !window.resumeButton.disabled`))
	browser.Click(t, ctx, "button#action-resume")
	browser.Click(t, ctx, "button#confirm-yes")
	browser.WaitText(t, ctx, "#session-status", "suspended_client_tool")

	setValue(t, ctx, `.pending-call[data-tool-call-id="q1"] textarea.result-input`, `{"answer": ""}`)
	browser.Click(t, ctx, `.pending-call[data-tool-call-id="q1"] button.submit-result`)
	browser.WaitText(t, ctx, "#error", "rejected") // the API's own check of the tool's output schema
	setValue(t, ctx, `.pending-call[data-tool-call-id="q1"] textarea.result-input`, `{"answer": "blue"}`)
	browser.Click(t, ctx, `.pending-call[data-tool-call-id="q1"] button.submit-result`)
	browser.WaitText(t, ctx, "#session-status", "completed")
	browser.WaitText(t, ctx, `.tool-call[data-tool-call-id="q1"] .tool-result`, `"answer": "blue"`)
	require.True(t, browser.Eval[bool](t, ctx, `document.querySelector('#error').hidden`), "the error went with the answer")
}

// Model and tool text is shown as text: a tool result with a <script> and
// an <img onerror> neither runs nor becomes an element, and the page
// reports no problem (no CSP violation either).
func TestInspectorBrowserUntrustedText(t *testing.T) {
	t.Parallel()
	const payload = `<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">`
	fetchPage := helix.MustNewTool("fetch_page", "Fetch a page", func(ctx context.Context, in struct{}, tc helix.ToolContext) (map[string]string, error) {
		return map[string]string{"html": payload}, nil
	})
	agent := &helix.Agent{Name: "reader", Tools: []*helix.Tool{fetchPage}, Model: scripted.New(
		scripted.Step{Text: "Reading " + payload, ToolCalls: []scripted.Call{{ID: "f1", Name: "fetch_page", Args: map[string]any{}}}},
		scripted.Step{Text: "It says " + payload},
	)}
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{agent}})
	id, _ := h.start("alice", map[string]any{"agentType": "reader", "message": "read " + payload})
	h.waitStatus("alice", id, "completed")

	ctx := openAs(t, h, "alice", "/inspector/sessions/"+id)
	got := browser.WaitText(t, ctx, `.tool-call[data-tool-call-id="f1"] .tool-result`, "<script>")
	require.Contains(t, got, `window.pwned = 1</script><img src=x onerror=\"window.pwned = 2\">`)
	browser.WaitText(t, ctx, `.message[data-role="user"]`, payload)
	require.True(t, browser.Eval[bool](t, ctx, `window.pwned === undefined`))
	require.Zero(t, browser.Eval[int](t, ctx, `document.querySelectorAll('#main script, #main img').length`))
	browser.RequireNoProblems(t, ctx)
}

// Another principal's session is refused as a missing one.
func TestInspectorBrowserOtherPrincipal(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{echoAgent()}})
	id, _ := h.start("bob", map[string]any{"agentType": "echo", "message": "secret plans"})
	h.waitStatus("bob", id, "completed")

	ctx := openAs(t, h, "alice", "/inspector/sessions/"+id)
	browser.WaitText(t, ctx, "#error", "Session not found")
	require.False(t, browser.Eval[bool](t, ctx, `document.body.innerText.includes('secret plans')`))
	require.True(t, browser.Eval[bool](t, ctx, `document.querySelector('#transcript') === null`))
}

// The cluster page lists the live executor and what it owns: the count of
// the cluster, and links to the caller's own sessions only.
func TestInspectorBrowserCluster(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	h := newHarness(t, "", "browser-exec", server.Config{Agents: []*helix.Agent{approverAgent(&runs)}})
	alices, _ := h.start("alice", map[string]any{"agentType": "approver", "message": "pay"})
	bobs, _ := h.start("bob", map[string]any{"agentType": "approver", "message": "pay"})
	h.waitStatus("alice", alices, "suspended_client_tool")
	h.waitStatus("bob", bobs, "suspended_client_tool")

	ctx := openAs(t, h, "alice", "/inspector/cluster")
	row := `table#executors tr[data-executor-id="browser-exec"]`
	browser.WaitText(t, ctx, row, "alive")
	browser.WaitVisible(t, ctx, row+` td.owned a[href$="/inspector/sessions/`+alices+`"]`)
	require.Equal(t, "2", browser.Eval[string](t, ctx, `document.querySelector('`+row+` td.owned').firstChild.textContent`))
	require.False(t, browser.Eval[bool](t, ctx, `document.body.innerText.includes('`+bobs+`')`), "bob's session is not named")
	require.Equal(t, strconv.Itoa(int(postgres.FormatLevelNewest)), browser.Eval[string](t, ctx, `document.querySelector('`+row+` td.format-level').textContent`),
		"the storage format level the executor reads")
	browser.WaitText(t, ctx, "p#format-level", "(the newest)")
	browser.Click(t, ctx, "a#nav-sessions")
	browser.WaitVisible(t, ctx, `table#sessions tr[data-session-id="`+alices+`"]`)
	browser.Click(t, ctx, "a#nav-cluster")
	browser.WaitVisible(t, ctx, row)
	screenshot(t, ctx, "inspector-cluster.png")
	browser.RequireNoProblems(t, ctx)
}
