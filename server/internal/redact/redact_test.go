package redact_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/server/internal/redact"
)

func TestChunk(t *testing.T) {
	t.Parallel()
	const secret = "SELECT password FROM vault"

	tool := &helix.ToolEndChunk{ToolCallID: "c1", Error: secret, ErrorCode: helix.CodeInternal}
	got := redact.Chunk(tool).(*helix.ToolEndChunk)
	require.Equal(t, redact.ToolFailure, got.Error)
	require.Equal(t, helix.CodeInternal, got.ErrorCode)
	require.Equal(t, secret, tool.Error, "the stored chunk is not modified")

	run := &helix.ErrorChunk{Error: secret, Code: helix.CodeInternal, ErrorDetail: &helix.ErrorDetail{Message: secret, Cause: secret, Code: helix.CodeInternal}}
	e := redact.Chunk(run).(*helix.ErrorChunk)
	require.Equal(t, redact.RunFailure, e.Error)
	require.Equal(t, redact.RunFailure, e.ErrorDetail.Message)
	require.Empty(t, e.ErrorDetail.Cause)
	require.Equal(t, secret, run.ErrorDetail.Cause, "the stored chunk is not modified")

	detailOnly := &helix.ErrorChunk{Error: secret, ErrorDetail: &helix.ErrorDetail{Message: secret, Code: helix.CodeInternal}}
	require.Equal(t, redact.RunFailure, redact.Chunk(detailOnly).(*helix.ErrorChunk).Error, "the code may be in the detail only")

	for _, c := range []helix.Chunk{
		&helix.ToolEndChunk{Error: "no such city", ErrorCode: "tool_error"},
		&helix.ErrorChunk{Error: "slow down", Code: helix.CodeProviderRateLimited},
		&helix.TextDeltaChunk{Delta: secret},
	} {
		require.Nil(t, redact.Chunk(c), "%T: only internal failures are redacted", c)
		require.Same(t, c, redact.Or(c))
	}
	require.NotSame(t, tool, redact.Or(tool))
}
