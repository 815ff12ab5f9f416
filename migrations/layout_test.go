package migrations_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

// The per-step tables are keyed by their session's or stream's key: the
// rows read through the functions and views with their text IDs
// (checkpoint IDs rendered by helix.checkpoint_id_of, looked up by the
// parts helix.checkpoint_id_parts gives, no other ID found); a pending
// model record is read for a replay and moved to helix.step_journal by an
// eviction; deleting a session or a stream takes its keyed rows and leaves
// another's.
func TestTheLayout(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := open(t, pgtest.NewURL(t))
	_, err := db.ExecContext(ctx, `
		INSERT INTO helix.sessions (session_id, agent_type, stream_id, root_session_id)
			VALUES ('k', 'a', 'k', 'k'), ('gone', 'a', 'gone', 'gone');
		INSERT INTO helix.streams (stream_id, owner_session_id) SELECT session_id, session_id FROM helix.sessions;
		INSERT INTO helix.runs (run_id, session_id, turn, status, workflow_id, completed_at) VALUES
			('rk', 'k', 1, 'completed', 'k-turn-1', now()), ('rg', 'gone', 1, 'completed', 'gone-turn-1', now());
		INSERT INTO helix.messages (session_key, seq, message)
			SELECT key, s, to_jsonb(session_id || s) FROM helix.sessions, generate_series(0, 2) s;
		INSERT INTO helix.checkpoints (session_key, step_count, id_ms, id_rand, run_id, message_count, status, custom_state, journal, usage)
			SELECT key, 1, 1700000000001, 'b1', CASE session_id WHEN 'k' THEN 'rk' ELSE 'rg' END, 2, 'active', '{}',
				'[0,1000000,1700000000000,["helix.commit_step",0,1,null,{"<o":2}]]', '[{"t":"model","k":"m~"}]'
			FROM helix.sessions;
		INSERT INTO helix.checkpoints (session_key, step_count, id_ms, id_rand, run_id, message_count, status, custom_state)
			SELECT key, 2, 1700000000002, 'c2', 'rk', 3, 'active', '{}' FROM helix.sessions WHERE session_id = 'k';
		INSERT INTO helix.stream_chunks (stream_key, seq, step, chunk) SELECT key, 1, 1, '{"x":1}' FROM helix.streams`)
	require.NoError(t, err)

	col := func(q string, args ...any) []string {
		t.Helper()
		return column(t, db, q, args...)
	}
	require.Equal(t, []string{"cpv1-k-s1-t1700000000001-b1", "cpv1-k-s2-t1700000000002-c2"},
		col(`SELECT helix.checkpoint_id_of(s.session_id, c.step_count, c.id_ms, c.id_rand) FROM helix.checkpoints c
			JOIN helix.sessions s ON s.key = c.session_key WHERE s.session_id = 'k' ORDER BY c.created_seq`))
	require.Equal(t, []string{"{1,1700000000001,b1}"}, col(`SELECT helix.checkpoint_id_parts('cpv1-k-s1-t1700000000001-b1', 'k')::text`))
	for _, id := range []string{"cpv1-k-s01-t1-b1", "cpv1-kk-s1-t1-b1", "cpv1-k-s1-t1-b-1", "cpv1-k-s1-t1-", "custom-k", "cpv1-gone-s1-t1700000000001-b1"} {
		require.Equal(t, []string{"NULL"}, col(`SELECT COALESCE(helix.checkpoint_id_parts($1, 'k')::text, 'NULL')`, id), id)
	}
	require.Equal(t, []string{"cpv1-k-s1-t1700000000001-b1"}, col(`SELECT checkpoint_id FROM helix.run_journals('k', 'rk', 0)`))
	require.Equal(t, []string{"gone-turn-1", "k-turn-1"}, col(`SELECT workflow_id FROM helix.step_journal_records ORDER BY 1`))
	require.Equal(t, []string{"gone:m:rg:1", "k:m:rk:1"}, col(`SELECT session_id || ':' || key FROM helix.usage_records ORDER BY 1`))

	// A model record in a pending row (at the session's message count, 3)
	// is read for a replay, in the view, and moved to helix.step_journal
	// by an eviction.
	_, err = db.ExecContext(ctx, `UPDATE helix.sessions SET message_count = 3 WHERE session_id = 'k';
		INSERT INTO helix.messages (session_key, seq, message, meta)
			SELECT key, 3, '{"role":"assistant","content":"m"}', '[1,0,5,1700000000000,2]' FROM helix.sessions WHERE session_id = 'k'`)
	require.NoError(t, err)
	require.Equal(t, []string{"3"}, col(`SELECT seq::text FROM helix.run_model_messages('k', 'rk', 0)`))
	require.Equal(t, []string{"1000005"}, col(`SELECT id::text FROM helix.step_journal_records WHERE name = 'helix.call_model'`))
	require.Equal(t, []string{"0"}, col(`SELECT helix.evict_pending_messages('k', 3, '{"role":"assistant","content":"m"}')::text`),
		"the row holding the message kept is the writer's own")
	require.Equal(t, []string{"1"}, col(`SELECT helix.evict_pending_messages('k', 3)::text`))
	require.Equal(t, []string{"k-turn-1/1000005"}, col(`SELECT workflow_id || '/' || id FROM helix.step_journal`))
	require.Empty(t, col(`SELECT seq::text FROM helix.run_model_messages('k', 'rk', 0)`))
	require.Equal(t, []string{`"k0"`, `"k1"`, `"k2"`}, col(`SELECT m.message::text FROM helix.messages m
		JOIN helix.sessions s ON s.key = m.session_key WHERE s.session_id = 'k' ORDER BY m.seq`))

	// Deleting a session (its stream with it, by the cascade) takes their
	// keyed rows, and only theirs.
	_, err = db.ExecContext(ctx, `DELETE FROM helix.sessions WHERE session_id = 'gone'`)
	require.NoError(t, err)
	require.Equal(t, []string{"3", "2", "1"}, col(`SELECT (SELECT count(*) FROM helix.messages)::text
		UNION ALL SELECT (SELECT count(*) FROM helix.checkpoints)::text UNION ALL SELECT (SELECT count(*) FROM helix.stream_chunks)::text`))
	require.Equal(t, []string{"k"}, col(`SELECT t.stream_id FROM helix.stream_chunks c JOIN helix.streams t ON t.key = c.stream_key`))
}
