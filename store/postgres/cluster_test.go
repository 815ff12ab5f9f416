package postgres_test

import (
	"strings"
	"testing"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// newClusterStore returns a store on a fresh migrated database that also
// has DBOS's system tables (DBOS migrates them when a context is created;
// nothing is launched).
func newClusterStore(t testing.TB, opts ...postgres.Option) *postgres.Store {
	t.Helper()
	url := pgtest.NewURL(t)
	dc, err := dbos.NewContext(t.Context(), dbos.Config{DatabaseURL: url, AppName: "helix-store-test"})
	require.NoError(t, err)
	dbos.Shutdown(dc, 5*time.Second)
	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	st, err := postgres.New(pool, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// seedCluster writes executors, sessions, their runs and DBOS workflows:
//
//   - exec-a (alive) runs the current runs of alice-1, of its sub-agent
//     alice-1-sub (whose own row names mallory) and of bob-1;
//   - exec-b (stopped) still holds the pending workflow of old-1's first
//     run, which is not old-1's current run (its second run finished);
//   - exec-Z is alive with nothing; exec-c was taken over; exec-d's lease
//     expired;
//   - ghost, with no row, holds ghost-1's workflow;
//   - queue q1 has two workflows waiting (60 s and 10 s) and alice-1's
//     running; q0 one running; q2 only finished ones.
func seedCluster(t *testing.T, st *postgres.Store) {
	t.Helper()
	_, err := st.Pool().Exec(t.Context(), `
		INSERT INTO helix.executors (executor_id, application_version, hostname, pid, started_at, heartbeat_at, lease_ms, stopped_at, taken_over_by) VALUES
			('exec-a', 'v2', 'host-a', 101, now() - interval '1 hour', now(), 30000, NULL, NULL),
			('exec-Z', 'v2', NULL, NULL, now() - interval '1 hour', now(), 30000, NULL, NULL),
			('exec-b', 'v1', 'host-b', 102, now() - interval '2 hours', now() - interval '1 hour', 30000, now() - interval '1 hour', NULL),
			('exec-c', 'v1', 'host-c', 103, now() - interval '2 hours', now(), 30000, NULL, 'exec-a'),
			('exec-d', 'v1', 'host-d', 104, now() - interval '2 hours', now() - interval '1 minute', 30000, NULL, NULL);
		INSERT INTO helix.sessions (session_id, agent_type, stream_id, parent_session_id, root_session_id, user_id) VALUES
			('alice-1', 'a', 'alice-1', NULL, 'alice-1', 'alice'),
			('alice-1-sub', 'child', 'alice-1', 'alice-1', 'alice-1', 'mallory'),
			('bob-1', 'a', 'bob-1', NULL, 'bob-1', 'bob'),
			('old-1', 'a', 'old-1', NULL, 'old-1', 'alice'),
			('done-1', 'a', 'done-1', NULL, 'done-1', 'alice'),
			('ghost-1', 'a', 'ghost-1', NULL, 'ghost-1', 'alice');
		INSERT INTO helix.runs (run_id, session_id, turn, status, workflow_id, completed_at) VALUES
			('r-alice-1', 'alice-1', 1, 'suspended_client_tool', 'wf-alice-1', NULL),
			('r-alice-1-sub', 'alice-1-sub', 1, 'running', 'wf-alice-1-sub', NULL),
			('r-bob-1', 'bob-1', 1, 'running', 'wf-bob-1', NULL),
			('r-old-1', 'old-1', 1, 'running', 'wf-old-1', NULL),
			('r-old-2', 'old-1', 2, 'completed', 'wf-old-2', now()),
			('r-done-1', 'done-1', 1, 'completed', 'wf-done-1', now()),
			('r-ghost-1', 'ghost-1', 1, 'running', 'wf-ghost-1', NULL);
		INSERT INTO dbos.workflow_status (workflow_uuid, status, executor_id, queue_name, created_at) VALUES
			('wf-alice-1', 'PENDING', 'exec-a', 'q1', 0),
			('wf-alice-1-sub', 'PENDING', 'exec-a', NULL, 0),
			('wf-bob-1', 'PENDING', 'exec-a', 'q0', 0),
			('wf-old-1', 'PENDING', 'exec-b', NULL, 0),
			('wf-old-2', 'SUCCESS', 'exec-b', NULL, 0),
			('wf-done-1', 'SUCCESS', 'exec-a', 'q2', 0),
			('wf-ghost-1', 'PENDING', 'ghost', NULL, 0),
			('waits-long', 'ENQUEUED', NULL, 'q1', ((extract(epoch FROM now()) - 60) * 1000)::bigint),
			('waits-short', 'ENQUEUED', NULL, 'q1', ((extract(epoch FROM now()) - 10) * 1000)::bigint)`)
	require.NoError(t, err)
}

// ReadCluster lists every executor, alive ones first, with the sessions
// whose current run's workflow is pending under it: counted for the whole
// cluster, named only when the caller owns their root session. It lists the
// queues with work, and reads no history of runs to do any of it.
func TestReadCluster(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newClusterStore(t)
	seedCluster(t, st)

	c, err := st.ReadCluster(ctx, nil)
	require.NoError(t, err)
	var order []string
	byID := map[string]postgres.Executor{}
	for _, e := range c.Executors {
		order = append(order, e.ExecutorID)
		byID[e.ExecutorID] = e
	}
	require.Equal(t, []string{"exec-Z", "exec-a", "exec-b", "exec-c", "exec-d"}, order, "alive first, then by ID, byte-wise")
	alive := map[string]bool{}
	for id, e := range byID {
		alive[id] = e.Alive
	}
	require.Equal(t, map[string]bool{"exec-a": true, "exec-Z": true, "exec-b": false, "exec-c": false, "exec-d": false}, alive)
	a := byID["exec-a"]
	require.Equal(t, 3, a.SessionsOwned)
	require.Equal(t, []string{"alice-1", "alice-1-sub", "bob-1"}, a.Sessions, "without a user: every session")
	require.Equal(t, "v2", a.ApplicationVersion)
	require.Equal(t, "host-a", a.Hostname)
	require.Equal(t, 101, a.PID)
	require.Equal(t, 30*time.Second, a.LeaseExpiresAt.Sub(a.HeartbeatAt))
	require.Nil(t, a.StoppedAt)
	require.Zero(t, byID["exec-b"].SessionsOwned, "a pending workflow of a run that is no longer current owns nothing")
	require.Empty(t, byID["exec-b"].Sessions)
	require.NotNil(t, byID["exec-b"].StoppedAt)
	require.Equal(t, "exec-a", byID["exec-c"].TakenOverBy)
	require.Empty(t, byID["exec-Z"].Hostname)
	require.Zero(t, byID["exec-Z"].PID)

	for user, sessions := range map[string][]string{
		"alice":   {"alice-1", "alice-1-sub"}, // a sub-agent session is its root's owner's
		"bob":     {"bob-1"},
		"mallory": {},
	} {
		c, err := st.ReadCluster(ctx, &postgres.ClusterOptions{UserID: user})
		require.NoError(t, err)
		require.Equal(t, "exec-a", c.Executors[1].ExecutorID)
		require.Equal(t, 3, c.Executors[1].SessionsOwned, "%s: the count is the cluster's", user)
		require.Equal(t, sessions, c.Executors[1].Sessions, user)
	}
	c, err = st.ReadCluster(ctx, &postgres.ClusterOptions{SessionsPerExecutor: 1})
	require.NoError(t, err)
	require.Equal(t, []string{"alice-1"}, c.Executors[1].Sessions)
	require.Equal(t, 3, c.Executors[1].SessionsOwned)

	require.Len(t, c.Queues, 2, "q2 has no work")
	require.Equal(t, postgres.QueueLoad{Queue: "q0", Depth: 0, Running: 1}, c.Queues[0])
	q1 := c.Queues[1]
	require.Equal(t, "q1", q1.Queue)
	require.Equal(t, int64(2), q1.Depth)
	require.Equal(t, int64(1), q1.Running)
	require.InDelta(t, 60, q1.OldestWaitSeconds, 5, "the oldest waits about a minute")

	t.Run("reads no history", func(t *testing.T) { readsNoHistory(t, st) })
}

// readsNoHistory checks that ReadCluster's cost follows the work in
// flight: with a history of runs, the runs of the pending workflows are
// found by workflow ID, not by scanning every run.
func readsNoHistory(t *testing.T, st *postgres.Store) {
	ctx := t.Context()
	_, err := st.Pool().Exec(ctx, `
		INSERT INTO helix.sessions (session_id, agent_type, stream_id, root_session_id, status, user_id)
		SELECT 'h-' || i, 'a', 'h-' || i, 'h-' || i, 'completed', 'alice' FROM generate_series(1, 5000) i;
		INSERT INTO helix.runs (run_id, session_id, turn, status, workflow_id, completed_at)
		SELECT 'hr-' || i, 'h-' || i, 1, 'completed', 'hw-' || i, now() FROM generate_series(1, 5000) i;
		INSERT INTO dbos.workflow_status (workflow_uuid, status, executor_id, created_at)
		SELECT 'hw-' || i, 'SUCCESS', 'exec-a', 0 FROM generate_series(1, 5000) i;
		ANALYZE helix.sessions; ANALYZE helix.runs; ANALYZE dbos.workflow_status`)
	require.NoError(t, err)
	rows, err := st.Pool().Query(ctx, "EXPLAIN "+postgres.ClusterExecutorsSQL, "alice", 50)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	plan := strings.Join(lines, "\n")
	require.NotContains(t, plan, "Seq Scan on runs", plan)
	require.Contains(t, plan, "runs_workflow_idx", plan)
	c, err := st.ReadCluster(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, 3, c.Executors[1].SessionsOwned)
	require.Equal(t, []string{"alice-1", "alice-1-sub", "bob-1"}, c.Executors[1].Sessions)
}
