package anthropic

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/llm/internal/provider"
)

// parseErrorBody reads an error body or error event:
// {"type":"error","error":{"type","message"},"request_id"}.
func parseErrorBody(raw string) (provider.ErrorInfo, bool) {
	var body struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
		RequestID string `json:"request_id"`
	}
	if json.Unmarshal([]byte(raw), &body) != nil || (body.Error.Type == "" && body.Error.Message == "") {
		return provider.ErrorInfo{}, false
	}
	return provider.ErrorInfo{Type: body.Error.Type, Message: body.Error.Message, RequestID: body.RequestID}, true
}

// classify maps an HTTP status (0 for an error event inside a stream) and
// the API's error type to a helix code and whether the failure is
// recoverable (and so retried while nothing was forwarded).
func classify(status int, typ string) (string, bool) {
	switch sdk.ErrorType(typ) {
	case sdk.ErrorTypeOverloadedError:
		return helix.CodeProviderOverloaded, true
	case sdk.ErrorTypeRateLimitError:
		return helix.CodeProviderRateLimited, true
	case sdk.ErrorTypeAuthenticationError, sdk.ErrorTypePermissionError:
		return helix.CodeProviderAuth, false
	case sdk.ErrorTypeBillingError:
		return helix.CodeProviderError, false
	case sdk.ErrorTypeInvalidRequestError, sdk.ErrorTypeNotFoundError, "request_too_large":
		return helix.CodeProviderInvalidRequest, false
	case sdk.ErrorTypeTimeoutError:
		return helix.CodeProviderTimeout, true
	case sdk.ErrorTypeAPIError:
		return helix.CodeProviderUnavailable, true
	}
	if status == 0 {
		// An error event of a type this adapter does not know.
		return helix.CodeProviderUnavailable, true
	}
	return provider.ClassifyStatus(status)
}

// hint tells the user what to do about a failure.
func hint(code, typ string, status int) string {
	switch {
	case typ == string(sdk.ErrorTypeBillingError) || status == http.StatusPaymentRequired:
		return "check the account's plan and billing"
	case code == helix.CodeProviderAuth:
		return "check the API key (Config.APIKey / " + APIKeyEnv + ") and that it may use this model"
	case code == helix.CodeProviderRateLimited:
		return "the API is rate limiting this key: retry later, lower the request rate or raise the limits"
	case code == helix.CodeProviderOverloaded:
		return "the API is overloaded: retry later"
	case code == helix.CodeProviderUnavailable:
		return "the API failed: retry later"
	case code == helix.CodeProviderTimeout:
		return "the API did not answer in time: retry, or allow more time"
	case code == helix.CodeProviderInvalidRequest && status == http.StatusNotFound:
		return "check the model name and Config.BaseURL"
	case code == helix.CodeProviderInvalidRequest:
		return "check the model name, the LLMConfig settings (max tokens, thinking budget), the messages and the tools"
	}
	return "see the API's message"
}

// sdkFailure classifies an error of the SDK: an API error (an HTTP error
// response or an error event inside the stream), an unreadable event or a
// transport failure. midStream says whether events were read already.
func sdkFailure(err error, midStream bool, apiKey string) *provider.Failure {
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		return apiFailure(apiErr, apiKey)
	}
	// Without the HTTP response (never in GenerateStep) the SDK reports an
	// error event as text.
	if raw, ok := strings.CutPrefix(err.Error(), "received error while streaming: "); ok {
		info, _ := parseErrorBody(raw)
		f := eventFailure(info, apiKey)
		f.Cause = err
		return f
	}
	var syntax *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &syntax) || errors.As(err, &typeErr) || errors.Is(err, bufio.ErrTooLong) {
		f := malformed(err.Error())
		f.Cause = err
		return f
	}
	return provider.TransportFailure(name, err, midStream, apiKey, provider.TransportWording{
		Certificate:       "the API's TLS certificate was rejected",
		Timeout:           "the API did not answer in time",
		TimeoutAdvice:     hint(helix.CodeProviderTimeout, "", 0),
		Broken:            "the stream broke off",
		Unreachable:       "could not reach the API",
		UnreachableAdvice: "check Config.BaseURL and the network",
	})
}

// apiFailure classifies an API error. An error event in a stream comes
// with the stream's 200 status; it is classified by its type alone.
func apiFailure(e *sdk.Error, apiKey string) *provider.Failure {
	info, ok := parseErrorBody(e.RawJSON())
	if !ok {
		info.Message = provider.Snippet(e.RawJSON())
	}
	info.Type = string(e.Type())
	if info.RequestID == "" {
		info.RequestID = e.RequestID
	}
	status := e.StatusCode
	if status >= 200 && status < 300 {
		f := eventFailure(info, apiKey)
		f.Cause = e
		return f
	}
	code, recoverable := classify(status, info.Type)
	what := fmt.Sprintf("the API answered HTTP %d %s", status, http.StatusText(status))
	f := provider.NewFailure(code, recoverable, status, provider.Redact(provider.Describe(name, what, info, hint(code, info.Type, status)), apiKey))
	if e.Response != nil {
		f.RetryAfter, f.HasRetryAfter = provider.ParseRetryAfter(e.Response.Header, time.Now())
	}
	f.Cause = e
	return f
}

// eventFailure classifies an error event received inside a stream.
func eventFailure(info provider.ErrorInfo, apiKey string) *provider.Failure {
	code, recoverable := classify(0, info.Type)
	return provider.NewFailure(code, recoverable, 0, provider.Redact(provider.Describe(name, "the stream carried an error event", info, hint(code, info.Type, 0)), apiKey))
}

// malformed reports an event the adapter cannot read. Not recoverable: an
// endpoint that speaks another dialect answers the same way again.
func malformed(what string) *provider.Failure {
	return provider.NewFailure(helix.CodeProviderError, false, 0,
		name+": unreadable stream event: "+what+": the endpoint does not speak the Messages streaming format")
}
