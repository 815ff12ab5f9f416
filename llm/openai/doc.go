// Package openai is a [helix.Model] for OpenAI's Chat Completions API and
// the servers that speak it: vLLM, Ollama, OpenRouter, llama.cpp, LM
// Studio, DeepSeek, Azure OpenAI and others. It is written on net/http
// (no SDK), so the wire format and its quirks are under this package's
// control.
//
// # Configuration
//
// [New] takes a [Config]: BaseURL (default OpenAI's, "/chat/completions"
// is appended), APIKey (sent as a bearer token when set; read from
// OPENAI_API_KEY only for OpenAI's own URL), Model (the default model; an
// agent's helix.LLMConfig.Model overrides it), Headers (extra headers such
// as OpenRouter's HTTP-Referer), HTTPClient, the retry settings
// (MaxRetries, MinBackoff, MaxBackoff, MaxRetryAfter) and IdleTimeout, the
// stall watchdog. The examples show OpenAI, Ollama, vLLM and OpenRouter.
//
// From helix.LLMConfig the adapter sends Model, Temperature (when set) and
// MaxOutputTokens (when set): as max_completion_tokens to OpenAI's own API
// (a BaseURL on api.openai.com), whose reasoning models (o-series, gpt-5)
// reject max_tokens, and as max_tokens to every other server, since most
// compatible servers (vLLM, Ollama, older Azure API versions, …) know only
// that one. ProviderOptions["openai"] is a JSON object whose members are
// set on the request body as they are: response_format (structured
// output), reasoning_effort, top_p, seed, OpenRouter's provider routing,
// and so on. A null member removes a field the adapter sets (e.g.
// "stream_options": null for a server that rejects it); a token limit in
// the options replaces the one the adapter set ("max_completion_tokens"
// for a compatible server that wants it, such as Azure's reasoning
// deployments; "max_tokens" to send the old field to OpenAI); "stream"
// and "messages" cannot be set. Structured output needs no option: the
// engine presents it as the __finish__ tool.
//
// # Request mapping
//
// Messages keep their order and roles: system, user, assistant (its tool
// calls as tool_calls, arguments serialized; content null when it only
// calls tools) and tool (tool_call_id and content; a failed tool's content
// is the engine's {"error": …} object, since Chat Completions has no error
// flag). Reasoning in assistant messages is not sent back: Chat Completions
// has no standard field for it. Tools become function tools whose
// parameters are the tool's JSON Schema ({"type":"object","properties":{}}
// when it has none).
//
// # Streaming
//
// Requests stream with stream_options.include_usage. Text deltas go to
// OnTextDelta as they arrive (a refusal too, with stop reason refusal);
// reasoning, in delta.reasoning_content (DeepSeek, vLLM, llama.cpp) or
// delta.reasoning (OpenRouter, Ollama), goes to OnThinking as pieces
// (complete false) and into StepResult.Thinking. Tool calls are assembled
// from their fragments by index, arguments split anywhere: OnToolArgStart
// when a call's name is known, OnToolArgDelta per fragment, OnToolArgEnd at
// the finish reason (or when the next call of its index starts). Servers
// that send parallel calls whole, each with its own ID but all with index
// 0 (Ollama, LiteLLM, SGLang), are read as separate calls: a fragment with
// a new ID and a function name, after a call whose arguments are complete,
// starts another call; a fragment with a new ID but no name (servers that
// change the ID on every fragment) continues its call. A call without an
// ID, or repeating one, gets "<id or call>_<index>"; empty arguments
// become {}, and arguments that are not valid JSON (a model cut off by
// max_tokens) a JSON string holding the text, so the engine's validation
// reports them to the model. Usage comes
// from the usage chunk (prompt_tokens, completion_tokens,
// prompt_tokens_details.cached_tokens or DeepSeek's
// prompt_cache_hit_tokens); Usage.InputTokens counts all prompt tokens,
// cached ones included. The finish reason maps with
// helix.MapOpenAIFinishReason; a "stop" with tool calls (older Ollama) is
// tool_use. Only the first choice is read.
//
// A stream is complete only at its data: [DONE] event: a body that ends
// before it is a recoverable provider_unavailable error, never a
// truncated success. An event that is not valid JSON is a provider_error
// (not recoverable).
//
// A stream that goes silent, the connection open but nothing arriving
// (no event, no line, no keep-alive comment), is abandoned after
// Config.IdleTimeout (default 5 minutes; negative disables the watchdog):
// the default client has no overall timeout, since a stream may rightly
// last many minutes, and the call would otherwise hang. The countdown
// starts with the response headers and restarts at every read. Raise it
// for OpenAI's reasoning models at high effort, which send nothing over
// Chat Completions while they reason.
//
// # Errors and retries
//
// Every error GenerateStep returns matches *helix.ModelError (errors.As),
// whose Code, Recoverable and StatusCode the engine copies into the error
// chunk. HTTP errors are classified from the status and the provider's
// error type and code:
//
//	401, 403                        provider_auth            not recoverable
//	400, 404, 413, 422, other 4xx   provider_invalid_request not recoverable
//	  content_filter / policy code  provider_content_filter  not recoverable
//	402                             provider_error           not recoverable
//	408                             provider_timeout         recoverable
//	429                             provider_rate_limited    recoverable
//	  insufficient_quota            provider_rate_limited    not recoverable
//	503, 529                        provider_overloaded      recoverable
//	409, 500, 502, 504, other 5xx   provider_unavailable     recoverable
//	connection failure, cut stream  provider_unavailable     recoverable
//	response header timeout         provider_timeout         recoverable
//	silent stream (IdleTimeout)     provider_timeout         recoverable
//	context deadline                provider_timeout         recoverable
//	context cancelled               provider_error           recoverable
//
// An error event inside a stream (OpenRouter's, vLLM's) is classified from
// its type and code the same way. Context errors also match the context's
// error (and cause) with errors.Is. Messages say what failed, carry the
// provider's explanation and request ID, and end with what to do; the API
// key is redacted from them.
//
// Recoverable failures are retried up to Config.MaxRetries times (default
// 3), but only while nothing has been forwarded to the callbacks: once a
// delta went out, a failure is returned instead, because the engine runs
// the step again and its stream must not hold two attempts. The wait is
// the response's Retry-After (seconds or an HTTP date) or retry-after-ms,
// in full, or else an exponential backoff from Config.MinBackoff with
// jitter, capped by Config.MaxBackoff; cancelling the context ends the
// wait. A Retry-After longer than Config.MaxRetryAfter (default 60s) is
// not waited for: the failure (provider_rate_limited, recoverable, for a
// 429) is returned at once, and its message says how long the provider
// asked to wait.
//
// # Not supported
//
// Images and other non-text content, the Responses API, n > 1 choices,
// logprobs and sending reasoning back.
package openai
