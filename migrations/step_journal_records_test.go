package migrations_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

// The records a checkpoint carries (checkpoints.journal) show in
// helix.step_journal_records under the workflow that wrote them (the run's
// own, or its segment's), the commit's with its checkpoint's rendered ID
// back in; helix.run_journals finds a run's journals no further back than
// the newest checkpoint of an earlier run.
func TestJournalInCheckpoints(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := open(t, pgtest.NewURL(t))
	_, err := db.ExecContext(ctx, `INSERT INTO helix.sessions (session_id, agent_type, stream_id, root_session_id, custom_state)
		VALUES ('s', 'a', 's', 's', '{}');
		INSERT INTO helix.runs (run_id, session_id, turn, status, workflow_id, completed_at) VALUES
			('r1', 's', 1, 'completed', 's-turn-1', now()), ('r2', 's', 2, 'running', 's-turn-2', NULL), ('r3', 's', 3, 'running', 's-retry-3', NULL)`)
	require.NoError(t, err)
	// A checkpoint's ID is rendered from its row: cpv1-s-s{step}-t1-{rand}.
	steps := map[string]int{"cp-0": 0, "cp-1": 1, "cp-2": 2, "cp-saved": 3, "cp-3": 4, "cp-suspended": 5, "cp-4": 6}
	id := func(name string) string {
		return fmt.Sprintf("cpv1-s-s%d-t1-%s", steps[name], strings.ReplaceAll(name, "-", ""))
	}
	checkpoint := func(name, run, journal string) {
		t.Helper()
		var r, j any
		if run != "" {
			r = run
		}
		if journal != "" {
			j = journal
		}
		_, err := db.ExecContext(ctx, `INSERT INTO helix.checkpoints (session_key, step_count, id_ms, id_rand, run_id, message_count,
			status, custom_state, journal) SELECT key, $1, 1, $2, $3, 0, 'active', '{}', $4 FROM helix.sessions WHERE session_id = 's'`,
			steps[name], strings.ReplaceAll(name, "-", ""), r, j)
		require.NoError(t, err)
	}
	const at = 1_700_000_000_000
	// Oldest first. cp-0 is r2's as no real checkpoint is (written before
	// r1's): it is older than r1's newest, so it is not r2's own.
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
	require.Equal(t, []string{id("cp-2")}, journals("r2", 0), "past r3's, the checkpoints without a journal, and r2's segment's")
	require.Equal(t, []string{id("cp-3")}, journals("r2", 2))
	require.Equal(t, []string{id("cp-4")}, journals("r3", 0))
	require.Equal(t, []string{id("cp-1")}, journals("r1", 0))
	require.Empty(t, journals("r9", 0), "no such run")

	s := func(v string) *string { return &v }
	n := func(v int64) *int64 { return &v }
	want := []journalRecord{
		{"s-retry-3", "helix.commit_step", 1_000_000, s(`{"checkpointId":"` + id("cp-4") + `","messageCount":9}`), nil, n(at + 200), n(at + 201)},
		{"s-turn-1", "helix.commit_step", 1_000_001, s(`{"checkpointId":"` + id("cp-1") + `","messageCount":2}`), nil, n(at), n(at + 1)},
		{"s-turn-2", "helix.commit_step", 1_000_000, s(`{"checkpointId":"` + id("cp-0") + `","messageCount":1}`), nil, n(at), n(at + 1)},
		{"s-turn-2", "helix.run_tool", 1_000_001, s(`{"k":[1,2]}`), s(`it "failed"`), n(at - 5), n(at + 3)},
		{"s-turn-2", "helix.commit_step", 1_000_002, s(`{"checkpointId":"` + id("cp-2") + `","messageCount":3,"interrupted":true}`), nil, n(at + 4), n(at + 6)},
		{"s-turn-2-seg-2", "helix.run_tool", 1_000_004, nil, nil, n(at + 100), n(at + 101)},
		{"s-turn-2-seg-2", "helix.commit_step", 1_000_005, s(`{"checkpointId":"` + id("cp-3") + `"}`), nil, n(at + 102), n(at + 103)},
	}
	require.Equal(t, want, journalRecords(t, db, "helix.step_journal_records"))
}
