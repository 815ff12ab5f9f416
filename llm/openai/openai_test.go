package openai_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/llm/llmtest"
	"github.com/helix-agents/helix-dbos/llm/openai"
)

const testKey = "sk-test-0123456789abcdef"

// serve starts a fake server replaying fixtures and a model pointed at it.
func serve(t *testing.T, cfg openai.Config, fixtures ...llmtest.Fixture) (*openai.Model, *llmtest.Server) {
	t.Helper()
	srv := llmtest.NewServer(t, fixtures...)
	if cfg.BaseURL == "" {
		cfg.BaseURL = srv.URL + "/v1"
	}
	cfg.HTTPClient = srv.Client()
	cfg.Model = "gpt-4o"
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff, cfg.MaxBackoff = time.Millisecond, 5*time.Millisecond
	}
	m, err := openai.New(cfg)
	require.NoError(t, err)
	return m, srv
}

func status(code int, name string) llmtest.Fixture {
	f := llmtest.Testdata(name)
	f.Status = code
	return f
}

func userRequest() helix.ModelRequest {
	return helix.ModelRequest{Messages: []helix.Message{helix.UserMessage("hi")}}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]openai.Config{
		"relative URL":      {BaseURL: "localhost:11434/v1"},
		"bad scheme":        {BaseURL: "ftp://example.com"},
		"min above max":     {MinBackoff: time.Minute, MaxBackoff: time.Second},
		"negative backoff":  {MinBackoff: -time.Second},
		"negative wait cap": {MaxRetryAfter: -time.Second},
		"bad header name":   {Headers: map[string]string{"Bad Header": "x"}},
		"header with CR/LF": {Headers: map[string]string{"X-Ok": "a\r\nInjected: 1"}},
	} {
		_, err := openai.New(cfg)
		require.Error(t, err, name)
		require.Contains(t, err.Error(), "openai: Config.", name)
	}
}

func TestRequestMapping(t *testing.T) {
	t.Parallel()
	m, srv := serve(t, openai.Config{APIKey: testKey}, llmtest.Testdata("text.sse"))
	req := helix.ModelRequest{
		Messages: []helix.Message{
			helix.SystemMessage("sys"),
			helix.UserMessage("u"),
			helix.AssistantMessage("", helix.ToolCall{ID: "c1", Name: "noop"}),
			helix.ToolResultMessage("c1", "noop", `{"error":"boom"}`),
		},
		Tools: []helix.ToolSpec{{Name: "noop"}},
	}
	_, err := m.GenerateStep(t.Context(), req, helix.StreamCallbacks{})
	require.NoError(t, err)
	b := srv.RequestBody(t, 0)
	require.JSONEq(t, `"gpt-4o"`, string(b["model"]), "Config.Model is the default model")
	require.JSONEq(t, `{"include_usage":true}`, string(b["stream_options"]))
	require.JSONEq(t, `[
		{"role":"system","content":"sys"},
		{"role":"user","content":"u"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"noop","arguments":"{}"}}]},
		{"role":"tool","content":"{\"error\":\"boom\"}","tool_call_id":"c1"}]`, string(b["messages"]))
	require.JSONEq(t, `[{"type":"function","function":{"name":"noop","parameters":{"type":"object","properties":{}}}}]`, string(b["tools"]))
	_, hasTemp := b["temperature"]
	_, hasMax := b["max_tokens"]
	require.False(t, hasTemp || hasMax, "unset LLMConfig fields are not sent")
}

func TestProviderOptions(t *testing.T) {
	t.Parallel()
	m, srv := serve(t, openai.Config{}, llmtest.Testdata("text.sse"))
	req := userRequest()
	req.Config = helix.LLMConfig{Model: "o4-mini", MaxOutputTokens: 100, ProviderOptions: map[string]json.RawMessage{
		"openai":    json.RawMessage(`{"response_format":{"type":"json_schema","json_schema":{"name":"a","schema":{"type":"object"}}},"max_completion_tokens":100,"stream_options":null,"reasoning_effort":"low"}`),
		"anthropic": json.RawMessage(`{"top_k":5}`),
	}}
	_, err := m.GenerateStep(t.Context(), req, helix.StreamCallbacks{})
	require.NoError(t, err)
	b := srv.RequestBody(t, 0)
	require.JSONEq(t, `"o4-mini"`, string(b["model"]), "LLMConfig.Model overrides Config.Model")
	require.JSONEq(t, `{"type":"json_schema","json_schema":{"name":"a","schema":{"type":"object"}}}`, string(b["response_format"]))
	require.JSONEq(t, `"low"`, string(b["reasoning_effort"]))
	require.JSONEq(t, `100`, string(b["max_completion_tokens"]))
	for _, k := range []string{"max_tokens", "stream_options", "top_k"} {
		_, ok := b[k]
		require.False(t, ok, "%s must not be sent", k)
	}
}

