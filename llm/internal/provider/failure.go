package provider

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	helix "github.com/helix-agents/helix-dbos"
)

// Failure is a classified failure of one attempt: the *helix.ModelError
// the caller sees, the underlying error (an SDK, transport or context
// error) and whether a retry may succeed. It matches *helix.ModelError with
// errors.As and its cause with errors.Is.
type Failure struct {
	// Model is the error the caller sees.
	Model *helix.ModelError
	// Cause is the underlying error, nil when there is none.
	Cause error
	// Retry: sending the same request again may succeed (a rate limit, an
	// overload, a broken connection). Retried only while nothing was
	// forwarded to the callbacks.
	Retry bool
	// RetryAfter is the provider's Retry-After, when HasRetryAfter.
	RetryAfter    time.Duration
	HasRetryAfter bool
}

// Error returns the model error's text.
func (f *Failure) Error() string { return f.Model.Error() }

// Unwrap returns the model error and the cause.
func (f *Failure) Unwrap() []error {
	if f.Cause == nil {
		return []error{f.Model}
	}
	return []error{f.Model, f.Cause}
}

// NewFailure returns a failure with a model error of code and msg, retried
// when recoverable.
func NewFailure(code string, recoverable bool, status int, msg string) *Failure {
	return &Failure{Model: &helix.ModelError{Code: code, Message: msg, Recoverable: recoverable, StatusCode: status}, Retry: recoverable}
}

// InvalidRequest reports a request the adapter cannot send (no model, a
// tool schema that is not JSON, …). Not recoverable: retrying cannot help.
func InvalidRequest(name, msg string) *Failure {
	return NewFailure(helix.CodeProviderInvalidRequest, false, 0, name+": invalid request: "+msg)
}

// ErrorInfo is what a provider's error body or error event says. Each
// adapter reads its provider's shapes into it.
type ErrorInfo struct {
	Message, Type, Code, RequestID string
}

// Describe builds the message of a failure of adapter name: what failed,
// the provider's explanation and identifiers, and what to do:
// "name: what: message (type t, code c, request ID r): hint".
func Describe(name, what string, info ErrorInfo, hint string) string {
	var b strings.Builder
	b.WriteString(name)
	b.WriteString(": ")
	b.WriteString(what)
	if info.Message != "" {
		fmt.Fprintf(&b, ": %s", info.Message)
	}
	var details []string
	if info.Type != "" {
		details = append(details, "type "+info.Type)
	}
	if info.Code != "" {
		details = append(details, "code "+info.Code)
	}
	if info.RequestID != "" {
		details = append(details, "request ID "+info.RequestID)
	}
	if len(details) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(details, ", "))
	}
	b.WriteString(": ")
	b.WriteString(hint)
	return b.String()
}

// Snippet returns the start of a body that is not a known error shape.
func Snippet(body string) string {
	s := strings.TrimSpace(body)
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// Redact removes the API key from a message: some providers echo part of a
// rejected key, and a message ends up in logs and error chunks. A key
// shorter than 4 bytes is left alone: replacing it would garble the text
// and hide nothing.
func Redact(msg, apiKey string) string {
	if len(apiKey) < 4 {
		return msg
	}
	return strings.ReplaceAll(msg, apiKey, "[redacted]")
}

// ClassifyStatus maps the status of an HTTP error response (not 0) to a
// helix code and whether the failure is recoverable (and so retried while
// nothing was forwarded). Adapters consult the provider's error type first;
// this is what the status alone says.
func ClassifyStatus(status int) (code string, recoverable bool) {
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return helix.CodeProviderAuth, false
	case status == http.StatusTooManyRequests:
		return helix.CodeProviderRateLimited, true
	case status == http.StatusRequestTimeout:
		return helix.CodeProviderTimeout, true
	case status == http.StatusConflict:
		return helix.CodeProviderUnavailable, true
	case status == http.StatusServiceUnavailable || status == 529:
		// 529 is Anthropic's "overloaded", which some gateways copy.
		return helix.CodeProviderOverloaded, true
	case status >= 500:
		return helix.CodeProviderUnavailable, true
	case status == http.StatusPaymentRequired:
		return helix.CodeProviderError, false
	case status >= 400:
		return helix.CodeProviderInvalidRequest, false
	}
	return helix.CodeProviderError, false
}

// TransportWording is what an adapter's transport failures say. Each
// message reads "name: <what>: <the error>: <advice>"; the advice of a
// broken stream is that the step can be run again.
type TransportWording struct {
	// Certificate is what failed when the server's TLS certificate was
	// rejected, e.g. "the API's TLS certificate was rejected".
	Certificate string
	// Timeout and TimeoutAdvice describe a timeout of the HTTP client (a
	// response header timeout), e.g. "the API did not answer in time".
	Timeout, TimeoutAdvice string
	// Broken is what failed when the body broke off mid-stream, e.g. "the
	// stream broke off".
	Broken string
	// Unreachable and UnreachableAdvice describe a request that could not
	// be sent, e.g. "could not reach the API".
	Unreachable, UnreachableAdvice string
}

// TransportFailure classifies err, a failure of the HTTP client or of
// reading the body (the context is not done; see [ContextFailure]).
// midStream says whether the stream had begun. A rejected certificate is
// not recoverable (the next attempt meets the same certificate); a timeout,
// a broken stream and an unreachable server are.
func TransportFailure(name string, err error, midStream bool, apiKey string, w TransportWording) *Failure {
	var cv *tls.CertificateVerificationError
	var ne net.Error
	var f *Failure
	switch {
	case errors.As(err, &cv):
		f = NewFailure(helix.CodeProviderUnavailable, false, 0,
			fmt.Sprintf("%s: %s: %v: check Config.BaseURL", name, w.Certificate, err))
	case errors.As(err, &ne) && ne.Timeout():
		f = NewFailure(helix.CodeProviderTimeout, true, 0,
			fmt.Sprintf("%s: %s: %v: %s", name, w.Timeout, err, w.TimeoutAdvice))
	case midStream:
		f = NewFailure(helix.CodeProviderUnavailable, true, 0,
			fmt.Sprintf("%s: %s: %v: the step can be run again", name, w.Broken, err))
	default:
		f = NewFailure(helix.CodeProviderUnavailable, true, 0,
			fmt.Sprintf("%s: %s: %v: %s", name, w.Unreachable, err, w.UnreachableAdvice))
	}
	f.Model.Message = Redact(f.Model.Message, apiKey)
	f.Cause = err
	return f
}

// ContextFailure reports a call ended by its context: a deadline is a
// recoverable timeout, a cancellation a recoverable provider_error (the
// engine may run the step again; this call will not retry). Both match the
// context's error (and cause) with errors.Is.
func ContextFailure(ctx context.Context, name string) *Failure {
	var f *Failure
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		f = NewFailure(helix.CodeProviderTimeout, true, 0,
			name+": the call's deadline passed before the model finished: allow more time (the context's deadline)")
	} else {
		f = NewFailure(helix.CodeProviderError, true, 0, name+": the call was cancelled before the model finished")
	}
	f.Retry = false
	f.Cause = ctx.Err()
	if cause := context.Cause(ctx); cause != nil && cause != ctx.Err() {
		f.Cause = errors.Join(ctx.Err(), cause)
	}
	return f
}
