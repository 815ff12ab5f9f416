package steps

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
)

// A suspended step's record goes to the session's row without its run and
// step (the suspended step ID beside it names them) and reads back whole,
// for run IDs with colons too; a whole record (SaveSuspendedStep's) keeps
// its own run and step; a record without them whose ID names none is an
// error, not a record of step 0.
func TestSuspendedStepRecordLeavesItsIDToTheRow(t *testing.T) {
	t.Parallel()
	for _, runID := range []string{"01a229f0-cbd5-7e2f-8f2e-d6ab11b557c0", "run:with:colons"} {
		rec := SuspendedStep{RunID: runID, Step: 12, Model: helix.StepResult{Type: "tool_calls",
			ToolCalls: []helix.ToolCall{{ID: "c1", Name: "t", Arguments: json.RawMessage(`{"a":1}`)}}},
			Results: []ToolResult{{}}}
		raw, stepID, err := storedRecord(rec)
		require.NoError(t, err)
		require.Equal(t, runID+":12", stepID)
		require.NotContains(t, string(raw), "runId")
		require.NotContains(t, string(raw), `"step"`)
		back, err := loadRecord("s", raw, stepID)
		require.NoError(t, err)
		require.Equal(t, rec, *back)
	}

	whole, err := json.Marshal(SuspendedStep{RunID: "r-own", Step: 3})
	require.NoError(t, err)
	back, err := loadRecord("s", whole, "r-other:4")
	require.NoError(t, err)
	require.Equal(t, "r-own", back.RunID)
	require.Equal(t, 3, back.Step)

	for _, id := range []string{"", "r", ":3", "r:", "r:0", "r:x"} {
		_, err := loadRecord("s", []byte(`{"model":{}}`), id)
		require.ErrorContains(t, err, "names none", "step ID %q", id)
	}
	_, _, err = storedRecord(SuspendedStep{Step: 1})
	require.ErrorContains(t, err, "needs its run and its step")
}