// redirect sends every request to srv, whatever its URL says, so that a
// model configured for OpenAI's own API talks to the fake server.
type redirect struct {
	srv *llmtest.Server
}

func (r redirect) RoundTrip(req *http.Request) (*http.Response, error) {
	u, err := url.Parse(r.srv.URL)
	if err != nil {
		return nil, err
	}
	req = req.Clone(req.Context())
	req.URL.Scheme, req.URL.Host = u.Scheme, u.Host
	return r.srv.Client().Transport.RoundTrip(req)
}

// OpenAI's reasoning models (o-series, gpt-5) reject max_tokens: OpenAI's
// own API gets max_completion_tokens, compatible servers keep max_tokens,
// and either limit in ProviderOptions replaces the adapter's.
func TestMaxTokensField(t *testing.T) {
	t.Parallel()
	limit := func(b map[string]json.RawMessage) string {
		var got []string
		for _, k := range []string{"max_tokens", "max_completion_tokens"} {
			if v, ok := b[k]; ok {
				got = append(got, k+"="+string(v))
			}
		}
		return strings.Join(got, " ")
	}
	for name, tc := range map[string]struct {
		baseURL string // "" for the fake server's own URL
		options string
		want    string
	}{
		"OpenAI":                         {openai.DefaultBaseURL, "", "max_completion_tokens=100"},
		"OpenAI, another path and case":  {"https://API.openai.com/v1/", "", "max_completion_tokens=100"},
		"compatible server":              {"", "", "max_tokens=100"},
		"lookalike host":                 {"https://api.openai.com.example.net/v1", "", "max_tokens=100"},
		"OpenAI, max_tokens option":      {openai.DefaultBaseURL, `{"max_tokens":50}`, "max_tokens=50"},
		"compatible, completion option":  {"", `{"max_completion_tokens":50}`, "max_completion_tokens=50"},
		"OpenAI, limit removed":          {openai.DefaultBaseURL, `{"max_completion_tokens":null}`, ""},
		"null leaves the other in place": {"", `{"max_completion_tokens":null}`, "max_tokens=100"},
		"both set by the options":        {"", `{"max_tokens":7,"max_completion_tokens":8}`, "max_tokens=7 max_completion_tokens=8"},
	} {
		srv := llmtest.NewServer(t, llmtest.Testdata("text.sse"))
		baseURL := cmp.Or(tc.baseURL, srv.URL+"/v1")
		m, err := openai.New(openai.Config{BaseURL: baseURL, APIKey: testKey, Model: "o4-mini", HTTPClient: &http.Client{Transport: redirect{srv}}})
		require.NoError(t, err, name)
		req := userRequest()
		req.Config.MaxOutputTokens = 100
		if tc.options != "" {
			req.Config.ProviderOptions = map[string]json.RawMessage{openai.ProviderOptionsKey: json.RawMessage(tc.options)}
		}
		_, err = m.GenerateStep(t.Context(), req, helix.StreamCallbacks{})
		require.NoError(t, err, name)
		require.Equal(t, tc.want, limit(srv.RequestBody(t, 0)), name)
	}
}

func TestInvalidRequestsFailBeforeSending(t *testing.T) {
	t.Parallel()
	m, srv := serve(t, openai.Config{}, llmtest.Testdata("text.sse"))
	for name, req := range map[string]helix.ModelRequest{
		"options not an object": {Config: helix.LLMConfig{ProviderOptions: map[string]json.RawMessage{"openai": json.RawMessage(`[1]`)}}},
		"options set stream":    {Config: helix.LLMConfig{ProviderOptions: map[string]json.RawMessage{"openai": json.RawMessage(`{"stream":false}`)}}},
		"bad schema":            {Tools: []helix.ToolSpec{{Name: "t", InputSchema: json.RawMessage(`{`)}}},
		"unknown role":          {Messages: []helix.Message{{Role: "robot", Content: "x"}}},
	} {
		_, err := m.GenerateStep(t.Context(), req, helix.StreamCallbacks{})
		me := llmtest.AsModelError(t, err)
		require.Equal(t, helix.CodeProviderInvalidRequest, me.Code, name)
		require.False(t, me.Recoverable, name)
	}
	require.Empty(t, srv.Requests())
}

