// Package provider holds what the HTTP model adapters (llm/openai,
// llm/anthropic) share below their wire formats: the classified [Failure]
// every GenerateStep error is, the failures of the transport and of the
// call's context, the retry policy ([Retry]: Retry-After up to
// MaxRetryAfter, exponential backoff with jitter, retrying only while
// nothing was forwarded), the idle watchdog of each attempt ([WatchBody]:
// a response that goes silent for IdleTimeout is abandoned as a
// recoverable provider_timeout), and the checks and defaults of the
// Config fields the adapters have in common.
//
// What differs between providers stays in the adapters: how an error body
// or event reads, how its type maps to a helix code, and what the messages
// advise. Every message a failure carries starts with the adapter's name
// ("openai: …"), which the adapters pass in.
package provider
