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
	_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: "s", AgentType: "payer"})
	require.NoError(t, err)
	_, err = st.CreateRun(ctx, store.CreateRunParams{RunID: "run-s", SessionID: "s", WorkflowID: "wf-s"})
	require.NoError(t, err)
	_, err = st.Pool().Exec(ctx, `INSERT INTO dbos.workflow_status (workflow_uuid, status, created_at) VALUES ('wf-s', 'PENDING', 0)`)
	require.NoError(t, err)
	send := func(q postgres.Querier, topic, key string) error {
		sql, args := postgres.SendMessageStatement("wf-s", topic, "e30=", key)
		_, err := q.Exec(ctx, sql, args...)
		return err
	}
	hibernate := func(topic string) (bool, error) {
		var ok bool
		err := pgx.BeginFunc(ctx, st.Pool(), func(tx pgx.Tx) (err error) {
			ok, err = postgres.HibernateRun(ctx, postgres.PgxQuerier(tx), "run-s", "wf-s", []string{topic}, 0)
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
