package openai

import (
	"cmp"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/helix-agents/helix-dbos/llm/internal/provider"
)

// Defaults applied by [New] to zero [Config] fields.
const (
	// DefaultBaseURL is OpenAI's API.
	DefaultBaseURL = "https://api.openai.com/v1"
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
)

// openAIHost is the host of OpenAI's own API, which gets
// max_completion_tokens where compatible servers get max_tokens.
const openAIHost = "api.openai.com"

// name starts every message of this package.
const name = "openai"

// APIKeyEnv is the environment variable read for the API key when
// Config.APIKey is empty and Config.BaseURL is OpenAI's.
const APIKeyEnv = "OPENAI_API_KEY"

// Config configures a [Model]. Only Model (or a per-agent
// helix.LLMConfig.Model) is needed for OpenAI itself with OPENAI_API_KEY
// set; an OpenAI-compatible server needs BaseURL too.
type Config struct {
	// BaseURL is the API's base URL, to which "/chat/completions" is
	// appended; a query string is kept (Azure's api-version). Default
	// DefaultBaseURL. Examples: "http://localhost:11434/v1" (Ollama),
	// "http://localhost:8000/v1" (vLLM), "https://openrouter.ai/api/v1".
	BaseURL string
	// APIKey is sent as "Authorization: Bearer <key>" when set; servers
	// that need none (Ollama, a local vLLM) leave it empty. When it is
	// empty and BaseURL is OpenAI's, New reads OPENAI_API_KEY; the key is
	// never read from the environment for another server, so an OpenAI key
	// is not sent to a third party by accident.
	APIKey string
	// Model is the default model; a non-empty helix.LLMConfig.Model of
	// the agent overrides it. One of the two is required at call time.
	Model string
	// Headers are extra request headers, set after Authorization (so they
	// can replace it, e.g. Azure's "api-key"); OpenRouter's HTTP-Referer
	// and X-Title go here.
	Headers map[string]string
	// HTTPClient sends the requests. Default: a client without an overall
	// timeout (a stream may last minutes; bound a call with its context)
	// whose transport waits at most DefaultResponseHeaderTimeout for the
	// response headers.
	HTTPClient *http.Client
	// MaxRetries is how many times a failed request is retried: 429, 408,
	// 409, 5xx, connection failures and error events, and only while no
	// output has been forwarded to the callbacks. 0 means
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
	// 429) says how long the provider asked to wait. 0 means
	// DefaultMaxRetryAfter; it must not be negative.
	MaxRetryAfter time.Duration
	// IdleTimeout is how long the response may send nothing (no event, no
	// line, not even a keep-alive comment) before the attempt is abandoned
	// as stalled: the connection is closed and the call fails with a
	// recoverable provider_timeout, retried while nothing was forwarded.
	// The countdown starts when the response headers arrive (HTTPClient's
	// response header timeout covers the wait for them) and restarts at
	// every read. 0 means DefaultIdleTimeout; a negative value disables the
	// watchdog. Raise it for a server that stays silent longer on purpose:
	// OpenAI's reasoning models send nothing over Chat Completions while
	// they reason, and a local server may pause to load a model.
	IdleTimeout time.Duration
}

// withDefaults returns c with its zero fields set to their defaults.
func (c Config) withDefaults() Config {
	official := c.BaseURL == "" || strings.TrimRight(c.BaseURL, "/") == DefaultBaseURL
	c.BaseURL = cmp.Or(c.BaseURL, DefaultBaseURL)
	if c.APIKey == "" && official {
		c.APIKey = os.Getenv(APIKeyEnv)
	}
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
func (c Config) validate() (*url.URL, error) {
	u, err := provider.ParseBaseURL(name, c.BaseURL, DefaultBaseURL)
	if err != nil {
		return nil, err
	}
	if err := c.retry().Validate(); err != nil {
		return nil, err
	}
	if err := provider.ValidateHeaders(name, c.Headers); err != nil {
		return nil, err
	}
	return u, nil
}

// DefaultHTTPClient returns the client a [Config] without HTTPClient uses:
// a clone of http.DefaultTransport that waits at most
// DefaultResponseHeaderTimeout for response headers, and no overall
// timeout, so that long streams are not cut.
func DefaultHTTPClient() *http.Client {
	return provider.NewHTTPClient(DefaultResponseHeaderTimeout)
}
