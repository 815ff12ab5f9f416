package openai_test

import (
	"encoding/json"
	"fmt"
	"log"
	"os"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/llm/openai"
)

// OpenAI itself: with Config.APIKey empty the key comes from
// OPENAI_API_KEY. The agent's LLMConfig overrides the model and sets the
// sampling; nothing is sent until the engine runs the agent.
func Example() {
	model, err := openai.New(openai.Config{Model: "gpt-4o-mini"})
	if err != nil {
		log.Fatal(err)
	}
	temperature := 0.2
	agent := &helix.Agent{
		Name:         "assistant",
		SystemPrompt: "You are a concise assistant.",
		Model:        model,
		LLMConfig:    helix.LLMConfig{Model: "gpt-4o", Temperature: &temperature, MaxOutputTokens: 1024},
	}
	fmt.Println(agent.Name, "uses", agent.LLMConfig.Model)
	// Output: assistant uses gpt-4o
}

// Ollama serves an OpenAI-compatible API on port 11434 and needs no key.
func ExampleNew_ollama() {
	model, err := openai.New(openai.Config{BaseURL: "http://localhost:11434/v1", Model: "qwen3:8b"})
	fmt.Println(model != nil, err)
	// Output: true <nil>
}

// vLLM serves the model it was started with; its key is the one given to
// `vllm serve --api-key`, if any.
func ExampleNew_vLLM() {
	model, err := openai.New(openai.Config{
		BaseURL: "http://localhost:8000/v1",
		APIKey:  os.Getenv("VLLM_API_KEY"),
		Model:   "Qwen/Qwen3-8B",
	})
	fmt.Println(model != nil, err)
	// Output: true <nil>
}

// OpenRouter takes its attribution headers through Config.Headers, and
// provider-specific request fields through the agent's ProviderOptions
// (here OpenRouter's provider routing and a JSON-schema response format).
func ExampleNew_openRouter() {
	model, err := openai.New(openai.Config{
		BaseURL: "https://openrouter.ai/api/v1",
		APIKey:  os.Getenv("OPENROUTER_API_KEY"),
		Model:   "anthropic/claude-sonnet-4.5",
		Headers: map[string]string{"HTTP-Referer": "https://example.com", "X-Title": "My helix app"},
	})
	if err != nil {
		log.Fatal(err)
	}
	cfg := helix.LLMConfig{ProviderOptions: map[string]json.RawMessage{
		openai.ProviderOptionsKey: json.RawMessage(`{"provider":{"sort":"throughput"},"response_format":{"type":"json_object"}}`),
	}}
	fmt.Println(model != nil, len(cfg.ProviderOptions))
	// Output: true 1
}
