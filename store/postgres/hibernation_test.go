package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// parentAndChild records a parent session with a running run (workflow
// "wf-p") and a sub-agent session with a run waiting for people, and
// returns the runs' IDs.
func parentAndChild(t *testing.T, st *postgres.Store) (parentRun, childRun string) {
	t.Helper()
	ctx := t.Context()
	_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: "p", AgentType: "boss"})
	require.NoError(t, err)
	_, err = st.CreateSession(ctx, store.CreateSessionParams{SessionID: "p-sub-c1", AgentType: "helper", ParentSessionID: "p"})
	require.NoError(t, err)
	_, err = st.CreateRun(ctx, store.CreateRunParams{RunID: "run-p", SessionID: "p", WorkflowID: "wf-p"})
	require.NoError(t, err)
	_, err = st.CreateRun(ctx, store.CreateRunParams{RunID: "run-c", SessionID: "p-sub-c1", WorkflowID: "wf-c"})
	require.NoError(t, err)
	require.NoError(t, st.UpdateRunStatus(ctx, "run-c", helix.RunSuspendedClientTool, nil))
	return "run-p", "run-c"
}

// hibernateForChild runs postgres.HibernateForChildren for the parent in
// tx (recording nothing else).
func hibernateForChild(ctx context.Context, tx pgx.Tx, parentRun string) (bool, error) {
	return postgres.HibernateForChildren(ctx, postgres.PgxQuerier(tx), parentRun, []string{"p-sub-c1"}, func() error { return nil })
}

// runOfS records session "s" and its run "run-s", whose workflow "wf-s"
// has DBOS status wfStatus.
func runOfS(t *testing.T, st *postgres.Store, wfStatus string) {
	t.Helper()
	ctx := t.Context()
	_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: "s", AgentType: "payer"})
	require.NoError(t, err)
	_, err = st.CreateRun(ctx, store.CreateRunParams{RunID: "run-s", SessionID: "s", WorkflowID: "wf-s"})
	require.NoError(t, err)
	_, err = st.Pool().Exec(ctx, `INSERT INTO dbos.workflow_status (workflow_uuid, status, created_at) VALUES ('wf-s', $1, 0)`, wfStatus)
	require.NoError(t, err)
}

// wakesOf reads a run's hibernation: whether it is hibernated and its
// wakes.
func wakesOf(t *testing.T, st *postgres.Store, runID string) (hibernated bool, wakes int) {
	t.Helper()
	require.NoError(t, st.Pool().QueryRow(t.Context(), `SELECT hibernated_at IS NOT NULL, wakes FROM helix.runs WHERE run_id = $1`,
		runID).Scan(&hibernated, &wakes))
	return hibernated, wakes
}

// A parent hibernating for its sub-agent and the sub-agent's end race: in
// either order of their transactions, the parent ends up woken once, never
// hibernated with its child ended.
func TestHibernateForChildrenRacesTheChildsEnd(t *testing.T) {
	t.Parallel()
	t.Run("the child ends first", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		st := newTestStore(t)
		parentRun, childRun := parentAndChild(t, st)
		// The child's end holds its row; the parent's hibernation waits
		// for it, then sees it ended and wakes the parent at once.
		end, err := st.Pool().Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = end.Rollback(ctx) }()
		require.NoError(t, st.WithQuerier(postgres.PgxQuerier(end)).UpdateRunStatus(ctx, childRun, helix.RunCompleted, nil))
		woken := make(chan bool, 1)
		go func() {
			var w bool
			err := pgx.BeginFunc(ctx, st.Pool(), func(tx pgx.Tx) (err error) { w, err = hibernateForChild(ctx, tx, parentRun); return err })
			if err != nil {
				t.Error(err)
			}
			woken <- w
		}()
		requireBlocked(t, st, "FOR SHARE")
		require.NoError(t, end.Commit(ctx))
		require.True(t, <-woken, "the parent saw its child ended")
		hibernated, wakes := wakesOf(t, st, parentRun)
		require.False(t, hibernated)
		require.Equal(t, 1, wakes)
	})
	t.Run("the parent hibernates first", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		st := newTestStore(t)
		parentRun, childRun := parentAndChild(t, st)
		// The hibernation holds the child's row; the child's end waits for
		// it, then its trigger wakes the hibernated parent.
		hib, err := st.Pool().Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = hib.Rollback(ctx) }()
		woken, err := hibernateForChild(ctx, hib, parentRun)
		require.NoError(t, err)
		require.False(t, woken)
		ended := make(chan error, 1)
		go func() { ended <- st.UpdateRunStatus(ctx, childRun, helix.RunCompleted, nil) }()
		requireBlocked(t, st, "UPDATE helix.runs")
		require.NoError(t, hib.Commit(ctx))
		require.NoError(t, <-ended)
		hibernated, wakes := wakesOf(t, st, parentRun)
		require.False(t, hibernated, "the child's end woke the parent")
		require.Equal(t, 1, wakes)
	})
	t.Run("a child still waits", func(t *testing.T) {
		t.Parallel()
		st := newTestStore(t)
		parentRun, _ := parentAndChild(t, st)
		var woken bool
		require.NoError(t, pgx.BeginFunc(t.Context(), st.Pool(), func(tx pgx.Tx) (err error) {
			woken, err = hibernateForChild(t.Context(), tx, parentRun)
			return err
		}))
		require.False(t, woken)
		hibernated, wakes := wakesOf(t, st, parentRun)
		require.True(t, hibernated)
		require.Zero(t, wakes)
	})
}

