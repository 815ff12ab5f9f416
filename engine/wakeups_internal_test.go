package engine

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

// The wake-up sweep, which every engine runs each second, reads the
// sessions with pending calls through the index of those with a suspended
// step (migration 00032), not by scanning every session: its condition
// implies the index's.
func TestWakeSweepReadsTheSuspendedIndex(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.NewURL(t)
	e, err := New(ctx, Config{DatabaseURL: url, DisableTakeover: true}) // DBOS's schema, which the sweep reads too
	require.NoError(t, err)
	require.NoError(t, e.Launch(ctx))
	require.NoError(t, e.Shutdown(ctx))
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `SET enable_seqscan = off`)
	require.NoError(t, err)
	rows, err := conn.Query(ctx, "EXPLAIN "+wakeSweepSQL, "chan", "topic::", int64(0), "executor", "segment::", int64(0))
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
