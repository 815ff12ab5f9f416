package postgres_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/store/postgres"
)

// The wake-up sweep, which every engine runs each second, starts from the
// engine's pending workflows (DBOS's partial index of them), then probes
// their runs and sessions by key: its cost follows the runs held live, not
// the hibernated sessions.
func TestWakeSweepReadsTheEnginesPendingWorkflows(t *testing.T) {
	t.Parallel()
	plan := explainWithoutSeqScans(t, postgres.WakeSweepSQL, "chan", "topic::", int64(0), "executor", "segment::", int64(0))
	require.Contains(t, plan, "idx_workflow_status_pending", "the sweep's plan:\n%s", plan)
	require.Contains(t, plan, "sessions_pkey", "the sweep's plan:\n%s", plan)
	require.NotContains(t, plan, "Seq Scan", "the sweep's plan:\n%s", plan)
}

// The sweep of sessions cancelled with DBOS's tools, every two seconds,
// reads the live runs (helix.runs_live_idx), not every active session: a
// hibernated session costs it nothing.
func TestCancelSweepReadsTheLiveRuns(t *testing.T) {
	t.Parallel()
	plan := explainWithoutSeqScans(t, postgres.CancelledSessionsSQL, int64(0))
	require.Contains(t, plan, "runs_live_idx", "the sweep's plan:\n%s", plan)
}

// explainWithoutSeqScans returns the plan of sql with args on a store with
// DBOS's schema, sequential scans discouraged (the tables are empty).
func explainWithoutSeqScans(t *testing.T, sql string, args ...any) string {
	t.Helper()
	ctx := t.Context()
	st := newClusterStore(t) // DBOS's schema, which the sweeps read too
	conn, err := st.Pool().Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SET enable_seqscan = off`)
	require.NoError(t, err)
	defer func() { _, _ = conn.Exec(ctx, `RESET enable_seqscan`) }()
	rows, err := conn.Query(ctx, "EXPLAIN "+sql, args...)
	require.NoError(t, err)
	var plan []string
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan = append(plan, line)
	}
	require.NoError(t, rows.Err())
	return strings.Join(plan, "\n")
}
