package anthropic_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/llm/anthropic"
	"github.com/helix-agents/helix-dbos/llm/llmtest"
)

const testKey = "sk-ant-api03-test-0123456789abcdef"

// serve starts a fake server replaying fixtures and a model pointed at it.
func serve(t *testing.T, cfg anthropic.Config, fixtures ...llmtest.Fixture) (*anthropic.Model, *llmtest.Server) {
	t.Helper()
	srv := llmtest.NewServer(t, fixtures...)
	cfg.BaseURL, cfg.HTTPClient = srv.URL, srv.Client()
	if cfg.APIKey == "" {
		cfg.APIKey = testKey
	}
	if cfg.Model == "" {
		cfg.Model = "claude-sonnet-4-5"
	}
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff, cfg.MaxBackoff = time.Millisecond, 5*time.Millisecond
	}
	m, err := anthropic.New(cfg)
	require.NoError(t, err)
	return m, srv
}

func userRequest() helix.ModelRequest {
	return helix.ModelRequest{Messages: []helix.Message{helix.UserMessage("hi")}}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]anthropic.Config{
		"relative URL":           {BaseURL: "api.anthropic.com"},
		"thinking below minimum": {Thinking: 512},
		"thinking above max":     {Thinking: 8000, MaxTokens: 8000},
		"negative max tokens":    {MaxTokens: -1},
		"min above max backoff":  {MinBackoff: time.Minute, MaxBackoff: time.Second},
		"negative wait cap":      {MaxRetryAfter: -time.Second},
		"bad header":             {Headers: map[string]string{"a b": "c"}},
	} {
		_, err := anthropic.New(cfg)
		require.ErrorContains(t, err, "anthropic: Config.", name)
	}
}

func TestRequestMapping(t *testing.T) {
	t.Parallel()
	m, srv := serve(t, anthropic.Config{}, llmtest.Testdata("text.sse"))
	temp := 0.7
	req := helix.ModelRequest{
		Messages: []helix.Message{
			helix.SystemMessage("first"),
			helix.UserMessage("a"),
			helix.UserMessage(""), // the API rejects empty text blocks
			helix.UserMessage("b"),
			{Role: helix.RoleAssistant, Thinking: &helix.Thinking{Content: "unsigned, from another provider"}, ToolCalls: []helix.ToolCall{
				{ID: "c1", Name: "t", Arguments: json.RawMessage(`"{\"broken"`)},
				{ID: "c2", Name: "t"},
			}},
			helix.ToolResultMessage("c1", "t", `{"error":"invalid arguments"}`),
			helix.ToolResultMessage("c2", "t", `{"error":"x","detail":1}`),
			helix.SystemMessage("second"),
		},
		Tools:  []helix.ToolSpec{{Name: "t", Description: "d"}},
		Config: helix.LLMConfig{Model: "claude-opus-4-1", Temperature: &temp, MaxOutputTokens: 321},
	}
	_, err := m.GenerateStep(t.Context(), req, helix.StreamCallbacks{})
	require.NoError(t, err)
	b := srv.RequestBody(t, 0)
	require.JSONEq(t, `"claude-opus-4-1"`, string(b["model"]))
	require.JSONEq(t, `321`, string(b["max_tokens"]))
	require.JSONEq(t, `0.7`, string(b["temperature"]))
	require.JSONEq(t, `[{"type":"text","text":"first"},{"type":"text","text":"second"}]`, string(b["system"]))
	require.JSONEq(t, `[
		{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
		{"role":"assistant","content":[
			{"type":"tool_use","id":"c1","name":"t","input":{}},
			{"type":"tool_use","id":"c2","name":"t","input":{}}]},
		{"role":"user","content":[
			{"type":"tool_result","tool_use_id":"c1","is_error":true,"content":[{"type":"text","text":"{\"error\":\"invalid arguments\"}"}]},
			{"type":"tool_result","tool_use_id":"c2","content":[{"type":"text","text":"{\"error\":\"x\",\"detail\":1}"}]}]}]`, string(b["messages"]))
	require.JSONEq(t, `[{"name":"t","description":"d","input_schema":{"type":"object","properties":{}}}]`, string(b["tools"]))
}

