package mcp_test

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/mcp"
)

// A server's tools are discovered and called over stdio (a child process)
// and streamable HTTP alike: names made valid and unique for providers,
// schemas carried, the idempotency key delivered in _meta, structured,
// text and isError results, progress notifications, approval patterns.
func TestToolsDiscoveredAndCalled(t *testing.T) {
	t.Setenv("HELIX_MCP_TEST_TOKEN", "s3cret")
	for _, tc := range []struct {
		name string
		// server returns the server; progressed, when not nil, is closed
		// once the test's client handled both progress notifications,
		// which the in-process server waits for before its result.
		server func(t *testing.T, progressed chan struct{}) mcp.Server
		inProc bool
	}{
		{"stdio", func(t *testing.T, _ chan struct{}) mcp.Server { return stdioServer(t, "kb") }, false},
		{"http", func(t *testing.T, progressed chan struct{}) mcp.Server {
			return mcp.Server{Name: "kb", URL: httpServer(t, "s3cret", progressed), BearerTokenEnv: "HELIX_MCP_TEST_TOKEN"}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			progressed := make(chan struct{})
			s := tc.server(t, progressed)
			s.ApprovalFor = []string{"ec*"}
			c, err := mcp.NewClient(s)
			require.NoError(t, err)
			defer c.Close()

			specs, err := c.ListTools(ctx)
			require.NoError(t, err)
			byName := map[string]mcp.ToolSpec{}
			for _, sp := range specs {
				require.NoError(t, helix.ValidateToolName(sp.Name), sp.Name)
				require.Equal(t, mcp.ToolName("kb", sp.Remote), sp.Name)
				require.Equal(t, "kb", sp.Source)
				byName[sp.Remote] = sp
			}
			require.Len(t, byName, 9)
			echo := byName["echo"]
			require.Equal(t, "kb__echo", echo.Name)
			require.Contains(t, string(echo.InputSchema), `"text"`)
			require.Contains(t, string(echo.OutputSchema), `"echo"`)
			require.True(t, echo.NeedsApproval, "echo matches ec*")
			require.False(t, byName["text"].NeedsApproval)
			require.JSONEq(t, `{"type":"object"}`, string(byName["fail"].InputSchema))
			weird, plain := byName["weird.name/with spaces"].Name, byName["weird_name_with_spaces"].Name
			require.Equal(t, "kb__weird_name_with_spaces", plain)
			require.NotEqual(t, plain, weird, "a sanitized name keeps apart from the name it became")
			require.Len(t, byName[longName].Name, helix.MaxToolNameLength)

			out, err := c.Call(ctx, "echo", json.RawMessage(`{"text":"hi"}`), mcp.CallOptions{IdempotencyKey: "wf-1:3:call-7"})
			require.NoError(t, err)
			var got struct{ Echo, Key string }
			require.NoError(t, json.Unmarshal(out, &got))
			require.Equal(t, "hi", got.Echo)
			require.Equal(t, "wf-1:3:call-7", got.Key, "the server received the idempotency key")

			out, err = c.Call(ctx, "text", nil, mcp.CallOptions{})
			require.NoError(t, err)
			require.JSONEq(t, `"plain words"`, string(out))
			out, err = c.Call(ctx, "weird.name/with spaces", nil, mcp.CallOptions{})
			require.NoError(t, err)
			require.JSONEq(t, `"weird.name/with spaces"`, string(out))

			_, err = c.Call(ctx, "fail", nil, mcp.CallOptions{})
			var ce *mcp.CallError
			require.ErrorAs(t, err, &ce)
			require.True(t, ce.ToolError)
			require.Equal(t, "it broke", ce.Message)
			require.EqualError(t, err, `tool "fail" of MCP server "kb" failed: it broke`)

			var mu sync.Mutex
			var seen []mcp.Progress
			out, err = c.Call(ctx, "progress", nil, mcp.CallOptions{Progress: func(p mcp.Progress) {
				mu.Lock()
				defer mu.Unlock()
				if seen = append(seen, p); len(seen) == 2 {
					close(progressed)
				}
			}})
			require.NoError(t, err)
			require.JSONEq(t, `"done"`, string(out))
			mu.Lock()
			defer mu.Unlock()
			want := []mcp.Progress{{Progress: 1, Total: 2, Message: "working"}, {Progress: 2, Total: 2, Message: "working"}}
			if tc.inProc {
				require.Equal(t, want, seen)
			} else {
				// The child process's result does not wait: the
				// notifications handled before it, in order.
				require.True(t, slices.Equal(want[:len(seen)], seen), "%v", seen)
			}
		})
	}
}

