package anthropic_test

import (
	"encoding/json"
	"fmt"
	"log"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/llm/anthropic"
)

// With Config.APIKey empty the key comes from ANTHROPIC_API_KEY. The
// agent's LLMConfig may override the model and the output limit; nothing
// is sent until the engine runs the agent.
func Example() {
	model, err := anthropic.New(anthropic.Config{Model: "claude-sonnet-4-5", MaxTokens: 8192})
	if err != nil {
		log.Fatal(err)
	}
	agent := &helix.Agent{
		Name:         "assistant",
		SystemPrompt: "You are a concise assistant.",
		Model:        model,
		LLMConfig:    helix.LLMConfig{Model: "claude-haiku-4-5", MaxOutputTokens: 1024},
	}
	fmt.Println(agent.Name, "uses", agent.LLMConfig.Model)
	// Output: assistant uses claude-haiku-4-5
}

// Extended thinking with a budget; the reasoning streams as thinking
// chunks and comes back, signed, in the next request. A budget must leave
// room for the answer within max_tokens.
func ExampleNew_thinking() {
	_, err := anthropic.New(anthropic.Config{Model: "claude-sonnet-4-5", MaxTokens: 16000, Thinking: 10000})
	fmt.Println(err)
	_, err = anthropic.New(anthropic.Config{Model: "claude-sonnet-4-5", MaxTokens: 4096, Thinking: 10000})
	fmt.Println(err)
	// Output:
	// <nil>
	// anthropic: Config.Thinking must be 0 (off) or between 1024 and MaxTokens-1 (4095), got 10000
}

// A gateway or proxy with its own URL and headers (a beta feature here),
// and request fields the adapter does not set passed per agent through
// ProviderOptions.
func ExampleNew_gateway() {
	model, err := anthropic.New(anthropic.Config{
		BaseURL: "https://llm-gateway.internal.example/anthropic/",
		APIKey:  "gateway-issued-key",
		Model:   "claude-sonnet-4-5",
		Headers: map[string]string{"anthropic-beta": "context-1m-2025-08-07"},
	})
	if err != nil {
		log.Fatal(err)
	}
	cfg := helix.LLMConfig{ProviderOptions: map[string]json.RawMessage{
		anthropic.ProviderOptionsKey: json.RawMessage(`{"top_k":40,"metadata":{"user_id":"user-42"}}`),
	}}
	fmt.Println(model != nil, len(cfg.ProviderOptions))
	// Output: true 1
}
