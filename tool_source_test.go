package helix_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
)

// calculator is a ToolSource of one tool, for the tests and the example.
type calculator struct{}

func (calculator) SourceName() string { return "calc" }

func (calculator) ListSourceTools(context.Context) ([]helix.SourceTool, error) {
	return []helix.SourceTool{{Name: "calc__add", Source: "calc", Remote: "add", Description: "Adds two numbers.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]}`)}}, nil
}

func (calculator) CallSourceTool(_ context.Context, remote string, args json.RawMessage, _ helix.ToolContext) (json.RawMessage, error) {
	var in struct{ A, B float64 }
	if err := json.Unmarshal(args, &in); err != nil {
		return nil, err
	}
	return json.Marshal(in.A + in.B)
}

// A listed tool becomes a tool that validates its arguments against the
// source's schema, calls the source, is cancelled by an interrupt, and
// waits for an approval when the source says so; a bad name is refused.
func TestSourceToolTool(t *testing.T) {
	t.Parallel()
	list, err := calculator{}.ListSourceTools(t.Context())
	require.NoError(t, err)
	tool, err := list[0].Tool(calculator{})
	require.NoError(t, err)
	require.Equal(t, "calc__add", tool.Name())
	require.True(t, tool.CancelsOnInterrupt())
	require.False(t, tool.NeedsApprovalCheck())
	require.Error(t, tool.ValidateArguments(json.RawMessage(`{"a":1}`)))
	out, err := tool.Execute(t.Context(), json.RawMessage(`{"a":1,"b":2}`), nil)
	require.NoError(t, err)
	require.JSONEq(t, `3`, string(out))

	gated := list[0]
	gated.NeedsApproval = true
	tool, err = gated.Tool(calculator{})
	require.NoError(t, err)
	require.True(t, tool.NeedsApprovalCheck())

	bad := list[0]
	bad.Name = "calc add"
	_, err = bad.Tool(calculator{})
	require.ErrorContains(t, err, `tool "add" of source "calc"`)

	_, err = helix.NewRawClientTool("ask", "", json.RawMessage(`{"type":"object"}`), nil, helix.CancelOnInterrupt())
	require.ErrorContains(t, err, "CancelOnInterrupt")

	a := &helix.Agent{Name: "a", Model: helix.ModelFunc(nil), ToolSources: []helix.ToolSource{calculator{}, calculator{}}}
	require.ErrorContains(t, a.Validate(), `duplicate source name "calc"`)
}

// A ToolSource's listed tool, as the engine makes it for a run.
func ExampleSourceTool_Tool() {
	var src helix.ToolSource = calculator{}
	list, err := src.ListSourceTools(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	tool, err := list[0].Tool(src)
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err := tool.Execute(context.Background(), json.RawMessage(`{"a":2,"b":3}`), nil)
	fmt.Println(tool.Name(), string(out), err)
	// Output: calc__add 5 <nil>
}
