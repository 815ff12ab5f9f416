package helix

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Role identifies who produced a [Message].
type Role string

// The four message roles of the specification.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Valid reports whether r is one of the four roles.
func (r Role) Valid() bool {
	switch r {
	case RoleSystem, RoleUser, RoleAssistant, RoleTool:
		return true
	}
	return false
}

// ToolCall is a tool invocation requested by the model (the specification's
// ToolCallRequest). Arguments is the raw JSON object the model produced.
type ToolCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// Thinking is reasoning content attached to an assistant message. Signature
// carries a provider's opaque verification token when it sends one (Anthropic
// requires it back on the next request).
type Thinking struct {
	Content   string `json:"content"`
	Signature string `json:"signature,omitempty"`
}

// Message is one entry of a session's conversation. It is a single struct
// with a Role discriminator rather than four types so that it stores and
// checkpoints as plain JSON; [Message.Validate] enforces the per-role shape:
//
//   - system and user: Content.
//   - assistant: Content and/or ToolCalls, optional Thinking.
//   - tool: ToolCallID, ToolName and Content (the serialized result).
type Message struct {
	Role       Role           `json:"role"`
	Content    string         `json:"content"`
	ToolCalls  []ToolCall     `json:"toolCalls,omitempty"`
	Thinking   *Thinking      `json:"thinking,omitempty"`
	ToolCallID string         `json:"toolCallId,omitempty"`
	ToolName   string         `json:"toolName,omitempty"`
	Metadata   map[string]any `json:"metadata,omitempty"`
}

// SystemMessage returns a system message with the given content.
func SystemMessage(content string) Message { return Message{Role: RoleSystem, Content: content} }

// UserMessage returns a user message with the given content.
func UserMessage(content string) Message { return Message{Role: RoleUser, Content: content} }

// AssistantMessage returns an assistant message with text content and
// optional tool calls.
func AssistantMessage(content string, toolCalls ...ToolCall) Message {
	return Message{Role: RoleAssistant, Content: content, ToolCalls: toolCalls}
}

// ToolResultMessage returns the tool message answering toolCallID. The
// content is the serialized tool result the model will read.
func ToolResultMessage(toolCallID, toolName, content string) Message {
	return Message{Role: RoleTool, ToolCallID: toolCallID, ToolName: toolName, Content: content}
}

// Validate reports the first way m violates the shape its role requires.
func (m Message) Validate() error {
	switch m.Role {
	case RoleSystem, RoleUser:
		if len(m.ToolCalls) > 0 || m.ToolCallID != "" || m.ToolName != "" || m.Thinking != nil {
			return fmt.Errorf("helix: %s message may only carry content and metadata", m.Role)
		}
	case RoleAssistant:
		if m.ToolCallID != "" || m.ToolName != "" {
			return errors.New("helix: assistant message must not set toolCallId or toolName")
		}
		seen := make(map[string]bool, len(m.ToolCalls))
		for i, tc := range m.ToolCalls {
			if tc.ID == "" || tc.Name == "" {
				return fmt.Errorf("helix: assistant message tool call %d needs an id and a name", i)
			}
			if seen[tc.ID] {
				return fmt.Errorf("helix: assistant message repeats tool call id %q", tc.ID)
			}
			seen[tc.ID] = true
			if len(tc.Arguments) > 0 && !json.Valid(tc.Arguments) {
				return fmt.Errorf("helix: assistant message tool call %q has invalid JSON arguments", tc.ID)
			}
		}
	case RoleTool:
		if m.ToolCallID == "" || m.ToolName == "" {
			return errors.New("helix: tool message needs toolCallId and toolName")
		}
		if len(m.ToolCalls) > 0 || m.Thinking != nil {
			return errors.New("helix: tool message must not carry tool calls or thinking")
		}
	default:
		return fmt.Errorf("helix: unknown message role %q (want system, user, assistant or tool)", m.Role)
	}
	return nil
}

// MarshalJSON omits content on assistant messages that only call tools, as
// the specification makes it optional there and required everywhere else.
func (m Message) MarshalJSON() ([]byte, error) {
	type plain Message
	if m.Role == RoleAssistant && m.Content == "" {
		type assistant struct {
			plain
			Content string `json:"content,omitempty"`
		}
		return json.Marshal(assistant{plain: plain(m)})
	}
	return json.Marshal(plain(m))
}

// Common metadata keys (the specification's COMMON_METADATA_KEYS).
const (
	MetadataSource          = "source"
	MetadataHidden          = "hidden"
	MetadataTimestamp       = "timestamp"
	MetadataDuration        = "duration"
	MetadataModel           = "model"
	MetadataIsSubAgent      = "isSubAgent"
	MetadataParentSessionID = "parentSessionId"
	MetadataTags            = "tags"
)

// StripMetadata returns a copy of m without metadata.
func StripMetadata(m Message) Message {
	m.Metadata = nil
	return m
}

// StripThinking returns copies of msgs with thinking content removed, for
// providers that reject replayed reasoning.
func StripThinking(msgs []Message) []Message {
	out := make([]Message, len(msgs))
	for i, m := range msgs {
		m.Thinking = nil
		out[i] = m
	}
	return out
}

// FilterByMetadata returns the messages whose metadata satisfies keep. Messages
// without metadata are passed an empty map.
func FilterByMetadata(msgs []Message, keep func(metadata map[string]any) bool) []Message {
	var out []Message
	for _, m := range msgs {
		md := m.Metadata
		if md == nil {
			md = map[string]any{}
		}
		if keep(md) {
			out = append(out, m)
		}
	}
	return out
}

// MessagesWithMetadataKey returns the messages whose metadata contains key.
func MessagesWithMetadataKey(msgs []Message, key string) []Message {
	return FilterByMetadata(msgs, func(md map[string]any) bool {
		_, ok := md[key]
		return ok
	})
}

// ToolResults returns the tool messages of msgs keyed by tool call ID.
func ToolResults(msgs []Message) map[string]Message {
	out := map[string]Message{}
	for _, m := range msgs {
		if m.Role == RoleTool {
			out[m.ToolCallID] = m
		}
	}
	return out
}
