package migrations_test

import (
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

// Migration 00027: a row's format level holds for the process that claimed
// the row. A process of an earlier release that takes the row over (its
// claim sets started_at and writes no level) leaves it NULL, level 0, not
// its predecessor's; a heartbeat keeps it; an engine of this release sets
// its own in the statement after its claim. The Down drops the column.
func TestExecutorFormatLevel(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := open(t, pgtest.NewURL(t))
	level := func() sql.NullInt64 {
		t.Helper()
		var l sql.NullInt64
		require.NoError(t, db.QueryRowContext(ctx, `SELECT format_level FROM helix.executors WHERE executor_id = 'x'`).Scan(&l))
		return l
	}
	exec := func(q string) {
		t.Helper()
		_, err := db.ExecContext(ctx, q)
		require.NoError(t, err)
	}
	exec(`INSERT INTO helix.executors (executor_id, application_version, hostname, pid, format_level) VALUES ('x', 'v', 'h', 1, 1)`)
	require.Equal(t, sql.NullInt64{Int64: 1, Valid: true}, level())
	exec(`UPDATE helix.executors SET heartbeat_at = now() + interval '1 second' WHERE executor_id = 'x'`)
	require.Equal(t, sql.NullInt64{Int64: 1, Valid: true}, level(), "a heartbeat keeps the level")

	// A claim by an earlier release's process (engine/heartbeat.go's
	// upsert of that release).
	exec(`INSERT INTO helix.executors AS x (executor_id, application_version, hostname, pid, started_at, heartbeat_at)
		VALUES ('x', 'v', 'h', 2, now() + interval '1 minute', now()) ON CONFLICT (executor_id) DO UPDATE
		SET pid = EXCLUDED.pid, started_at = EXCLUDED.started_at, heartbeat_at = EXCLUDED.heartbeat_at`)
	require.False(t, level().Valid, "the earlier release's claim reads as level 0")
	exec(`UPDATE helix.executors SET format_level = 1 WHERE executor_id = 'x'`)
	require.Equal(t, sql.NullInt64{Int64: 1, Valid: true}, level(), "set in the statement after a claim")

	downTo(t, db, 25, "00025_journal_in_checkpoints.sql")
	var n int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.columns
		WHERE table_schema = 'helix' AND table_name = 'executors' AND column_name = 'format_level'`).Scan(&n))
	require.Zero(t, n)
	exec(`UPDATE helix.executors SET started_at = now() WHERE executor_id = 'x'`)
}
