package agentfile_test

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/internal/agentfile"
	"github.com/helix-agents/helix-dbos/llm/scripted"
)

// request is what a fake LLM server received.
type request struct {
	header http.Header
	body   map[string]any
}

// fakeLLM starts a server that answers every request with the event
// stream respond writes, and sends each request it receives on got.
func fakeLLM(t *testing.T, respond func(w io.Writer)) (url string, got <-chan request) {
	t.Helper()
	ch := make(chan request, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(b, &body)
		ch <- request{header: r.Header.Clone(), body: body}
		w.Header().Set("Content-Type", "text/event-stream")
		respond(w)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, ch
}

// An openai agent talks to the baseURL of the file with the key of the
// variable apiKeyEnv names, the file's headers and model, and the agent's
// LLM settings.
func TestOpenAIAgent(t *testing.T) {
	t.Parallel()
	url, got := fakeLLM(t, func(w io.Writer) {
		fmt.Fprint(w, `data: {"id":"c1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hello there"},"finish_reason":null}]}`+"\n\n")
		fmt.Fprint(w, `data: {"id":"c1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`+"\n\n")
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
	path := write(t, "agents.yaml", fmt.Sprintf(`
agents:
  - name: local
    systemPrompt: Be brief.
    model:
      provider: openai
      model: llama3.2
      baseURL: %s/v1
      apiKeyEnv: LOCAL_LLM_KEY
      headers: {HTTP-Referer: https://example.org}
      maxRetries: 0
      temperature: 0.25
      maxOutputTokens: 64
`, url))
	env := map[string]string{"LOCAL_LLM_KEY": "sk-local"}
	agents, err := agentfile.Load(path, &agentfile.Options{Getenv: func(k string) string { return env[k] }})
	require.NoError(t, err)
	a, _ := agents.Get("local")
	res, err := a.Model.GenerateStep(t.Context(), helix.ModelRequest{
		Messages: []helix.Message{helix.SystemMessage(a.SystemPrompt), helix.UserMessage("Hi")},
		Config:   a.LLMConfig, AgentType: a.Name, Step: 1,
	}, helix.StreamCallbacks{})
	require.NoError(t, err)
	require.Equal(t, "Hello there", res.Content)
	s := <-got
	require.Equal(t, "Bearer sk-local", s.header.Get("Authorization"))
	require.Equal(t, "https://example.org", s.header.Get("Http-Referer"))
	require.Equal(t, "llama3.2", s.body["model"])
	require.InDelta(t, 0.25, s.body["temperature"], 1e-9)
}

// Without apiKeyEnv, openai reads OPENAI_API_KEY for OpenAI itself and no
// key for a server of your own.
func TestOpenAIDefaultKey(t *testing.T) {
	t.Parallel()
	path := write(t, "agents.yaml", `
agents:
  - name: cloud
    model: {provider: openai, model: gpt-4o-mini}
  - name: local
    model: {provider: openai, model: llama3.2, baseURL: "http://localhost:11434/v1"}
`)
	_, err := agentfile.Load(path, &agentfile.Options{Getenv: func(string) string { return "" }})
	require.ErrorContains(t, err, `agent "cloud": model.apiKeyEnv: environment variable OPENAI_API_KEY is not set: it must hold the openai API key (export OPENAI_API_KEY=..., set apiKeyEnv to the variable that holds it; or use provider: scripted to try without a key)`)
	_, err = agentfile.Load(path, &agentfile.Options{Getenv: func(k string) string { return map[string]string{"OPENAI_API_KEY": "sk"}[k] }})
	require.NoError(t, err, "the local server needs no key")
}

// anthropicHello answers a Messages request with "Hello from Claude".
func anthropicHello(w io.Writer) {
	for _, ev := range []string{
		`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-test","content":[],"stop_reason":null,"usage":{"input_tokens":5,"output_tokens":1}}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello from Claude"}}`,
		`{"type":"content_block_stop","index":0}`,
		`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}`,
		`{"type":"message_stop"}`,
	} {
		var typ struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal([]byte(ev), &typ)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ.Type, ev)
	}
}

// openAIHello answers a Chat Completions request with "Hello there".
func openAIHello(w io.Writer) {
	fmt.Fprint(w, `data: {"id":"c1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hello there"},"finish_reason":null}]}`+"\n\n")
	fmt.Fprint(w, `data: {"id":"c1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`+"\n\n")
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// generate runs one model step of agent name.
func generate(t *testing.T, agents *agentfile.Agents, name string) helix.StepResult {
	t.Helper()
	a, ok := agents.Get(name)
	require.True(t, ok)
	res, err := a.Model.GenerateStep(t.Context(), helix.ModelRequest{
		Messages: []helix.Message{helix.UserMessage("Hi")}, Config: a.LLMConfig, AgentType: a.Name, Step: 1,
	}, helix.StreamCallbacks{})
	require.NoError(t, err)
	return res
}

// An anthropic agent sends the key of apiKeyEnv as X-Api-Key, the file's
// model and max tokens.
func TestAnthropicAgent(t *testing.T) {
	t.Parallel()
	url, got := fakeLLM(t, anthropicHello)
	path := write(t, "agents.yaml", fmt.Sprintf(`
agents:
  - name: claude
    model: {provider: anthropic, model: claude-test, baseURL: "%s/", apiKeyEnv: MY_ANTHROPIC_KEY, maxTokens: 512}
`, url))
	env := map[string]string{"MY_ANTHROPIC_KEY": "sk-ant-test"}
	agents, err := agentfile.Load(path, &agentfile.Options{Getenv: func(k string) string { return env[k] }})
	require.NoError(t, err)
	a, _ := agents.Get("claude")
	res, err := a.Model.GenerateStep(t.Context(), helix.ModelRequest{
		Messages: []helix.Message{helix.UserMessage("Hi")}, Config: a.LLMConfig, AgentType: a.Name, Step: 1,
	}, helix.StreamCallbacks{})
	require.NoError(t, err)
	require.Equal(t, "Hello from Claude", res.Content)
	s := <-got
	require.Equal(t, "sk-ant-test", s.header.Get("X-Api-Key"))
	require.Equal(t, "claude-test", s.body["model"])
	require.InDelta(t, 512, s.body["max_tokens"], 0)
}

// providerOptions reach the request body through
// helix.LLMConfig.ProviderOptions, under the key each adapter reads.
func TestProviderOptions(t *testing.T) {
	t.Parallel()
	oaURL, oaGot := fakeLLM(t, openAIHello)
	antURL, antGot := fakeLLM(t, anthropicHello)
	path := write(t, "agents.yaml", fmt.Sprintf(`
agents:
  - name: gpt
    model:
      provider: openai
      model: o4-mini
      baseURL: %s/v1
      maxOutputTokens: 256
      providerOptions:
        reasoning_effort: low
        max_completion_tokens: 512
        stream_options: null
        response_format: {type: json_object}
  - name: claude
    model:
      provider: anthropic
      model: claude-test
      baseURL: %s/
      apiKeyEnv: MY_ANTHROPIC_KEY
      providerOptions: {top_k: 40, metadata: {user_id: u-1}}
`, oaURL, antURL))
	agents, err := agentfile.Load(path, &agentfile.Options{Getenv: func(k string) string { return map[string]string{"MY_ANTHROPIC_KEY": "sk-ant"}[k] }})
	require.NoError(t, err)

	gpt, _ := agents.Get("gpt")
	require.Equal(t, []string{"openai"}, slices.Sorted(maps.Keys(gpt.LLMConfig.ProviderOptions)))
	require.Equal(t, "Hello there", generate(t, agents, "gpt").Content)
	body := (<-oaGot).body
	require.Equal(t, "low", body["reasoning_effort"])
	require.InDelta(t, 512, body["max_completion_tokens"], 0)
	require.NotContains(t, body, "max_tokens", "max_completion_tokens replaces it")
	require.NotContains(t, body, "stream_options", "a null member removes the field")
	require.Equal(t, map[string]any{"type": "json_object"}, body["response_format"])

	claude, _ := agents.Get("claude")
	require.Equal(t, []string{"anthropic"}, slices.Sorted(maps.Keys(claude.LLMConfig.ProviderOptions)))
	require.Equal(t, "Hello from Claude", generate(t, agents, "claude").Content)
	body = (<-antGot).body
	require.InDelta(t, 40, body["top_k"], 0)
	require.Equal(t, map[string]any{"user_id": "u-1"}, body["metadata"])

	// A provider of Options.Providers gets them under its own name.
	path = write(t, "agents.yaml", "agents:\n  - name: e\n    model: {provider: echo, providerOptions: {a: 1}}\n")
	agents, err = agentfile.Load(path, &agentfile.Options{Providers: map[string]agentfile.Provider{
		"echo": func(spec agentfile.ModelSpec, _ agentfile.ProviderEnv) (helix.Model, error) {
			require.JSONEq(t, `{"a":1}`, string(spec.ProviderOptions))
			return scripted.New(scripted.Step{Text: "hi"}), nil
		},
	}})
	require.NoError(t, err)
	e, _ := agents.Get("e")
	require.JSONEq(t, `{"a":1}`, string(e.LLMConfig.ProviderOptions["echo"]))
}

// With a baseURL and no apiKeyEnv, anthropic sends no key, as openai does:
// ANTHROPIC_API_KEY goes to Anthropic only, never to a server the file
// names, unless apiKeyEnv says so.
func TestAnthropicBaseURLSendsNoDefaultKey(t *testing.T) {
	t.Parallel()
	url, got := fakeLLM(t, anthropicHello)
	path := write(t, "agents.yaml", fmt.Sprintf(`
agents:
  - name: proxied
    model: {provider: anthropic, model: claude-test, baseURL: "%s/"}
  - name: keyed
    model: {provider: anthropic, model: claude-test, baseURL: "%s/", apiKeyEnv: ANTHROPIC_API_KEY}
`, url, url))
	env := map[string]string{"ANTHROPIC_API_KEY": "sk-ant-secret"}
	agents, err := agentfile.Load(path, &agentfile.Options{Getenv: func(k string) string { return env[k] }})
	require.NoError(t, err)
	generate(t, agents, "proxied")
	s := <-got
	require.Empty(t, s.header.Get("X-Api-Key"), "the default key is not sent to a baseURL")
	require.Empty(t, s.header.Get("Authorization"))
	generate(t, agents, "keyed")
	require.Equal(t, "sk-ant-secret", (<-got).header.Get("X-Api-Key"), "apiKeyEnv sends it")
}

// A thinking budget that fits is sent; one that does not fails Decode,
// before any environment variable is read or model built.
func TestAnthropicThinkingBudget(t *testing.T) {
	t.Parallel()
	url, got := fakeLLM(t, anthropicHello)
	path := write(t, "agents.yaml", fmt.Sprintf(`
agents:
  - name: thinker
    model: {provider: anthropic, model: claude-test, baseURL: "%s/", thinking: 2048, maxOutputTokens: 8000}
`, url))
	agents, err := agentfile.Load(path, nil)
	require.NoError(t, err, "maxOutputTokens alone may exceed the adapter's default of 4096")
	generate(t, agents, "thinker")
	body := (<-got).body
	require.InDelta(t, 8000, body["max_tokens"], 0)
	require.Equal(t, map[string]any{"type": "enabled", "budget_tokens": float64(2048)}, body["thinking"])

	_, err = agentfile.Decode([]byte(`
agents:
  - name: thinker
    model: {provider: anthropic, model: claude-test, thinking: 2048, maxOutputTokens: 1024}
`), &agentfile.Options{Path: "agents.yaml"})
	require.EqualError(t, err, `agents.yaml:4: agent "thinker": model.thinking: the thinking budget 2048 must be below maxOutputTokens (1024): `+
		`Anthropic counts thinking in max tokens, so every request would be refused; raise maxOutputTokens or lower thinking`)
}
