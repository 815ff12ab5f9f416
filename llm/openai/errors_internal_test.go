package openai

import (
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status      int
		typ, code   string
		want        string
		recoverable bool
	}{
		{401, "", "", helix.CodeProviderAuth, false},
		{403, "", "", helix.CodeProviderAuth, false},
		{400, "invalid_request_error", "", helix.CodeProviderInvalidRequest, false},
		{400, "invalid_request_error", "context_length_exceeded", helix.CodeProviderInvalidRequest, false},
		{400, "", "content_filter", helix.CodeProviderContentFilter, false},
		{404, "", "", helix.CodeProviderInvalidRequest, false},
		{422, "", "", helix.CodeProviderInvalidRequest, false},
		{402, "", "", helix.CodeProviderError, false},
		{408, "", "", helix.CodeProviderTimeout, true},
		{429, "tokens", "rate_limit_exceeded", helix.CodeProviderRateLimited, true},
		{429, "insufficient_quota", "insufficient_quota", helix.CodeProviderRateLimited, false},
		{500, "", "", helix.CodeProviderUnavailable, true},
		{502, "", "", helix.CodeProviderUnavailable, true},
		{503, "", "", helix.CodeProviderOverloaded, true},
		{504, "", "", helix.CodeProviderUnavailable, true},
		{529, "", "", helix.CodeProviderOverloaded, true},
		{302, "", "", helix.CodeProviderError, false},
		// Error events inside a stream (no status).
		{0, "", "502", helix.CodeProviderUnavailable, true},
		{0, "", "429", helix.CodeProviderRateLimited, true},
		{0, "", "server_error", helix.CodeProviderUnavailable, true},
		{0, "overloaded_error", "", helix.CodeProviderOverloaded, true},
		{0, "BadRequestError", "", helix.CodeProviderInvalidRequest, false},
		{0, "", "rate_limit_exceeded", helix.CodeProviderRateLimited, true},
	} {
		code, rec := classify(tc.status, tc.typ, tc.code)
		require.Equal(t, tc.want, code, "%d %q %q", tc.status, tc.typ, tc.code)
		require.Equal(t, tc.recoverable, rec, "%d %q %q", tc.status, tc.typ, tc.code)
	}
}
