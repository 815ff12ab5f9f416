package openai

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/llm/internal/provider"
)

// parseErrorBody reads the error shapes of OpenAI-compatible servers:
// {"error":{"message","type","code"}} (OpenAI, OpenRouter, vLLM),
// {"error":"…"} (Ollama), {"object":"error","message",…} (older vLLM) and
// {"detail":"…"} (FastAPI servers). ok is false when body is none of them.
func parseErrorBody(body []byte) (provider.ErrorInfo, bool) {
	var top struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &top) != nil {
		return provider.ErrorInfo{}, false
	}
	var info provider.ErrorInfo
	if len(top.Error) > 0 && string(top.Error) != "null" {
		var obj struct {
			Message string          `json:"message"`
			Type    string          `json:"type"`
			Code    json.RawMessage `json:"code"`
		}
		var s string
		switch {
		case json.Unmarshal(top.Error, &obj) == nil:
			info = provider.ErrorInfo{Message: obj.Message, Type: obj.Type, Code: rawCode(obj.Code)}
		case json.Unmarshal(top.Error, &s) == nil:
			info.Message = s
		}
	}
	if info.Message == "" {
		info.Message = top.Message
	}
	if info.Type == "" {
		info.Type = top.Type
	}
	if info.Code == "" {
		info.Code = rawCode(top.Code)
	}
	if info.Message == "" && len(top.Detail) > 0 {
		var s string
		if json.Unmarshal(top.Detail, &s) == nil {
			info.Message = s
		} else {
			info.Message = string(top.Detail)
		}
	}
	return info, info.Message != "" || info.Type != "" || info.Code != ""
}

// rawCode returns a JSON string or number as text.
func rawCode(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return n.String()
	}
	return ""
}

// classify maps an HTTP status (0 for an error event inside a stream) and
// the provider's error type and code to a helix code and whether the
// failure is recoverable (and so retried while nothing was forwarded).
func classify(status int, typ, code string) (string, bool) {
	tc := strings.ToLower(typ + " " + code)
	switch {
	case strings.Contains(tc, "content_filter") || strings.Contains(tc, "content_policy"):
		return helix.CodeProviderContentFilter, false
	case strings.Contains(tc, "insufficient_quota"):
		// A quota, not a rate: waiting does not help.
		return helix.CodeProviderRateLimited, false
	case strings.Contains(tc, "context_length"):
		return helix.CodeProviderInvalidRequest, false
	}
	if status != 0 {
		return provider.ClassifyStatus(status)
	}
	// An error event: its type, code (OpenRouter puts an HTTP status there)
	// or nothing says what happened.
	if n, err := strconv.Atoi(code); err == nil && n >= 400 && n < 600 {
		return classify(n, typ, "")
	}
	switch {
	case strings.Contains(tc, "rate_limit"):
		return helix.CodeProviderRateLimited, true
	case strings.Contains(tc, "overloaded"):
		return helix.CodeProviderOverloaded, true
	case strings.Contains(tc, "invalid_request"), strings.Contains(tc, "badrequest"):
		return helix.CodeProviderInvalidRequest, false
	case strings.Contains(tc, "auth"), strings.Contains(tc, "permission"):
		return helix.CodeProviderAuth, false
	case strings.Contains(tc, "timeout"):
		return helix.CodeProviderTimeout, true
	}
	return helix.CodeProviderUnavailable, true
}

// hint tells the user what to do about a failure of code.
func hint(code string, status int) string {
	switch code {
	case helix.CodeProviderAuth:
		return "check the API key (Config.APIKey / " + APIKeyEnv + ") and that it may use this model"
	case helix.CodeProviderRateLimited:
		return "the provider is rate limiting this key: retry later, lower the request rate or raise the limits (a quota error needs the plan or billing checked)"
	case helix.CodeProviderOverloaded:
		return "the provider is overloaded: retry later"
	case helix.CodeProviderUnavailable:
		return "the provider failed: retry later"
	case helix.CodeProviderTimeout:
		return "the provider did not answer in time: retry, or allow more time"
	case helix.CodeProviderContentFilter:
		return "the provider's content filter blocked the request: rephrase the input"
	case helix.CodeProviderInvalidRequest:
		if status == http.StatusNotFound {
			return "check Config.BaseURL and the model name"
		}
		return "check the model name, the LLMConfig settings, the messages and the tools"
	}
	return "see the provider's message"
}

// statusFailure classifies an HTTP error response.
func statusFailure(endpoint string, status int, header http.Header, body []byte, apiKey string) *provider.Failure {
	info, ok := parseErrorBody(body)
	if !ok {
		info.Message = provider.Snippet(string(body))
	}
	info.RequestID = header.Get("x-request-id")
	code, recoverable := classify(status, info.Type, info.Code)
	what := fmt.Sprintf("%s answered HTTP %d %s", endpoint, status, http.StatusText(status))
	f := provider.NewFailure(code, recoverable, status, provider.Redact(provider.Describe(name, what, info, hint(code, status)), apiKey))
	f.RetryAfter, f.HasRetryAfter = provider.ParseRetryAfter(header, time.Now())
	return f
}

// eventFailure classifies an error event received inside a stream.
func eventFailure(info provider.ErrorInfo, apiKey string) *provider.Failure {
	code, recoverable := classify(0, info.Type, info.Code)
	return provider.NewFailure(code, recoverable, 0, provider.Redact(provider.Describe(name, "the stream carried an error event", info, hint(code, 0)), apiKey))
}

// transportFailure classifies an error of the HTTP client or of reading
// the body (the context is not done; see provider.ContextFailure).
func transportFailure(endpoint string, err error, midStream bool, apiKey string) *provider.Failure {
	return provider.TransportFailure(name, err, midStream, apiKey, provider.TransportWording{
		Certificate:       "the TLS certificate of " + endpoint + " was rejected",
		Timeout:           endpoint + " did not answer in time",
		TimeoutAdvice:     hint(helix.CodeProviderTimeout, 0),
		Broken:            "the stream from " + endpoint + " broke off",
		Unreachable:       "could not reach " + endpoint,
		UnreachableAdvice: "check Config.BaseURL and that the server is running",
	})
}

// malformed reports an event the adapter cannot read. Not recoverable: a
// server that speaks an unexpected dialect answers the same way again.
func malformed(what string, data []byte) *provider.Failure {
	msg := name + ": unreadable stream event: " + what
	if data != nil {
		msg += ": " + provider.Snippet(string(data))
	}
	return provider.NewFailure(helix.CodeProviderError, false, 0, msg+": the server does not speak the Chat Completions streaming format this adapter reads")
}
