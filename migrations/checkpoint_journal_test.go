package migrations_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

// helix.step_journal_records reads compact checkpoint journals (coded step
// names, the short commit entry rebuilt from the checkpoint's message
// count, names of the application's as strings, a commit entry in the long
// form when its output says more); helix.run_journals returns the message
// counts and the rendered IDs; helix.checkpoint_journal (TruncateMessages'
// move of the records) puts the checkpoint's ID back.
func TestCompactCheckpointJournals(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := open(t, pgtest.NewURL(t))
	_, err := db.ExecContext(ctx, `INSERT INTO helix.sessions (session_id, agent_type, stream_id, root_session_id, custom_state)
		VALUES ('s', 'a', 's', 's', '{}');
		INSERT INTO helix.runs (run_id, session_id, turn, status, workflow_id) VALUES ('r1', 's', 1, 'running', 's-turn-1')`)
	require.NoError(t, err)
	checkpoint := func(step, messages int, journal string) {
		t.Helper()
		_, err := db.ExecContext(ctx, `INSERT INTO helix.checkpoints (session_key, step_count, id_ms, id_rand, run_id, message_count,
			status, custom_state, journal) SELECT key, $1, 1700000000000, 'r', 'r1', $2, 'active', '{}', $3
			FROM helix.sessions WHERE session_id = 's'`, step, messages, journal)
		require.NoError(t, err)
	}
	checkpoint(1, 3, `[0,1000000,1700000000000,["helix.run_tool",0,1,null,{"<a":1}],["helix.commit_step",2,3,null,{"<o":3}]]`)
	checkpoint(2, 5, `[0,1000002,1700000000010,[0,0,1,null,{"<a":2}],[0,1,2,"it \"failed\""],["app.step",2,3,null,7],[4,6]]`)
	checkpoint(3, 6, `[0,1000006,1700000000020,[2,0,1,null,{}],[1,2,3,null,{"<o":6,"<C":true}]]`)

	s := func(v string) *string { return &v }
	n := func(v int64) *int64 { return &v }
	const at = 1_700_000_000_000
	want := []journalRecord{
		{"s-turn-1", "helix.run_tool", 1_000_000, s(`{"result":1}`), nil, n(at), n(at + 1)},
		{"s-turn-1", "helix.commit_step", 1_000_001, s(`{"checkpointId":"cpv1-s-s1-t1700000000000-r","messageCount":3}`), nil, n(at + 2), n(at + 3)},
		{"s-turn-1", "helix.run_tool", 1_000_002, s(`{"result":2}`), nil, n(at + 10), n(at + 11)},
		{"s-turn-1", "helix.run_tool", 1_000_003, nil, s(`it "failed"`), n(at + 11), n(at + 12)},
		{"s-turn-1", "app.step", 1_000_004, s(`7`), nil, n(at + 12), n(at + 13)},
		{"s-turn-1", "helix.commit_step", 1_000_005, s(`{"checkpointId":"cpv1-s-s2-t1700000000000-r","messageCount":5}`), nil, n(at + 14), n(at + 16)},
		{"s-turn-1", "helix.call_model", 1_000_006, s(`{}`), nil, n(at + 20), n(at + 21)},
		{"s-turn-1", "helix.commit_step", 1_000_007, s(`{"checkpointId":"cpv1-s-s3-t1700000000000-r","messageCount":6,"interrupted":true}`), nil, n(at + 22), n(at + 23)},
	}
	require.Equal(t, want, journalRecords(t, db, "helix.step_journal_records"))

	rows, err := db.QueryContext(ctx, `SELECT checkpoint_id, message_count FROM helix.run_journals('s', 'r1', 0)`)
	require.NoError(t, err)
	counts := map[string]int{}
	for rows.Next() {
		var id string
		var mc int
		require.NoError(t, rows.Scan(&id, &mc))
		counts[id] = mc
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[string]int{"cpv1-s-s1-t1700000000000-r": 3, "cpv1-s-s2-t1700000000000-r": 5, "cpv1-s-s3-t1700000000000-r": 6}, counts)

	var name, output string
	require.NoError(t, db.QueryRowContext(ctx, `SELECT name, output FROM helix.checkpoint_journal('cp-2',
		(SELECT journal FROM helix.checkpoints WHERE step_count = 2), 5) WHERE id = 1000005`).Scan(&name, &output))
	require.Equal(t, "helix.commit_step", name)
	require.Equal(t, `{"<t":"cp-2","<o":5}`, output, "coded, as helix.step_journal keeps outputs")
}
