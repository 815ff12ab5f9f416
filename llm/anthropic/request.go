package anthropic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	sdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/packages/param"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/llm/internal/provider"
)

// ProviderOptionsKey is the key of helix.LLMConfig.ProviderOptions this
// adapter reads: a JSON object whose members are set on the request body
// as they are, replacing the adapter's, e.g. {"top_k": 40},
// {"thinking": {"type": "adaptive"}} or {"metadata": {"user_id": "u-1"}}.
// A null member removes a field the adapter sets.
const ProviderOptionsKey = "anthropic"

// params maps req to a Messages request. Its failures are invalid requests
// (not recoverable): retrying cannot help.
func (m *Model) params(req helix.ModelRequest) (sdk.MessageNewParams, error) {
	model := req.Config.Model
	if model == "" {
		model = m.cfg.Model
	}
	if model == "" {
		return sdk.MessageNewParams{}, invalid("no model: set Config.Model or the agent's LLMConfig.Model")
	}
	maxTokens := req.Config.MaxOutputTokens
	if maxTokens == 0 {
		maxTokens = m.cfg.MaxTokens
	}
	p := sdk.MessageNewParams{Model: sdk.Model(model), MaxTokens: int64(maxTokens)}
	if m.cfg.Thinking > 0 {
		if maxTokens <= m.cfg.Thinking {
			return p, invalid(fmt.Sprintf("max tokens %d must exceed the thinking budget %d (Config.Thinking): raise LLMConfig.MaxOutputTokens", maxTokens, m.cfg.Thinking))
		}
		p.Thinking = sdk.ThinkingConfigParamOfEnabled(int64(m.cfg.Thinking))
	} else if t := req.Config.Temperature; t != nil {
		p.Temperature = sdk.Float(*t)
	}
	var err error
	if p.System, p.Messages, err = messages(req.Messages); err != nil {
		return p, err
	}
	for _, t := range req.Tools {
		tool, err := toolParam(t)
		if err != nil {
			return p, err
		}
		p.Tools = append(p.Tools, sdk.ToolUnionParam{OfTool: tool})
	}
	if raw, ok := req.Config.ProviderOptions[ProviderOptionsKey]; ok {
		var opts map[string]json.RawMessage
		if err := json.Unmarshal(raw, &opts); err != nil || opts == nil {
			return p, invalid(fmt.Sprintf("LLMConfig.ProviderOptions[%q] must be a JSON object, got %s", ProviderOptionsKey, provider.Snippet(string(raw))))
		}
		extra := make(map[string]any, len(opts))
		for _, k := range slices.Sorted(maps.Keys(opts)) {
			if k == "stream" || k == "messages" {
				return p, invalid(fmt.Sprintf("LLMConfig.ProviderOptions[%q] must not set %q: the adapter owns it", ProviderOptionsKey, k))
			}
			if v := bytes.TrimSpace(opts[k]); string(v) == "null" {
				extra[k] = param.Omit
			} else {
				extra[k] = json.RawMessage(v)
			}
		}
		p.SetExtraFields(extra)
	}
	return p, nil
}

