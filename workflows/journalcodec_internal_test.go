package workflows

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/steps"
)

// codecCases are step outputs as the journal records them: its own types,
// and user data that looks like them (keys the table codes, strings that
// spell coded keys, '<' and codes in text).
func codecCases(t *testing.T) []string {
	t.Helper()
	outputs := []any{
		steps.ModelOutput{Result: helix.StepResult{Type: helix.StepToolCalls, StopReason: helix.StopToolUse,
			ToolCalls: []helix.ToolCall{{ID: "call-1", Name: "noop", Arguments: json.RawMessage(`{"result":{"type":"<a"},"name":1}`)}},
			Usage:     helix.Usage{InputTokens: 3, OutputTokens: 4}}, DurationMS: 12, MessageCount: 101},
		steps.ToolResult{ToolCallID: "call-1", ToolName: "noop", Result: json.RawMessage(`{"ok":"\"result\": <b> & \"<c\":"}`), DurationMS: 1},
		steps.CommitOutput{CheckpointID: "cpv1-s-s1-t1-abc", MessageCount: 103},
		map[string]any{`"<a":`: `"result":`, "x<y": []string{"<", `"<z":`}},
		"plain string with \"id\": inside",
		nil,
	}
	out := make([]string, len(outputs))
	for i, o := range outputs {
		b, err := json.Marshal(o)
		require.NoError(t, err)
		out[i] = string(b)
	}
	return out
}

// Coded outputs are shorter, still JSON, and expand to the bytes
// json.Marshal wrote; outputs written before coding read as they are.
func TestJournalOutputCodeRoundTrips(t *testing.T) {
	t.Parallel()
	for _, s := range codecCases(t) {
		coded := codeOutput(s)
		require.True(t, json.Valid([]byte(coded)), coded)
		require.Equal(t, s, expandOutput(coded))
		require.Equal(t, s, expandOutput(s), "an uncoded output reads as it is")
	}
	model := codecCases(t)[0]
	require.Less(t, len(codeOutput(model)), len(model)*3/4, "a model call's record: %s", codeOutput(model))
	require.NotContains(t, codeOutput(model), `"toolCalls":`)
}

// Migration 00022's helix.journal_output repeats the key table: it expands
// every coded output exactly as the journal does.
func TestJournalOutputExpandsInSQL(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	for _, s := range codecCases(t) {
		var got string
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT helix.journal_output($1)`, codeOutput(s)).Scan(&got))
		require.Equal(t, s, got)
	}
	all := make([]string, len(journalKeys))
	for i, k := range journalKeys {
		all[i] = `"` + k + `":1`
	}
	s := "{" + strings.Join(all, ",") + "}"
	var got string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT helix.journal_output($1)`, codeOutput(s)).Scan(&got))
	require.Equal(t, s, got, "every key of the table")
}
