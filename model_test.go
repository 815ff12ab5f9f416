package helix_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
)

func TestStopReasonMapping(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]helix.StopReason{"stop": helix.StopEndTurn, "length": helix.StopMaxTokens,
		"tool_calls": helix.StopToolUse, "content_filter": helix.StopContentFilter, "weird": helix.StopUnknown} {
		require.Equal(t, want, helix.MapOpenAIFinishReason(in), in)
	}
	for in, want := range map[string]helix.StopReason{"end_turn": helix.StopEndTurn, "stop_sequence": helix.StopStopSequence,
		"tool_use": helix.StopToolUse, "max_tokens": helix.StopMaxTokens, "refusal": helix.StopRefusal, "?": helix.StopUnknown} {
		require.Equal(t, want, helix.MapAnthropicStopReason(in), in)
	}
	for in, want := range map[string]helix.StopReason{"STOP": helix.StopEndTurn, "MAX_TOKENS": helix.StopMaxTokens,
		"SAFETY": helix.StopContentFilter, "MALFORMED_FUNCTION_CALL": helix.StopError} {
		require.Equal(t, want, helix.MapGeminiFinishReason(in), in)
	}
	for in, want := range map[string]helix.StopReason{"stop": helix.StopEndTurn, "tool-calls": helix.StopToolUse,
		"content-filter": helix.StopContentFilter, "error": helix.StopError, "other": helix.StopUnknown} {
		require.Equal(t, want, helix.MapVercelFinishReason(in), in)
	}
	for r, want := range map[helix.StopReason]bool{helix.StopMaxTokens: true, helix.StopContentFilter: true,
		helix.StopRefusal: true, helix.StopError: true, helix.StopEndTurn: false, helix.StopToolUse: false, helix.StopUnknown: false} {
		require.Equal(t, want, helix.IsErrorStopReason(r), r)
	}
	for r, want := range map[helix.StopReason]string{helix.StopEndTurn: "stop", helix.StopStopSequence: "stop",
		helix.StopMaxTokens: "length", helix.StopToolUse: "tool-calls", helix.StopRefusal: "content-filter",
		helix.StopError: "error", helix.StopUnknown: "other"} {
		require.Equal(t, want, r.FinishReason(), r)
	}
}

func TestStepResultRoundTrip(t *testing.T) {
	t.Parallel()
	in := helix.StepResult{
		Type: helix.StepToolCalls, Content: "calling", Thinking: &helix.Thinking{Content: "plan"},
		ToolCalls:  []helix.ToolCall{{ID: "c1", Name: "search", Arguments: json.RawMessage(`{"q":"go","n":2.5}`)}},
		Output:     json.RawMessage(`{"big":12345678901234567890}`),
		StopReason: helix.StopToolUse, Usage: helix.Usage{InputTokens: 10, OutputTokens: 2, CachedTokens: 8}, Model: "m",
	}
	b, err := json.Marshal(in)
	require.NoError(t, err)
	var out helix.StepResult
	require.NoError(t, json.Unmarshal(b, &out))
	require.Equal(t, in.ToolCalls[0].ID, out.ToolCalls[0].ID)
	require.JSONEq(t, `{"q":"go","n":2.5}`, string(out.ToolCalls[0].Arguments))
	require.Equal(t, `{"big":12345678901234567890}`, string(out.Output), "raw JSON survives checkpointing byte for byte")
	out.ToolCalls[0].Arguments, in.ToolCalls[0].Arguments = nil, nil
	out.Output, in.Output = nil, nil
	require.Equal(t, in, out)
	require.Equal(t, helix.Usage{InputTokens: 11, OutputTokens: 4, CachedTokens: 8, CacheWriteTokens: 1},
		helix.Usage{InputTokens: 1, OutputTokens: 2, CacheWriteTokens: 1}.Add(helix.Usage{InputTokens: 10, OutputTokens: 2, CachedTokens: 8}))
}

func TestStreamCallbacksAreOptional(t *testing.T) {
	t.Parallel()
	var cb helix.StreamCallbacks
	cb.TextDelta("x")
	cb.Thinking("y", true)
	cb.ToolArgStart("c", "t")
	cb.ToolArgDelta("c", "{")
	cb.ToolArgEnd("c")
	var got []string
	cb = helix.StreamCallbacks{OnTextDelta: func(d string) { got = append(got, d) }}
	m := helix.ModelFunc(func(ctx context.Context, req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
		cb.TextDelta("he")
		cb.TextDelta("llo")
		return helix.StepResult{Type: helix.StepText, Content: "hello"}, nil
	})
	res, err := m.GenerateStep(context.Background(), helix.ModelRequest{}, cb)
	require.NoError(t, err)
	require.Equal(t, "hello", res.Content)
	require.Equal(t, []string{"he", "llo"}, got)
}