// requireBlocked waits until a statement starting with prefix waits for a
// lock in the store's database.
func requireBlocked(t *testing.T, st *postgres.Store, prefix string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		err := st.Pool().QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND position($1 in query) > 0`, prefix).Scan(&n)
		return err == nil && n > 0
	}, 10*time.Second, 5*time.Millisecond, "no statement with %q waits for a lock", prefix)
}

// An answer sent while its run hibernates: the hibernation waits for the
// answer's transaction (helix.wake_run locks the run's row), then sees the
// message and does not hibernate; one sent after the hibernation wakes the
// run. No answer is left with its run asleep.
func TestHibernateRunRacesAnAnswer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newClusterStore(t)
	runOfS(t, st, "PENDING")
	send := func(q postgres.Querier, topic, key string) error {
		sql, args := postgres.SendMessageStatement("wf-s", topic, "e30=", key, true)
		_, err := q.Exec(ctx, sql, args...)
		return err
	}
	hibernate := func(topic string) (bool, error) {
		var ok bool
		err := pgx.BeginFunc(ctx, st.Pool(), func(tx pgx.Tx) (err error) {
			ok, err = postgres.HibernateRun(ctx, postgres.PgxQuerier(tx), "run-s", "wf-s", 0, []string{topic}, 0)
			return err
		})
		return ok, err
	}

	// The answer's transaction is open when the run hibernates.
	answer, err := st.Pool().Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = answer.Rollback(ctx) }()
	require.NoError(t, send(postgres.PgxQuerier(answer), "helix.tool.a", "k-a"))
	done := make(chan bool, 1)
	go func() {
		ok, err := hibernate("helix.tool.a")
		if err != nil {
			t.Error(err)
		}
		done <- ok
	}()
	requireBlocked(t, st, "FOR UPDATE")
	require.NoError(t, answer.Commit(ctx))
	require.False(t, <-done, "the hibernation saw the answer")
	hibernated, wakes := wakesOf(t, st, "run-s")
	require.False(t, hibernated)
	require.Zero(t, wakes)

	// Hibernated first: the next answer wakes it.
	ok, err := hibernate("helix.tool.b")
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, send(postgres.PgxQuerier(st.Pool()), "helix.tool.b", "k-b"))
	hibernated, wakes = wakesOf(t, st, "run-s")
	require.False(t, hibernated)
	require.Equal(t, 1, wakes)
}

// A hibernation writes no journal record, so a recovered workflow runs it
// again: it reports the run hibernated and writes nothing when the run is
// asleep already, was woken since (its wakes past the execution's), or
// ended; the continuation that was woken hibernates it again.
func TestHibernateRunAgainWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newClusterStore(t)
	runOfS(t, st, "SUCCESS")
	state := func() (s string) {
		require.NoError(t, st.Pool().QueryRow(ctx, `SELECT concat_ws(' ', status, hibernated_at IS NOT NULL, wakes, xmin)
			FROM helix.runs WHERE run_id = 'run-s'`).Scan(&s))
		return s
	}
	hibernate := func(wake int) bool {
		var ok bool
		require.NoError(t, pgx.BeginFunc(ctx, st.Pool(), func(tx pgx.Tx) (err error) {
			ok, err = postgres.HibernateRun(ctx, postgres.PgxQuerier(tx), "run-s", "wf-s", wake, []string{"helix.tool.a"}, 0)
			return err
		}))
		return ok
	}
	require.True(t, hibernate(0))
	asleep := state()
	require.True(t, hibernate(0), "asleep already")
	require.Equal(t, asleep, state(), "nothing written")

	sql, args := postgres.SendMessageStatement("wf-s", "helix.tool.a", "e30=", "k-a", true)
	_, err := st.Pool().Exec(ctx, sql, args...)
	require.NoError(t, err)
	woken := state()
	require.True(t, hibernate(0), "woken since: the execution of wake 0 hibernated it before")
	require.Equal(t, woken, state(), "nothing written")
	require.True(t, hibernate(1), "the continuation it woke hibernates it")
	require.NotEqual(t, woken, state())

	require.NoError(t, st.UpdateRunStatus(ctx, "run-s", helix.RunCompleted, nil))
	ended := state()
	require.True(t, hibernate(1), "ended")
	require.Equal(t, ended, state(), "nothing written")
}

// A message sent to the workflow of a hibernated run wakes it once and
// returns the wake's announcement, which names the run, its session, its
// workflow, the continuation due and the agent: what starting the
// continuation needs. A message to a run that is not hibernated (or no
// longer: woken already) returns none. The deadline sweep counts the runs
// it woke.
func TestSendToolMessageAnnouncesTheWake(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newClusterStore(t)
	pool := st.Pool()
	runOfS1(t, st, helix.RunSuspendedClientTool)

	send := func(key string) *string {
		t.Helper()
		sql, args := postgres.SendMessageStatement("s1-turn-1", "topic", "e30=", key, true)
		var woke *string
		require.NoError(t, pool.QueryRow(ctx, sql, args...).Scan(&woke))
		return woke
	}
	require.Nil(t, send("m1"), "the run is not hibernated")

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	hibernated, err := postgres.HibernateRun(ctx, postgres.PgxQuerier(tx), "r1", "s1-turn-1", 0, []string{"other"}, 0)
	require.NoError(t, err)
	require.True(t, hibernated)
	require.NoError(t, tx.Commit(ctx))

	woke := send("m2")
	require.NotNil(t, woke)
	o, ok := postgres.ParseWakeAnnouncement(*woke)
	require.True(t, ok, "announcement %q", *woke)
	require.Equal(t, postgres.OrphanRun{RunID: "r1", SessionID: "s1", WorkflowID: "s1-turn-1", Wake: 1, AgentType: "payer"}, o)
	require.Nil(t, send("m3"), "woken already")

	orphans, err := postgres.ListOrphanRuns(ctx, postgres.PgxQuerier(pool))
	require.NoError(t, err)
	require.Equal(t, []postgres.OrphanRun{o}, orphans, "the woken run is the sweep's until its continuation begins")
}

// Only a wake's announcement parses as one: a recorded run's ID (what
// ExecuteTx announces), the empty payload of a reconnection and malformed
// ones do not.
func TestParseWakeAnnouncement(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"", "r1", "r1\ts1\twf\t0\ta\t\t\t0", "r1\ts1\twf\tx\ta\t\t\t0", "\ts1\twf\t1\ta\t\t\t0",
		"r1\ts1\t\t1\ta\t\t\t0", "r1\ts1\twf\t1\ta", "r1\ts1\twf\t1\ta\tq\tk\tx"} {
		_, ok := postgres.ParseWakeAnnouncement(p)
		require.False(t, ok, "payload %q", p)
	}
	o, ok := postgres.ParseWakeAnnouncement("r1\ts1\twf\t2\ta\t\t\t0")
	require.True(t, ok)
	require.Equal(t, postgres.OrphanRun{RunID: "r1", SessionID: "s1", WorkflowID: "wf", Wake: 2, AgentType: "a"}, o)
	o, ok = postgres.ParseWakeAnnouncement("r1\ts1\twf\t2\ta\thelix-sessions\ttenant-1\t3")
	require.True(t, ok, "a queued run's wake carries its admission")
	require.Equal(t, postgres.OrphanRun{RunID: "r1", SessionID: "s1", WorkflowID: "wf", Wake: 2, AgentType: "a",
		Queue: "helix-sessions", PartitionKey: "tenant-1", Priority: 3}, o)
}

// The recorded-run sweep lists a root session's run whose workflow was
// never started, not a sub-agent's: its parent starts it, with the input
// that ties it to the parent (started as a root run, it could hibernate
// and hand a queued parent's driver a hibernated outcome as its result).
// A sub-agent's woken run is listed: its continuation is the sweep's.
func TestOrphanSweepLeavesSubAgentRunsToTheirParent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newClusterStore(t)
	pool := st.Pool()
	_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: "p", AgentType: "lead"})
	require.NoError(t, err)
	_, err = st.CreateSession(ctx, store.CreateSessionParams{SessionID: "p-sub-c", AgentType: "helper", ParentSessionID: "p", RootSessionID: "p"})
	require.NoError(t, err)
	for _, r := range []store.CreateRunParams{
		{RunID: "rp", SessionID: "p", Turn: 1, Status: helix.RunRunning, WorkflowID: "p-turn-1"},
		{RunID: "rc", SessionID: "p-sub-c", Turn: 1, Status: helix.RunRunning, WorkflowID: "p-sub-c-turn-1"},
	} {
		_, err = st.CreateRun(ctx, r)
		require.NoError(t, err)
	}
	orphans, err := postgres.ListOrphanRuns(ctx, postgres.PgxQuerier(pool))
	require.NoError(t, err)
	require.Equal(t, []postgres.OrphanRun{{RunID: "rp", SessionID: "p", WorkflowID: "p-turn-1", AgentType: "lead"}}, orphans,
		"the root's recorded run only")

	_, err = pool.Exec(ctx, `INSERT INTO dbos.workflow_status (workflow_uuid, status, created_at) VALUES ('p-turn-1', 'PENDING', 0), ('p-sub-c-turn-1', 'SUCCESS', 0)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE helix.runs SET woken_at = now(), wakes = 1 WHERE run_id = 'rc'`)
	require.NoError(t, err)
	orphans, err = postgres.ListOrphanRuns(ctx, postgres.PgxQuerier(pool))
	require.NoError(t, err)
	require.Equal(t, []postgres.OrphanRun{{RunID: "rc", SessionID: "p-sub-c", WorkflowID: "p-sub-c-turn-1", AgentType: "helper", Wake: 1}}, orphans,
		"the sub-agent's woken run: its continuation")
}
