package engine_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/helixtest"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/mcp"
)

// mcpServer is an MCP server over streamable HTTP on 127.0.0.1 with an
// "echo" tool that reports the idempotency keys it was called with.
type mcpServer struct {
	*sdk.Server
	URL string

	mu   sync.Mutex
	keys []string
}

func newMCPServer(t *testing.T) *mcpServer {
	t.Helper()
	s := &mcpServer{Server: sdk.NewServer(&sdk.Implementation{Name: "kb", Version: "1"}, nil)}
	type in struct {
		Text string `json:"text"`
	}
	sdk.AddTool(s.Server, &sdk.Tool{Name: "echo", Description: "Echoes text."},
		func(_ context.Context, req *sdk.CallToolRequest, i in) (*sdk.CallToolResult, map[string]string, error) {
			key, _ := req.Params.Meta[mcp.IdempotencyKeyMeta].(string)
			s.mu.Lock()
			s.keys = append(s.keys, key)
			s.mu.Unlock()
			return nil, map[string]string{"echo": i.Text}, nil
		})
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.Server }, nil))
	t.Cleanup(hs.Close)
	s.URL = hs.URL
	return s
}

// toolNames returns the names of the tools a model request offers.
func toolNames(req helix.ModelRequest) []string {
	var out []string
	for _, t := range req.Tools {
		out = append(out, t.Name)
	}
	return out
}

// addEmptyTool adds a tool named name that returns nothing: a change of the
// server's list.
func (s *mcpServer) addEmptyTool(name string) {
	s.AddTool(&sdk.Tool{Name: name, InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{}, nil
		})
}

// sentKeys returns the idempotency keys echo was called with.
func (s *mcpServer) sentKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.keys)
}

// mcpClient returns a client of s, closed at the test's end.
func mcpClient(t *testing.T, s mcp.Server) *mcp.Client {
	t.Helper()
	c, err := mcp.NewClient(s)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// offeredTools records the tool names each model request offered.
type offeredTools struct {
	mu    sync.Mutex
	lists [][]string
}

// then returns step, which records its request's tools first.
func (o *offeredTools) then(step func(helix.ModelRequest, helix.StreamCallbacks) (helix.StepResult, error)) func(helix.ModelRequest, helix.StreamCallbacks) (helix.StepResult, error) {
	return func(req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
		o.mu.Lock()
		o.lists = append(o.lists, toolNames(req))
		o.mu.Unlock()
		return step(req, cb)
	}
}

// all returns the recorded lists, one per model request.
func (o *offeredTools) all() [][]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.lists)
}

// An agent takes tools from an MCP server: the model is offered them, a
// call goes to the server with its idempotency key and its result comes
// back; the run keeps the list it began with when the server's changes
// mid-run, and the next run sees the new one.
func TestMCPToolsPinnedPerRun(t *testing.T) {
	t.Parallel()
	srv := newMCPServer(t)
	client := mcpClient(t, mcp.Server{Name: "kb", URL: srv.URL})

	var offered offeredTools
	agent := &helix.Agent{Name: "mcp-user", ToolSources: []helix.ToolSource{client}, Model: script(
		offered.then(func(req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
			// The server's list changes while the run goes on.
			srv.addEmptyTool("later")
			return calls(call("c1", "kb__echo", `{"text":"hi"}`))(req, cb)
		}),
		offered.then(text("echoed")),
		offered.then(text("second turn")),
	)}
	e := newEngine(t, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "echo hi"}, nil)
	require.NoError(t, err)
	res := result(t, h)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)

	var toolResult string
	for _, m := range allMessages(t, e, h.SessionID) {
		if m.Role == helix.RoleTool && m.ToolCallID == "c1" {
			toolResult = m.Content
		}
	}
	require.JSONEq(t, `{"echo":"hi"}`, toolResult)
	keys := srv.sentKeys()
	require.Len(t, keys, 1, "the call went to the server once")
	require.NotEmpty(t, keys[0], "with its idempotency key")

	h2, err := e.Execute(t.Context(), agent, engine.Input{Message: "again"}, &engine.ExecuteOptions{SessionID: h.SessionID})
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, result(t, h2).Status)

	lists := offered.all()
	require.Len(t, lists, 3)
	for i, names := range lists {
		require.Contains(t, names, "kb__echo", "model call %d", i)
	}
	require.NotContains(t, lists[0], "kb__later")
	require.NotContains(t, lists[1], "kb__later", "the run keeps the list it began with")
	require.Contains(t, lists[2], "kb__later", "the next run lists the server again")
	require.True(t, slices.Equal(lists[0], lists[1]))
}

