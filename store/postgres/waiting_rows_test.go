package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// A waiting session's row keeps one entry in each index of
// helix.sessions, and its run's row one in each of helix.runs: the
// suspension and the answers (the one-statement path and the general one)
// update both heap-only, since no index names a column they write (a run's
// status included: its end is completed_at). Counted in one transaction
// (pg_stat_xact_user_tables).
func TestAWaitingSessionsUpdatesAreHeapOnly(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newClusterStore(t)
	tx, err := st.Pool().Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	in := st.WithQuerier(postgres.PgxQuerier(tx))
	_, err = in.CreateSession(ctx, store.CreateSessionParams{SessionID: "w", AgentType: "payer"})
	require.NoError(t, err)
	_, err = in.CreateRun(ctx, store.CreateRunParams{RunID: "w-r", SessionID: "w", Turn: 1, WorkflowID: "w-wf"})
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO dbos.workflow_status (workflow_uuid, status, created_at) VALUES ('w-wf', 'PENDING', 0)`)
	require.NoError(t, err)
	p := store.SuspendParams{SessionID: "w", RunID: "w-r", StepID: "w-r:1", Step: 1, Record: []byte(`{"step":1}`)}
	for _, id := range []string{"a1", "a2"} {
		p.Pending = append(p.Pending, store.PendingCall{Call: store.PendingClientToolCall{ToolCallID: id, ToolName: "pay",
			Kind: helix.SubmissionApprovalResponse, WorkflowID: "w-wf"}, Timeout: time.Hour})
	}
	_, err = in.SuspendStep(ctx, p)
	require.NoError(t, err)

	yes := true
	a1 := helix.ToolSubmission{Kind: helix.SubmissionApprovalResponse, ToolCallID: "a1", Approved: &yes}
	_, _, ok, err := in.SubmitAnswer(ctx, "w", a1, answerMessage(a1))
	require.NoError(t, err)
	require.True(t, ok, "the one-statement path took the first answer")
	a2 := helix.ToolSubmission{Kind: helix.SubmissionApprovalResponse, ToolCallID: "a2", Approved: &yes}
	_, err = in.RecordSubmission(ctx, "w", a2)
	require.NoError(t, err)

	for table, least := range map[string]int64{"helix.sessions": 3, "helix.runs": 2} {
		var updates, heapOnly int64
		require.NoError(t, tx.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables
			WHERE relid = $1::regclass`, table).Scan(&updates, &heapOnly))
		require.GreaterOrEqual(t, updates, least, "the suspension and the answers updated the row of %s", table)
		require.Equal(t, updates, heapOnly, "every update of the row of %s was heap-only", table)
	}
	var status string
	require.NoError(t, tx.QueryRow(ctx, `SELECT status FROM helix.runs WHERE run_id = 'w-r'`).Scan(&status))
	require.Equal(t, "running", status, "answered")
}

// The statements that read waiting sessions and runs read them through
// their indexes: the orphan sweep the live runs (runs_live_idx: no entry
// for a hibernated or ended run), a conversation's calls the root by its
// primary key and its sub-agents' sessions through sessions_root_idx
// (which holds those only).
func TestWaitingReadsUseTheNarrowIndexes(t *testing.T) {
	t.Parallel()
	plan := explainWithoutSeqScans(t, postgres.OrphanRunsSQL(""))
	require.Contains(t, plan, "runs_live_idx", "the orphan sweep's plan:\n%s", plan)
	require.NotContains(t, plan, "Seq Scan on runs", "the orphan sweep's plan:\n%s", plan)

	plan = explainWithoutSeqScans(t, postgres.ConversationCallsSQL, "root")
	require.Contains(t, plan, "sessions_pkey", "a conversation's calls:\n%s", plan)
	require.Contains(t, plan, "sessions_root_idx", "a conversation's calls:\n%s", plan)
}

// A listing by session ID prefix reads the primary key (session_id sorts
// byte-wise), generic plan or custom, and returns exactly the IDs with the
// prefix, whatever their bytes.
func TestPrefixListingReadsThePrimaryKey(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newTestStore(t)
	_, err := st.Pool().Exec(ctx, `
		INSERT INTO helix.sessions (session_id, agent_type, stream_id, root_session_id, created_at)
		SELECT id, 'a', id, id, now() - g * interval '1 second'
		FROM generate_series(1, 10000) g, LATERAL (SELECT 'p' || (g % 100) || '-' || g AS id) i;
		INSERT INTO helix.sessions (session_id, agent_type, stream_id, root_session_id)
		VALUES ('p7', 'a', 'p7', 'p7'), ('P7-upper', 'a', 'P7-upper', 'P7-upper'), ('p7_x', 'a', 'p7_x', 'p7_x'), ('p7é', 'a', 'p7é', 'p7é');
		ANALYZE helix.sessions`)
	require.NoError(t, err)
	o := store.PageSessionsOptions{IDPrefix: "p7-"}
	q, args := postgres.PageSessionsQuery(&o, 50)
	for _, mode := range []string{"force_generic_plan", "force_custom_plan"} {
		plan := explain(t, st, mode, q, args...)
		require.Contains(t, plan, "sessions_pkey", "%s:\n%s", mode, plan)
	}
	count := func(prefix string) int {
		page, err := st.PageSessions(ctx, &store.PageSessionsOptions{IDPrefix: prefix, Limit: 200})
		require.NoError(t, err)
		for _, s := range page.Sessions {
			require.Truef(t, len(s.SessionID) >= len(prefix) && s.SessionID[:len(prefix)] == prefix, "%s has the prefix %s", s.SessionID, prefix)
		}
		return len(page.Sessions)
	}
	require.Equal(t, 100, count("p7-"))
	require.Equal(t, 1, count("p7_"), "p7_x alone: _ is no wildcard")
	require.Equal(t, 1, count("p7é"))
	require.Equal(t, 1, count("P7"), "byte-wise: P7-upper, none of the p7…")
}

