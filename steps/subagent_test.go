package steps_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/steps"
)

// A child's internal failure (infrastructure text: SQL, DBOS) never reaches
// the parent's model or stream; a classified failure does, as it is.
func TestChildResultKeepsInternalTextOut(t *testing.T) {
	call := helix.ToolCall{ID: "c1", Name: "subagent__x"}
	r := steps.ChildResult(call, steps.Outcome{Status: helix.RunFailed, Code: helix.CodeInternal,
		Error: `step 3: ERROR: relation "helix.sessions" does not exist (SQLSTATE 42P01)`}, nil)
	require.Equal(t, steps.CodeSubAgentFailed, r.ErrorCode)
	require.NotContains(t, r.Error, "SQLSTATE")
	require.Contains(t, r.Error, "internal error")

	r = steps.ChildResult(call, steps.Outcome{}, errors.New("dbos: workflow x: pq: connection refused"))
	require.NotContains(t, r.Error, "connection refused")

	r = steps.ChildResult(call, steps.Outcome{Status: helix.RunFailed, Code: helix.CodeProviderOverloaded,
		Error: "the provider is overloaded"}, nil)
	require.Equal(t, "the provider is overloaded", r.Error)
}