func TestNoModel(t *testing.T) {
	t.Parallel()
	m, err := openai.New(openai.Config{BaseURL: "http://127.0.0.1:1/v1"})
	require.NoError(t, err)
	_, err = m.GenerateStep(t.Context(), userRequest(), helix.StreamCallbacks{})
	require.ErrorContains(t, err, "set Config.Model or the agent's LLMConfig.Model")
}

func TestBaseURLQueryAndHeaders(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t, llmtest.Testdata("text.sse"))
	m, err := openai.New(openai.Config{
		BaseURL: srv.URL + "/openai/deployments/gpt-4o/?api-version=2024-10-21", Model: "gpt-4o", HTTPClient: srv.Client(),
		Headers: map[string]string{"api-key": "azure-key"},
	})
	require.NoError(t, err)
	_, err = m.GenerateStep(t.Context(), userRequest(), helix.StreamCallbacks{})
	require.NoError(t, err)
	r := srv.Requests()[0]
	require.Equal(t, "/openai/deployments/gpt-4o/chat/completions", r.Path)
	require.Equal(t, "api-version=2024-10-21", r.RawQuery)
	require.Equal(t, "azure-key", r.Header.Get("api-key"))
	require.Empty(t, r.Header.Get("Authorization"), "no key, no Authorization header (Ollama needs none)")
}

func TestAPIKeyFromEnvironmentOnlyForOpenAI(t *testing.T) {
	t.Setenv(openai.APIKeyEnv, "sk-from-env")
	srv := llmtest.NewServer(t, llmtest.Testdata("text.sse"))
	m, err := openai.New(openai.Config{BaseURL: srv.URL + "/v1", Model: "m", HTTPClient: srv.Client()})
	require.NoError(t, err)
	_, err = m.GenerateStep(t.Context(), userRequest(), helix.StreamCallbacks{})
	require.NoError(t, err)
	require.Empty(t, srv.Requests()[0].Header.Get("Authorization"), "an OpenAI key must not go to another server")
}

