package migrations_test

import (
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

// An executor's format_level is cleared by the trigger when its started_at
// changes (a process claims the row, and writes its own level in the
// statement after), so a claim never inherits its predecessor's level; a
// heartbeat keeps it.
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

	// A claim by another process that writes no level with it.
	exec(`INSERT INTO helix.executors AS x (executor_id, application_version, hostname, pid, started_at, heartbeat_at)
		VALUES ('x', 'v', 'h', 2, now() + interval '1 minute', now()) ON CONFLICT (executor_id) DO UPDATE
		SET pid = EXCLUDED.pid, started_at = EXCLUDED.started_at, heartbeat_at = EXCLUDED.heartbeat_at`)
	require.False(t, level().Valid, "a claim clears the level: none until the claimer writes its own")
	exec(`UPDATE helix.executors SET format_level = 1 WHERE executor_id = 'x'`)
	require.Equal(t, sql.NullInt64{Int64: 1, Valid: true}, level(), "set in the statement after a claim")
}