// A call the server does not answer within CallTimeout is an error that
// says so, and the connection serves the next call.
func TestCallTimeout(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := stdioServer(t, "slowpoke")
	s.CallTimeout = 300 * time.Millisecond
	c, err := mcp.NewClient(s)
	require.NoError(t, err)
	defer c.Close()
	began := time.Now()
	_, err = c.Call(ctx, "slow", nil, mcp.CallOptions{})
	require.ErrorContains(t, err, `MCP server "slowpoke": call of tool "slow": no answer within 300ms`)
	require.Less(t, time.Since(began), 10*time.Second)
	_, err = c.Call(ctx, "echo", json.RawMessage(`{"text":"after"}`), mcp.CallOptions{})
	require.NoError(t, err)
}

// A stdio server that dies during a call makes that call an error (it may
// have run: not sent again), and the next call starts the server again.
func TestDyingStdioServer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c, err := mcp.NewClient(stdioServer(t, "fragile"))
	require.NoError(t, err)
	defer c.Close()
	pid := func() int {
		out, err := c.Call(ctx, "echo", json.RawMessage(`{"text":"x"}`), mcp.CallOptions{})
		require.NoError(t, err)
		var got struct{ PID int }
		require.NoError(t, json.Unmarshal(out, &got))
		return got.PID
	}
	first := pid()
	_, err = c.Call(ctx, "die", nil, mcp.CallOptions{})
	var ce *mcp.CallError
	require.ErrorAs(t, err, &ce)
	require.False(t, ce.ToolError)
	require.Contains(t, err.Error(), "the connection was lost during the call")
	second := pid()
	require.NotEqual(t, first, second, "a new server process")
}

// An HTTP server's bearer token comes from the environment: unset, the
// connection is refused with the variable's name; wrong, the server's
// refusal is the error; right, the calls go through.
func TestBearerTokenFromEnvironment(t *testing.T) {
	ctx := t.Context()
	url := httpServer(t, "right", nil)
	s := mcp.Server{Name: "secure", URL: url, BearerTokenEnv: "HELIX_MCP_TEST_BEARER"}
	call := func() error {
		c, err := mcp.NewClient(s)
		require.NoError(t, err)
		defer c.Close()
		_, err = c.ListTools(ctx)
		return err
	}
	t.Setenv("HELIX_MCP_TEST_BEARER", "")
	require.ErrorContains(t, call(), "the environment variable HELIX_MCP_TEST_BEARER (bearerTokenEnv) is unset or empty")
	t.Setenv("HELIX_MCP_TEST_BEARER", "wrong")
	err := call()
	require.Error(t, err)
	require.Contains(t, err.Error(), `mcp server "secure"`)
	t.Setenv("HELIX_MCP_TEST_BEARER", "right")
	require.NoError(t, call())
}

// A server's configuration is checked field by field.
func TestServerValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s    mcp.Server
		want string
	}{
		{mcp.Server{Command: "x"}, "name: required"},
		{mcp.Server{Name: "1st", Command: "x"}, "starting with a letter"},
		{mcp.Server{Name: "a_b", Command: "x"}, "use letters, digits and '-'"},
		{mcp.Server{Name: strings.Repeat("a", 25), Command: "x"}, "25 characters, at most 24"},
		{mcp.Server{Name: "a"}, "give a command (stdio) or a url"},
		{mcp.Server{Name: "a", Command: "x", URL: "http://h"}, "not both"},
		{mcp.Server{Name: "a", URL: "ftp://h"}, `"ftp://h" is not an http or https URL`},
		{mcp.Server{Name: "a", URL: "http://h", Args: []string{"-v"}}, "only for a stdio server"},
		{mcp.Server{Name: "a", Command: "x", BearerTokenEnv: "T"}, "only for an HTTP server"},
		{mcp.Server{Name: "a", Command: "x", CallTimeout: -time.Second}, "callTimeout: negative"},
		{mcp.Server{Name: "a", Command: "x", ApprovalFor: []string{"[a"}}, `pattern "[a"`},
	} {
		_, err := mcp.NewClient(tc.s)
		require.ErrorContains(t, err, tc.want, "%+v", tc.s)
	}
	_, err := mcp.NewClient(mcp.Server{Name: "ok-1", URL: "https://example.test/mcp"})
	require.NoError(t, err)
}

// A tool's name for the model depends on its server and name alone, is
// valid for providers, and keeps apart names that only differ in what
// was replaced or cut.
func TestToolName(t *testing.T) {
	t.Parallel()
	require.Equal(t, "s__get_issue", mcp.ToolName("s", "get_issue"))
	names := map[string]bool{}
	for _, remote := range []string{"a.b", "a_b", "a b", "a/b", "", strings.Repeat("x", 80), strings.Repeat("x", 81), "ünïcode"} {
		n := mcp.ToolName("srv", remote)
		require.NoError(t, helix.ValidateToolName(n), "%q -> %q", remote, n)
		require.Equal(t, n, mcp.ToolName("srv", remote), "stable")
		require.False(t, names[n], "%q -> %q collides", remote, n)
		names[n] = true
	}
}
