package postgres_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/store/postgres"
)

// An executor is alive while it neither stopped nor was taken over and its
// last heartbeat is more recent than its own lease; every reader of
// helix.executors agrees: the holder check at Launch, the operators' view
// (ReadCluster), the survey behind the format level, and the takeover
// sweep, which claims exactly the executors that are not alive.
func TestExecutorAliveIsOneDefinition(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newClusterStore(t)
	_, err := st.Pool().Exec(ctx, `
		INSERT INTO helix.executors (executor_id, app_name, application_version, hostname, pid, started_at, heartbeat_at, lease_ms,
			stopped_at, taken_over_by, format_level) VALUES
			('fresh', 'app', 'v1', 'h', 1, now(), now() - interval '10 seconds', 30000, NULL, NULL, 1),
			('expired', 'app', 'v1', 'h', 2, now(), now() - interval '10 seconds', 5000, NULL, NULL, 1),
			('stopped', 'app', 'v1', 'h', 3, now(), now(), 30000, now(), NULL, 1),
			('taken', 'app', 'v1', 'h', 4, now(), now(), 30000, NULL, 'fresh', 1);
		INSERT INTO dbos.workflow_status (workflow_uuid, status, executor_id, application_version, application_name, created_at)
		SELECT 'wf-' || id, 'PENDING', id, 'v1', 'app', 0 FROM unnest(ARRAY['fresh', 'expired', 'stopped', 'taken']) id`)
	require.NoError(t, err)
	want := map[string]bool{"fresh": true, "expired": false, "stopped": false, "taken": false}

	db := postgres.PgxQuerier(st.Pool())
	for id, alive := range want {
		h, found, err := postgres.ReadExecutorHolder(ctx, db, id)
		require.NoError(t, err)
		require.True(t, found, id)
		require.Equal(t, alive, h.Alive, "ReadExecutorHolder: %s", id)
	}
	_, found, err := postgres.ReadExecutorHolder(ctx, db, "nobody")
	require.NoError(t, err)
	require.False(t, found)

	c, err := st.ReadCluster(ctx, nil)
	require.NoError(t, err)
	got := map[string]bool{}
	for _, e := range c.Executors {
		got[e.ExecutorID] = e.Alive
	}
	require.Equal(t, want, got, "ReadCluster")

	// The survey lists the executors in service, the stale one only as
	// not fresh when it is this engine (self) or on this machine.
	survey := func(ns, self string) map[string]bool {
		list, err := postgres.SurveyExecutors(ctx, db, ns, self)
		require.NoError(t, err)
		out := map[string]bool{}
		for _, e := range list {
			out[e.ExecutorID] = e.Fresh
		}
		return out
	}
	require.Equal(t, map[string]bool{"fresh": true}, survey("", ""))
	require.Equal(t, map[string]bool{"fresh": true, "expired": false}, survey("", "expired"))

	claims, err := postgres.ClaimExecutors(ctx, db, postgres.TakeoverScope{ExecutorID: "sweeper", AppName: "app", Versions: []string{"v1"}},
		time.Minute, nil)
	require.NoError(t, err)
	var claimed []string
	for _, c := range claims {
		claimed = append(claimed, c.ExecutorID)
	}
	slices.Sort(claimed)
	require.Equal(t, []string{"expired", "stopped"}, claimed,
		"the sweep takes over the executors that are not alive (one already taken over is its taker's to recover)")
}