func TestThinkingConfig(t *testing.T) {
	t.Parallel()
	m, srv := serve(t, anthropic.Config{Thinking: 2048, MaxTokens: 8192}, llmtest.Testdata("thinking.sse"))
	temp := 0.2
	req := userRequest()
	req.Config.Temperature = &temp
	res, err := m.GenerateStep(t.Context(), req, helix.StreamCallbacks{})
	require.NoError(t, err)
	require.Equal(t, fixtureSignature, res.Thinking.Signature)
	b := srv.RequestBody(t, 0)
	require.JSONEq(t, `{"type":"enabled","budget_tokens":2048}`, string(b["thinking"]))
	require.JSONEq(t, `8192`, string(b["max_tokens"]))
	_, hasTemp := b["temperature"]
	require.False(t, hasTemp, "temperature is not sent with thinking on")

	req.Config.MaxOutputTokens = 2048
	_, err = m.GenerateStep(t.Context(), req, helix.StreamCallbacks{})
	me := llmtest.AsModelError(t, err)
	require.Equal(t, helix.CodeProviderInvalidRequest, me.Code)
	require.Contains(t, me.Message, "must exceed the thinking budget")
}

func TestProviderOptions(t *testing.T) {
	t.Parallel()
	m, srv := serve(t, anthropic.Config{Thinking: 1024}, llmtest.Testdata("text.sse"))
	req := userRequest()
	req.Config.ProviderOptions = map[string]json.RawMessage{
		"anthropic": json.RawMessage(`{"top_k":40,"thinking":{"type":"adaptive"},"metadata":{"user_id":"u-1"},"max_tokens":null}`),
		"openai":    json.RawMessage(`{"seed":1}`),
	}
	_, err := m.GenerateStep(t.Context(), req, helix.StreamCallbacks{})
	require.NoError(t, err)
	b := srv.RequestBody(t, 0)
	require.JSONEq(t, `40`, string(b["top_k"]))
	require.JSONEq(t, `{"type":"adaptive"}`, string(b["thinking"]), "options replace the adapter's fields")
	require.JSONEq(t, `{"user_id":"u-1"}`, string(b["metadata"]))
	for _, k := range []string{"max_tokens", "seed"} {
		_, ok := b[k]
		require.False(t, ok, k)
	}

	for _, opts := range []string{`{"stream":false}`, `"x"`, `null`} {
		req.Config.ProviderOptions = map[string]json.RawMessage{"anthropic": json.RawMessage(opts)}
		_, err := m.GenerateStep(t.Context(), req, helix.StreamCallbacks{})
		require.Equal(t, helix.CodeProviderInvalidRequest, llmtest.AsModelError(t, err).Code, opts)
	}
}

func TestNoModel(t *testing.T) {
	t.Parallel()
	m, err := anthropic.New(anthropic.Config{BaseURL: "http://127.0.0.1:1", APIKey: "k"})
	require.NoError(t, err)
	_, err = m.GenerateStep(t.Context(), userRequest(), helix.StreamCallbacks{})
	require.ErrorContains(t, err, "set Config.Model or the agent's LLMConfig.Model")
}

func TestAPIKeyFromEnvironmentOnlyForTheDefaultURL(t *testing.T) {
	t.Setenv(anthropic.APIKeyEnv, "sk-ant-from-env")
	srv := llmtest.NewServer(t, llmtest.Testdata("text.sse"))
	m, err := anthropic.New(anthropic.Config{BaseURL: srv.URL, Model: "m", HTTPClient: srv.Client()})
	require.NoError(t, err)
	_, err = m.GenerateStep(t.Context(), userRequest(), helix.StreamCallbacks{})
	require.NoError(t, err)
	require.Empty(t, srv.Requests()[0].Header.Get("X-Api-Key"), "a key from the environment must not go to another server")
}

func TestRefusal(t *testing.T) {
	t.Parallel()
	m, _ := serve(t, anthropic.Config{}, llmtest.Testdata("refusal.sse"))
	res, err := m.GenerateStep(t.Context(), userRequest(), helix.StreamCallbacks{})
	require.NoError(t, err)
	require.Equal(t, helix.StopRefusal, res.StopReason)
	require.Equal(t, "I can't help with that.", res.Content)
}

