package llmtest

import (
	"fmt"
	"strings"

	helix "github.com/helix-agents/helix-dbos"
)

// Request is a provider request decoded back into provider-neutral terms
// by an adapter's [Adapter.DecodeRequest], so the suite can check the
// request mapping of every adapter the same way.
type Request struct {
	// Model is the model the request names.
	Model string
	// Stream reports whether the request asks for a streamed response.
	Stream bool
	// System is the system prompt: the system message (OpenAI) or the
	// system parameter (Anthropic). Several system texts are joined with
	// "\n\n".
	System string
	// Messages is the conversation after the system prompt. Tool results
	// are messages of role tool whatever the wire carries them in
	// (Anthropic sends them as tool_result blocks of a user message): one
	// per result, in order, with the user text that shares their wire
	// message after them.
	Messages []Message
	// Tools are the tools offered, in order; InputSchema is the JSON Schema
	// sent as the tool's parameters.
	Tools []helix.ToolSpec
	// Temperature is the sampling temperature, nil when not sent.
	Temperature *float64
	// MaxTokens is the output token limit sent, 0 when not sent.
	MaxTokens int
}

// Message is one decoded conversation message.
type Message struct {
	// Role is user, assistant or tool.
	Role helix.Role
	// Content is the text (of a tool message: the result sent).
	Content string
	// ToolCalls are an assistant message's tool calls.
	ToolCalls []helix.ToolCall
	// Thinking is an assistant message's reasoning sent back, nil when
	// none was sent.
	Thinking *helix.Thinking
	// ToolCallID is the call a tool message answers.
	ToolCallID string
	// IsError reports whether a tool message is flagged as a failure.
	IsError bool
}

// diffMessages describes how got differs from want, or returns "".
func diffMessages(want, got []Message) string {
	var diffs []string
	if len(want) != len(got) {
		diffs = append(diffs, fmt.Sprintf("%d messages, want %d: got %s", len(got), len(want), describeMessages(got)))
		return strings.Join(diffs, "; ")
	}
	for i := range want {
		w, g := want[i], got[i]
		prefix := fmt.Sprintf("message %d (%s)", i, w.Role)
		if w.Role != g.Role {
			diffs = append(diffs, fmt.Sprintf("%s: role %q", prefix, g.Role))
		}
		if w.Content != g.Content {
			diffs = append(diffs, fmt.Sprintf("%s: content %q, want %q", prefix, g.Content, w.Content))
		}
		if w.ToolCallID != g.ToolCallID {
			diffs = append(diffs, fmt.Sprintf("%s: tool call ID %q, want %q", prefix, g.ToolCallID, w.ToolCallID))
		}
		if w.IsError != g.IsError {
			diffs = append(diffs, fmt.Sprintf("%s: is_error %t, want %t", prefix, g.IsError, w.IsError))
		}
		if (w.Thinking == nil) != (g.Thinking == nil) || (w.Thinking != nil && *w.Thinking != *g.Thinking) {
			diffs = append(diffs, fmt.Sprintf("%s: thinking %+v, want %+v", prefix, g.Thinking, w.Thinking))
		}
		if len(w.ToolCalls) != len(g.ToolCalls) {
			diffs = append(diffs, fmt.Sprintf("%s: %d tool calls, want %d", prefix, len(g.ToolCalls), len(w.ToolCalls)))
			continue
		}
		for j := range w.ToolCalls {
			wc, gc := w.ToolCalls[j], g.ToolCalls[j]
			if wc.ID != gc.ID || wc.Name != gc.Name || !JSONEqual(string(wc.Arguments), string(gc.Arguments)) {
				diffs = append(diffs, fmt.Sprintf("%s: tool call %d is %s %s %s, want %s %s %s",
					prefix, j, gc.ID, gc.Name, gc.Arguments, wc.ID, wc.Name, wc.Arguments))
			}
		}
	}
	return strings.Join(diffs, "; ")
}

func describeMessages(msgs []Message) string {
	parts := make([]string, len(msgs))
	for i, m := range msgs {
		parts[i] = fmt.Sprintf("%s(%q, %d calls, id %q)", m.Role, m.Content, len(m.ToolCalls), m.ToolCallID)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
