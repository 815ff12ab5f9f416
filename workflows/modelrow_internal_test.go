package workflows

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/steps"
)

// A model record written as a message row reads back as the record it is,
// whichever reads it: the replay (modelRowRecord, from the row as the
// database returns it) and SQL (helix.message_record, which an eviction
// writes to helix.step_journal) give the same output, every field of the
// model's result included, and a result the row cannot hold is not
// written as one.
func TestModelRowReadsBackInGoAndSQL(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	full := steps.ModelOutput{DurationMS: 812, MessageCount: 7, Result: helix.StepResult{
		Type: helix.StepToolCalls, Content: `a "<b>" \u0041 é`, Thinking: &helix.Thinking{Content: "hm", Signature: "sig"},
		ToolCalls: []helix.ToolCall{{ID: "c1", Name: "t", Arguments: json.RawMessage(`{"z": [1, 2], "a": {"<x": "<y>"}}`)},
			{ID: "c2", Name: "u", Arguments: json.RawMessage(`{}`)}},
		Output: json.RawMessage(`{"k": 1}`), Error: "e", ErrorCode: "E1", StopReason: helix.StopToolUse,
		Usage: helix.Usage{InputTokens: 10, OutputTokens: 20, CachedTokens: 3, CacheWriteTokens: 4}, Model: "m-1"}}
	plain := steps.ModelOutput{DurationMS: 5, MessageCount: 1, Result: helix.StepResult{Type: helix.StepToolCalls,
		ToolCalls: []helix.ToolCall{{ID: "c1", Name: "t", Arguments: json.RawMessage(`{"a":1}`)}}, StopReason: helix.StopToolUse,
		Usage: helix.Usage{InputTokens: 100, OutputTokens: 7}}}
	other := plain
	other.Result.Type = helix.StepText
	for name, out := range map[string]steps.ModelOutput{"every field": full, "the usual step": plain, "another type": other} {
		t.Run(name, func(t *testing.T) {
			text := "unused"
			rec := journalRecord{ID: JournalBase + 3, Name: steps.NameCallModel, Output: &text, Started: 1_700_000_000_000, Completed: 1_700_000_000_900}
			row, ok, err := newModelRow(4, 2, rec, out)
			require.NoError(t, err)
			require.True(t, ok, "written as a row")
			var message, meta string
			require.NoError(t, pool.QueryRow(t.Context(), `SELECT $1::jsonb::text, $2::json::text`, row.message, row.meta).Scan(&message, &meta))

			got, err := modelRowRecord(row.seq, message, meta)
			require.NoError(t, err)
			require.Equal(t, JournalBase+3, got.ID)
			require.Equal(t, [2]int64{rec.Started, rec.Completed}, [2]int64{got.Started, got.Completed})
			var sql string
			require.NoError(t, pool.QueryRow(t.Context(), `SELECT helix.message_record($1, $2::jsonb, $3::json)`, row.seq, message, meta).Scan(&sql))
			require.NotContains(t, sql, `"<`, "no text a coded key could be read from")

			fromGo, err := decode[steps.ModelOutput](got)
			require.NoError(t, err)
			fromSQL, err := decode[steps.ModelOutput](journalRecord{ID: got.ID, Name: got.Name, Output: &sql})
			require.NoError(t, err)
			fromGo.Result.ToolCalls, fromSQL.Result.ToolCalls = storedArguments(fromGo.Result.ToolCalls), storedArguments(fromSQL.Result.ToolCalls)
			require.Equal(t, fromGo, fromSQL, "the replay's record and SQL's are the same")
			// As a replay of its helix.step_journal form reads it
			// (json.Marshal's compact JSON).
			b, err := json.Marshal(out)
			require.NoError(t, err)
			var want steps.ModelOutput
			require.NoError(t, json.Unmarshal(b, &want))
			want.Result.ToolCalls = nil
			fromGo.Result.ToolCalls = nil
			require.Equal(t, want, fromGo, "every field but the arguments' form comes back")
			for i, c := range storedArguments(got.outputCalls(t)) {
				require.JSONEq(t, string(out.Result.ToolCalls[i].Arguments), string(c.Arguments))
			}
		})
	}

	failed := plain
	failed.Failure = &steps.Failure{Message: "no"}
	text := "x"
	_, ok, err := newModelRow(1, 0, journalRecord{ID: JournalBase, Output: &text}, failed)
	require.NoError(t, err)
	require.False(t, ok, "a failed call has no assistant message")
}

// outputCalls returns the tool calls of a model record.
func (r journalRecord) outputCalls(t *testing.T) []helix.ToolCall {
	t.Helper()
	out, err := decode[steps.ModelOutput](r)
	require.NoError(t, err)
	return out.Result.ToolCalls
}