func TestStreamQuirks(t *testing.T) {
	t.Parallel()
	// A redacted_thinking block (kept for the round trip), a tool_use without an ID, a
	// repeated ID, input given whole in the start event, unknown delta
	// and block types, and a stop reason this adapter does not know.
	const stream = `event: message_start
data: {"type":"message_start","message":{"model":"claude-x","usage":{"input_tokens":10,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix/LafPsn4a"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"","name":"a","input":{}}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"b","input":{"k":"v"}}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"citations_delta","citation":{}}}

event: content_block_start
data: {"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_1","name":"c","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{\"n\": 1"}}

event: content_block_start
data: {"type":"content_block_start","index":4,"content_block":{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[]}}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"brand_new_reason"},"usage":{"output_tokens":30}}

event: message_stop
data: {"type":"message_stop"}

`
	m, _ := serve(t, anthropic.Config{}, llmtest.Fixture{Body: stream})
	rec := llmtest.NewRecorder()
	res, err := m.GenerateStep(t.Context(), userRequest(), rec.Callbacks())
	require.NoError(t, err)
	llmtest.CheckStream(t, rec, res)
	require.Equal(t, &helix.Thinking{Signature: `helix-anthropic-thinking-blocks-v1:[{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix/LafPsn4a"}]`}, res.Thinking)
	require.Equal(t, helix.StopUnknown, res.StopReason)
	require.Equal(t, helix.Usage{InputTokens: 10, OutputTokens: 30}, res.Usage)
	require.Equal(t, []helix.ToolCall{
		{ID: "toolu_1", Name: "a", Arguments: json.RawMessage(`{}`)},
		{ID: "toolu_2", Name: "b", Arguments: json.RawMessage(`{"k":"v"}`)},
		{ID: "toolu_3", Name: "c", Arguments: json.RawMessage(`"{\"n\": 1"`)},
	}, res.ToolCalls)
}

// Server tools (web search here) stream a server_tool_use block with
// input_json_delta pieces and a result block: both are dropped, with
// their deltas, and the text that follows is the answer.
func TestServerToolBlocksAreDropped(t *testing.T) {
	t.Parallel()
	m, _ := serve(t, anthropic.Config{}, llmtest.Testdata("server_tool_use.sse"))
	rec := llmtest.NewRecorder()
	res, err := m.GenerateStep(t.Context(), userRequest(), rec.Callbacks())
	require.NoError(t, err)
	llmtest.CheckStream(t, rec, res)
	require.Equal(t, helix.StepText, res.Type)
	require.Equal(t, "It is 18°C and sunny in Paris today.", res.Content)
	require.Empty(t, res.ToolCalls, "a server tool call is not the agent's to run")
	require.Zero(t, rec.Count(llmtest.EventToolArgStart)+rec.Count(llmtest.EventToolArgDelta))
	require.Equal(t, helix.StopEndTurn, res.StopReason)
	require.Equal(t, helix.Usage{InputTokens: 10682, OutputTokens: 83}, res.Usage)
}

// A delta for a block that was never started, or of a kept block of
// another type, is still a malformed stream.
func TestInputJSONDeltaOfAnotherBlock(t *testing.T) {
	t.Parallel()
	const head = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"usage\":{}}}\n\n"
	const delta = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}}\n\n"
	for name, tc := range map[string]struct{ start, want string }{
		"never started": {"", "input_json_delta for block 0, which was never started"},
		"a text block": {"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
			"input_json_delta for block 0, which is a text block"},
	} {
		m, _ := serve(t, anthropic.Config{}, llmtest.Fixture{Body: head + tc.start + delta})
		_, err := m.GenerateStep(t.Context(), userRequest(), helix.StreamCallbacks{})
		me := llmtest.AsModelError(t, err)
		require.Equal(t, helix.CodeProviderError, me.Code, name)
		require.False(t, me.Recoverable, name)
		require.Contains(t, me.Message, tc.want, name)
	}
}

