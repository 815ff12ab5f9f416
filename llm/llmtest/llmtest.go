package llmtest

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	helix "github.com/helix-agents/helix-dbos"
)

// Scenario names one conformance scenario. The package documentation
// lists what each one's fixtures must contain and what the suite expects.
type Scenario string

// The scenarios, in the order [Run] runs them.
const (
	ScenarioText              Scenario = "text"
	ScenarioToolCall          Scenario = "tool_call"
	ScenarioParallelToolCalls Scenario = "parallel_tool_calls"
	ScenarioConversation      Scenario = "conversation"
	ScenarioThinking          Scenario = "thinking"
	ScenarioCachedUsage       Scenario = "cached_usage"
	ScenarioRateLimitRetry    Scenario = "rate_limit_retry"
	ScenarioRateLimited       Scenario = "rate_limited"
	ScenarioRateLimitTooLong  Scenario = "rate_limit_too_long"
	ScenarioOverloaded        Scenario = "overloaded"
	ScenarioErrorEventRetry   Scenario = "error_event_retry"
	ScenarioErrorEvent        Scenario = "error_event"
	ScenarioAuth              Scenario = "auth"
	ScenarioInvalidRequest    Scenario = "invalid_request"
	ScenarioStreamCut         Scenario = "stream_cut"
	ScenarioConnectionDrop    Scenario = "connection_drop"
	ScenarioCancel            Scenario = "cancel"
	ScenarioTimeout           Scenario = "timeout"
	ScenarioStall             Scenario = "stall"
	ScenarioStallMidStream    Scenario = "stall_mid_stream"
	ScenarioMalformed         Scenario = "malformed"
)

// Scenarios returns every scenario, in the order [Run] runs them.
func Scenarios() []Scenario {
	out := make([]Scenario, len(scenarios))
	for i, s := range scenarios {
		out[i] = s.name
	}
	return out
}

// Values the fixtures must contain and the requests the suite sends. See
// the package documentation for which scenario uses which.
const (
	// RequestModel is the LLMConfig.Model of every request; the wire
	// request must name it.
	RequestModel = "helix-conformance-model"
	// SystemPrompt is the system message of every request.
	SystemPrompt = "You are a concise assistant. Answer in one sentence."
	// TextAnswer is the text of the text and retry scenarios.
	TextAnswer = "The capital of France is Paris."
	// ToolPreface is the text a tool_call fixture may stream before its
	// call (or it streams no text).
	ToolPreface = "Let me check."
	// WeatherArgs are the arguments of the tool_call scenario's call.
	WeatherArgs = `{"city":"Paris","unit":"celsius"}`
	// ParallelWeatherArgs and ParallelTimeArgs are the arguments of the
	// parallel_tool_calls scenario's two calls, in this order.
	ParallelWeatherArgs = `{"city":"Paris"}`
	ParallelTimeArgs    = `{"city":"Tokyo"}`
	// ConversationAnswer is the text of the conversation scenario.
	ConversationAnswer = "It is 18°C and sunny in Paris; the time in Tokyo is unavailable."
	// ThinkingContent is the reasoning of the thinking scenario and
	// ThinkingAnswer its text.
	ThinkingContent = "17 × 23 = 17 × 20 + 17 × 3 = 340 + 51 = 391."
	ThinkingAnswer  = "17 × 23 = 391."
	// PartialText is the text a stream forwards before it breaks (the
	// error_event, stream_cut, connection_drop and cancel scenarios).
	PartialText = "The capital of"
	// InvalidRequestMention is a word the provider's explanation of the
	// invalid_request scenario contains, which the error must carry.
	InvalidRequestMention = "max_tokens"
)

// Tool names of the tool scenarios.
const (
	WeatherTool = "get_weather"
	TimeTool    = "get_time"
)