// A source that cannot be listed leaves the run without its tools (the
// model is offered the others), and the run goes on.
func TestMCPSourceUnavailable(t *testing.T) {
	t.Parallel()
	client := mcpClient(t, mcp.Server{Name: "down", URL: "http://127.0.0.1:1/mcp", Reconnects: -1})
	var offered []string
	agent := &helix.Agent{Name: "mcp-down", ToolSources: []helix.ToolSource{client}, Model: script(
		func(req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
			offered = toolNames(req)
			return text("fine")(req, cb)
		})}
	url := pgtest.NewURL(t)
	e := newEngineOn(t, url, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "hi"}, nil)
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, result(t, h).Status)
	for _, n := range offered {
		require.NotContains(t, n, "down__")
	}
	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	defer pool.Close()
	var raw json.RawMessage
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT tools FROM helix.runs WHERE session_id = $1`, h.SessionID).Scan(&raw))
	var pinned struct{ Unavailable map[string]string }
	require.NoError(t, json.Unmarshal(raw, &pinned))
	require.Contains(t, pinned.Unavailable["down"], `mcp server "down": list tools: connect:`, "the run's row says why")
}

// A crash around an MCP call: after the call ran and before its record,
// the replacement sends it once more with the same idempotency key; after
// the step's commit, never again. Across a crash before the first record,
// the replacement offers the model the list the run began with, though the
// server's changed.
func TestMCPCallsAcrossACrash(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		point helixtest.CrashPoint
		sends int
	}{
		{"after the call, before its record", helixtest.AfterTool("kb__echo"), 2},
		{"after the step's commit", helixtest.AfterCommit(1), 1},
		{"after the first model call", helixtest.AfterModelCall(1), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newMCPServer(t)
			client := mcpClient(t, mcp.Server{Name: "kb", URL: srv.URL})
			var offered offeredTools
			agent := &helix.Agent{Name: "mcp-crash", ToolSources: []helix.ToolSource{client}, Model: script(
				offered.then(calls(call("c1", "kb__echo", `{"text":"once"}`))),
				text("done"),
			)}
			e := helixtest.NewEngine(t, helixtest.EngineOptions{CrashAt: &tc.point}, agent)
			h := e.Start(agent, "echo once")
			e.AwaitCrash()
			// The server's list changes while no process runs the session.
			srv.addEmptyTool("later")
			r := e.Replacement(helixtest.ReplacementOptions{})
			res := r.Await(r.Attach(h))
			require.Equal(t, helix.AgentCompleted, res.Status, res.Error)

			keys := srv.sentKeys()
			require.Len(t, keys, tc.sends, "sends of the call")
			for _, k := range keys {
				require.Equal(t, keys[0], k, "every send carries the call's one key")
			}
			for i, names := range offered.all() {
				require.NotContains(t, names, "kb__later", "model call %d offers the run's list", i)
				require.Contains(t, names, "kb__echo")
			}
			r.RequireTranscriptOnce(h.SessionID)
		})
	}
}

// An MCP tool that needs approval waits like any gated tool; the run
// hibernates, and its continuation (another workflow, with a journal of
// its own) offers the model the list on the run's row, not the server's
// changed one.
func TestMCPApprovalAcrossHibernation(t *testing.T) {
	t.Parallel()
	srv := newMCPServer(t)
	client := mcpClient(t, mcp.Server{Name: "kb", URL: srv.URL, ApprovalFor: []string{"ech*"}})
	var offered offeredTools
	agent := &helix.Agent{Name: "mcp-gated", ToolSources: []helix.ToolSource{client}, Model: script(
		offered.then(calls(call("c1", "kb__echo", `{"text":"approved"}`))),
		offered.then(text("done")),
	)}
	url := pgtest.NewURL(t)
	pool := appPool(t, url)
	e := hibernating(t, url, "mcp-hib", nil, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "echo, once approved"}, nil)
	require.NoError(t, err)
	awaitHibernated(t, pool, h.RunID)
	require.Empty(t, srv.sentKeys(), "not called before its approval")

	srv.addEmptyTool("later")
	submit(t, e, h.SessionID, helix.Approve("c1", "ok"))
	res := result(t, h)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	require.Equal(t, runState{wakes: 1, status: "SUCCESS", latest: "SUCCESS"}, readRunState(t, pool, h.RunID))
	require.Len(t, srv.sentKeys(), 1, "called once, after its approval")
	lists := offered.all()
	require.Len(t, lists, 2)
	require.Equal(t, lists[0], lists[1], "the continuation offers the run's list")
	require.NotContains(t, lists[1], "kb__later")
}

// An interrupt cancels an MCP call in flight: the server's handler sees its
// context cancelled, the run ends interrupted, and the model reads after
// the resume that the call was cancelled by the interrupt.
func TestInterruptCancelsAnMCPCall(t *testing.T) {
	t.Parallel()
	srv := newMCPServer(t)
	started, cancelled := make(chan struct{}), make(chan struct{})
	srv.AddTool(&sdk.Tool{Name: "wait", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, _ *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			close(started)
			<-ctx.Done()
			close(cancelled)
			return nil, ctx.Err()
		})
	client := mcpClient(t, mcp.Server{Name: "kb", URL: srv.URL})
	var seen string
	agent := &helix.Agent{Name: "mcp-interrupted", ToolSources: []helix.ToolSource{client}, Model: script(
		calls(call("c1", "kb__wait", `{}`)),
		func(req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
			seen = req.Messages[len(req.Messages)-1].Content
			return text("stopped")(req, cb)
		},
	)}
	e := newEngine(t, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "wait"}, nil)
	require.NoError(t, err)
	<-started
	require.NoError(t, e.Interrupt(t.Context(), h.SessionID, "enough"))
	select {
	case <-cancelled:
	case <-time.After(30 * time.Second):
		t.Fatal("the interrupt did not cancel the call in flight")
	}
	res := result(t, h)
	require.Equal(t, helix.AgentInterrupted, res.Status, res.Error)

	h2, err := e.Resume(t.Context(), h.SessionID, nil)
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, result(t, h2).Status)
	require.Contains(t, seen, "the call was cancelled: the session was interrupted")
}

// A resume that finishes a suspended step of an interrupted run keeps that
// run's tool list, though the server's changed since: the step's call goes
// to the tool the model chose from it.
func TestMCPResumeKeepsTheSuspendedRunsList(t *testing.T) {
	t.Parallel()
	srv := newMCPServer(t)
	client := mcpClient(t, mcp.Server{Name: "kb", URL: srv.URL, RequireApproval: true})
	var offered offeredTools
	agent := &helix.Agent{Name: "mcp-resumed", ToolSources: []helix.ToolSource{client}, Model: script(
		offered.then(calls(call("c1", "kb__echo", `{"text":"later"}`))),
		offered.then(text("done")),
	)}
	e := newEngine(t, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "echo later"}, nil)
	require.NoError(t, err)
	require.Equal(t, helix.AgentSuspendedClientTool, result(t, h).Status, "waiting for the approval")
	require.NoError(t, e.Interrupt(t.Context(), h.SessionID, "later"))
	res, err := h.Await(t.Context())
	require.NoError(t, err)
	require.Equal(t, helix.AgentInterrupted, res.Status)

	srv.addEmptyTool("later")
	h2, err := e.Resume(t.Context(), h.SessionID, nil)
	require.NoError(t, err)
	submit(t, e, h.SessionID, helix.Approve("c1", "ok"))
	res, err = h2.Await(t.Context())
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	require.Len(t, srv.sentKeys(), 1, "the approved call ran once")
	lists := offered.all()
	require.Len(t, lists, 2)
	require.Equal(t, lists[0], lists[1], "the resume offers the suspended run's list")
	require.NotContains(t, lists[1], "kb__later")
}

// An MCP call's progress notifications reach the session's stream while
// the call runs, as mcp_progress custom events.
func TestMCPProgressReachesTheStream(t *testing.T) {
	t.Parallel()
	srv := newMCPServer(t)
	release := make(chan struct{})
	srv.AddTool(&sdk.Tool{Name: "index", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			if err := req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(),
				Progress: 1, Total: 4, Message: "indexing"}); err != nil {
				return nil, err
			}
			select { // until the test read the event from the stream
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "indexed"}}}, nil
		})
	client := mcpClient(t, mcp.Server{Name: "kb", URL: srv.URL})
	agent := &helix.Agent{Name: "mcp-progress", ToolSources: []helix.ToolSource{client}, Model: script(
		calls(call("c1", "kb__index", `{}`)), text("done"))}
	e := newEngine(t, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "index"}, nil)
	require.NoError(t, err)
	var got mcp.ProgressData
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // a missing event fails, not hangs
	defer cancel()
	for c, err := range h.Stream(ctx) {
		require.NoError(t, err, "no mcp_progress event in the stream")
		if ev, ok := c.Chunk.(*helix.CustomEventChunk); ok && ev.EventName == mcp.ProgressEvent {
			require.NoError(t, json.Unmarshal(ev.Data, &got))
			break
		}
	}
	close(release)
	require.Equal(t, mcp.ProgressData{Server: "kb", Tool: "index", Progress: mcp.Progress{Progress: 1, Total: 4, Message: "indexing"}}, got)
	require.Equal(t, helix.AgentCompleted, result(t, h).Status)
}

// stdioServerEnv, set, makes the test binary an MCP server on its stdin
// and stdout (TestMain), with a tool that echoes its process ID and one
// that kills the process.
const stdioServerEnv = "HELIX_ENGINE_TEST_MCP_STDIO"

func serveStdioMCP() {
	s := sdk.NewServer(&sdk.Implementation{Name: "stdio", Version: "1"}, nil)
	s.AddTool(&sdk.Tool{Name: "pid", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strconv.Itoa(os.Getpid())}}}, nil
		})
	s.AddTool(&sdk.Tool{Name: "die", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			os.Exit(3)
			return nil, nil
		})
	if err := s.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
		os.Exit(1)
	}
	os.Exit(0)
}

// A stdio server that dies during a call: the model reads the call's
// error, and the next call starts the server again.
func TestMCPStdioServerDiesDuringACall(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	require.NoError(t, err)
	client := mcpClient(t, mcp.Server{Name: "local", Command: exe, Env: []string{stdioServerEnv + "=1"}})
	var afterDeath string
	agent := &helix.Agent{Name: "mcp-stdio", ToolSources: []helix.ToolSource{client}, Model: script(
		calls(call("c1", "local__pid", `{}`)),
		calls(call("c2", "local__die", `{}`)),
		func(req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
			afterDeath = req.Messages[len(req.Messages)-1].Content
			return calls(call("c3", "local__pid", `{}`))(req, cb)
		},
		text("done"),
	)}
	e := newEngine(t, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "go"}, nil)
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, result(t, h).Status)
	var toolErr struct{ Error string }
	require.NoError(t, json.Unmarshal([]byte(afterDeath), &toolErr), afterDeath)
	require.Contains(t, toolErr.Error, `MCP server "local": call of tool "die": the connection was lost during the call`)
	pids := map[string]string{}
	for _, m := range allMessages(t, e, h.SessionID) {
		if m.Role == helix.RoleTool {
			pids[m.ToolCallID] = m.Content
		}
	}
	require.NotEmpty(t, pids["c1"])
	require.NotEmpty(t, pids["c3"])
	require.NotEqual(t, pids["c1"], pids["c3"], "a new server process after the death")
}