// Several thinking blocks and a redacted_thinking block cannot travel as
// one text with the last signature (the API rejects that turn for good):
// the result shows the texts joined, and its Signature carries every
// block, which goes back to the API block by block, in order, before the
// turn's text and tool calls.
func TestThinkingBlocksRoundTrip(t *testing.T) {
	t.Parallel()
	const (
		sig1     = "EqQBCkgIBxABGAIqQFirstBlockSignatureXc8Tn4Lm7Rq2Pw9Ys1VdHe6uJaBKfYw3qLm5Xc"
		sig2     = "EqQBCkgIBxABGAIqQSecondBlockSignatureRq7Pw2Ys6VdHe1uJaBKfYw8qLm4Xc3Tn"
		redacted = "EmwKAhgBEgy3va3pzix/LafPsn4aDFmQ8Tn2Lm6Xc9Rq4Pw1Ys7V"
	)
	m, srv := serve(t, anthropic.Config{Thinking: 1024, MaxTokens: 4096}, llmtest.Testdata("thinking_blocks.sse"), llmtest.Testdata("text.sse"))
	rec := llmtest.NewRecorder()
	res, err := m.GenerateStep(t.Context(), userRequest(), rec.Callbacks())
	require.NoError(t, err)
	llmtest.CheckStream(t, rec, res)
	require.Equal(t, "The user wants the weather in Paris.\n\nI should call get_weather.", res.Thinking.Content)
	require.NotContains(t, res.Thinking.Signature, sig1+sig2)
	require.Len(t, res.ToolCalls, 1)

	// The engine stores the step as an assistant message and sends it back
	// with the tool's result.
	turn := helix.AssistantMessage(res.Content, res.ToolCalls...)
	turn.Thinking = res.Thinking
	next := helix.ModelRequest{Messages: []helix.Message{
		helix.UserMessage("hi"), turn,
		helix.ToolResultMessage(res.ToolCalls[0].ID, res.ToolCalls[0].Name, `{"temperature":18}`),
	}}
	_, err = m.GenerateStep(t.Context(), next, helix.StreamCallbacks{})
	require.NoError(t, err)
	var msgs []struct {
		Role    string            `json:"role"`
		Content []json.RawMessage `json:"content"`
	}
	require.NoError(t, json.Unmarshal(srv.RequestBody(t, 1)["messages"], &msgs))
	require.Len(t, msgs, 3)
	require.Equal(t, "assistant", msgs[1].Role)
	require.Len(t, msgs[1].Content, 4)
	require.JSONEq(t, `{"type":"thinking","thinking":"The user wants the weather in Paris.","signature":"`+sig1+`"}`, string(msgs[1].Content[0]))
	require.JSONEq(t, `{"type":"redacted_thinking","data":"`+redacted+`"}`, string(msgs[1].Content[1]))
	require.JSONEq(t, `{"type":"thinking","thinking":"I should call get_weather.","signature":"`+sig2+`"}`, string(msgs[1].Content[2]))
	require.JSONEq(t, `{"type":"tool_use","id":"toolu_01Hb6Xc1Lm9Tn3Rz7Pv2Ys8Kd","name":"get_weather","input":{"city":"Paris"}}`, string(msgs[1].Content[3]))
}

// Reasoning the API did not sign in this form is not sent back: a
// Signature that claims several blocks but cannot be read, or holds a
// thinking block without a signature, would fail the turn for good.
func TestThinkingBlocksThatCannotGoBack(t *testing.T) {
	t.Parallel()
	for name, sig := range map[string]string{
		"unreadable":             "helix-anthropic-thinking-blocks-v1:[{",
		"unsigned block":         `helix-anthropic-thinking-blocks-v1:[{"type":"thinking","thinking":"a","signature":"s"},{"type":"thinking","thinking":"b"}]`,
		"empty redacted block":   `helix-anthropic-thinking-blocks-v1:[{"type":"redacted_thinking"}]`,
		"unknown block type":     `helix-anthropic-thinking-blocks-v1:[{"type":"text","thinking":"a","signature":"s"}]`,
		"no signature (another)": "",
	} {
		m, srv := serve(t, anthropic.Config{}, llmtest.Testdata("text.sse"))
		turn := helix.AssistantMessage("answer")
		turn.Thinking = &helix.Thinking{Content: "a\n\nb", Signature: sig}
		req := helix.ModelRequest{Messages: []helix.Message{helix.UserMessage("q"), turn, helix.UserMessage("again")}}
		_, err := m.GenerateStep(t.Context(), req, helix.StreamCallbacks{})
		require.NoError(t, err, name)
		require.JSONEq(t, `[
			{"role":"user","content":[{"type":"text","text":"q"}]},
			{"role":"assistant","content":[{"type":"text","text":"answer"}]},
			{"role":"user","content":[{"type":"text","text":"again"}]}]`, string(srv.RequestBody(t, 0)["messages"]), name)
	}
}

