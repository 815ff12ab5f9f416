package aisdk_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/server/aisdk"
)

// The body useChat's DefaultChatTransport posts (ai 7.0.173), with a
// continuation's tool parts, decodes; unknown fields are ignored.
func TestParseChatRequest(t *testing.T) {
	t.Parallel()
	body := `{"id":"chat1","agent":"asker","extra":{"x":1},"trigger":"submit-message","messageId":"run-1","messages":[
		{"parts":[{"type":"text","text":"hello"}],"id":"u1","role":"user"},
		{"id":"run-1","role":"assistant","metadata":{"helix":{"runId":"run-1","sequence":4}},"parts":[{"type":"step-start"},
			{"type":"tool-ask_user","toolCallId":"c1","state":"output-available","input":{"q":1},"output":{"a":2}},
			{"type":"dynamic-tool","toolName":"x","toolCallId":"c2","state":"approval-responded","input":{},"approval":{"id":"r::c2","approved":false,"reason":"no"}}]}]}`
	req, err := aisdk.ParseChatRequest([]byte(body))
	require.NoError(t, err)
	require.Equal(t, "chat1", req.ID)
	require.Equal(t, "asker", req.Agent)
	require.Equal(t, "run-1", req.MessageID)
	parts := req.Messages[1].Parts
	require.True(t, parts[1].IsTool())
	require.Equal(t, "ask_user", parts[1].Tool())
	require.JSONEq(t, `{"a":2}`, string(parts[1].Output))
	require.Equal(t, "x", parts[2].Tool())
	require.False(t, *parts[2].Approval.Approved)
	require.False(t, parts[0].IsTool())
}

// The parser never panics and accepts only requests it can serve.
func FuzzParseChatRequest(f *testing.F) {
	f.Add([]byte(`{"id":"a","messages":[{"id":"u","role":"user","parts":[{"type":"text","text":"hi"}]}]}`))
	f.Add([]byte(`{"id":"a","messages":[{"id":"m","role":"assistant","parts":[{"type":"tool-x","toolCallId":"c","state":"output-available","output":null}]}]}`))
	f.Add([]byte(`{"id":"a/b","messages":[]}`))
	f.Add([]byte(`{"id":"a","trigger":"regenerate-message","messages":[{"role":"user"}]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := aisdk.ParseChatRequest(body)
		if err != nil {
			require.Nil(t, req)
			return
		}
		require.NotEmpty(t, req.ID)
		require.NotContains(t, req.ID, "/")
		require.NotEmpty(t, req.Messages)
		last := req.Messages[len(req.Messages)-1].Role
		require.Contains(t, []string{"user", "assistant"}, last)
		require.NotEqual(t, aisdk.TriggerRegenerateMessage, req.Trigger)
	})
}
