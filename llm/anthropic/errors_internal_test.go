package anthropic

import (
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status      int
		typ         string
		want        string
		recoverable bool
	}{
		{400, "invalid_request_error", helix.CodeProviderInvalidRequest, false},
		{401, "authentication_error", helix.CodeProviderAuth, false},
		{403, "permission_error", helix.CodeProviderAuth, false},
		{400, "billing_error", helix.CodeProviderError, false},
		{404, "not_found_error", helix.CodeProviderInvalidRequest, false},
		{413, "request_too_large", helix.CodeProviderInvalidRequest, false},
		{429, "rate_limit_error", helix.CodeProviderRateLimited, true},
		{500, "api_error", helix.CodeProviderUnavailable, true},
		{504, "timeout_error", helix.CodeProviderTimeout, true},
		{529, "overloaded_error", helix.CodeProviderOverloaded, true},
		{503, "", helix.CodeProviderOverloaded, true},
		{502, "", helix.CodeProviderUnavailable, true},
		{429, "", helix.CodeProviderRateLimited, true},
		{401, "", helix.CodeProviderAuth, false},
		{422, "", helix.CodeProviderInvalidRequest, false},
		{0, "overloaded_error", helix.CodeProviderOverloaded, true},
		{0, "something_new", helix.CodeProviderUnavailable, true},
	} {
		code, rec := classify(tc.status, tc.typ)
		require.Equal(t, tc.want, code, "%d %q", tc.status, tc.typ)
		require.Equal(t, tc.recoverable, rec, "%d %q", tc.status, tc.typ)
	}
}
