package workflows

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/steps"
	"github.com/helix-agents/helix-dbos/store/postgres"
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

// helix.journal_output repeats the key table: it expands
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

// helix.journal_step_code, which names the steps of a packed step
// journal row (helix.record_steps), codes them as codeStepName does, and a
// packed row reads back whole, in Go (unpack) and in SQL
// (helix.step_journal_row_records).
func TestPackedJournalRowsCodeStepNames(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	names := append(slices.Clone(journalStepNames), "app.step", "4")
	for _, name := range names {
		want, err := codeStepName(name)
		require.NoError(t, err)
		var got string
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT helix.journal_step_code($1)`, name).Scan(&got))
		require.Equal(t, string(want), got, name)
	}
	recs := make([]journalRecord, len(names))
	for i, name := range names {
		out := `{"<a":` + strconv.Itoa(i) + `}`
		recs[i] = journalRecord{ID: JournalBase + i, Name: name, Output: &out, Started: 1_700_000_000_000, Completed: 1_700_000_000_001}
	}
	// helix.record_steps checks the workflow's owner in DBOS's table: the
	// columns it reads are enough here.
	_, err := pool.Exec(t.Context(), `CREATE SCHEMA IF NOT EXISTS dbos;
		CREATE TABLE dbos.workflow_status (workflow_uuid text PRIMARY KEY, owner_xid text);
		INSERT INTO dbos.workflow_status VALUES ('wf', 'me')`)
	require.NoError(t, err)
	sql, args := postgres.RecordStepsStatement("wf", "me", stepRecords(recs))
	_, err = pool.Exec(t.Context(), sql, args...)
	require.NoError(t, err)
	var id, n int
	var name string
	var output *string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT id, n, name, output FROM helix.step_journal WHERE workflow_id = 'wf'`).Scan(&id, &n, &name, &output))
	require.Equal(t, len(names), n, "one packed row")
	require.NotContains(t, *output, steps.NameBeginRun, "the engine's names are coded")
	got, err := unpack(id, n, name, output, nil)
	require.NoError(t, err)
	rows, err := pool.Query(t.Context(), `SELECT name FROM helix.step_journal_row_records WHERE workflow_id = 'wf' ORDER BY id`)
	require.NoError(t, err)
	inSQL, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for i := range names {
		require.Equal(t, names[i], got[i].Name)
		require.Equal(t, *recs[i].Output, *got[i].Output)
	}
	require.Equal(t, names, inSQL)
}

// helix.journal_step_name repeats the step name table,
// and its helix.checkpoint_journal reads a compact checkpoint journal as
// unpackCheckpoint does: every coded name, the short commit entry rebuilt
// from the message count, the long forms as they are.
func TestCompactCheckpointJournalsReadInSQL(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	for i, name := range journalStepNames {
		var got string
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT helix.journal_step_name($1::json)`, strconv.Itoa(i)).Scan(&got))
		require.Equal(t, name, got, "code %d", i)
	}
	var unknown *string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT helix.journal_step_name($1::json)`,
		strconv.Itoa(len(journalStepNames))).Scan(&unknown))
	require.Nil(t, unknown, "a code past the table names nothing")

	s := func(v string) *string { return &v }
	const at = 1_700_000_000_000
	j := &journal{scope: journalScope{segment: 1}}
	var recs []journalRecord
	for i, name := range append(slices.Clone(journalStepNames), "app.step") {
		recs = append(recs, journalRecord{ID: 100 + i, Name: name, Output: s(`{"<a":` + strconv.Itoa(i) + `}`),
			Started: at + int64(i), Completed: at + int64(2*i)})
	}
	// (helix.checkpoint_journal puts a checkpoint ID in every commit's
	// output, unpackCheckpoint in the last's: a checkpoint carries one.)
	recs[1].Output, recs[3].Err, recs[4].Output = nil, s(`it "failed"`), nil
	for _, commit := range []string{codeOutput(`{"messageCount":7}`), codeOutput(`{"messageCount":7,"interrupted":true}`), `{}`} {
		all := append(slices.Clone(recs), journalRecord{ID: 100 + len(recs), Name: steps.NameCommitStep, Output: &commit,
			Started: at + 50, Completed: at + 60})
		text, lead, err := j.checkpointRecords(all, 7)
		require.NoError(t, err)
		require.Empty(t, lead)
		want, err := unpackCheckpoint("cp-9", text, 7)
		require.NoError(t, err)
		rows, err := pool.Query(t.Context(), `SELECT seg, id, name, output, error, started_at, completed_at
			FROM helix.checkpoint_journal('cp-9', $1, 7) ORDER BY id`, text)
		require.NoError(t, err)
		var got []journalRecord
		for rows.Next() {
			var r journalRecord
			var seg int
			require.NoError(t, rows.Scan(&seg, &r.ID, &r.Name, &r.Output, &r.Err, &r.Started, &r.Completed))
			require.Equal(t, 1, seg)
			require.Equal(t, all[r.ID-100].Started, r.Started, "step %d", r.ID)
			require.Equal(t, all[r.ID-100].Completed, r.Completed, "step %d", r.ID)
			r.Started, r.Completed = 0, 0
			got = append(got, r)
		}
		require.NoError(t, rows.Err())
		require.Equal(t, want, got, text)
	}
}