func TestErrorClassification(t *testing.T) {
	t.Parallel()
	llmtest.RunErrorCases(t, func(t *testing.T, f llmtest.Fixture) (helix.Model, *llmtest.Server) {
		m, srv := serve(t, anthropic.Config{MaxRetries: 2}, f)
		return m, srv
	}, map[string]llmtest.ErrorCase{
		"billing":     {Fixture: llmtest.Fixture{Status: 400, File: "testdata/billing.json"}, Code: helix.CodeProviderError, Recoverable: false, Requests: 1, Mention: "check the account's plan and billing"},
		"not found":   {Fixture: llmtest.Fixture{Status: 404, File: "testdata/not_found.json"}, Code: helix.CodeProviderInvalidRequest, Recoverable: false, Requests: 1, Mention: "check the model name and Config.BaseURL"},
		"html 502":    {Fixture: llmtest.Fixture{Status: 502, Body: "<html>Bad Gateway</html>"}, Code: helix.CodeProviderUnavailable, Recoverable: true, Requests: 3, Mention: "<html>Bad Gateway</html>"},
		"api error":   {Fixture: llmtest.Fixture{Status: 500, Body: `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`}, Code: helix.CodeProviderUnavailable, Recoverable: true, Requests: 3, Mention: "Internal server error"},
		"permission":  {Fixture: llmtest.Fixture{Status: 403, Body: `{"type":"error","error":{"type":"permission_error","message":"Your API key does not have permission to use the specified resource."}}`}, Code: helix.CodeProviderAuth, Recoverable: false, Requests: 1, Mention: "ANTHROPIC_API_KEY"},
		"request id":  {Fixture: llmtest.Fixture{Status: 401, File: "testdata/auth.json"}, Code: helix.CodeProviderAuth, Recoverable: false, Requests: 1, Mention: "request ID req_011CUaB2Xc7Tn1Rq5Pw9Ys3V"},
		"too large":   {Fixture: llmtest.Fixture{Status: 413, Body: `{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}`}, Code: helix.CodeProviderInvalidRequest, Recoverable: false, Requests: 1, Mention: "maximum allowed"},
		"event retry": {Fixture: llmtest.Fixture{File: "testdata/error_event_first.sse"}, Code: helix.CodeProviderOverloaded, Recoverable: true, Requests: 3, Mention: "Overloaded"},
	})
}

func TestOverloadedThenSuccess(t *testing.T) {
	t.Parallel()
	m, srv := serve(t, anthropic.Config{}, llmtest.Fixture{Status: 529, File: "testdata/overloaded.json"}, llmtest.Testdata("text.sse"))
	res, err := m.GenerateStep(t.Context(), userRequest(), helix.StreamCallbacks{})
	require.NoError(t, err)
	require.Equal(t, llmtest.TextAnswer, res.Content)
	require.Len(t, srv.Requests(), 2)
}

func TestAPIKeyNeverInErrors(t *testing.T) {
	t.Parallel()
	echo := `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key ` + testKey + `"}}`
	m, _ := serve(t, anthropic.Config{}, llmtest.Fixture{Status: 401, Body: echo})
	_, err := m.GenerateStep(t.Context(), userRequest(), helix.StreamCallbacks{})
	require.Error(t, err)
	require.NotContains(t, err.Error(), testKey)
	require.Contains(t, err.Error(), "[redacted]")
}

func TestConnectionRefused(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t, llmtest.Testdata("text.sse"))
	m, err := anthropic.New(anthropic.Config{BaseURL: "http://127.0.0.1:1", APIKey: "k", Model: "m", HTTPClient: srv.Client(),
		MaxRetries: 1, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
	require.NoError(t, err)
	_, err = m.GenerateStep(t.Context(), userRequest(), helix.StreamCallbacks{})
	me := llmtest.AsModelError(t, err)
	require.Equal(t, helix.CodeProviderUnavailable, me.Code)
	require.True(t, me.Recoverable)
	require.Contains(t, me.Message, "after 2 attempts")
}
