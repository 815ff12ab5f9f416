package helix

import (
	"context"
	"encoding/json"
)

// Model generates one step of an agent's conversation. Implementations live
// in the llm packages (llm/openai, llm/anthropic, llm/scripted); any type with
// this method can drive an agent.
//
// GenerateStep must honour ctx cancellation, forward streamed deltas through
// the callbacks as they arrive, and return a [StepResult]. A provider failure
// is returned as an error, preferably a *[ModelError] so the runtime can emit
// a classified error chunk. The runtime calls GenerateStep inside a durable
// step: a crash before the result is checkpointed calls it again.
type Model interface {
	GenerateStep(ctx context.Context, req ModelRequest, cb StreamCallbacks) (StepResult, error)
}

// ModelFunc adapts a function to the [Model] interface.
type ModelFunc func(ctx context.Context, req ModelRequest, cb StreamCallbacks) (StepResult, error)

// GenerateStep calls f.
func (f ModelFunc) GenerateStep(ctx context.Context, req ModelRequest, cb StreamCallbacks) (StepResult, error) {
	return f(ctx, req, cb)
}

// ModelRequest is what a [Model] receives for one step.
type ModelRequest struct {
	// Messages is the conversation, system prompt first. The engine shares
	// it with its copy of the session's log, for the call's duration: read
	// it, never modify it or its messages (copy what you change).
	Messages []Message `json:"messages"`
	// Tools are the tools the model may call this step, __finish__ included
	// when the agent has an output schema.
	Tools []ToolSpec `json:"tools,omitempty"`
	// Config carries the agent's LLM settings.
	Config LLMConfig `json:"config"`
	// AgentID is the session ID of the agent making the call; AgentType its
	// agent name. Scripted models key their scripts on AgentType.
	AgentID   string `json:"agentId"`
	AgentType string `json:"agentType"`
	// Step is the 1-based step number within the current turn.
	Step int `json:"step"`
}

// ToolSpec is a tool as presented to a model: name, description and the JSON
// Schema of its input.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"inputSchema"`
}

// LLMConfig holds per-agent model settings. Zero values mean "provider
// default".
type LLMConfig struct {
	Model           string   `json:"model,omitempty"`
	Temperature     *float64 `json:"temperature,omitempty"`
	MaxOutputTokens int      `json:"maxOutputTokens,omitempty"`
	// ProviderOptions are passed through to the provider adapter untouched.
	ProviderOptions map[string]json.RawMessage `json:"providerOptions,omitempty"`
}

// StreamCallbacks receive a model's output as it is generated. Every field is
// optional. Callbacks are invoked from the goroutine running GenerateStep and
// must not block for long: the runtime forwards them to the session's stream.
type StreamCallbacks struct {
	OnTextDelta func(delta string)
	// OnThinking receives reasoning content; complete is true for a final,
	// whole block and false for an incremental piece.
	OnThinking func(content string, complete bool)
	// OnToolArgStart, OnToolArgDelta and OnToolArgEnd report tool-call
	// arguments as they stream, for models that stream them.
	OnToolArgStart func(toolCallID, toolName string)
	OnToolArgDelta func(toolCallID, delta string)
	OnToolArgEnd   func(toolCallID string)
}

// TextDelta calls OnTextDelta when it is set.
func (cb StreamCallbacks) TextDelta(delta string) {
	if cb.OnTextDelta != nil {
		cb.OnTextDelta(delta)
	}
}

// Thinking calls OnThinking when it is set.
func (cb StreamCallbacks) Thinking(content string, complete bool) {
	if cb.OnThinking != nil {
		cb.OnThinking(content, complete)
	}
}

// ToolArgStart calls OnToolArgStart when it is set.
func (cb StreamCallbacks) ToolArgStart(toolCallID, toolName string) {
	if cb.OnToolArgStart != nil {
		cb.OnToolArgStart(toolCallID, toolName)
	}
}

// ToolArgDelta calls OnToolArgDelta when it is set.
func (cb StreamCallbacks) ToolArgDelta(toolCallID, delta string) {
	if cb.OnToolArgDelta != nil {
		cb.OnToolArgDelta(toolCallID, delta)
	}
}

// ToolArgEnd calls OnToolArgEnd when it is set.
func (cb StreamCallbacks) ToolArgEnd(toolCallID string) {
	if cb.OnToolArgEnd != nil {
		cb.OnToolArgEnd(toolCallID)
	}
}

// StepResultType discriminates [StepResult].
type StepResultType string

// Step result types.
const (
	StepText             StepResultType = "text"
	StepToolCalls        StepResultType = "tool_calls"
	StepStructuredOutput StepResultType = "structured_output"
	StepError            StepResultType = "error"
)

