package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/llm/internal/provider"
)

// ProviderOptionsKey is the key of helix.LLMConfig.ProviderOptions this
// adapter reads: a JSON object whose members are set on the request body
// as they are, e.g. {"response_format": {...}, "reasoning_effort": "low",
// "top_p": 0.9}.
const ProviderOptionsKey = "openai"

// wireRequest is a Chat Completions request.
type wireRequest struct {
	Model       string        `json:"model"`
	Messages    []wireMessage `json:"messages"`
	Tools       []wireTool    `json:"tools,omitempty"`
	Temperature *float64      `json:"temperature,omitempty"`
	MaxTokens   int           `json:"max_tokens,omitempty"`
	// MaxCompletionTokens replaces MaxTokens on OpenAI's own API, whose
	// reasoning models (o-series, gpt-5) reject max_tokens.
	MaxCompletionTokens int            `json:"max_completion_tokens,omitempty"`
	Stream              bool           `json:"stream"`
	StreamOptions       *streamOptions `json:"stream_options,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type wireMessage struct {
	Role string `json:"role"`
	// Content is null for an assistant message that only calls tools.
	Content    *string        `json:"content"`
	ToolCalls  []wireToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

type wireToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function wireFunction `json:"function"`
}

type wireFunction struct {
	Name string `json:"name"`
	// Arguments is a JSON document serialized as a string.
	Arguments string `json:"arguments"`
}

type wireTool struct {
	Type     string      `json:"type"`
	Function wireToolDef `json:"function"`
}

type wireToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}

// emptySchema is the parameters of a tool without an input schema.
var emptySchema = json.RawMessage(`{"type":"object","properties":{}}`)

// requestBody encodes req as a streaming Chat Completions request. Its
// failures are invalid requests (not recoverable): retrying cannot help.
func (m *Model) requestBody(req helix.ModelRequest) ([]byte, error) {
	w := wireRequest{
		Model:         m.cfg.Model,
		Temperature:   req.Config.Temperature,
		Stream:        true,
		StreamOptions: &streamOptions{IncludeUsage: true},
	}
	// OpenAI deprecated max_tokens for max_completion_tokens, which its
	// reasoning models require; compatible servers (vLLM, Ollama, older
	// Azure API versions, …) know only max_tokens.
	if m.openAI {
		w.MaxCompletionTokens = req.Config.MaxOutputTokens
	} else {
		w.MaxTokens = req.Config.MaxOutputTokens
	}
	if req.Config.Model != "" {
		w.Model = req.Config.Model
	}
	if w.Model == "" {
		return nil, invalid("no model: set Config.Model or the agent's LLMConfig.Model")
	}
	for i, msg := range req.Messages {
		wm, err := wireMessageOf(msg)
		if err != nil {
			return nil, invalid(fmt.Sprintf("message %d: %v", i, err))
		}
		w.Messages = append(w.Messages, wm)
	}
	for _, t := range req.Tools {
		params := t.InputSchema
		if len(bytes.TrimSpace(params)) == 0 || string(params) == "null" {
			params = emptySchema
		}
		if !json.Valid(params) {
			return nil, invalid(fmt.Sprintf("tool %q: its input schema is not valid JSON", t.Name))
		}
		w.Tools = append(w.Tools, wireTool{Type: "function", Function: wireToolDef{Name: t.Name, Description: t.Description, Parameters: params}})
	}
	body, err := json.Marshal(w)
	if err != nil {
		return nil, invalid(fmt.Sprintf("encode the request: %v", err))
	}
	raw, ok := req.Config.ProviderOptions[ProviderOptionsKey]
	if !ok {
		return body, nil
	}
	return mergeOptions(body, raw)
}

// mergeOptions sets the members of the provider options on the request
// body. A null member removes the field (e.g. "stream_options": null for a
// server that rejects it). The two token limits replace each other: a
// non-null "max_completion_tokens" removes the adapter's max_tokens and a
// non-null "max_tokens" its max_completion_tokens, unless the options set
// both.
func mergeOptions(body []byte, raw json.RawMessage) ([]byte, error) {
	var opts map[string]json.RawMessage
	if err := json.Unmarshal(raw, &opts); err != nil || opts == nil {
		return nil, invalid(fmt.Sprintf("LLMConfig.ProviderOptions[%q] must be a JSON object, got %s", ProviderOptionsKey, provider.Snippet(string(raw))))
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, invalid(fmt.Sprintf("encode the request: %v", err))
	}
	for _, pair := range [][2]string{{"max_completion_tokens", "max_tokens"}, {"max_tokens", "max_completion_tokens"}} {
		limit, other := pair[0], pair[1]
		v, ok := opts[limit]
		if _, explicit := opts[other]; ok && !explicit && string(bytes.TrimSpace(v)) != "null" {
			delete(fields, other)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(opts)) {
		if k == "stream" || k == "messages" {
			return nil, invalid(fmt.Sprintf("LLMConfig.ProviderOptions[%q] must not set %q: the adapter owns it", ProviderOptionsKey, k))
		}
		if v := opts[k]; string(bytes.TrimSpace(v)) == "null" {
			delete(fields, k)
		} else {
			fields[k] = v
		}
	}
	out, err := json.Marshal(fields)
	if err != nil {
		return nil, invalid(fmt.Sprintf("LLMConfig.ProviderOptions[%q]: %v", ProviderOptionsKey, err))
	}
	return out, nil
}

// wireMessageOf maps one helix message. Reasoning (Thinking) is not sent
// back: Chat Completions has no standard field for it and some servers
// reject unknown ones.
func wireMessageOf(m helix.Message) (wireMessage, error) {
	content := m.Content
	switch m.Role {
	case helix.RoleSystem, helix.RoleUser:
		return wireMessage{Role: string(m.Role), Content: &content}, nil
	case helix.RoleAssistant:
		w := wireMessage{Role: "assistant", Content: &content}
		for _, c := range m.ToolCalls {
			args := string(bytes.TrimSpace(c.Arguments))
			if args == "" {
				args = "{}"
			}
			w.ToolCalls = append(w.ToolCalls, wireToolCall{ID: c.ID, Type: "function", Function: wireFunction{Name: c.Name, Arguments: args}})
		}
		if len(w.ToolCalls) > 0 && content == "" {
			w.Content = nil
		}
		return w, nil
	case helix.RoleTool:
		// A failed tool's content is its error as JSON ({"error": …}), which
		// the model reads as is: Chat Completions has no error flag.
		return wireMessage{Role: "tool", Content: &content, ToolCallID: m.ToolCallID}, nil
	}
	return wireMessage{}, fmt.Errorf("unknown role %q", m.Role)
}

func invalid(msg string) *provider.Failure { return provider.InvalidRequest(name, msg) }
