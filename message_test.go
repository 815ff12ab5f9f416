package helix_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
)

func TestMessageJSON(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		msg  helix.Message
		json string
	}{
		"system": {helix.SystemMessage("be brief"), `{"role":"system","content":"be brief"}`},
		"user":   {helix.UserMessage(""), `{"role":"user","content":""}`},
		"assistant tool call only": {helix.AssistantMessage("", helix.ToolCall{ID: "c1", Name: "t", Arguments: json.RawMessage(`{"a":1}`)}),
			`{"role":"assistant","toolCalls":[{"id":"c1","name":"t","arguments":{"a":1}}]}`},
		"assistant with thinking": {helix.Message{Role: helix.RoleAssistant, Content: "x", Thinking: &helix.Thinking{Content: "hmm", Signature: "sig"}},
			`{"role":"assistant","content":"x","thinking":{"content":"hmm","signature":"sig"}}`},
		"tool": {helix.ToolResultMessage("c1", "t", `{"ok":true}`), `{"role":"tool","content":"{\"ok\":true}","toolCallId":"c1","toolName":"t"}`},
		"metadata": {helix.Message{Role: helix.RoleUser, Content: "hi", Metadata: map[string]any{"source": "web-ui"}},
			`{"role":"user","content":"hi","metadata":{"source":"web-ui"}}`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.NoError(t, c.msg.Validate())
			b, err := json.Marshal(c.msg)
			require.NoError(t, err)
			require.JSONEq(t, c.json, string(b))
			var back helix.Message
			require.NoError(t, json.Unmarshal(b, &back))
			b2, err := json.Marshal(back)
			require.NoError(t, err)
			require.JSONEq(t, c.json, string(b2))
		})
	}
}

func TestMessageValidate(t *testing.T) {
	t.Parallel()
	bad := []helix.Message{
		{Role: "robot"},
		{Role: helix.RoleUser, ToolCallID: "x"},
		{Role: helix.RoleSystem, Thinking: &helix.Thinking{}},
		{Role: helix.RoleTool, Content: "x"},
		{Role: helix.RoleTool, ToolCallID: "c", ToolName: "t", ToolCalls: []helix.ToolCall{{ID: "a", Name: "b"}}},
		{Role: helix.RoleAssistant, ToolCallID: "c"},
		{Role: helix.RoleAssistant, ToolCalls: []helix.ToolCall{{ID: "", Name: "t"}}},
		{Role: helix.RoleAssistant, ToolCalls: []helix.ToolCall{{ID: "a", Name: "t"}, {ID: "a", Name: "u"}}},
		{Role: helix.RoleAssistant, ToolCalls: []helix.ToolCall{{ID: "a", Name: "t", Arguments: json.RawMessage(`{`)}}},
	}
	for i, m := range bad {
		require.Error(t, m.Validate(), "case %d", i)
	}
	require.True(t, helix.RoleTool.Valid())
	require.False(t, helix.Role("x").Valid())
}

func TestMetadataHelpers(t *testing.T) {
	t.Parallel()
	msgs := []helix.Message{
		{Role: helix.RoleUser, Content: "a", Metadata: map[string]any{helix.MetadataSource: "web-ui"}},
		{Role: helix.RoleUser, Content: "b", Metadata: map[string]any{helix.MetadataHidden: true}},
		{Role: helix.RoleAssistant, Content: "c", Thinking: &helix.Thinking{Content: "t"}},
		helix.ToolResultMessage("c1", "t", "r"),
	}
	require.Equal(t, []helix.Message{msgs[0]}, helix.FilterByMetadata(msgs, func(md map[string]any) bool { return md["source"] == "web-ui" }))
	require.Equal(t, []helix.Message{msgs[1]}, helix.MessagesWithMetadataKey(msgs, helix.MetadataHidden))
	require.Nil(t, helix.StripMetadata(msgs[0]).Metadata)
	require.NotNil(t, msgs[0].Metadata, "StripMetadata returns a copy")
	stripped := helix.StripThinking(msgs)
	require.Nil(t, stripped[2].Thinking)
	require.NotNil(t, msgs[2].Thinking)
	require.Equal(t, map[string]helix.Message{"c1": msgs[3]}, helix.ToolResults(msgs))
}
