package anthropic

import (
	"context"
	"maps"
	"net/http"
	"slices"

	sdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/llm/internal/provider"
)

// Model is a [helix.Model] backed by Anthropic's Messages API through the
// official SDK. It is safe for concurrent use.
type Model struct {
	cfg    Config
	retry  provider.Retry
	client sdk.Client
}

var _ helix.Model = (*Model)(nil)

// New returns a model for cfg, with defaults applied. It fails on an
// invalid BaseURL, MaxTokens, Thinking budget, backoff or header; a
// missing model is reported at call time, since an agent's
// LLMConfig.Model may supply it.
//
// The SDK client is built without its environment defaults (so only
// Config decides the key and URL), with its retries off (this adapter
// retries, see [Config.MaxRetries]) and with Config.HTTPClient. Its
// OpenTelemetry spans stay on: they go to the globally registered tracer
// provider, a no-op unless the application installs one.
func New(cfg Config) (*Model, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	opts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithHTTPClient(cfg.HTTPClient),
		option.WithMaxRetries(0),
		// The idle watchdog of each attempt (Config.IdleTimeout) watches
		// the response body the SDK reads, ping events included.
		option.WithMiddleware(func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			res, err := next(req)
			if err == nil && res != nil {
				res.Body = provider.WatchBody(req.Context(), res.Body)
			}
			return res, err
		}),
	}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	for _, k := range slices.Sorted(maps.Keys(cfg.Headers)) {
		opts = append(opts, option.WithHeader(k, cfg.Headers[k]))
	}
	return &Model{cfg: cfg, retry: cfg.retry(), client: sdk.NewClient(opts...)}, nil
}

// GenerateStep sends req as a streaming Messages request and forwards the
// response's deltas to cb as they arrive: text_delta through OnTextDelta,
// thinking_delta through OnThinking (pieces, complete false), and each
// tool_use block's input_json_delta through OnToolArgStart,
// OnToolArgDelta and OnToolArgEnd.
//
// A failed attempt is retried (see [Config.MaxRetries]) only while nothing
// has been forwarded: once a delta reached cb, a failure is returned, so
// the engine runs the step again with a clean stream. Every error matches
// *helix.ModelError with errors.As; an error of the call's context also
// matches that context's error with errors.Is.
func (m *Model) GenerateStep(ctx context.Context, req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
	params, err := m.params(req)
	if err != nil {
		return helix.StepResult{}, err
	}
	return m.retry.Do(ctx, func(ctx context.Context) (helix.StepResult, bool, *provider.Failure) {
		acc := &accumulator{cb: cb, apiKey: m.cfg.APIKey}
		res, f := m.attempt(ctx, params, acc)
		return res, acc.forwarded, f
	})
}

// attempt sends the request once.
func (m *Model) attempt(ctx context.Context, params sdk.MessageNewParams, acc *accumulator) (helix.StepResult, *provider.Failure) {
	stream := m.client.Messages.NewStreaming(ctx, params)
	defer func() { _ = stream.Close() }()
	return acc.consume(stream)
}
