package postgres_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// The operator's queries read what the store wrote: schemas, sessions by
// status and prefix, an active session without a run, and a workflow DBOS
// does not know; the monitoring figures count the same sessions.
func TestDiagnosticsReadWhatTheStoreWrote(t *testing.T) {
	t.Parallel()
	st := newClusterStore(t)
	ctx := t.Context()
	d := st.Diagnostics()

	exist, err := d.RelationsExist(ctx, "helix.sessions", "dbos.workflow_status", "helix.no_such_table")
	require.NoError(t, err)
	require.Equal(t, []bool{true, true, false}, exist)

	for _, id := range []string{"load-1", "load-2", "other"} {
		_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: id, AgentType: "a"})
		require.NoError(t, err)
	}
	_, err = st.CompareAndSetStatus(ctx, "load-2", []helix.SessionStatus{helix.SessionActive}, helix.SessionFailed, nil)
	require.NoError(t, err)

	n, err := d.CountSessionsWithPrefix(ctx, "load-")
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	n, err = d.CountSessions(ctx, string(helix.SessionActive))
	require.NoError(t, err)
	require.EqualValues(t, 2, n)

	counts, err := d.CountSessionOutcomes(ctx, []string{"load-1", "load-2", "load-3"})
	require.NoError(t, err)
	require.Equal(t, postgres.SessionCounts{Rows: 2, Failed: 1}, counts)
	outcomes, err := d.SessionOutcomes(ctx, []string{"load-1", "load-2", "load-3"})
	require.NoError(t, err)
	require.Len(t, outcomes, 2)
	require.Equal(t, "failed", outcomes["load-2"].Status)
	require.False(t, outcomes["load-1"].CreatedAt.IsZero())

	active, err := d.ActiveSessions(ctx, time.Hour)
	require.NoError(t, err)
	require.Len(t, active, 2)
	for _, a := range active {
		require.Empty(t, a.RunID, "no run was started")
		require.Empty(t, a.OverdueCalls)
	}

	_, _, err = d.WorkflowStatus(ctx, "no-such-workflow")
	require.ErrorIs(t, err, helix.ErrNotFound)
	pending, err := d.PendingWorkflows(ctx)
	require.NoError(t, err)
	require.Empty(t, pending)
	queued, err := d.QueuedWorkflows(ctx)
	require.NoError(t, err)
	require.Empty(t, queued)
	takeovers, err := d.ExecutorTakeovers(ctx)
	require.NoError(t, err)
	require.Empty(t, takeovers)
	c, err := d.ReadCluster(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, c.Executors)

	stats, err := st.ReadDatabaseStats(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"active": 2, "failed": 1}, stats.Sessions)
	require.Empty(t, stats.Runs)
	require.Zero(t, stats.Steps)
}

// The execution log keeps every record, in order, per session; creating
// it again keeps what it holds.
func TestExecutionLogKeepsEveryAttempt(t *testing.T) {
	t.Parallel()
	st := newTestStore(t)
	ctx := t.Context()
	log := postgres.NewExecutionLog(postgres.PgxQuerier(st.Pool()))
	require.NoError(t, log.Create(ctx))
	first := postgres.Execution{SessionID: "s", Kind: "tool", Name: "save", Step: 1, Key: "k1", PID: 7}
	require.NoError(t, log.Record(ctx, first))
	require.NoError(t, log.Create(ctx))
	require.NoError(t, log.Record(ctx, first)) // a retried attempt shows twice
	require.NoError(t, log.Record(ctx, postgres.Execution{SessionID: "other", Kind: "model", Name: "step 1", Step: 1, PID: 7}))
	got, err := log.Executions(ctx, "s")
	require.NoError(t, err)
	require.Equal(t, []postgres.Execution{first, first}, got)
}
