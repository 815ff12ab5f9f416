package postgres_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// The listing of a user's root sessions (a page, and the page after a
// cursor) is planned on sessions_roots_user_created_idx, generic plan or
// custom, although the index holds only the roots that have a user: the
// others (here nine in ten) take no room in it.
func TestUserListingUsesTheNarrowUserIndex(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newTestStore(t)
	_, err := st.Pool().Exec(ctx, `
		INSERT INTO helix.sessions (session_id, agent_type, stream_id, root_session_id, user_id, created_at)
		SELECT 'u-' || g, 'a', 'u-' || g, 'u-' || g, CASE WHEN g % 10 = 0 THEN 'user-' || (g % 50) END,
			now() - g * interval '1 second'
		FROM generate_series(1, 10000) g;
		ANALYZE helix.sessions`)
	require.NoError(t, err)
	at := time.Now()
	for _, o := range []store.PageSessionsOptions{
		{UserID: "user-10"},
		{UserID: "user-10", After: &store.SessionCursor{CreatedAt: at, SessionID: "u-5"}},
	} {
		q, args := postgres.PageSessionsQuery(&o, 50)
		for _, mode := range []string{"force_generic_plan", "force_custom_plan"} {
			plan := explain(t, st, mode, q, args...)
			require.Contains(t, plan, "sessions_roots_user_created_idx", "%s, %+v:\n%s", mode, o, plan)
		}
	}
	var user, all int64
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT pg_relation_size('helix.sessions_roots_user_created_idx'),
		pg_relation_size('helix.sessions_roots_created_idx')`).Scan(&user, &all))
	require.Less(t, user*4, all, "the user index holds the roots with a user only")
}

// explain returns the plan of q in plan cache mode mode.
func explain(t *testing.T, st *postgres.Store, mode, q string, args ...any) string {
	t.Helper()
	tx, err := st.Pool().Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(t.Context()) }()
	_, err = tx.Exec(t.Context(), "SET LOCAL plan_cache_mode = "+mode)
	require.NoError(t, err)
	rows, err := tx.Query(t.Context(), "EXPLAIN "+q, args...)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return strings.Join(lines, "\n")
}
