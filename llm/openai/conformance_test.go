package openai_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/llm/llmtest"
	"github.com/helix-agents/helix-dbos/llm/openai"
)

// adapter describes the OpenAI adapter to the conformance suite. The
// fixtures are responses of OpenAI (gpt-4o), DeepSeek (reasoning) and
// OpenRouter (error events) in their recorded wire format.
func adapter() llmtest.Adapter {
	return llmtest.Adapter{
		Name: "openai",
		New: func(t llmtest.Target) (helix.Model, error) {
			return openai.New(openai.Config{
				BaseURL: t.BaseURL + "/v1", APIKey: t.APIKey, Headers: t.Headers, HTTPClient: t.HTTPClient,
				MaxRetries: t.MaxRetries, MinBackoff: t.MinBackoff, MaxBackoff: t.MaxBackoff,
				MaxRetryAfter: t.MaxRetryAfter, IdleTimeout: t.IdleTimeout,
			})
		},
		Path:          "/v1/chat/completions",
		AuthHeader:    "Authorization",
		DecodeRequest: decodeRequest,
		Fixtures: llmtest.TestdataFixtures(&llmtest.TestdataOpts{
			RateLimitHeader: map[string]string{"Retry-After": "1", "x-request-id": "req_7f3c2a9e41b84d0c", "x-ratelimit-remaining-tokens": "0"},
		}),
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	llmtest.Run(t, adapter())
}

// decodeRequest reads a Chat Completions request as the API documents it,
// independently of the adapter's encoder.
func decodeRequest(body []byte) (llmtest.Request, error) {
	var w struct {
		Model               string   `json:"model"`
		Stream              bool     `json:"stream"`
		Temperature         *float64 `json:"temperature"`
		MaxTokens           int      `json:"max_tokens"`
		MaxCompletionTokens int      `json:"max_completion_tokens"`
		Messages            []struct {
			Role       string  `json:"role"`
			Content    *string `json:"content"`
			ToolCallID string  `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
			ReasoningContent *string `json:"reasoning_content"`
			Reasoning        *string `json:"reasoning"`
		} `json:"messages"`
		Tools []struct {
			Type     string `json:"type"`
			Function struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &w); err != nil {
		return llmtest.Request{}, err
	}
	r := llmtest.Request{Model: w.Model, Stream: w.Stream, Temperature: w.Temperature, MaxTokens: max(w.MaxTokens, w.MaxCompletionTokens)}
	var system []string
	for i, m := range w.Messages {
		content := ""
		if m.Content != nil {
			content = *m.Content
		}
		switch m.Role {
		case "system", "developer":
			system = append(system, content)
			continue
		case "user", "assistant", "tool":
		default:
			return r, fmt.Errorf("message %d: role %q", i, m.Role)
		}
		msg := llmtest.Message{Role: helix.Role(m.Role), Content: content, ToolCallID: m.ToolCallID}
		for _, c := range m.ToolCalls {
			if c.Type != "function" {
				return r, fmt.Errorf("message %d: tool call type %q", i, c.Type)
			}
			msg.ToolCalls = append(msg.ToolCalls, helix.ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: json.RawMessage(c.Function.Arguments)})
		}
		if m.ReasoningContent != nil || m.Reasoning != nil {
			msg.Thinking = &helix.Thinking{}
		}
		r.Messages = append(r.Messages, msg)
	}
	r.System = strings.Join(system, "\n\n")
	for _, t := range w.Tools {
		if t.Type != "function" {
			return r, fmt.Errorf("tool type %q", t.Type)
		}
		r.Tools = append(r.Tools, helix.ToolSpec{Name: t.Function.Name, Description: t.Function.Description, InputSchema: t.Function.Parameters})
	}
	return r, nil
}