// The current run of a session is its run of the highest turn, whatever
// the order or the times the runs were recorded in; every statement that
// needs it reads that one.
func TestCurrentRunIsNewestByTurn(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newClusterStore(t)
	_, err := st.Pool().Exec(ctx, `
		INSERT INTO helix.executors (executor_id, application_version, started_at, heartbeat_at, lease_ms) VALUES
			('x', 'v1', now(), now(), 30000);
		INSERT INTO helix.sessions (session_id, agent_type, stream_id, root_session_id, user_id) VALUES ('s', 'a', 's', 's', 'u');
		INSERT INTO helix.runs (run_id, session_id, turn, status, workflow_id, queue, started_at, completed_at) VALUES
			('r3', 's', 3, 'running', 'wf-3', 'q', now() - interval '1 hour', NULL),
			('r1', 's', 1, 'completed', 'wf-1', NULL, now(), now()),
			('r2', 's', 2, 'completed', 'wf-2', NULL, now() + interval '1 hour', now() + interval '1 hour');
		INSERT INTO dbos.workflow_status (workflow_uuid, status, executor_id, queue_name, parent_workflow_id, created_at, updated_at) VALUES
			('wf-2', 'PENDING', 'x', NULL, NULL, 0, 0),
			('wf-2-seg-1', 'ENQUEUED', NULL, 'q', 'wf-2', 5, 0),
			('wf-3', 'CANCELLED', 'x', NULL, NULL, 0, 0)`)
	require.NoError(t, err)

	run, err := st.GetCurrentRun(ctx, "s")
	require.NoError(t, err)
	require.Equal(t, "r3", run.RunID, "GetCurrentRun")

	c, err := st.ReadCluster(ctx, nil)
	require.NoError(t, err)
	require.Zero(t, c.Executors[0].SessionsOwned, "ReadCluster: the pending workflow of turn 2 is not the current run's")

	cancelled, err := postgres.ListSessionsCancelledThroughDBOS(ctx, postgres.PgxQuerier(st.Pool()), 1)
	require.NoError(t, err)
	require.Equal(t, []postgres.CancelledWorkflow{{SessionID: "s", WorkflowID: "wf-3"}}, cancelled,
		"ListSessionsCancelledThroughDBOS: the current run's workflow")

	pos, found, err := postgres.ReadQueuePosition(ctx, postgres.PgxQuerier(st.Pool()), "s")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "q", pos.Queue, "ReadQueuePosition: turn 3 waits for its first segment, not turn 2's segment")
	require.WithinDuration(t, time.Now().Add(-time.Hour), pos.Since, time.Minute, "queued since turn 3 started")

	// Garbage collection reads the current run's error code: the session
	// failed by an abort of its current run is kept for the aborted
	// sessions' retention, not the failed ones'.
	_, err = st.Pool().Exec(ctx, `
		UPDATE helix.sessions SET status = 'failed', updated_at = now() - interval '2 hours' WHERE session_id = 's';
		UPDATE helix.runs SET status = 'failed', completed_at = coalesce(completed_at, now()), error_code = CASE WHEN turn = 3 THEN 'aborted' ELSE 'model_error' END WHERE session_id = 's'`)
	require.NoError(t, err)
	hour := time.Hour
	roots, err := st.SelectGCRoots(ctx, postgres.GCSelection{Failed: &hour}, "", 10)
	require.NoError(t, err)
	require.Empty(t, roots, "an aborted session's current run says aborted")
	roots, err = st.SelectGCRoots(ctx, postgres.GCSelection{Aborted: &hour}, "", 10)
	require.NoError(t, err)
	require.Equal(t, []string{"s"}, roots)
}

// A queued run's segments are the child workflows of its driver whose ID
// has the segment prefix; a sub-agent's run, also a child, is not one.
func TestSegmentsOfARun(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newClusterStore(t)
	_, err := st.Pool().Exec(ctx, `
		INSERT INTO dbos.workflow_status (workflow_uuid, status, queue_name, parent_workflow_id, created_at) VALUES
			('d', 'CANCELLED', NULL, NULL, 0),
			('d`+postgres.SegmentInfix+`1', 'CANCELLED', 'q', 'd', 0),
			('d`+postgres.SegmentInfix+`2', 'SUCCESS', 'q', 'd', 0),
			('d-child', 'CANCELLED', NULL, 'd', 0),
			('d`+postgres.SegmentInfix+`9', 'CANCELLED', 'q', 'other', 0),
			('d`+postgres.SegmentInfix+`3', 'ENQUEUED', 'q', 'd', 0),
			('d`+postgres.SegmentInfix+`4', 'PENDING', 'q', 'd', 0),
			('d-child-2', 'PENDING', NULL, 'd', 0)`)
	require.NoError(t, err)
	list, err := postgres.ListCancelledRunWorkflows(ctx, postgres.PgxQuerier(st.Pool()), "d")
	require.NoError(t, err)
	slices.SortFunc(list, func(a, b postgres.CancelledWorkflow) int { return strings.Compare(a.WorkflowID, b.WorkflowID) })
	require.Equal(t, []postgres.CancelledWorkflow{{WorkflowID: "d"}, {WorkflowID: "d" + postgres.SegmentInfix + "1", Queue: "q"}}, list)
	open, err := postgres.ListOpenSegments(ctx, postgres.PgxQuerier(st.Pool()), "d")
	require.NoError(t, err)
	slices.Sort(open)
	require.Equal(t, []string{"d" + postgres.SegmentInfix + "3", "d" + postgres.SegmentInfix + "4"}, open,
		"the driver's segments still queued or running, not its child workflows")
}
