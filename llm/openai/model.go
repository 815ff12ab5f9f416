package openai

import (
	"bytes"
	"context"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/llm/internal/provider"
)

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 64 << 10

// Model is a [helix.Model] backed by an OpenAI-compatible Chat Completions
// endpoint. It is safe for concurrent use.
type Model struct {
	cfg   Config
	retry provider.Retry
	// endpoint is the chat completions URL; shown is the same without its
	// query string, for messages.
	endpoint string
	shown    string
	// openAI is set when BaseURL is OpenAI's own API (api.openai.com),
	// which gets max_completion_tokens instead of max_tokens.
	openAI bool
}

var _ helix.Model = (*Model)(nil)

// New returns a model for cfg, with defaults applied. It fails on an
// invalid BaseURL, backoff or header; a missing model is reported at call
// time, since an agent's LLMConfig.Model may supply it.
func New(cfg Config) (*Model, error) {
	cfg = cfg.withDefaults()
	u, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	u.Path = strings.TrimRight(u.Path, "/") + "/chat/completions"
	u.RawPath = ""
	shown := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}
	return &Model{cfg: cfg, retry: cfg.retry(), endpoint: u.String(), shown: shown.String(),
		openAI: strings.EqualFold(u.Hostname(), openAIHost)}, nil
}

// GenerateStep sends req as a streaming chat completion and forwards the
// response's deltas to cb as they arrive: text through OnTextDelta,
// reasoning through OnThinking (pieces, complete false) and tool-call
// arguments through OnToolArgStart, OnToolArgDelta and OnToolArgEnd.
//
// A failed attempt is retried (see [Config.MaxRetries]) only while nothing
// has been forwarded: once a delta reached cb, a failure is returned, so
// the engine runs the step again with a clean stream. Every error matches
// *helix.ModelError with errors.As; an error of the call's context also
// matches that context's error with errors.Is.
func (m *Model) GenerateStep(ctx context.Context, req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
	body, err := m.requestBody(req)
	if err != nil {
		return helix.StepResult{}, err
	}
	return m.retry.Do(ctx, func(ctx context.Context) (helix.StepResult, bool, *provider.Failure) {
		return m.attempt(ctx, body, cb)
	})
}

// attempt sends the request once. forwarded reports whether any delta
// reached the callbacks.
func (m *Model) attempt(ctx context.Context, body []byte, cb helix.StreamCallbacks) (res helix.StepResult, forwarded bool, f *provider.Failure) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, m.endpoint, bytes.NewReader(body))
	if err != nil {
		return res, false, invalid(err.Error())
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "text/event-stream")
	if m.cfg.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+m.cfg.APIKey)
	}
	for k, v := range m.cfg.Headers {
		hreq.Header.Set(k, v)
	}
	resp, err := m.cfg.HTTPClient.Do(hreq)
	if err != nil {
		return res, false, transportFailure(m.shown, err, false, m.cfg.APIKey)
	}
	// From here on the idle watchdog of the attempt (Config.IdleTimeout)
	// watches the body: a server that goes silent is cut off.
	resp.Body = provider.WatchBody(ctx, resp.Body)
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return res, false, statusFailure(m.shown, resp.StatusCode, resp.Header, data, m.cfg.APIKey)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/json" {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		if info, ok := parseErrorBody(data); ok && info.Message != "" {
			return res, false, eventFailure(info, m.cfg.APIKey)
		}
		return res, false, malformed("the server answered with JSON instead of an event stream (does it support \"stream\": true?)", data)
	}
	s := &stream{cb: cb, endpoint: m.shown, apiKey: m.cfg.APIKey}
	res, f = s.read(resp.Body)
	return res, s.forwarded, f
}
