package agentfile

import (
	"cmp"
	"encoding/json"
	"fmt"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/llm/anthropic"
	"github.com/helix-agents/helix-dbos/llm/openai"
)

// builtinModel builds an openai or anthropic model with the key read from
// the environment.
func builtinModel(m ModelSpec, apiKey string) (helix.Model, error) {
	switch m.Provider {
	case ProviderOpenAI:
		return openai.New(openai.Config{
			BaseURL:    m.BaseURL,
			APIKey:     apiKey,
			Model:      m.Model,
			Headers:    m.Headers,
			MaxRetries: retries(m.MaxRetries),
		})
	case ProviderAnthropic:
		// Every request of the agent sends maxOutputTokens as max_tokens
		// when it is set, so it is the adapter's default too (the adapter
		// checks the thinking budget against its default when built).
		return anthropic.New(anthropic.Config{
			APIKey:     apiKey,
			BaseURL:    m.BaseURL,
			Model:      m.Model,
			MaxTokens:  cmp.Or(m.MaxTokens, m.MaxOutputTokens),
			Headers:    m.Headers,
			MaxRetries: retries(m.MaxRetries),
			Thinking:   m.Thinking,
		})
	}
	return nil, fmt.Errorf("provider %s is not available in this build yet", m.Provider)
}

// ProviderOptionsKey returns the key of helix.LLMConfig.ProviderOptions
// under which a model's providerOptions are passed: the adapter's key for
// openai and anthropic (openai.ProviderOptionsKey,
// anthropic.ProviderOptionsKey), the provider's name for a provider of
// Options.Providers.
func ProviderOptionsKey(provider string) string {
	switch provider {
	case ProviderOpenAI:
		return openai.ProviderOptionsKey
	case ProviderAnthropic:
		return anthropic.ProviderOptionsKey
	}
	return provider
}

// providerOptions returns the helix.LLMConfig.ProviderOptions of a model
// (nil without providerOptions).
func providerOptions(m ModelSpec) map[string]json.RawMessage {
	if len(m.ProviderOptions) == 0 {
		return nil
	}
	return map[string]json.RawMessage{ProviderOptionsKey(m.Provider): m.ProviderOptions}
}

// retries maps the file's maxRetries (0 = none, absent = the provider's
// default) to the providers' convention (0 = default, negative = none).
func retries(n *int) int {
	switch {
	case n == nil:
		return 0
	case *n <= 0:
		return -1
	}
	return *n
}
