package provider_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/llm/internal/provider"
)

func TestDescribe(t *testing.T) {
	t.Parallel()
	info := provider.ErrorInfo{Message: "slow down", Type: "tokens", Code: "rate_limit_exceeded", RequestID: "req_1"}
	require.Equal(t, "x: the API answered HTTP 429: slow down (type tokens, code rate_limit_exceeded, request ID req_1): retry later",
		provider.Describe("x", "the API answered HTTP 429", info, "retry later"))
	require.Equal(t, "x: it broke: retry", provider.Describe("x", "it broke", provider.ErrorInfo{}, "retry"))
}

func TestRedact(t *testing.T) {
	t.Parallel()
	require.Equal(t, "key [redacted] rejected", provider.Redact("key sk-123456 rejected", "sk-123456"))
	require.Equal(t, "abc", provider.Redact("abc", "ab"), "a key too short to matter is left")
}

func TestValidateHeaders(t *testing.T) {
	t.Parallel()
	require.NoError(t, provider.ValidateHeaders("x", map[string]string{"HTTP-Referer": "https://a.example", "api-key": "k"}))
	for _, h := range []map[string]string{{"": "v"}, {"Bad Header": "v"}, {"X-Ok": "a\r\nInjected: 1"}, {"X(": "v"}} {
		require.ErrorContains(t, provider.ValidateHeaders("x", h), "x: Config.Headers: invalid header", "%v", h)
	}
}

func TestParseBaseURL(t *testing.T) {
	t.Parallel()
	u, err := provider.ParseBaseURL("x", "http://localhost:11434/v1", "https://a.example")
	require.NoError(t, err)
	require.Equal(t, "/v1", u.Path)
	for _, bad := range []string{"localhost:11434/v1", "ftp://a.example", "https://", "::"} {
		_, err := provider.ParseBaseURL("x", bad, "https://a.example")
		require.EqualError(t, err, `x: Config.BaseURL must be an http(s) URL like "https://a.example", got "`+bad+`"`)
	}
}

func TestArguments(t *testing.T) {
	t.Parallel()
	require.JSONEq(t, `{}`, string(provider.Arguments(" ")))
	require.JSONEq(t, `{"a":1}`, string(provider.Arguments(` {"a":1} `)))
	require.Equal(t, `"{\"cut"`, string(provider.Arguments(`{"cut`)))
}