// Usages the fixtures must report.
var (
	// TextUsage is the usage of the text scenario.
	TextUsage = helix.Usage{InputTokens: 24, OutputTokens: 8}
	// CachedUsage is the usage of the cached_usage scenario: 2048 input
	// tokens in all, 1536 of them read from the cache and (for providers
	// that report cache writes) 256 written to it.
	CachedUsage = helix.Usage{InputTokens: 2048, OutputTokens: 64, CachedTokens: 1536, CacheWriteTokens: 256}
)

// Tools are the tools the tool scenarios offer.
var Tools = []helix.ToolSpec{
	{
		Name:        WeatherTool,
		Description: "Get the current weather for a city.",
		InputSchema: []byte(`{"type":"object","properties":{"city":{"type":"string","description":"City name"},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["city"],"additionalProperties":false}`),
	},
	{
		Name:        TimeTool,
		Description: "Get the local time in a city.",
		InputSchema: []byte(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`),
	},
}

// Target is what the suite asks an adapter's constructor to use. The
// adapter must honour every field: the suite checks the key and headers on
// the wire and counts the retries.
type Target struct {
	// BaseURL is the fake server's URL (no path); the adapter appends its
	// API's base path when it has one (e.g. "/v1").
	BaseURL string
	// APIKey is a fake key the wire requests must carry; no error message
	// may contain it.
	APIKey string
	// Headers are custom headers every request must carry.
	Headers map[string]string
	// HTTPClient must be the adapter's HTTP client.
	HTTPClient *http.Client
	// MaxRetries, MinBackoff and MaxBackoff configure the retries, with
	// an exponential backoff between MinBackoff and MaxBackoff when the
	// response has no Retry-After.
	MaxRetries int
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// MaxRetryAfter is the longest Retry-After the adapter may wait for: a
	// shorter one must be waited for in full (even beyond MaxBackoff), a
	// longer one must end the call at once, without a retry.
	MaxRetryAfter time.Duration
	// IdleTimeout is how long a response may send nothing before the
	// adapter abandons the attempt as stalled (a recoverable
	// provider_timeout); 0 means the adapter's default.
	IdleTimeout time.Duration
}

// Adapter describes a model adapter under test.
type Adapter struct {
	// Name names the adapter in failures.
	Name string
	// New builds the model for one scenario.
	New func(Target) (helix.Model, error)
	// Fixtures are the recorded responses of each scenario, replayed in
	// order to successive requests (the last one again once they run out).
	// Every scenario needs fixtures except timeout, which has a default.
	Fixtures map[Scenario][]Fixture
	// Path is the URL path the adapter posts to, e.g.
	// "/v1/chat/completions".
	Path string
	// AuthHeader is the request header that must carry Target.APIKey,
	// e.g. "Authorization" (its value need only contain the key).
	AuthHeader string
	// DecodeRequest decodes a recorded wire request body. Write it from
	// the provider's documentation, independently of the adapter's
	// encoder, or the mapping checks prove nothing.
	DecodeRequest func(body []byte) (Request, error)
	// ResponseModel is the model name the fixtures answer with, which a
	// successful result must report; when empty (fixtures recorded from
	// several models) the result must report some model.
	ResponseModel string
	// ReportsCacheWrites says the provider reports cache writes, so the
	// cached_usage scenario expects CachedUsage.CacheWriteTokens (else 0).
	ReportsCacheWrites bool
	// FlagsToolErrors says the wire format flags a failed tool result
	// (Anthropic's is_error), which the conversation scenario then checks.
	FlagsToolErrors bool
	// SendsThinking says reasoning is sent back with assistant messages,
	// which the thinking scenario then checks; otherwise it checks that
	// none is sent.
	SendsThinking bool
	// ThinkingSignature, when set, is the signature the thinking
	// scenario's result must carry.
	ThinkingSignature string
}

// Settings of the Target the suite passes to Adapter.New.
const (
	TestAPIKey     = "sk-helix-conformance-SECRET-0123456789"
	TestMaxRetries = 2
	TestMinBackoff = time.Millisecond
	TestMaxBackoff = 50 * time.Millisecond
	// TestMaxRetryAfter is the Target's MaxRetryAfter: above the 1-second
	// Retry-After of the rate-limit fixtures, so that they are waited for.
	TestMaxRetryAfter = 2 * time.Second
	// TestIdleTimeout is the Target's IdleTimeout in the stall scenarios
	// (the others leave the adapter's default).
	TestIdleTimeout = 200 * time.Millisecond
	// TestTimeout is the deadline of the timeout scenario.
	TestTimeout = 300 * time.Millisecond
	// callTimeout fails a scenario whose GenerateStep does not return.
	callTimeout = 30 * time.Second
)

// TestHeaders are the custom headers of the Target.
var TestHeaders = map[string]string{"X-Helix-Conformance": "1", "HTTP-Referer": "https://helix.example"}

// Run runs every scenario against a, each as a parallel subtest with its
// own fake server.
func Run(t *testing.T, a Adapter) {
	t.Helper()
	if a.New == nil || a.DecodeRequest == nil || a.Path == "" || a.AuthHeader == "" {
		t.Fatalf("llmtest: adapter %q needs New, DecodeRequest, Path and AuthHeader", a.Name)
	}
	for _, sc := range scenarios {
		t.Run(string(sc.name), func(t *testing.T) {
			t.Parallel()
			runScenario(t, a, sc)
		})
	}
}

// outcome is what one scenario observed.
type outcome struct {
	a        Adapter
	target   Target
	req      helix.ModelRequest
	rec      *Recorder
	res      helix.StepResult
	err      error
	requests []RecordedRequest
	decoded  []Request
	srv      *Server
}

func runScenario(t *testing.T, a Adapter, sc scenario) {
	fixtures := a.Fixtures[sc.name]
	if len(fixtures) == 0 && sc.defaultFixtures != nil {
		fixtures = sc.defaultFixtures
	}
	if len(fixtures) == 0 {
		t.Fatalf("adapter %s has no fixtures for scenario %s", a.Name, sc.name)
	}
	if sc.adjust != nil {
		fixtures = append([]Fixture(nil), fixtures...)
		sc.adjust(fixtures)
	}
	srv := NewServer(t, fixtures...)
	target := Target{
		BaseURL: srv.URL, APIKey: TestAPIKey, Headers: TestHeaders, HTTPClient: srv.Client(),
		MaxRetries: TestMaxRetries, MinBackoff: TestMinBackoff, MaxBackoff: TestMaxBackoff,
		MaxRetryAfter: TestMaxRetryAfter, IdleTimeout: sc.idleTimeout,
	}
	model, err := a.New(target)
	if err != nil {
		t.Fatalf("adapter %s: New: %v", a.Name, err)
	}
	o := &outcome{a: a, target: target, req: sc.request(), rec: NewRecorder(), srv: srv}
	if sc.hold {
		srv.HoldLastEvent(o.rec.First())
	}
	call := sc.call
	if call == nil {
		call = func(ctx context.Context, m helix.Model, o *outcome) (helix.StepResult, error) {
			return m.GenerateStep(ctx, o.req, o.rec.Callbacks())
		}
	}
	type result struct {
		res helix.StepResult
		err error
	}
	ch := make(chan result, 1)
	go func() {
		res, err := call(t.Context(), model, o)
		ch <- result{res, err}
	}()
	select {
	case r := <-ch:
		o.res, o.err = r.res, r.err
	case <-time.After(callTimeout):
		t.Fatalf("GenerateStep did not return within %s", callTimeout)
	}
	o.requests = srv.Requests()
	checkCommon(t, o)
	sc.check(t, o)
}

// checkCommon checks what every scenario expects: the wire requests (path,
// auth, headers, model, streaming), no key in an error, and a result
// consistent with what was streamed.
func checkCommon(t *testing.T, o *outcome) {
	t.Helper()
	if len(o.requests) == 0 {
		t.Fatalf("the adapter sent no request")
	}
	for i, r := range o.requests {
		if r.Method != http.MethodPost || r.Path != o.a.Path {
			t.Errorf("request %d: %s %s, want POST %s", i, r.Method, r.Path, o.a.Path)
		}
		if got := r.Header.Get(o.a.AuthHeader); !strings.Contains(got, o.target.APIKey) {
			t.Errorf("request %d: header %s is %q, want it to carry the API key", i, o.a.AuthHeader, got)
		}
		for k, v := range o.target.Headers {
			if got := r.Header.Get(k); got != v {
				t.Errorf("request %d: custom header %s is %q, want %q", i, k, got, v)
			}
		}
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("request %d: Content-Type %q, want application/json", i, ct)
		}
		d, err := o.a.DecodeRequest(r.Body)
		if err != nil {
			t.Fatalf("request %d: decode %s: %v", i, r.Body, err)
		}
		if d.Model != RequestModel {
			t.Errorf("request %d: model %q, want LLMConfig.Model %q", i, d.Model, RequestModel)
		}
		if !d.Stream {
			t.Errorf("request %d: not a streaming request", i)
		}
		if d.System != SystemPrompt {
			t.Errorf("request %d: system prompt %q, want %q", i, d.System, SystemPrompt)
		}
		o.decoded = append(o.decoded, d)
	}
	if o.err != nil {
		if strings.Contains(o.err.Error(), o.target.APIKey) {
			t.Errorf("the error message contains the API key: %v", o.err)
		}
		return
	}
	if o.srv.HoldTimedOut() {
		t.Errorf("the adapter forwarded no delta before the end of the stream: deltas must be forwarded as they arrive (events: %s)",
			describeEvents(o.rec.Events()))
	}
	CheckStream(t, o.rec, o.res)
	switch {
	case o.a.ResponseModel != "" && o.res.Model != o.a.ResponseModel:
		t.Errorf("result model %q, want %q (the model the fixture answers with)", o.res.Model, o.a.ResponseModel)
	case o.res.Model == "":
		t.Errorf("the result does not report the model that answered")
	}
	wantType := helix.StepText
	if len(o.res.ToolCalls) > 0 {
		wantType = helix.StepToolCalls
	}
	if o.res.Type != wantType {
		t.Errorf("result type %q, want %q", o.res.Type, wantType)
	}
}

// requireModelError checks a classified failure.
func requireModelError(t *testing.T, o *outcome, codes []string, recoverable bool) *helix.ModelError {
	t.Helper()
	if o.err == nil {
		t.Fatalf("GenerateStep succeeded (%+v), want an error", o.res)
	}
	var me *helix.ModelError
	if !errors.As(o.err, &me) {
		t.Fatalf("error %v (%T) is not a *helix.ModelError", o.err, o.err)
	}
	ok := false
	for _, c := range codes {
		ok = ok || me.Code == c
	}
	if !ok {
		t.Errorf("error code %q, want one of %v (error: %v)", me.Code, codes, o.err)
	}
	if me.Recoverable != recoverable {
		t.Errorf("recoverable %t, want %t (error: %v)", me.Recoverable, recoverable, o.err)
	}
	if strings.TrimSpace(me.Message) == "" {
		t.Errorf("error %v has no message", o.err)
	}
	return me
}

// AsModelError returns the *helix.ModelError err matches with errors.As,
// the error every adapter failure must match, and fails the test at once
// when there is none.
func AsModelError(t testing.TB, err error) *helix.ModelError {
	t.Helper()
	var me *helix.ModelError
	if !errors.As(err, &me) {
		t.Fatalf("error %v (%T) is not a *helix.ModelError", err, err)
	}
	return me
}

func requireRequests(t *testing.T, o *outcome, n int) {
	t.Helper()
	if len(o.requests) != n {
		t.Errorf("%d requests, want %d", len(o.requests), n)
	}
}

func requireNoEvents(t *testing.T, o *outcome) {
	t.Helper()
	if ev := o.rec.Events(); len(ev) > 0 {
		t.Errorf("callbacks fired for a request that failed before any output: %s", describeEvents(ev))
	}
}
