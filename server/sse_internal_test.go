package server

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/server/internal/redact"
	"github.com/helix-agents/helix-dbos/store"
)

// GET /sse serves stored chunks byte for byte, except the text of an
// internal failure: a tool call's (tool_end with errorCode internal_error)
// as well as a run's (error chunk).
func TestChunkEventRedactsInternalFailures(t *testing.T) {
	t.Parallel()
	const secret = `ERROR: relation "helix.vault" does not exist (SQLSTATE 42P01)`
	event := func(c helix.Chunk) string {
		raw, err := json.Marshal(c)
		require.NoError(t, err)
		return string(chunkEvent(store.StoredChunk{Sequence: 7, Chunk: c, Raw: raw}))
	}

	got := event(&helix.ToolEndChunk{ToolCallID: "c1", ToolName: "lookup", Error: secret, ErrorCode: helix.CodeInternal})
	require.NotContains(t, got, "vault")
	require.Contains(t, got, redact.ToolFailure)
	require.Contains(t, got, `"errorCode":"internal_error"`, "the code stays: clients switch on it")

	got = event(&helix.ErrorChunk{Error: secret, Code: helix.CodeInternal,
		ErrorDetail: &helix.ErrorDetail{Message: secret, Code: helix.CodeInternal, Cause: secret}})
	require.NotContains(t, got, "vault")
	require.Contains(t, got, redact.RunFailure)

	// A tool's own error is written for the model and the user: it passes.
	got = event(&helix.ToolEndChunk{ToolCallID: "c2", ToolName: "lookup", Error: "no such city", ErrorCode: "tool_error"})
	require.Contains(t, got, "no such city")
}
