// Package llmtest is the conformance suite every provider adapter of
// helix (llm/openai, llm/anthropic, …) passes. An adapter's test calls
// [Run] with an [Adapter]: how to build the model for a fake server, the
// recorded wire-format responses (fixtures) of each scenario, and a
// decoder of its wire requests. Run then plays every scenario as a
// parallel subtest against its own [Server], an httptest server that
// replays the fixtures, event by event, and records the requests. No test
// needs an API key or the network.
//
// The package also serves adapter-specific tests: [NewServer] replays any
// fixtures and [Server.RequestBody] reads back what was sent, [Recorder]
// records the stream callbacks and [CheckStream] checks them against a
// result, [AsModelError] extracts the classified error of a failure, and
// [RunErrorCases] plays an adapter's own table of error responses
// ([ErrorCase]). [TestdataFixtures] builds Adapter.Fixtures from recorded
// files named by convention ([Testdata] names one of them).
//
// # What every scenario checks
//
// Each request the adapter sent is a POST to Adapter.Path, carries
// Target.APIKey in Adapter.AuthHeader and the Target.Headers, has a JSON
// body that Adapter.DecodeRequest reads, asks for a stream, names
// [RequestModel] (the request's LLMConfig.Model) and sends [SystemPrompt]
// (the first message) as the system prompt. An error must not contain the
// API key. A success must agree with its callbacks ([CheckStream]), report
// the model that answered (Adapter.ResponseModel when set), have type
// tool_calls when it has calls and text otherwise, and must have forwarded
// something before the stream's last event: in success scenarios the
// server holds that event back until the first callback (at most 5s), so
// an adapter that buffers until the end fails.
//
// The Target sets MaxRetries [TestMaxRetries] (2), MinBackoff
// [TestMinBackoff] (1ms), MaxBackoff [TestMaxBackoff] (50ms) and
// MaxRetryAfter [TestMaxRetryAfter] (2s); IdleTimeout is
// [TestIdleTimeout] (200ms) in the stall scenarios and 0 (the adapter's
// default) in the others.
//
// # Scenarios
//
// The fixtures of a scenario are the responses to its successive requests
// (the last one repeats). What they must contain, and what the suite
// expects:
//
//   - text: a stream of [TextAnswer] in at least two text deltas, stop
//     reason end, usage [TextUsage]. Expects that text, stop reason
//     end_turn, no thinking, that usage, one request; and the request
//     mapping: the user message, temperature 0.2 and max tokens 256 (from
//     LLMConfig), no tools.
//   - tool_call: one call of [WeatherTool] with [WeatherArgs], the
//     arguments split mid-JSON over at least two deltas, optionally
//     preceded by the text [ToolPreface]. Expects type tool_calls, stop
//     reason tool_use, a non-empty ID, the call's arguments streamed
//     (start, deltas, end), and [Tools] sent with their names, descriptions
//     and schemas.
//   - parallel_tool_calls: two calls in one response, [WeatherTool] with
//     [ParallelWeatherArgs] then [TimeTool] with [ParallelTimeArgs].
//     Expects both, in order, with distinct IDs, each streamed.
//   - conversation: a stream of [ConversationAnswer]. The request carries a
//     history (user, assistant text with two tool calls, their two tool
//     results, the second a failure {"error": …}, then a user nudge) that
//     must decode to the same messages; the failed result is flagged when
//     Adapter.FlagsToolErrors.
//   - thinking: reasoning [ThinkingContent] in at least two pieces, then
//     the text [ThinkingAnswer]. Expects both, the pieces forwarded as
//     incremental thinking (complete false) before any text, the signature
//     Adapter.ThinkingSignature when set; and the previous turn's signed
//     reasoning sent back when Adapter.SendsThinking, not sent otherwise.
//   - cached_usage: any text, with usage [CachedUsage] (input tokens
//     counting every prompt token, cached ones included). Expects that
//     usage, without cache writes unless Adapter.ReportsCacheWrites.
//   - rate_limit_retry: a 429 with a Retry-After of 1 second (at least 1
//     second, at most TestMaxRetryAfter), then the text fixture. Expects
//     the text, exactly two identical requests, and a wait of at least 1
//     second between them (the Retry-After honoured in full, beyond
//     MaxBackoff, since it is within MaxRetryAfter).
//   - rate_limited: a 429 (repeated). Expects provider_rate_limited,
//     recoverable, status 429, MaxRetries+1 requests, no callback.
//   - rate_limit_too_long: the rate_limited fixture with a Retry-After of
//     3600 seconds (the suite sets it), more than MaxRetryAfter. Expects
//     provider_rate_limited, recoverable, status 429, one request (no
//     retry), no callback, and a message that says how long the provider
//     asked to wait (1h0m0s) and names MaxRetryAfter.
//   - overloaded: an overload status (503, 529). Expects
//     provider_overloaded, recoverable, the 5xx status, MaxRetries+1
//     requests, no callback.
//   - error_event_retry: a stream whose error event comes before any
//     output, then the text fixture. Expects the text after two requests.
//   - error_event: a stream of [PartialText] then an error event
//     (overloaded or a server error). Expects provider_overloaded or
//     provider_unavailable, recoverable, one request (no retry after
//     output), and exactly PartialText forwarded.
//   - auth: a 401. Expects provider_auth, not recoverable, status 401, one
//     request, a message that mentions the API key.
//   - invalid_request: a 400 whose explanation mentions
//     [InvalidRequestMention]. Expects provider_invalid_request, not
//     recoverable, status 400, one request, the explanation in the message.
//   - stream_cut: a stream of PartialText that ends without its terminal
//     event. Expects provider_unavailable, recoverable, one request,
//     PartialText forwarded.
//   - connection_drop: the stream_cut fixture with the connection dropped
//     mid-body (the suite sets Fixture.Abort). Same expectations.
//   - cancel: the stream_cut fixture kept open (the suite sets
//     Fixture.Hang); the suite cancels the context at the first text
//     delta. Expects an error matching context.Canceled, one request, a
//     non-empty prefix of PartialText forwarded.
//   - timeout: a stream that sends headers and nothing more (the suite's
//     default fixture); the call has a [TestTimeout] deadline. Expects
//     provider_timeout, recoverable, matching context.DeadlineExceeded.
//   - stall: the same silent stream (the suite's default fixture), the
//     call without a deadline and IdleTimeout [TestIdleTimeout]: the idle
//     watchdog must end each attempt. Expects provider_timeout,
//     recoverable, not matching context.DeadlineExceeded, a message that
//     names IdleTimeout, MaxRetries+1 requests (nothing was forwarded, so
//     the stall is retried) and no callback.
//   - stall_mid_stream: the stream_cut fixture kept open (the suite sets
//     Fixture.Hang), IdleTimeout TestIdleTimeout. Expects the stall
//     scenario's error after one request (no retry after output), with
//     PartialText forwarded.
//   - malformed: a stream with an event that is not valid JSON. Expects
//     provider_error, not recoverable, one request.
//
// Every adapter runs every scenario: one without fixtures for a scenario
// fails it.
package llmtest
