package agentfile

import (
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
		return anthropic.New(anthropic.Config{
			APIKey:     apiKey,
			BaseURL:    m.BaseURL,
			Model:      m.Model,
			MaxTokens:  m.MaxTokens,
			Headers:    m.Headers,
			MaxRetries: retries(m.MaxRetries),
			Thinking:   m.Thinking,
		})
	}
	return nil, fmt.Errorf("provider %s is not available in this build yet", m.Provider)
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
