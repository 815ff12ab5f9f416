package anthropic

import (
	"cmp"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/helix-agents/helix-dbos/llm/internal/provider"
)

// Defaults applied by [New] to zero [Config] fields.
const (
	// DefaultMaxTokens is max_tokens when neither Config.MaxTokens nor the
	// agent's LLMConfig.MaxOutputTokens sets it (the API requires one).
	DefaultMaxTokens = 4096
	// DefaultMaxRetries is the number of retries of a failed request: 3.
	DefaultMaxRetries = provider.DefaultMaxRetries
	// DefaultMinBackoff is the wait before the first retry (doubled at
	// each retry, with jitter): 500ms.
	DefaultMinBackoff = provider.DefaultMinBackoff
	// DefaultMaxBackoff caps the exponential backoff: 20s.
	DefaultMaxBackoff = provider.DefaultMaxBackoff
	// DefaultMaxRetryAfter is the longest Retry-After waited for: 60s.
	DefaultMaxRetryAfter = provider.DefaultMaxRetryAfter
	// DefaultIdleTimeout is how long a response may send nothing before
	// the attempt is abandoned as stalled: 5 minutes (reasoning models may
	// stream nothing for minutes while they think).
	DefaultIdleTimeout = provider.DefaultIdleTimeout
	// DefaultResponseHeaderTimeout bounds the wait for the response
	// headers with the default HTTP client: 10 minutes. It does not bound
	// the stream.
	DefaultResponseHeaderTimeout = provider.DefaultResponseHeaderTimeout
	// MinThinkingBudget is the smallest extended-thinking budget the API
	// accepts.
	MinThinkingBudget = 1024
)

// name starts every message of this package.
const name = "anthropic"

// APIKeyEnv is the environment variable read for the API key when
// Config.APIKey and Config.BaseURL are empty.
const APIKeyEnv = "ANTHROPIC_API_KEY"

// Config configures a [Model]. Only Model (or a per-agent
// helix.LLMConfig.Model) is needed with ANTHROPIC_API_KEY set.
type Config struct {
	// APIKey is sent as the X-Api-Key header. When it is empty and BaseURL
	// is too, New reads ANTHROPIC_API_KEY. Nothing else is read from the
	// environment (no profiles, no ANTHROPIC_BASE_URL): the configuration
	// is what this struct says.
	APIKey string
	// BaseURL is the API's base URL, to which "v1/messages" is appended.
	// Default the SDK's, https://api.anthropic.com/.
	BaseURL string
	// Model is the default model, e.g. "claude-sonnet-4-5"; a non-empty
	// helix.LLMConfig.Model of the agent overrides it. One of the two is
	// required at call time.
	Model string
	// MaxTokens is max_tokens when the agent's LLMConfig.MaxOutputTokens
	// is 0. Default DefaultMaxTokens.
	MaxTokens int
	// Headers are extra request headers, e.g. "anthropic-beta".
	Headers map[string]string
	// HTTPClient sends the requests. Default: a client without an overall
	// timeout (a stream may last minutes; bound a call with its context)
	// whose transport waits at most DefaultResponseHeaderTimeout for the
	// response headers.
	HTTPClient *http.Client
	// MaxRetries is how many times a failed request is retried: 429, 408,
	// 409, 5xx, 529, connection failures and error events (overloaded_error
	// …), and only while no output has been forwarded to the callbacks.
	// The SDK's own retries are off; this adapter retries. 0 means
	// DefaultMaxRetries; a negative value disables retries.
	MaxRetries int
	// MinBackoff and MaxBackoff bound the exponential backoff with jitter
	// between retries: MinBackoff before the first retry, doubling, never
	// more than MaxBackoff. Defaults DefaultMinBackoff and
	// DefaultMaxBackoff. A response with a Retry-After (or retry-after-ms)
	// header is retried after that wait instead; see MaxRetryAfter.
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// MaxRetryAfter is the longest Retry-After the adapter waits for
	// before retrying. A response asking for a longer wait is not retried
	// (an earlier retry would be rejected again, and waiting would hold the
	// agent's step): its recoverable error (provider_rate_limited for a
	// 429) says how long the API asked to wait. 0 means
	// DefaultMaxRetryAfter; it must not be negative.
	MaxRetryAfter time.Duration
	// IdleTimeout is how long the response may send nothing (no event,
	// ping events included) before the attempt is abandoned as stalled:
	// the connection is closed and the call fails with a recoverable
	// provider_timeout, retried while nothing was forwarded. The countdown
	// starts when the response headers arrive (HTTPClient's response
	// header timeout covers the wait for them) and restarts at every read;
	// the API sends ping events while the model works, so a healthy stream
	// never comes near it. 0 means DefaultIdleTimeout; a negative value
	// disables the watchdog.
	IdleTimeout time.Duration
	// Thinking is the extended-thinking budget in tokens; 0 turns thinking
	// off. It must be at least MinThinkingBudget and below the max_tokens
	// of every request. With thinking on, Temperature is not sent (the API
	// allows no other value than its default then).
	Thinking int
}

// withDefaults returns c with its zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.APIKey == "" && c.BaseURL == "" {
		c.APIKey = os.Getenv(APIKeyEnv)
	}
	c.MaxTokens = cmp.Or(c.MaxTokens, DefaultMaxTokens)
	r := c.retry().WithDefaults()
	c.MaxRetries, c.MinBackoff, c.MaxBackoff = r.MaxRetries, r.MinBackoff, r.MaxBackoff
	c.MaxRetryAfter, c.IdleTimeout = r.MaxRetryAfter, r.IdleTimeout
	if c.HTTPClient == nil {
		c.HTTPClient = DefaultHTTPClient()
	}
	return c
}

// retry returns the retry policy c configures.
func (c Config) retry() provider.Retry {
	return provider.Retry{Name: name, MaxRetries: c.MaxRetries, MinBackoff: c.MinBackoff, MaxBackoff: c.MaxBackoff,
		MaxRetryAfter: c.MaxRetryAfter, IdleTimeout: c.IdleTimeout}
}

// validate reports the first invalid field of a defaulted config.
func (c Config) validate() error {
	if c.BaseURL != "" {
		if _, err := provider.ParseBaseURL(name, c.BaseURL, "https://api.anthropic.com/"); err != nil {
			return err
		}
	}
	if c.MaxTokens < 1 {
		return fmt.Errorf("anthropic: Config.MaxTokens must be >= 1, got %d", c.MaxTokens)
	}
	if c.Thinking != 0 && (c.Thinking < MinThinkingBudget || c.Thinking >= c.MaxTokens) {
		return fmt.Errorf("anthropic: Config.Thinking must be 0 (off) or between %d and MaxTokens-1 (%d), got %d",
			MinThinkingBudget, c.MaxTokens-1, c.Thinking)
	}
	if err := c.retry().Validate(); err != nil {
		return err
	}
	return provider.ValidateHeaders(name, c.Headers)
}

// DefaultHTTPClient returns the client a [Config] without HTTPClient uses:
// a clone of http.DefaultTransport that waits at most
// DefaultResponseHeaderTimeout for response headers, and no overall
// timeout, so that long streams are not cut.
func DefaultHTTPClient() *http.Client {
	return provider.NewHTTPClient(DefaultResponseHeaderTimeout)
}
