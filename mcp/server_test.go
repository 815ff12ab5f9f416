package mcp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/helix-agents/helix-dbos/mcp"
)

// serverEnv, set to "stdio", makes the test binary an MCP server on its
// stdin and stdout (TestMain): the stdio tests run it as a child process.
const serverEnv = "HELIX_MCP_TEST_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(serverEnv) == "stdio" {
		if err := testServer(os.Getpid(), nil).Run(context.Background(), &sdk.StdioTransport{}); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// longName is a tool name past the providers' 64 characters once prefixed.
var longName = strings.Repeat("l", 70)

type echoIn struct {
	Text string `json:"text" jsonschema:"what to echo"`
}

type echoOut struct {
	Echo string `json:"echo"`
	Key  string `json:"key"`
	PID  int    `json:"pid"`
}

// testServer returns the tests' MCP server; pid tells its process apart.
// Its "progress" tool, after its notifications, waits for progressed to
// close when it is not nil (the client handled them: the SDK may hand a
// notification sent just before a result over after it).
func testServer(pid int, progressed <-chan struct{}) *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "helix-test", Version: "1"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "echo", Description: "Echoes text, with the call's idempotency key."},
		func(_ context.Context, req *sdk.CallToolRequest, in echoIn) (*sdk.CallToolResult, echoOut, error) {
			key, _ := req.Params.Meta[mcp.IdempotencyKeyMeta].(string)
			return nil, echoOut{Echo: in.Text, Key: key, PID: pid}, nil
		})
	s.AddTool(&sdk.Tool{Name: "fail", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "it broke"}}}, nil
		})
	s.AddTool(&sdk.Tool{Name: "text", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "plain words"}}}, nil
		})
	s.AddTool(&sdk.Tool{Name: "slow", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, _ *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		})
	s.AddTool(&sdk.Tool{Name: "die", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			os.Exit(3)
			return nil, nil
		})
	s.AddTool(&sdk.Tool{Name: "progress", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			for i := range 2 {
				_ = req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(),
					Progress: float64(i + 1), Total: 2, Message: "working"})
			}
			if progressed != nil {
				select {
				case <-progressed:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "done"}}}, nil
		})
	for _, name := range []string{"weird.name/with spaces", "weird_name_with_spaces", longName} {
		s.AddTool(&sdk.Tool{Name: name, InputSchema: map[string]any{"type": "object"}},
			func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
				return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: name}}}, nil
			})
	}
	return s
}

// stdioServer describes the test binary as a stdio server.
func stdioServer(t *testing.T, name string) mcp.Server {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return mcp.Server{Name: name, Command: exe, Env: []string{serverEnv + "=stdio"}, ConnectTimeout: 20 * time.Second}
}

// httpServer starts the test server over streamable HTTP on 127.0.0.1,
// refusing requests without "Authorization: Bearer " + token; progressed
// is the "progress" tool's (testServer).
func httpServer(t *testing.T, token string, progressed <-chan struct{}) string {
	t.Helper()
	s := testServer(os.Getpid(), progressed)
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}