// Every column that holds a session ID sorts like session_id (COLLATE
// "C"), so a join of two of them compares under one collation and the
// other side's index serves it: a column left in the database's collation
// made the planner scan its whole table for each session of a tree walk, a
// cascade or a run lookup (an index serves a comparison only in its own
// collation).
func TestSessionIDJoinsReadTheIndexes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ table, on, index, column string }{
		{"helix.runs", "x.session_id = s.session_id", "runs_session_id_turn_key", "session_id"},
		{"helix.sessions", "x.parent_session_id = s.session_id", "sessions_parent_idx", "parent_session_id"},
		{"helix.sessions", "x.root_session_id = s.session_id AND x.parent_session_id IS NOT NULL", "sessions_root_idx", "root_session_id"},
		{"helix.sub_session_refs", "x.session_id = s.session_id", "sub_session_refs_pkey", "session_id"},
		{"helix.inbox", "x.session_id = s.session_id", "inbox_pkey", "session_id"},
		{"helix.staging", "x.session_id = s.session_id", "staging_pkey", "session_id"},
		{"helix.usage", "x.session_id = s.session_id", "usage_pkey", "session_id"},
		{"helix.streams", "x.owner_session_id = s.session_id AND x.owner_session_id <> x.stream_id", "streams_owner_idx", "owner_session_id"},
	} {
		q := "SELECT 1 FROM helix.sessions s JOIN " + c.table + " x ON " + c.on + " WHERE s.session_id = $1"
		plan := explainWithoutSeqScans(t, q, "s1")
		require.Truef(t, searches(plan, c.index, c.column), "%s searched by %s (not scanned, filtered); %s:\n%s", c.index, c.column, q, plan)
		require.NotContains(t, plan, "Seq Scan", "%s:\n%s", q, plan)
	}

	// And a column added later: each one that names a session.
	st := newTestStore(t)
	loose := queryStrings(t, st.Pool(), `
		SELECT c.table_name || '.' || c.column_name FROM information_schema.columns c
		JOIN pg_tables p ON p.schemaname = c.table_schema AND p.tablename = c.table_name
		WHERE c.table_schema = 'helix' AND c.column_name LIKE '%session_id'
		  AND c.collation_name IS DISTINCT FROM 'C'`)
	require.Empty(t, loose, "columns holding a session ID in the database's collation, not session_id's (C)")
}

// searches reports whether plan reads index with a condition on column:
// the line after the index's names its condition.
func searches(plan, index, column string) bool {
	lines := strings.Split(plan, "\n")
	for i, l := range lines[:len(lines)-1] {
		if strings.Contains(l, " "+index+" ") && strings.HasPrefix(strings.TrimSpace(lines[i+1]), "Index Cond: ("+column+" = ") {
			return true
		}
	}
	return false
}

// Deleting a session finds the streams it owned through indexes (the
// sessions trigger compares a stream's ID with the session's in the
// streams' collation): no scan of helix.streams, however many it holds.
func TestDeletingASessionReadsItsStreamsByIndex(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newTestStore(t)
	_, err := st.Pool().Exec(ctx, `
		INSERT INTO helix.sessions (session_id, agent_type, stream_id, root_session_id)
		SELECT 's' || g, 'a', 's' || g, 's' || g FROM generate_series(1, 5000) g;
		INSERT INTO helix.streams (stream_id, owner_session_id) SELECT 's' || g, 's' || g FROM generate_series(1, 5000) g;
		INSERT INTO helix.streams (stream_id, owner_session_id) VALUES ('given', 's7');
		ANALYZE helix.sessions; ANALYZE helix.streams`)
	require.NoError(t, err)
	tx, err := st.Pool().Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `DELETE FROM helix.sessions WHERE session_id = 's7'`)
	require.NoError(t, err)
	var scans int64
	require.NoError(t, tx.QueryRow(ctx, `SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relid = 'helix.streams'::regclass`).Scan(&scans))
	require.Zero(t, scans, "sequential scans of helix.streams deleting one session")
	left := queryStrings(t, tx, `SELECT stream_id FROM helix.streams WHERE stream_id IN ('s6', 's7', 's8', 'given') ORDER BY 1`)
	require.Equal(t, []string{"s6", "s8"}, left, "its own stream and the one an app gave it went with it, no other")
}

// queryStrings returns the one text column of the rows sql reads through q.
func queryStrings(t *testing.T, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, sql string, args ...any) []string {
	t.Helper()
	rows, err := q.Query(t.Context(), sql, args...)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}
