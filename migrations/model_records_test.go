package migrations_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

// The model records message rows hold (messages.meta) show in
// helix.step_journal_records under the workflow that wrote them (the run
// of the turn meta names, its segment's), rendered as the step's output
// (helix.message_record); helix.run_model_messages finds a run's own.
func TestModelMessages(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := open(t, pgtest.NewURL(t))
	_, err := db.ExecContext(ctx, `INSERT INTO helix.sessions (session_id, agent_type, stream_id, root_session_id, custom_state, message_count)
		VALUES ('s', 'a', 's', 's', '{}', 2);
		INSERT INTO helix.runs (run_id, session_id, turn, status, workflow_id, completed_at) VALUES
			('r1', 's', 1, 'completed', 's-turn-1', now()), ('r2', 's', 2, 'running', 's-turn-2', NULL);
		INSERT INTO helix.checkpoints (session_key, step_count, id_ms, id_rand, run_id, message_count, status, custom_state)
			SELECT key, 1, 1, 'a', 'r1', 2, 'active', '{}' FROM helix.sessions WHERE session_id = 's';
		INSERT INTO helix.messages (session_key, seq, message, meta) SELECT s.key, v.* FROM helix.sessions s, (VALUES
			(0, '{"role":"user","content":"go"}'::jsonb, NULL::json),
			(1, '{"role":"assistant","content":"","toolCalls":[{"id":"c1","name":"t","arguments":{"a":1}}]}',
				'[1,0,0,1700000000000,5,4,null,"tool_use",10,2]'),
			(2, '{"role":"assistant","content":"<x>","toolCalls":[{"id":"c2","name":"t","arguments":{}}]}',
				'[2,1,3,1700000000100,7]')) AS v(seq, message, meta) WHERE s.session_id = 's'`)
	require.NoError(t, err)

	s := func(v string) *string { return &v }
	n := func(v int64) *int64 { return &v }
	want := []journalRecord{
		{"s-turn-1", "helix.call_model", 1_000_000, s(`{"result" : {"type" : "tool_calls", "content" : "", "toolCalls" : [{"id": "c1", "name": "t", "arguments": {"a": 1}}], ` +
			`"stopReason" : "tool_use", "usage" : {"inputTokens" : 10, "outputTokens" : 2, "cachedTokens" : 0, "cacheWriteTokens" : 0}}, ` +
			`"durationMs" : 4, "messageCount" : 1}`), nil, n(1_700_000_000_000), n(1_700_000_000_005)},
		{"s-turn-2-seg-1", "helix.call_model", 1_000_003, s(`{"result" : {"type" : "tool_calls", "content" : "\u003cx\u003e", ` +
			`"toolCalls" : [{"id": "c2", "name": "t", "arguments": {}}], "usage" : {"inputTokens" : 0, "outputTokens" : 0, "cachedTokens" : 0, ` +
			`"cacheWriteTokens" : 0}}, "durationMs" : 0, "messageCount" : 2}`), nil, n(1_700_000_000_100), n(1_700_000_000_107)},
	}
	requireRecords(t, want, journalRecords(t, db, "helix.step_journal_records"))
	for _, tc := range []struct {
		run  string
		seg  int
		seqs []int
	}{{"r1", 0, []int{1}}, {"r2", 1, []int{2}}, {"r2", 0, nil}} {
		rows, err := db.QueryContext(ctx, `SELECT seq FROM helix.run_model_messages('s', $1, $2)`, tc.run, tc.seg)
		require.NoError(t, err)
		var seqs []int
		for rows.Next() {
			var seq int
			require.NoError(t, rows.Scan(&seq))
			seqs = append(seqs, seq)
		}
		require.NoError(t, rows.Err())
		require.NoError(t, rows.Close())
		require.Equal(t, tc.seqs, seqs, "%s segment %d", tc.run, tc.seg)
	}
}

// requireRecords compares records, their outputs as JSON.
func requireRecords(t *testing.T, want, got []journalRecord) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		w, g := want[i], got[i]
		require.NotNil(t, g.Output, w.Name)
		require.JSONEq(t, *w.Output, *g.Output, "record %d", w.ID)
		w.Output, g.Output = nil, nil
		require.Equal(t, w, g)
	}
}
