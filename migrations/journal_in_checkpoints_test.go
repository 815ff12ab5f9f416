package migrations_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/migrations"
)

// Migration 00025: the records a checkpoint carries (checkpoints.journal)
// show in helix.step_journal_records under the workflow that wrote them
// (the run's own, or its segment's), the commit's with its checkpoint's ID
// back in; helix.run_journals finds a run's journals walking back no
// further than the first checkpoint of an earlier run; and the Down puts
// back a helix.step_journal row per record.
func TestJournalInCheckpoints(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := open(t, pgtest.NewURL(t))
	_, err := db.ExecContext(ctx, `INSERT INTO helix.sessions (session_id, agent_type, stream_id, root_session_id, custom_state)
		VALUES ('s', 'a', 's', 's', '{}');
		INSERT INTO helix.runs (run_id, session_id, turn, status, workflow_id) VALUES
			('r1', 's', 1, 'completed', 's-turn-1'), ('r2', 's', 2, 'running', 's-turn-2'), ('r3', 's', 3, 'running', 's-retry-3')`)
	require.NoError(t, err)
	checkpoint := func(id, run, journal string) {
		t.Helper()
		var r, j any
		if run != "" {
			r = run
		}
		if journal != "" {
			j = journal
		}
		_, err := db.ExecContext(ctx, `INSERT INTO helix.checkpoints (checkpoint_id, session_id, run_id, step_count, message_count,
			status, custom_state, journal) VALUES ($1, 's', $2, 0, 0, 'active', '{}', $3)`, id, r, j)
		require.NoError(t, err)
	}
	const at = 1_700_000_000_000
	// Oldest first. cp-0 is r2's as no real checkpoint is (written before
	// r1's): the walk stops at r1's cp-1 and never sees it.
	checkpoint("cp-0", "r2", `[0,1000000,1700000000000,["helix.commit_step",0,1,null,{"<o":1}]]`)
	checkpoint("cp-1", "r1", `[0,1000001,1700000000000,["helix.commit_step",0,1,null,{"<o":2}]]`)
	checkpoint("cp-2", "r2", `[0,1000001,1700000000000,["helix.run_tool",-5,3,"it \"failed\"",{"k":[1,2]}],`+
		`["helix.commit_step",4,6,null,{"<o":3,"<C":true}]]`)
	checkpoint("cp-saved", "", "")
	checkpoint("cp-3", "r2", `[2,1000004,1700000000100,["helix.run_tool",0,1,null],["helix.commit_step",2,3,null,{}]]`)
	checkpoint("cp-suspended", "r2", "")
	checkpoint("cp-4", "r3", `[0,1000000,1700000000200,["helix.commit_step",0,1,null,{"<o":9}]]`)

	journals := func(run string, seg int) []string {
		t.Helper()
		rows, err := db.QueryContext(ctx, `SELECT checkpoint_id FROM helix.run_journals('s', $1, $2)`, run, seg)
		require.NoError(t, err)
		defer rows.Close()
		var out []string
		for rows.Next() {
			var id string
			require.NoError(t, rows.Scan(&id))
			out = append(out, id)
		}
		require.NoError(t, rows.Err())
		return out
	}
	require.Equal(t, []string{"cp-2"}, journals("r2", 0), "past r3's, the checkpoints without a journal, and r2's segment's")
	require.Equal(t, []string{"cp-3"}, journals("r2", 2))
	require.Equal(t, []string{"cp-4"}, journals("r3", 0))
	require.Equal(t, []string{"cp-1"}, journals("r1", 0))
	require.Empty(t, journals("r9", 0), "no such run")

	s := func(v string) *string { return &v }
	n := func(v int64) *int64 { return &v }
	want := []journalRecord{
		{"s-retry-3", "helix.commit_step", 1_000_000, s(`{"checkpointId":"cp-4","messageCount":9}`), nil, n(at + 200), n(at + 201)},
		{"s-turn-1", "helix.commit_step", 1_000_001, s(`{"checkpointId":"cp-1","messageCount":2}`), nil, n(at), n(at + 1)},
		{"s-turn-2", "helix.commit_step", 1_000_000, s(`{"checkpointId":"cp-0","messageCount":1}`), nil, n(at), n(at + 1)},
		{"s-turn-2", "helix.run_tool", 1_000_001, s(`{"k":[1,2]}`), s(`it "failed"`), n(at - 5), n(at + 3)},
		{"s-turn-2", "helix.commit_step", 1_000_002, s(`{"checkpointId":"cp-2","messageCount":3,"interrupted":true}`), nil, n(at + 4), n(at + 6)},
		{"s-turn-2-seg-2", "helix.run_tool", 1_000_004, nil, nil, n(at + 100), n(at + 101)},
		{"s-turn-2-seg-2", "helix.commit_step", 1_000_005, s(`{"checkpointId":"cp-3"}`), nil, n(at + 102), n(at + 103)},
	}
	require.Equal(t, want, journalRecords(t, db, "helix.step_journal_records"))

	downTo(t, db, 25, "00025_journal_in_checkpoints.sql")
	require.Equal(t, want, journalRecords(t, db, "helix.step_journal_records"), "a row per record")
	var rows int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM helix.step_journal`).Scan(&rows))
	require.Equal(t, len(want), rows)
	_, err = migrations.Up(ctx, db)
	require.NoError(t, err)
}
