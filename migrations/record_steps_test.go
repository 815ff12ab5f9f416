package migrations_test

import (
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

// journalRecord is a row of helix.step_journal_records.
type journalRecord struct {
	WF, Name           string
	ID                 int
	Output, Err        *string
	Started, Completed *int64
}

func journalRecords(t *testing.T, db *sql.DB, table string) []journalRecord {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), `SELECT workflow_id, id, name, output, error, started_at, completed_at FROM `+
		table+` ORDER BY workflow_id, id`)
	require.NoError(t, err)
	defer rows.Close()
	var out []journalRecord
	for rows.Next() {
		var r journalRecord
		require.NoError(t, rows.Scan(&r.WF, &r.ID, &r.Name, &r.Output, &r.Err, &r.Started, &r.Completed))
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}

// helix.record_steps writes a call's records in one row
// per run of consecutive IDs (a call's IDs need not be consecutive, nor in
// order: parallel tools are recorded as they end), every column of every
// record comes back through helix.step_journal_records as it was written
// (a JSON output as is, SQL NULL apart from JSON null).
func TestStepJournalRowsPackRecords(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := open(t, pgtest.NewURL(t))
	// The function checks the workflow's owner in DBOS's table: the columns
	// it reads are enough here.
	_, err := db.ExecContext(ctx, `CREATE SCHEMA IF NOT EXISTS dbos;
		CREATE TABLE dbos.workflow_status (workflow_uuid text PRIMARY KEY, owner_xid text);
		INSERT INTO dbos.workflow_status VALUES ('wf-1', 'me'), ('wf-2', 'me')`)
	require.NoError(t, err)
	record := func(wf string, ids []int32, names []string, outputs, errs []*string, started, completed []*int64) {
		t.Helper()
		_, err := db.ExecContext(ctx, `SELECT helix.record_steps($1, 'me', $2, $3, $4, $5, $6, $7)`,
			wf, ids, names, outputs, errs, started, completed)
		require.NoError(t, err)
	}
	s := func(v string) *string { return &v }
	n := func(v int64) *int64 { return &v }
	const at = 1_700_000_000_000
	record("wf-1", []int32{1_000_000}, []string{"model"}, []*string{s(`{"text": "hi"}`)}, []*string{nil},
		[]*int64{n(at)}, []*int64{n(at + 5)})
	record("wf-1", []int32{1_000_001, 1_000_002}, []string{"tool", "commit"},
		[]*string{s(`"a \"quoted\" string"`), s(`{"k": [1, 2]}`)}, []*string{s("it failed"), nil},
		[]*int64{n(at + 10), n(at + 20)}, []*int64{n(at + 15), n(at + 30)})
	record("wf-2", []int32{7, 3, 4, 9}, []string{"d", "a", "b", "c"},
		[]*string{s(`1`), nil, s(`null`), s(`[]`)}, []*string{nil, s(`e"rr`), nil, nil},
		[]*int64{nil, n(5), n(6), nil}, []*int64{nil, n(8), n(9), n(10)})

	rows, err := db.QueryContext(ctx, `SELECT workflow_id, id, n FROM helix.step_journal ORDER BY workflow_id, id`)
	require.NoError(t, err)
	type span struct {
		WF    string
		ID, N int
	}
	var spans []span
	for rows.Next() {
		var r span
		require.NoError(t, rows.Scan(&r.WF, &r.ID, &r.N))
		spans = append(spans, r)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []span{{"wf-1", 1_000_000, 1}, {"wf-1", 1_000_001, 2}, {"wf-2", 3, 2}, {"wf-2", 7, 1}, {"wf-2", 9, 1}},
		spans, "a row per call and run of consecutive IDs")

	want := []journalRecord{
		{"wf-1", "model", 1_000_000, s(`{"text": "hi"}`), nil, n(at), n(at + 5)},
		{"wf-1", "tool", 1_000_001, s(`"a \"quoted\" string"`), s("it failed"), n(at + 10), n(at + 15)},
		{"wf-1", "commit", 1_000_002, s(`{"k": [1, 2]}`), nil, n(at + 20), n(at + 30)},
		{"wf-2", "a", 3, nil, s(`e"rr`), n(5), n(8)},
		{"wf-2", "b", 4, s(`null`), nil, n(6), n(9)},
		{"wf-2", "d", 7, s(`1`), nil, nil, nil},
		{"wf-2", "c", 9, s(`[]`), nil, nil, n(10)},
	}
	require.Equal(t, want, journalRecords(t, db, "helix.step_journal_records"))

	_, err = db.ExecContext(ctx, `SELECT helix.record_steps('wf-1', 'me', ARRAY[20, 21], ARRAY['x', 'y'], ARRAY['not JSON', '1'],
		ARRAY[NULL, NULL], ARRAY[1, 2], ARRAY[1, 2])`)
	require.ErrorContains(t, err, "invalid input syntax for type json", "a packed output must be JSON")
	_, err = db.ExecContext(ctx, `SELECT helix.record_steps('wf-1', 'me', ARRAY[30, 32, 30], ARRAY['x', 'y', 'z'],
		ARRAY['1', '2', '3'], ARRAY[NULL, NULL, NULL], ARRAY[1, 2, 3], ARRAY[1, 2, 3])`)
	require.ErrorContains(t, err, "recorded twice", "a record given twice would overlap rows")
	require.Equal(t, want, journalRecords(t, db, "helix.step_journal_records"), "failed calls write nothing")
}
