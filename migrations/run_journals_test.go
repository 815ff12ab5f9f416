package migrations_test

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

// helix.run_journals and helix.run_model_messages read a run's own
// checkpoints and model rows from the newest checkpoint of an earlier turn
// on: over a session of three runs (one with a checkpoint older than an
// earlier turn's, which is not the run's), beside another session's
// checkpoints, by segment.
func TestRunJournalsFromTheEarlierTurnsNewest(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := open(t, pgtest.NewURL(t))
	_, err := db.ExecContext(ctx, `
		INSERT INTO helix.sessions (session_id, agent_type, stream_id, root_session_id, message_count)
			VALUES ('k', 'a', 'k', 'k', 8), ('other', 'a', 'other', 'other', 0);
		INSERT INTO helix.runs (run_id, session_id, turn, status, workflow_id, completed_at) VALUES
			('r1', 'k', 1, 'completed', 'k-turn-1', now()), ('r2', 'k', 2, 'running', 'k-turn-2', NULL),
			('r3', 'k', 3, 'running', 'k-retry-3', NULL), ('o1', 'other', 1, 'running', 'other-turn-1', NULL)`)
	require.NoError(t, err)
	// Oldest first: each insert takes the next created_seq.
	keyed := func(session string, step int, rand, run, journal string, messages int) {
		t.Helper()
		var r, j any
		if run != "" {
			r = run
		}
		if journal != "" {
			j = journal
		}
		_, err := db.ExecContext(ctx, `INSERT INTO helix.checkpoints (session_key, step_count, id_ms, id_rand, run_id,
			message_count, status, custom_state, journal)
			SELECT key, $2::int, 1700000000000 + $2::int, $3, $4, $5, 'active', '{}', $6 FROM helix.sessions WHERE session_id = $1`,
			session, step, rand, r, messages, j)
		require.NoError(t, err)
	}
	commit := func(seg, messages int) string {
		return `[` + strconv.Itoa(seg) + `,1000000,1700000000000,["helix.commit_step",0,1,null,{"<o":` + strconv.Itoa(messages) + `}]]`
	}
	keyed("k", 1, "a0", "r2", commit(0, 1), 1) // r2's, older than r1's: never read
	keyed("k", 1, "a1", "r1", commit(0, 2), 2)
	keyed("k", 0, "saved1", "r1", "", 3) // the newest of turn 1
	keyed("other", 1, "o", "o1", commit(0, 1), 1)
	keyed("k", 1, "a2", "r2", commit(0, 4), 4)
	keyed("k", 2, "a3", "r2", "", 5)
	keyed("k", 0, "saved2", "", "", 5)
	keyed("k", 3, "a4", "r2", commit(2, 6), 6)
	keyed("k", 4, "a5", "r3", commit(0, 7), 7)
	_, err = db.ExecContext(ctx, `INSERT INTO helix.messages (session_key, seq, message, meta)
		SELECT key, s, to_jsonb('m' || s), CASE WHEN s % 2 = 0 THEN ('[' || CASE WHEN s < 3 THEN 1 ELSE 2 END || ',0,5,1700000000000,2]')::json END
		FROM helix.sessions, generate_series(0, 7) s WHERE session_id = 'k'`)
	require.NoError(t, err)

	col := func(q string, args ...any) []string {
		t.Helper()
		return column(t, db, q, args...)
	}
	type read struct{ run, fn string }
	reads := []read{}
	for _, run := range []string{"r1", "r2", "r3", "r9"} {
		for _, seg := range []string{"0", "2"} {
			reads = append(reads,
				read{run + "/" + seg, `SELECT checkpoint_id || ':' || message_count FROM helix.run_journals('k', '` + run + `', ` + seg + `)`},
				read{run + "/" + seg + " model", `SELECT seq::text FROM helix.run_model_messages('k', '` + run + `', ` + seg + `)`})
		}
	}
	snapshot := func() map[string][]string {
		out := map[string][]string{}
		for _, r := range reads {
			out[r.run] = col(r.fn)
		}
		return out
	}
	now := snapshot()
	require.Equal(t, []string{"cpv1-k-s1-t1700000000001-a1:2"}, now["r1/0"])
	require.Equal(t, []string{"cpv1-k-s1-t1700000000001-a2:4"}, now["r2/0"], "r2's of segment 0 after turn 1's newest, not a0")
	require.Equal(t, []string{"cpv1-k-s3-t1700000000003-a4:6"}, now["r2/2"])
	require.Equal(t, []string{"cpv1-k-s4-t1700000000004-a5:7"}, now["r3/0"])
	require.Empty(t, now["r9/0"], "no such run")
	require.Equal(t, []string{"0", "2"}, now["r1/0 model"], "turn 1's rows from the start")
	require.Equal(t, []string{"4", "6"}, now["r2/0 model"], "turn 2's rows from turn 1's newest checkpoint's count (3) on")
}
