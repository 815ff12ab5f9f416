package helix

import (
	"context"
	"encoding/json"
	"fmt"
)

// ToolSource supplies tools whose list is read when a run starts rather
// than defined in code: an MCP server (package mcp's Client). The engine
// lists each of an agent's sources once per run, in a durable step, and
// offers the model that list for every step of the run: a replay, a
// takeover or a resume of the run sees the tools the model saw, and a
// source whose list changed is read again at the next run.
type ToolSource interface {
	// SourceName names the source within the agent: its tools' names
	// start with it.
	SourceName() string
	// ListSourceTools lists the source's tools now. Their names must be
	// valid tool names (ValidateToolName), unique, and start with the
	// source's name.
	ListSourceTools(ctx context.Context) ([]SourceTool, error)
	// CallSourceTool calls the source's tool remote (SourceTool.Remote)
	// with args. tc is the call's context: tc.IdempotencyKey() is the
	// same each time one call of a run is sent, for the source to pass
	// on. An error is the tool's failure, which the model sees.
	CallSourceTool(ctx context.Context, remote string, args json.RawMessage, tc ToolContext) (json.RawMessage, error)
}

// SourceTool is a tool a ToolSource listed. It round-trips through JSON:
// the engine records a run's list.
type SourceTool struct {
	// Name is the name the model calls; Source the source's name; Remote
	// the tool's name at the source.
	Name   string `json:"name"`
	Source string `json:"source"`
	Remote string `json:"remote"`
	// Description, InputSchema (a JSON object schema) and OutputSchema
	// (optional) are offered to the model and validate the call.
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"inputSchema"`
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	// NeedsApproval makes the call wait for a person's approval.
	NeedsApproval bool `json:"needsApproval,omitempty"`
}

// Tool returns the tool that calls st through src, with the options
// NeedsApproval implies.
func (st SourceTool) Tool(src ToolSource) (*Tool, error) {
	if err := ValidateToolName(st.Name); err != nil {
		return nil, fmt.Errorf("tool %q of source %q: %w", st.Remote, st.Source, err)
	}
	opts := []ToolOption{CancelOnInterrupt()}
	if st.NeedsApproval {
		opts = append(opts, RequireApproval())
	}
	remote := st.Remote
	return NewRawTool(st.Name, st.Description, st.InputSchema, st.OutputSchema,
		func(ctx context.Context, args json.RawMessage, tc ToolContext) (json.RawMessage, error) {
			return src.CallSourceTool(ctx, remote, args, tc)
		}, opts...)
}
