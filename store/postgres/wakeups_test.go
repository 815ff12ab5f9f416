package postgres_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/store/postgres"
)

// The wake-up sweep, which every engine runs each second, reads the
// sessions with pending calls through the index of those with a suspended
// step, not by scanning every session: its condition
// implies the index's.
func TestWakeSweepReadsTheSuspendedIndex(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newClusterStore(t) // DBOS's schema, which the sweep reads too
	conn, err := st.Pool().Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SET enable_seqscan = off`)
	require.NoError(t, err)
	defer func() { _, _ = conn.Exec(ctx, `RESET enable_seqscan`) }()
	rows, err := conn.Query(ctx, "EXPLAIN "+postgres.WakeSweepSQL, "chan", "topic::", int64(0), "executor", "segment::", int64(0))
	require.NoError(t, err)
	var plan []string
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan = append(plan, line)
	}
	require.NoError(t, rows.Err())
	require.Contains(t, strings.Join(plan, "\n"), "sessions_suspended_idx", "the sweep's plan:\n%s", strings.Join(plan, "\n"))
}
