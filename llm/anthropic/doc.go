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
// HTTPClient, Thinking (an extended-thinking budget in tokens, 0 = off),
// the retry settings (MaxRetries, MinBackoff, MaxBackoff, MaxRetryAfter)
// and IdleTimeout, the stall watchdog. The SDK client is built with
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
// rejects it). An assistant message becomes its thinking blocks (see
// Thinking round trip), its text and its tool calls as tool_use blocks
// (arguments that are not a JSON object, a model's broken arguments, are
// sent as {}). A tool message becomes a
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
// to StepResult.Thinking.Signature, so the reasoning round-trips (see
// Thinking round trip); each
// tool_use block is reported by OnToolArgStart at its start, OnToolArgDelta
// per input_json_delta and OnToolArgEnd at its stop, and its arguments are
// the concatenated partial JSON ({} when empty; text that is not valid
// JSON, a model cut off by max_tokens, becomes a JSON string holding it,
// so the engine's validation reports it to the model). ping events are
// skipped (they still keep the stall watchdog quiet). The adapter keeps
// text, thinking, redacted_thinking and tool_use blocks and drops every
// other block with its deltas: the server tools' blocks (server_tool_use,
// web_search_tool_result, web_fetch_tool_result,
// code_execution_tool_result, mcp_tool_use, mcp_tool_result, …), which the
// API runs itself and whose input streams as input_json_delta, and types
// added later; citations_delta is dropped too. A delta for a block that
// was never started is applied as its type implies, except
// input_json_delta, which is an unreadable stream (provider_error, not
// recoverable), as is one for a text or thinking block. Usage comes from message_start and message_delta: InputTokens counts
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
// A stream that goes silent, the connection open but nothing arriving
// (not even the ping events the API sends while the model works), is
// abandoned after Config.IdleTimeout (default 5 minutes; negative
// disables the watchdog): the default client has no overall timeout,
// since a stream may rightly last many minutes, and the call would
// otherwise hang. The countdown starts with the response headers and
// restarts at every read.
//
// # Thinking round trip
//
// The API verifies every thinking block it gets back against the block's
// signature, and rejects the turn for good when one does not match; with
// thinking on, the last assistant turn of a tool-use loop must also start
// with its thinking. helix.Thinking holds one text and one signature, so:
//
//   - a step with one thinking block (the usual case) reports its text as
//     Content and its signature as Signature, and goes back as that block;
//   - a step with several thinking blocks, or a redacted_thinking block
//     (reasoning the API encrypted), reports the thinking texts joined by
//     a blank line as Content (what OnThinking forwarded, for display) and
//     every block, as the API must get it back, in Signature: an opaque
//     value of this adapter ("helix-anthropic-thinking-blocks-v1:" and the
//     blocks as JSON). It goes back as those blocks, in their order,
//     redacted ones included; Content is then not sent, so editing it
//     changes nothing;
//   - reasoning without a signature (from another provider, say) is not
//     sent back, nor is a multi-block Signature that cannot be read or
//     holds an unsigned thinking block: the API would reject the turn.
//
// The blocks go back before the turn's text and tool calls, where the API
// wants thinking; a response that interleaved thinking with text or tool
// calls comes back with its thinking first.
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
//	silent stream (IdleTimeout)                        provider_timeout         recoverable
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
// Retry-After (seconds or an HTTP date) or retry-after-ms, in full, or
// else an exponential backoff from Config.MinBackoff with jitter, capped
// by Config.MaxBackoff; cancelling the context ends the wait. A
// Retry-After longer than Config.MaxRetryAfter (default 60s) is not waited
// for: the failure (provider_rate_limited, recoverable, for a 429) is
// returned at once, and its message says how long the API asked to wait.
//
// # Not supported
//
// Images, documents and other non-text content, prompt-caching
// breakpoints (cache_control; cache usage is reported when the API
// caches), server tools (their blocks are dropped, so a pause_turn cannot
// be resumed: it ends the step as end_turn) and citations.
package anthropic
