package llmtest

import "net/http"

// Testdata returns a fixture whose body is the file testdata/name of the
// adapter's package, answered with status 200.
func Testdata(name string) Fixture { return Fixture{File: "testdata/" + name} }

// TestdataOpts are the provider-specific parts of [TestdataFixtures]. A
// nil *TestdataOpts means the defaults.
type TestdataOpts struct {
	// RateLimitHeader is the header of the 429 response of
	// rate_limited.json: the provider's rate-limit and request-ID headers,
	// with a Retry-After of 1 second (at least 1 second, at most
	// TestMaxRetryAfter). Default {"Retry-After": "1"}.
	RateLimitHeader map[string]string
	// OverloadedStatus is the status of overloaded.json: 503, or
	// Anthropic's 529. Default 503.
	OverloadedStatus int
}

// TestdataFixtures returns the fixtures of every scenario but timeout and
// stall (which have a default) from the recorded responses in the testdata
// directory of the adapter's package, the way llm/openai and llm/anthropic
// keep theirs. A scenario's file is named after it (text.sse,
// tool_call.sse, parallel_tool_calls.sse, conversation.sse, thinking.sse,
// cached_usage.sse, error_event.sse, malformed.sse), except:
//
//	rate_limit_retry   rate_limited.json (status 429), then text.sse
//	rate_limited       rate_limited.json (status 429), which
//	                   rate_limit_too_long replays with a longer
//	                   Retry-After
//	overloaded         overloaded.json (TestdataOpts.OverloadedStatus)
//	error_event_retry  error_event_first.sse, then text.sse
//	auth               auth.json (status 401)
//	invalid_request    invalid_request.json (status 400)
//	stream_cut         truncated.sse, which connection_drop, cancel and
//	                   stall_mid_stream replay too
//
// The package documentation says what each must contain. Change the
// entries where an adapter's recordings differ before passing the result
// as [Adapter.Fixtures].
func TestdataFixtures(opts *TestdataOpts) map[Scenario][]Fixture {
	var o TestdataOpts
	if opts != nil {
		o = *opts
	}
	if o.RateLimitHeader == nil {
		o.RateLimitHeader = map[string]string{"Retry-After": "1"}
	}
	if o.OverloadedStatus == 0 {
		o.OverloadedStatus = http.StatusServiceUnavailable
	}
	status := func(code int, name string, header map[string]string) Fixture {
		f := Testdata(name)
		f.Status, f.Header = code, header
		return f
	}
	one := func(f Fixture) []Fixture { return []Fixture{f} }
	rateLimited := status(http.StatusTooManyRequests, "rate_limited.json", o.RateLimitHeader)
	return map[Scenario][]Fixture{
		ScenarioText:              one(Testdata("text.sse")),
		ScenarioToolCall:          one(Testdata("tool_call.sse")),
		ScenarioParallelToolCalls: one(Testdata("parallel_tool_calls.sse")),
		ScenarioConversation:      one(Testdata("conversation.sse")),
		ScenarioThinking:          one(Testdata("thinking.sse")),
		ScenarioCachedUsage:       one(Testdata("cached_usage.sse")),
		ScenarioRateLimitRetry:    {rateLimited, Testdata("text.sse")},
		ScenarioRateLimited:       {rateLimited},
		ScenarioRateLimitTooLong:  {rateLimited},
		ScenarioOverloaded:        one(status(o.OverloadedStatus, "overloaded.json", nil)),
		ScenarioErrorEventRetry:   {Testdata("error_event_first.sse"), Testdata("text.sse")},
		ScenarioErrorEvent:        one(Testdata("error_event.sse")),
		ScenarioAuth:              one(status(http.StatusUnauthorized, "auth.json", nil)),
		ScenarioInvalidRequest:    one(status(http.StatusBadRequest, "invalid_request.json", nil)),
		ScenarioStreamCut:         one(Testdata("truncated.sse")),
		ScenarioConnectionDrop:    one(Testdata("truncated.sse")),
		ScenarioCancel:            one(Testdata("truncated.sse")),
		ScenarioStallMidStream:    one(Testdata("truncated.sse")),
		ScenarioMalformed:         one(Testdata("malformed.sse")),
	}
}