// messages maps the conversation. System messages, wherever they are,
// become the system parameter; tool results become tool_result blocks of a
// user message; consecutive messages of one role are merged into one, as
// the API wants turns to alternate.
func messages(msgs []helix.Message) ([]sdk.TextBlockParam, []sdk.MessageParam, error) {
	var system []sdk.TextBlockParam
	var out []sdk.MessageParam
	add := func(role sdk.MessageParamRole, blocks ...sdk.ContentBlockParamUnion) {
		if len(blocks) == 0 {
			return
		}
		if n := len(out); n > 0 && out[n-1].Role == role {
			out[n-1].Content = append(out[n-1].Content, blocks...)
			return
		}
		out = append(out, sdk.MessageParam{Role: role, Content: blocks})
	}
	for i, m := range msgs {
		switch m.Role {
		case helix.RoleSystem:
			if m.Content != "" {
				system = append(system, sdk.TextBlockParam{Text: m.Content})
			}
		case helix.RoleUser:
			// The API rejects empty text blocks.
			if m.Content != "" {
				add(sdk.MessageParamRoleUser, sdk.NewTextBlock(m.Content))
			}
		case helix.RoleAssistant:
			// Thinking goes first (the API wants it there), and only as
			// blocks the API signed: see thinkingBlocks.
			blocks := thinkingBlocks(m.Thinking)
			if m.Content != "" {
				blocks = append(blocks, sdk.NewTextBlock(m.Content))
			}
			for _, c := range m.ToolCalls {
				blocks = append(blocks, sdk.NewToolUseBlock(c.ID, toolInput(c.Arguments), c.Name))
			}
			add(sdk.MessageParamRoleAssistant, blocks...)
		case helix.RoleTool:
			result := sdk.ToolResultBlockParam{ToolUseID: m.ToolCallID}
			if m.Content != "" {
				result.Content = []sdk.ToolResultBlockParamContentUnion{{OfText: &sdk.TextBlockParam{Text: m.Content}}}
			}
			if isToolError(m.Content) {
				result.IsError = sdk.Bool(true)
			}
			add(sdk.MessageParamRoleUser, sdk.ContentBlockParamUnion{OfToolResult: &result})
		default:
			return nil, nil, invalid(fmt.Sprintf("message %d: unknown role %q", i, m.Role))
		}
	}
	return system, out, nil
}

// toolInput returns a call's arguments as the JSON object tool_use wants.
// Arguments that are not an object (a model's broken arguments, carried as
// a JSON string) become {}.
func toolInput(args json.RawMessage) json.RawMessage {
	trimmed := bytes.TrimSpace(args)
	if len(trimmed) == 0 || trimmed[0] != '{' || !json.Valid(trimmed) {
		return json.RawMessage(`{}`)
	}
	return trimmed
}

// isToolError reports whether a tool result is the engine's encoding of a
// failed tool: a JSON object whose only member is a string "error".
func isToolError(content string) bool {
	if !strings.HasPrefix(strings.TrimSpace(content), "{") {
		return false
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(content), &obj) != nil || len(obj) != 1 {
		return false
	}
	var msg string
	return json.Unmarshal(obj["error"], &msg) == nil
}

// toolParam maps a tool. The input schema's properties and required
// members go in their SDK fields, every other member as is.
func toolParam(t helix.ToolSpec) (*sdk.ToolParam, error) {
	tool := &sdk.ToolParam{Name: t.Name}
	if t.Description != "" {
		tool.Description = sdk.String(t.Description)
	}
	raw := bytes.TrimSpace(t.InputSchema)
	if len(raw) == 0 || string(raw) == "null" {
		tool.InputSchema = sdk.ToolInputSchemaParam{Properties: map[string]any{}}
		return tool, nil
	}
	var schema map[string]json.RawMessage
	if err := json.Unmarshal(raw, &schema); err != nil {
		return nil, invalid(fmt.Sprintf("tool %q: its input schema is not a JSON object: %v", t.Name, err))
	}
	var in sdk.ToolInputSchemaParam
	if p, ok := schema["properties"]; ok {
		in.Properties = p
	}
	if r, ok := schema["required"]; ok {
		if err := json.Unmarshal(r, &in.Required); err != nil {
			return nil, invalid(fmt.Sprintf("tool %q: the schema's required member is not a list of names", t.Name))
		}
	}
	for k, v := range schema {
		if k == "properties" || k == "required" || k == "type" {
			continue
		}
		if in.ExtraFields == nil {
			in.ExtraFields = map[string]any{}
		}
		in.ExtraFields[k] = v
	}
	tool.InputSchema = in
	return tool, nil
}

func invalid(msg string) *provider.Failure { return provider.InvalidRequest(name, msg) }
