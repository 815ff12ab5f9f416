package migrations_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/migrations"
)

// Migration 00029: a keyed session's rows in messages_k, checkpoints_k and
// stream_chunks_k read through the views and functions with their text
// IDs (checkpoint IDs rendered, looked up by their parts), beside a text
// session's; deleting a session or a stream takes its keyed rows; and the
// Down moves the keyed rows back to the tables of 00001, IDs rendered and
// created_seq kept.
func TestKeyedTables(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := open(t, pgtest.NewURL(t))
	_, err := db.ExecContext(ctx, `
		INSERT INTO helix.sessions (session_id, agent_type, stream_id, root_session_id, key)
			VALUES ('k', 'a', 'k', 'k', nextval('helix.session_keys')), ('t', 'a', 't', 't', NULL),
			       ('gone', 'a', 'gone', 'gone', nextval('helix.session_keys'));
		INSERT INTO helix.streams (stream_id, owner_session_id, key)
			SELECT session_id, session_id, key FROM helix.sessions;
		INSERT INTO helix.runs (run_id, session_id, turn, status, workflow_id) VALUES
			('rk', 'k', 1, 'completed', 'k-turn-1'), ('rt', 't', 1, 'completed', 't-turn-1');
		INSERT INTO helix.messages (session_id, seq, message) VALUES ('t', 0, '"t0"'), ('t', 1, '"t1"');
		INSERT INTO helix.messages_k (session_key, seq, message)
			SELECT key, s, to_jsonb('k' || s) FROM helix.sessions, generate_series(0, 2) s WHERE session_id IN ('k', 'gone');
		INSERT INTO helix.checkpoints (checkpoint_id, session_id, run_id, step_count, message_count, status, custom_state, journal, usage)
			VALUES ('cpv1-t-s1-t1700000000000-aaa', 't', 'rt', 1, 2, 'active', '{}',
				'[0,1000000,1700000000000,["helix.commit_step",0,1,null,{"<o":2}]]', '[{"t":"model","k":"m~"}]');
		INSERT INTO helix.checkpoints_k (session_key, step_count, id_ms, id_rand, run_id, message_count, status, custom_state, journal, usage)
			SELECT key, 1, 1700000000001, 'b1', CASE session_id WHEN 'k' THEN 'rk' END, 2, 'active', '{}', '[0,1000000,1700000000000,["helix.commit_step",0,1,null,{"<o":2}]]',
				'[{"t":"model","k":"m~"}]'
			FROM helix.sessions WHERE session_id IN ('k', 'gone');
		INSERT INTO helix.checkpoints_k (session_key, step_count, id_ms, id_rand, run_id, message_count, status, custom_state)
			SELECT key, 2, 1700000000002, 'c2', 'rk', 3, 'active', '{}' FROM helix.sessions WHERE session_id = 'k';
		INSERT INTO helix.checkpoints (checkpoint_id, session_id, step_count, message_count, status, custom_state)
			VALUES ('custom-k', 'k', 2, 3, 'active', '{}');
		INSERT INTO helix.stream_chunks_k (stream_key, seq, step, chunk) SELECT key, 1, 1, '{"x":1}' FROM helix.streams WHERE stream_id IN ('k', 'gone');
		INSERT INTO helix.stream_chunks (stream_id, seq, step, chunk) VALUES ('t', 1, 1, '{"x":1}');
		UPDATE helix.sessions SET checkpoint_id = '' WHERE session_id = 'k'`)
	require.NoError(t, err)

	col := func(q string, args ...any) []string {
		t.Helper()
		return column(t, db, q, args...)
	}
	require.Equal(t, []string{"cpv1-k-s1-t1700000000001-b1", "cpv1-k-s2-t1700000000002-c2", "custom-k"},
		col(`SELECT checkpoint_id FROM helix.all_checkpoints WHERE session_id = 'k' ORDER BY created_seq`))
	require.Equal(t, []string{`"k0"`, `"k1"`, `"k2"`}, col(`SELECT message::text FROM helix.all_messages WHERE session_id = 'k' ORDER BY seq`))
	require.Equal(t, []string{"k", "t"}, col(`SELECT stream_id FROM helix.all_stream_chunks WHERE stream_id IN ('k', 't') ORDER BY 1`))
	require.Equal(t, []string{"custom-k"}, col(`SELECT helix.session_checkpoint_id('k', '')`),
		"the newest by created_seq of both tables")
	require.Equal(t, []string{"{1,1700000000001,b1}"}, col(`SELECT helix.checkpoint_id_parts('cpv1-k-s1-t1700000000001-b1', 'k')::text`))
	for _, id := range []string{"cpv1-k-s01-t1-b1", "cpv1-kk-s1-t1-b1", "cpv1-k-s1-t1-b-1", "cpv1-k-s1-t1-", "custom-k"} {
		require.Equal(t, []string{"NULL"}, col(`SELECT COALESCE(helix.checkpoint_id_parts($1, 'k')::text, 'NULL')`, id), id)
	}
	require.Equal(t, []string{"cpv1-k-s1-t1700000000001-b1"}, col(`SELECT checkpoint_id FROM helix.run_journals('k', 'rk', 0)`))
	require.Equal(t, []string{"cpv1-t-s1-t1700000000000-aaa"}, col(`SELECT checkpoint_id FROM helix.run_journals('t', 'rt', 0)`))
	require.Equal(t, []string{"k-turn-1", "t-turn-1"}, col(`SELECT workflow_id FROM helix.step_journal_records ORDER BY 1`))
	require.Equal(t, []string{"gone:m::1", "k:m:rk:1", "t:m:rt:1"},
		col(`SELECT session_id || ':' || key FROM helix.usage_records ORDER BY 1`))

	// 00028's model records in a keyed session's rows: a pending row (at
	// the session's message count, 3) read for a replay, in the view, and
	// moved to helix.step_journal by an eviction.
	_, err = db.ExecContext(ctx, `UPDATE helix.sessions SET message_count = 3 WHERE session_id = 'k';
		INSERT INTO helix.messages_k (session_key, seq, message, meta)
			SELECT key, 3, '{"role":"assistant","content":"m"}', '[1,0,5,1700000000000,2]' FROM helix.sessions WHERE session_id = 'k'`)
	require.NoError(t, err)
	require.Equal(t, []string{"3"}, col(`SELECT seq::text FROM helix.run_model_messages('k', 'rk', 0)`))
	require.Equal(t, []string{"1000005"}, col(`SELECT id::text FROM helix.step_journal_records WHERE name = 'helix.call_model'`))
	require.Equal(t, []string{"1"}, col(`SELECT helix.evict_pending_messages('k', 3)::text`))
	require.Equal(t, []string{"k-turn-1/1000005"}, col(`SELECT workflow_id || '/' || id FROM helix.step_journal`))
	require.Empty(t, col(`SELECT seq::text FROM helix.run_model_messages('k', 'rk', 0)`))
	require.Equal(t, []string{`"k0"`, `"k1"`, `"k2"`}, col(`SELECT message::text FROM helix.all_messages WHERE session_id = 'k' ORDER BY seq`))

	// Deleting a session and its stream takes their keyed rows.
	_, err = db.ExecContext(ctx, `DELETE FROM helix.sessions WHERE session_id = 'gone'`)
	require.NoError(t, err)
	require.Equal(t, []string{"3", "2", "1"}, col(`SELECT (SELECT count(*) FROM helix.messages_k)::text
		UNION ALL SELECT (SELECT count(*) FROM helix.checkpoints_k)::text UNION ALL SELECT (SELECT count(*) FROM helix.stream_chunks_k)::text`))

	before := col(`SELECT checkpoint_id || '@' || created_seq FROM helix.all_checkpoints ORDER BY created_seq`)
	downTo(t, db, 29, "00029_keyed_tables.sql")
	require.Equal(t, before, col(`SELECT checkpoint_id || '@' || created_seq FROM helix.checkpoints ORDER BY created_seq`),
		"the keyed checkpoints back in helix.checkpoints with their IDs and order")
	require.Equal(t, []string{`"k0"`, `"k1"`, `"k2"`}, col(`SELECT message::text FROM helix.messages WHERE session_id = 'k' ORDER BY seq`))
	require.Equal(t, []string{"k", "t"}, col(`SELECT stream_id FROM helix.stream_chunks ORDER BY 1`))
	require.Equal(t, []string{"custom-k"}, col(`SELECT helix.session_checkpoint_id('k', '')`))
	require.Equal(t, []string{"cpv1-k-s1-t1700000000001-b1"}, col(`SELECT checkpoint_id FROM helix.run_journals('k', 'rk', 0)`))
	_, err = migrations.Up(ctx, db)
	require.NoError(t, err)
}
