package anthropic_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/llm/anthropic"
	"github.com/helix-agents/helix-dbos/llm/llmtest"
)

// Recorded values of the fixtures.
const (
	fixtureModel     = "claude-sonnet-4-5-20250929"
	fixtureSignature = "EqQBCkgIBxABGAIqQKq3Lm9XrTn4Rc8Pw2Ys6VdHe1uJaBKfYw2qLm8Xc4TnR0pZs9VdHe1uJaQ7LmXc2Tn5Pw8Ys1VdKe4bEgxq3Lm9XrTn4Rc8Pw2YaDHs6VdHe1uJaBKfYw2IjB0pZs9VdHe1uJaQ7LmXc2Tn5Pw8Ys1VdKe4b"
)

// adapter describes the Anthropic adapter to the conformance suite. The
// fixtures are Messages API streams in their recorded wire format, ping
// events included.
func adapter() llmtest.Adapter {
	return llmtest.Adapter{
		Name: "anthropic",
		New: func(t llmtest.Target) (helix.Model, error) {
			return anthropic.New(anthropic.Config{
				BaseURL: t.BaseURL, APIKey: t.APIKey, Headers: t.Headers, HTTPClient: t.HTTPClient,
				MaxRetries: t.MaxRetries, MinBackoff: t.MinBackoff, MaxBackoff: t.MaxBackoff,
				MaxRetryAfter: t.MaxRetryAfter, IdleTimeout: t.IdleTimeout,
			})
		},
		Path:               "/v1/messages",
		AuthHeader:         "X-Api-Key",
		DecodeRequest:      decodeRequest,
		ResponseModel:      fixtureModel,
		ReportsCacheWrites: true,
		FlagsToolErrors:    true,
		SendsThinking:      true,
		ThinkingSignature:  fixtureSignature,
		Fixtures: llmtest.TestdataFixtures(&llmtest.TestdataOpts{
			RateLimitHeader:  map[string]string{"Retry-After": "1", "request-id": "req_011CUa7Lm2Xc9Tn4Rq1Pw8Ys", "anthropic-ratelimit-input-tokens-remaining": "0"},
			OverloadedStatus: 529,
		}),
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	llmtest.Run(t, adapter())
}

// wireBlock is a content block of a Messages request, as documented.
type wireBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
	Thinking  string          `json:"thinking"`
	Signature string          `json:"signature"`
}

// blocks reads a content that is a string or a list of blocks.
func blocks(raw json.RawMessage) ([]wireBlock, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []wireBlock{{Type: "text", Text: s}}, nil
	}
	var bs []wireBlock
	err := json.Unmarshal(raw, &bs)
	return bs, err
}

func joinText(bs []wireBlock) string {
	var parts []string
	for _, b := range bs {
		if b.Type == "text" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "")
}

// decodeRequest reads a Messages request as the API documents it,
// independently of the adapter's mapping: tool_result blocks become tool
// messages, each user text block a user message.
func decodeRequest(body []byte) (llmtest.Request, error) {
	var w struct {
		Model       string          `json:"model"`
		Stream      bool            `json:"stream"`
		MaxTokens   int             `json:"max_tokens"`
		Temperature *float64        `json:"temperature"`
		System      json.RawMessage `json:"system"`
		Messages    []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Tools []struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			InputSchema json.RawMessage `json:"input_schema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &w); err != nil {
		return llmtest.Request{}, err
	}
	r := llmtest.Request{Model: w.Model, Stream: w.Stream, MaxTokens: w.MaxTokens, Temperature: w.Temperature}
	sys, err := blocks(w.System)
	if err != nil {
		return r, fmt.Errorf("system: %w", err)
	}
	var system []string
	for _, b := range sys {
		system = append(system, b.Text)
	}
	r.System = strings.Join(system, "\n\n")
	for i, m := range w.Messages {
		bs, err := blocks(m.Content)
		if err != nil {
			return r, fmt.Errorf("message %d: %w", i, err)
		}
		switch m.Role {
		case "user":
			for _, b := range bs {
				switch b.Type {
				case "text":
					r.Messages = append(r.Messages, llmtest.Message{Role: helix.RoleUser, Content: b.Text})
				case "tool_result":
					content, err := blocks(b.Content)
					if err != nil {
						return r, fmt.Errorf("message %d: tool_result content: %w", i, err)
					}
					r.Messages = append(r.Messages, llmtest.Message{Role: helix.RoleTool, ToolCallID: b.ToolUseID, Content: joinText(content), IsError: b.IsError})
				default:
					return r, fmt.Errorf("message %d: user block type %q", i, b.Type)
				}
			}
		case "assistant":
			msg := llmtest.Message{Role: helix.RoleAssistant, Content: joinText(bs)}
			for _, b := range bs {
				switch b.Type {
				case "thinking":
					msg.Thinking = &helix.Thinking{Content: b.Thinking, Signature: b.Signature}
				case "redacted_thinking":
					if msg.Thinking == nil {
						msg.Thinking = &helix.Thinking{}
					}
				case "tool_use":
					msg.ToolCalls = append(msg.ToolCalls, helix.ToolCall{ID: b.ID, Name: b.Name, Arguments: b.Input})
				case "text":
				default:
					return r, fmt.Errorf("message %d: assistant block type %q", i, b.Type)
				}
			}
			r.Messages = append(r.Messages, msg)
		default:
			return r, fmt.Errorf("message %d: role %q", i, m.Role)
		}
	}
	for _, t := range w.Tools {
		r.Tools = append(r.Tools, helix.ToolSpec{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema})
	}
	return r, nil
}
