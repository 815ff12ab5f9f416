// Package anthropic is a [helix.Model] for Anthropic's Messages API, built
// on the official SDK (github.com/anthropics/anthropic-sdk-go): requests
// are SDK params sent with Messages.NewStreaming, and the SDK decodes the
// event stream.
//
// # Configuration
//
// [New] takes a [Config]: APIKey (sent as X-Api-Key; read from
// ANTHROPIC_API_KEY only when both APIKey and BaseURL are empty), BaseURL
// (default the SDK's; set it for a gateway or proxy), Model (the default
// model; an agent's helix.LLMConfig.Model overrides it), MaxTokens (the
// API requires max_tokens; default 4096), Headers (e.g. anthropic-beta),
// HTTPClient, Thinking (an extended-thinking budget in tokens, 0 = off)
// and the retry settings. The SDK client is built with
// option.WithoutEnvironmentDefaults, so nothing else comes from the
// environment (no profiles, no ANTHROPIC_BASE_URL), and with its own
// retries off, since this adapter retries (see below). Its OpenTelemetry
// spans stay on and go to the registered tracer provider, a no-op unless
// the application installs one.
//
// From helix.LLMConfig the adapter sends Model, MaxOutputTokens (as
// max_tokens, else Config.MaxTokens) and Temperature (when set and
// thinking is off: with thinking on the API takes no other temperature).
// ProviderOptions["anthropic"] is a JSON object whose members are set on
// the request body, replacing the adapter's: top_k, top_p, stop_sequences,
// metadata, service_tier, a thinking configuration ({"type":"adaptive"}),
// and so on; a null member removes a field; "stream" and "messages" cannot
// be set. Structured output needs no option: the engine presents it as the
// __finish__ tool.
//
// # Request mapping
//
// System messages, wherever they are, become the system parameter, in
// order. User text becomes text blocks (empty text is skipped: the API
// rejects it). An assistant message becomes its thinking block (when it
// carries a signature: the API verifies thinking and rejects unsigned
// reasoning, e.g. from another provider, which is dropped), its text and
// its tool calls as tool_use blocks (arguments that are not a JSON object,
// a model's broken arguments, are sent as {}). A tool message becomes a
// tool_result block of a user turn, with is_error set when its content is
// the engine's encoding of a failed tool, a JSON object whose only member
// is a string "error". Consecutive messages of one role are merged into
// one turn, as the API wants turns to alternate. Tools become custom tools
// whose input_schema is the tool's JSON Schema.
//
// # Streaming
//
// text_delta pieces go to OnTextDelta as they arrive; thinking_delta
// pieces to OnThinking (complete false), and the block's signature_delta
// to StepResult.Thinking.Signature, so the reasoning round-trips; each
// tool_use block is reported by OnToolArgStart at its start, OnToolArgDelta
// per input_json_delta and OnToolArgEnd at its stop, and its arguments are
// the concatenated partial JSON ({} when empty; text that is not valid
// JSON, a model cut off by max_tokens, becomes a JSON string holding it,
// so the engine's validation reports it to the model). ping events are
// skipped; redacted_thinking, citations and server-tool blocks are not
// kept. Several thinking blocks are joined, with the last signature.
// Usage comes from message_start and message_delta: InputTokens counts
// every prompt token (input_tokens + cache_read_input_tokens +
// cache_creation_input_tokens, comparable with OpenAI's prompt_tokens),
// CachedTokens the cache reads and CacheWriteTokens the cache writes.
// stop_reason maps with helix.MapAnthropicStopReason (end_turn, tool_use,
// max_tokens, stop_sequence, refusal, pause_turn as end_turn; unknown as
// unknown).
//
// A stream is complete only at its message_stop event: a body that ends
// before it is a recoverable provider_unavailable error, never a
// truncated success. An event that is not valid JSON is a provider_error
// (not recoverable).
//
// # Errors and retries
//
// Every error GenerateStep returns matches *helix.ModelError (errors.As),
// whose Code, Recoverable and StatusCode the engine copies into the error
// chunk. API errors are classified by their error type, then their status:
//
//	authentication_error, permission_error, 401, 403   provider_auth            not recoverable
//	invalid_request_error, not_found_error,
//	  request_too_large, other 4xx                     provider_invalid_request not recoverable
//	billing_error, 402                                 provider_error           not recoverable
//	rate_limit_error, 429                              provider_rate_limited    recoverable
//	overloaded_error, 529, 503                         provider_overloaded      recoverable
//	api_error, 409, 500, 502, other 5xx                provider_unavailable     recoverable
//	timeout_error, 408, response header timeout        provider_timeout         recoverable
//	connection failure, cut stream                     provider_unavailable     recoverable
//	context deadline                                   provider_timeout         recoverable
//	context cancelled                                  provider_error           recoverable
//
// An error event inside the stream (overloaded_error, typically) is
// classified by its type. Context errors also match the context's error
// (and cause) with errors.Is. Messages say what failed, carry the API's
// explanation and request ID, and end with what to do; the API key is
// redacted from them.
//
// Recoverable failures are retried up to Config.MaxRetries times (default
// 3), but only while nothing has been forwarded to the callbacks (an error
// event right after message_start is retried): once a delta went out, a
// failure is returned instead, because the engine runs the step again and
// its stream must not hold two attempts. The wait is the response's
// Retry-After (seconds or an HTTP date) or retry-after-ms, capped by
// Config.MaxBackoff, or else an exponential backoff from Config.MinBackoff
// with jitter; cancelling the context ends the wait.
//
// # Not supported
//
// Images, documents and other non-text content, prompt-caching
// breakpoints (cache_control; cache usage is reported when the API
// caches), redacted thinking round trips, server tools and citations.
package anthropic