func TestStopReasonsAndQuirks(t *testing.T) {
	t.Parallel()
	const head = `data: {"id":"x","model":"m","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}` + "\n\n"
	finish := func(r string) string {
		return head + `data: {"id":"x","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"` + r + `"}]}` + "\n\ndata: [DONE]\n\n"
	}
	for reason, want := range map[string]helix.StopReason{
		"stop": helix.StopEndTurn, "length": helix.StopMaxTokens, "content_filter": helix.StopContentFilter,
		"tool_calls": helix.StopToolUse, "something_new": helix.StopUnknown,
	} {
		m, _ := serve(t, openai.Config{}, llmtest.Fixture{Body: finish(reason)})
		res, err := m.GenerateStep(t.Context(), userRequest(), helix.StreamCallbacks{})
		require.NoError(t, err)
		require.Equal(t, want, res.StopReason, reason)
	}

	// [DONE] without its blank line, CRLF line endings, comments, a refusal.
	body := ": keep-alive\r\n\r\n" +
		`data: {"model":"m","choices":[{"index":0,"delta":{"refusal":"I can't help with that."},"finish_reason":null}]}` + "\r\n\r\n" +
		`data: {"model":"m","choices":[{"index":1,"delta":{"content":"second choice"}},{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\r\n\r\n" +
		"data: [DONE]"
	m, _ := serve(t, openai.Config{}, llmtest.Fixture{Body: body})
	rec := llmtest.NewRecorder()
	res, err := m.GenerateStep(t.Context(), userRequest(), rec.Callbacks())
	require.NoError(t, err)
	require.Equal(t, "I can't help with that.", res.Content, "only the first choice is read")
	require.Equal(t, helix.StopRefusal, res.StopReason)
	llmtest.CheckStream(t, rec, res)
}

func TestReasoningField(t *testing.T) {
	t.Parallel()
	m, _ := serve(t, openai.Config{}, llmtest.Testdata("reasoning_ollama.sse"))
	rec := llmtest.NewRecorder()
	res, err := m.GenerateStep(t.Context(), userRequest(), rec.Callbacks())
	require.NoError(t, err)
	require.Equal(t, "17 × 23 = 391.", res.Thinking.Content)
	require.Equal(t, "391", res.Content)
	require.Equal(t, "gpt-oss:20b", res.Model)
	require.Equal(t, helix.Usage{InputTokens: 75, OutputTokens: 30}, res.Usage)
	llmtest.CheckStream(t, rec, res)
}

func TestDeepSeekUsageAndModel(t *testing.T) {
	t.Parallel()
	m, _ := serve(t, openai.Config{}, llmtest.Testdata("thinking.sse"))
	res, err := m.GenerateStep(t.Context(), userRequest(), helix.StreamCallbacks{})
	require.NoError(t, err)
	require.Equal(t, "deepseek-reasoner", res.Model)
	require.Equal(t, helix.Usage{InputTokens: 41, OutputTokens: 87}, res.Usage)
}

func TestToolCallQuirks(t *testing.T) {
	t.Parallel()
	// No index (Gemini, older Ollama), arguments sent whole as an object,
	// a repeated ID, a missing ID, arguments that are not JSON, finish
	// reason "stop" with tool calls.
	body := `data: {"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"id":"dup","type":"function","function":{"name":"a","arguments":{"x":1}}}]}}]}` + "\n\n" +
		`data: {"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"id":"dup2","type":"function","function":{"name":"b","arguments":"{\"y\":"}}]}}]}` + "\n\n" +
		`data: {"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"function":{"arguments":"2}"}}]}}]}` + "\n\n" +
		`data: {"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":7,"id":"dup","function":{"name":"c","arguments":""}}]}}]}` + "\n\n" +
		`data: {"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":8,"function":{"name":"d","arguments":"{\"cut"}}]}}]}` + "\n\n" +
		`data: {"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n"
	m, _ := serve(t, openai.Config{}, llmtest.Fixture{Body: body})
	rec := llmtest.NewRecorder()
	res, err := m.GenerateStep(t.Context(), userRequest(), rec.Callbacks())
	require.NoError(t, err)
	llmtest.CheckStream(t, rec, res)
	require.Equal(t, helix.StopToolUse, res.StopReason)
	require.Len(t, res.ToolCalls, 4)
	got := map[string]string{}
	for _, c := range res.ToolCalls {
		got[c.ID+" "+c.Name] = string(c.Arguments)
	}
	require.Equal(t, map[string]string{
		"dup a":    `{"x":1}`,
		"dup2 b":   `{"y":2}`,
		"dup_7 c":  `{}`,
		"call_8 d": `"{\"cut"`,
	}, got)
}

// Ollama (like LiteLLM and SGLang) sends parallel calls whole, each with
// index 0 and its own ID: they are two calls, not one with both argument
// objects concatenated.
func TestParallelToolCallsAllAtIndexZero(t *testing.T) {
	t.Parallel()
	m, _ := serve(t, openai.Config{}, llmtest.Testdata("parallel_tool_calls_ollama.sse"))
	rec := llmtest.NewRecorder()
	res, err := m.GenerateStep(t.Context(), userRequest(), rec.Callbacks())
	require.NoError(t, err)
	llmtest.CheckStream(t, rec, res)
	require.Equal(t, helix.StepToolCalls, res.Type)
	require.Equal(t, helix.StopToolUse, res.StopReason)
	require.Equal(t, []helix.ToolCall{
		{ID: "call_a1x9k2m7", Name: llmtest.WeatherTool, Arguments: json.RawMessage(llmtest.ParallelWeatherArgs)},
		{ID: "call_b2q4w8z3", Name: llmtest.TimeTool, Arguments: json.RawMessage(llmtest.ParallelTimeArgs)},
	}, res.ToolCalls)
	require.Equal(t, helix.Usage{InputTokens: 212, OutputTokens: 41}, res.Usage)
	// The first call ends when the second starts.
	var kinds []string
	for _, e := range rec.Events() {
		kinds = append(kinds, string(e.Kind)+" "+e.ToolCallID)
	}
	require.Equal(t, []string{
		"tool_arg_start call_a1x9k2m7", "tool_arg_delta call_a1x9k2m7", "tool_arg_end call_a1x9k2m7",
		"tool_arg_start call_b2q4w8z3", "tool_arg_delta call_b2q4w8z3", "tool_arg_end call_b2q4w8z3",
	}, kinds)
}

// What tells the calls of one index apart: a new ID with a name after a
// complete call. Two calls in one chunk at index 0 are two calls (a call
// without arguments included), an ID repeated on every fragment is one
// call, and so is a call whose ID changes on every fragment (a few
// servers do that) while its arguments stream.
func TestToolCallsOfOneIndex(t *testing.T) {
	t.Parallel()
	chunk := func(calls string) string {
		return `data: {"model":"m","choices":[{"index":0,"delta":{"tool_calls":[` + calls + `]}}]}` + "\n\n"
	}
	const end = `data: {"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}` + "\n\ndata: [DONE]\n\n"
	for name, tc := range map[string]struct {
		body string
		want []helix.ToolCall
	}{
		"two calls in one chunk": {
			chunk(`{"index":0,"id":"a1","function":{"name":"f","arguments":"{\"p\":1}"}},{"index":0,"id":"b2","function":{"name":"f","arguments":"{\"p\":2}"}}`) + end,
			[]helix.ToolCall{{ID: "a1", Name: "f", Arguments: json.RawMessage(`{"p":1}`)}, {ID: "b2", Name: "f", Arguments: json.RawMessage(`{"p":2}`)}},
		},
		"a call without arguments, then another": {
			chunk(`{"index":0,"id":"a1","function":{"name":"f","arguments":""}}`) +
				chunk(`{"index":0,"id":"b2","function":{"name":"g","arguments":"{\"p\":2}"}}`) + end,
			[]helix.ToolCall{{ID: "a1", Name: "f", Arguments: json.RawMessage(`{}`)}, {ID: "b2", Name: "g", Arguments: json.RawMessage(`{"p":2}`)}},
		},
		"ID repeated on every fragment": {
			chunk(`{"index":0,"id":"a1","function":{"name":"f","arguments":"{\"p\""}}`) +
				chunk(`{"index":0,"id":"a1","function":{"arguments":":1}"}}`) + end,
			[]helix.ToolCall{{ID: "a1", Name: "f", Arguments: json.RawMessage(`{"p":1}`)}},
		},
		"a new ID on every fragment": {
			chunk(`{"index":0,"id":"x1","function":{"name":"f","arguments":""}}`) +
				chunk(`{"index":0,"id":"x2","function":{"arguments":"{\"p\""}}`) +
				chunk(`{"index":0,"id":"x3","function":{"arguments":":1}"}}`) + end,
			[]helix.ToolCall{{ID: "x1", Name: "f", Arguments: json.RawMessage(`{"p":1}`)}},
		},
	} {
		m, _ := serve(t, openai.Config{}, llmtest.Fixture{Body: tc.body})
		rec := llmtest.NewRecorder()
		res, err := m.GenerateStep(t.Context(), userRequest(), rec.Callbacks())
		require.NoError(t, err, name)
		llmtest.CheckStream(t, rec, res)
		require.Equal(t, tc.want, res.ToolCalls, name)
	}
}

func TestRetryOnServerErrorThenSuccess(t *testing.T) {
	t.Parallel()
	m, srv := serve(t, openai.Config{}, llmtest.Fixture{Status: 502, Body: "<html><body>502 Bad Gateway</body></html>", Header: map[string]string{"Content-Type": "text/html"}}, llmtest.Testdata("text.sse"))
	res, err := m.GenerateStep(t.Context(), userRequest(), helix.StreamCallbacks{})
	require.NoError(t, err)
	require.Equal(t, llmtest.TextAnswer, res.Content)
	require.Len(t, srv.Requests(), 2)
}

func TestErrorClassification(t *testing.T) {
	t.Parallel()
	llmtest.RunErrorCases(t, func(t *testing.T, f llmtest.Fixture) (helix.Model, *llmtest.Server) {
		m, srv := serve(t, openai.Config{MaxRetries: 2}, f)
		return m, srv
	}, map[string]llmtest.ErrorCase{
		"insufficient quota": {Fixture: status(429, "insufficient_quota.json"), Code: helix.CodeProviderRateLimited, Recoverable: false, Requests: 1, Mention: "quota"},
		"content filter":     {Fixture: status(400, "content_filter.json"), Code: helix.CodeProviderContentFilter, Recoverable: false, Requests: 1, Mention: "content management policy"},
		"model not found":    {Fixture: status(404, "ollama_not_found.json"), Code: helix.CodeProviderInvalidRequest, Recoverable: false, Requests: 1, Mention: "check Config.BaseURL and the model name"},
		"html 502":           {Fixture: llmtest.Fixture{Status: 502, Body: "<html>Bad Gateway</html>"}, Code: helix.CodeProviderUnavailable, Recoverable: true, Requests: 3, Mention: "<html>Bad Gateway</html>"},
		"ollama string":      {Fixture: llmtest.Fixture{Status: 500, Body: `{"error":"llama runner process has terminated"}`}, Code: helix.CodeProviderUnavailable, Recoverable: true, Requests: 3, Mention: "llama runner"},
		"json not stream":    {Fixture: llmtest.Fixture{Body: `{"id":"x","choices":[]}`, Header: map[string]string{"Content-Type": "application/json"}}, Code: helix.CodeProviderError, Recoverable: false, Requests: 1, Mention: "instead of an event stream"},
		"forbidden":          {Fixture: llmtest.Fixture{Status: 403, Body: `{"error":{"message":"Project does not have access to model","type":"invalid_request_error","code":"model_not_found"}}`}, Code: helix.CodeProviderAuth, Recoverable: false, Requests: 1, Mention: "check the API key"},
	})
}

func TestAPIKeyNeverInErrors(t *testing.T) {
	t.Parallel()
	echo := `{"error":{"message":"Incorrect API key provided: ` + testKey + `.","type":"invalid_request_error","code":"invalid_api_key"}}`
	m, _ := serve(t, openai.Config{APIKey: testKey}, llmtest.Fixture{Status: 401, Body: echo})
	_, err := m.GenerateStep(t.Context(), userRequest(), helix.StreamCallbacks{})
	require.Error(t, err)
	require.NotContains(t, err.Error(), testKey)
	require.Contains(t, err.Error(), "[redacted]")
	require.Contains(t, err.Error(), "OPENAI_API_KEY")
}

func TestConnectionRefusedIsRetriedThenUnavailable(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t, llmtest.Testdata("text.sse"))
	m, err := openai.New(openai.Config{BaseURL: "http://127.0.0.1:1/v1", Model: "m", HTTPClient: srv.Client(),
		MaxRetries: 1, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
	require.NoError(t, err)
	_, err = m.GenerateStep(t.Context(), userRequest(), helix.StreamCallbacks{})
	me := llmtest.AsModelError(t, err)
	require.Equal(t, helix.CodeProviderUnavailable, me.Code)
	require.True(t, me.Recoverable)
	require.Contains(t, me.Message, "after 2 attempts")
	require.Contains(t, me.Message, "check Config.BaseURL")
}

func TestCancelledWhileWaitingToRetry(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t, llmtest.Fixture{Status: http.StatusTooManyRequests, Body: `{"error":{"message":"slow down"}}`})
	answered := make(chan struct{})
	client := &http.Client{Transport: &notifyTransport{rt: srv.Client().Transport, done: answered}}
	m, err := openai.New(openai.Config{BaseURL: srv.URL, Model: "m", HTTPClient: client, MinBackoff: time.Hour, MaxBackoff: time.Hour})
	require.NoError(t, err)
	ctx, cancel := context.WithCancelCause(t.Context())
	go func() {
		<-answered
		cancel(errCancelled)
	}()
	_, err = m.GenerateStep(ctx, userRequest(), helix.StreamCallbacks{})
	require.ErrorIs(t, err, errCancelled)
	require.ErrorIs(t, err, context.Canceled)
	require.Len(t, srv.Requests(), 1, "no retry after the cancellation")
}

var errCancelled = errors.New("test cancelled the call")

// notifyTransport closes done once the first response has arrived.
type notifyTransport struct {
	rt   http.RoundTripper
	done chan struct{}
	once sync.Once
}

func (n *notifyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := n.rt.RoundTrip(r)
	n.once.Do(func() { close(n.done) })
	return resp, err
}

func TestMessagesAreActionable(t *testing.T) {
	t.Parallel()
	m, _ := serve(t, openai.Config{}, status(400, "invalid_request.json"))
	_, err := m.GenerateStep(t.Context(), userRequest(), helix.StreamCallbacks{})
	msg := llmtest.AsModelError(t, err).Message
	for _, want := range []string{"HTTP 400", "max_tokens is too large", "type invalid_request_error", "check the model name"} {
		require.True(t, strings.Contains(msg, want), "%q lacks %q", msg, want)
	}
}
