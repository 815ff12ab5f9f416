package agentfile_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/internal/agentfile"
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

// An anthropic agent sends the key of apiKeyEnv as X-Api-Key, the file's
// model and max tokens.
func TestAnthropicAgent(t *testing.T) {
	t.Parallel()
	url, got := fakeLLM(t, func(w io.Writer) {
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
	})
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
