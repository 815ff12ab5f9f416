package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/helix-agents/helix-dbos/mcp"
)

// A client lists a server's tools, named for the model, and calls one with
// the call's idempotency key.
func ExampleClient() {
	// A server over streamable HTTP (any MCP server: here one built on the
	// official SDK, in this process).
	srv := sdk.NewServer(&sdk.Implementation{Name: "issues", Version: "1"}, nil)
	type in struct {
		ID int `json:"id"`
	}
	type out struct {
		Title string `json:"title"`
	}
	sdk.AddTool(srv, &sdk.Tool{Name: "get_issue", Description: "Reads an issue."},
		func(_ context.Context, _ *sdk.CallToolRequest, i in) (*sdk.CallToolResult, out, error) {
			return nil, out{Title: fmt.Sprintf("issue %d", i.ID)}, nil
		})
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	defer hs.Close()

	c, err := mcp.NewClient(mcp.Server{Name: "tracker", URL: hs.URL})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	ctx := context.Background()
	tools, err := c.ListTools(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, t := range tools {
		fmt.Println(t.Name, "->", t.Remote)
	}
	res, err := c.Call(ctx, "get_issue", json.RawMessage(`{"id":7}`), mcp.CallOptions{IdempotencyKey: "wf-1:3:call-1"})
	fmt.Println(string(res), err)
	// Output:
	// tracker__get_issue -> get_issue
	// {"title":"issue 7"} <nil>
}