// StepResult is what a model produced in one step. It is checkpointed as JSON
// and must round-trip exactly.
type StepResult struct {
	Type StepResultType `json:"type"`
	// Content is the assistant text (also present alongside tool calls).
	Content  string    `json:"content,omitempty"`
	Thinking *Thinking `json:"thinking,omitempty"`
	// ToolCalls are the calls requested, in the model's order.
	ToolCalls []ToolCall `json:"toolCalls,omitempty"`
	// Output is the structured output of a structured_output result.
	Output json.RawMessage `json:"output,omitempty"`
	// Error and ErrorCode describe an error result.
	Error      string     `json:"error,omitempty"`
	ErrorCode  string     `json:"errorCode,omitempty"`
	StopReason StopReason `json:"stopReason,omitempty"`
	Usage      Usage      `json:"usage"`
	// Model is the concrete model that answered, when the provider says.
	Model string `json:"model,omitempty"`
}

// Usage counts the tokens of one model call.
type Usage struct {
	InputTokens      int `json:"inputTokens"`
	OutputTokens     int `json:"outputTokens"`
	CachedTokens     int `json:"cachedTokens,omitempty"`
	CacheWriteTokens int `json:"cacheWriteTokens,omitempty"`
}

// Add returns the sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{
		InputTokens:      u.InputTokens + v.InputTokens,
		OutputTokens:     u.OutputTokens + v.OutputTokens,
		CachedTokens:     u.CachedTokens + v.CachedTokens,
		CacheWriteTokens: u.CacheWriteTokens + v.CacheWriteTokens,
	}
}

// StopReason is a provider-neutral reason a model stopped generating.
type StopReason string

// Stop reasons.
const (
	StopEndTurn       StopReason = "end_turn"
	StopStopSequence  StopReason = "stop_sequence"
	StopToolUse       StopReason = "tool_use"
	StopMaxTokens     StopReason = "max_tokens"
	StopContentFilter StopReason = "content_filter"
	StopRefusal       StopReason = "refusal"
	StopError         StopReason = "error"
	StopUnknown       StopReason = "unknown"
)

// IsErrorStopReason reports whether r means the generation did not finish
// normally (token limit, safety filter, refusal, error).
func IsErrorStopReason(r StopReason) bool {
	switch r {
	case StopMaxTokens, StopContentFilter, StopRefusal, StopError:
		return true
	}
	return false
}

// MapOpenAIFinishReason maps an OpenAI Chat Completions finish_reason.
func MapOpenAIFinishReason(reason string) StopReason {
	switch reason {
	case "stop":
		return StopEndTurn
	case "length":
		return StopMaxTokens
	case "tool_calls", "function_call":
		return StopToolUse
	case "content_filter":
		return StopContentFilter
	case "":
		return StopUnknown
	}
	return StopUnknown
}

// MapAnthropicStopReason maps an Anthropic Messages stop_reason.
func MapAnthropicStopReason(reason string) StopReason {
	switch reason {
	case "end_turn", "pause_turn":
		return StopEndTurn
	case "stop_sequence":
		return StopStopSequence
	case "tool_use":
		return StopToolUse
	case "max_tokens", "model_context_window_exceeded":
		return StopMaxTokens
	case "refusal":
		return StopRefusal
	}
	return StopUnknown
}

// MapGeminiFinishReason maps a Gemini finishReason.
func MapGeminiFinishReason(reason string) StopReason {
	switch reason {
	case "STOP":
		return StopEndTurn
	case "MAX_TOKENS":
		return StopMaxTokens
	case "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII":
		return StopContentFilter
	case "MALFORMED_FUNCTION_CALL":
		return StopError
	}
	return StopUnknown
}

// MapVercelFinishReason maps a Vercel AI SDK finishReason.
func MapVercelFinishReason(reason string) StopReason {
	switch reason {
	case "stop":
		return StopEndTurn
	case "length":
		return StopMaxTokens
	case "tool-calls":
		return StopToolUse
	case "content-filter":
		return StopContentFilter
	case "error":
		return StopError
	}
	return StopUnknown
}

// FinishReason converts a stop reason to the finishReason vocabulary of the
// step_end chunk: stop, length, tool-calls, content-filter, error or other.
func (r StopReason) FinishReason() string {
	switch r {
	case StopEndTurn, StopStopSequence:
		return "stop"
	case StopMaxTokens:
		return "length"
	case StopToolUse:
		return "tool-calls"
	case StopContentFilter, StopRefusal:
		return "content-filter"
	case StopError:
		return "error"
	}
	return "other"
}
