package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// DeleteSessionTrees deletes a batch of trees in one transaction: a
// running tree refuses the whole batch (or is skipped with SkipRunning), a
// sub-agent's ID is refused, missing and repeated roots are reported once,
// and each deleted tree's rows are counted per table.
func TestDeleteSessionTreesBatch(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newTestStore(t)
	create := func(id, parent string, status helix.SessionStatus) {
		t.Helper()
		_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: id, AgentType: "a", ParentSessionID: parent})
		require.NoError(t, err)
		_, err = st.CreateRun(ctx, store.CreateRunParams{RunID: id + "-run", SessionID: id, WorkflowID: id + "-turn-1"})
		require.NoError(t, err)
		_, err = st.AppendMessages(ctx, id, []helix.Message{helix.UserMessage("q")})
		require.NoError(t, err)
		require.NoError(t, st.UpdateStatus(ctx, id, status, nil))
	}
	create("a", "", helix.SessionCompleted)
	create("a-sub-1", "a", helix.SessionCompleted)
	create("b", "", helix.SessionFailed)
	create("busy", "", helix.SessionCompleted)
	create("busy-sub-1", "busy", helix.SessionActive)

	_, err := st.DeleteSessionTrees(ctx, []string{"a", "busy"}, nil)
	var running *helix.SessionRunningError
	require.ErrorAs(t, err, &running)
	require.Equal(t, "busy", running.SessionID)
	require.Equal(t, "busy-sub-1", running.RunningSessionID, "an active sub-agent makes its tree running")
	_, err = st.LoadState(ctx, "a")
	require.NoError(t, err, "a refused batch deletes nothing")

	_, err = st.DeleteSessionTrees(ctx, []string{"a-sub-1"}, nil)
	var notRoot *helix.NotRootSessionError
	require.ErrorAs(t, err, &notRoot)
	require.Equal(t, "a", notRoot.RootSessionID)

	stats, err := st.DeleteSessionTrees(ctx, []string{"a", "busy", "nobody", "a", "b", "busy", "nobody"}, &postgres.DeleteTreesOptions{SkipRunning: true})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, stats.Deleted)
	require.Equal(t, []string{"busy"}, stats.Running)
	require.Equal(t, []string{"nobody"}, stats.NotFound)
	require.EqualValues(t, 3, stats.Sessions)
	require.Equal(t, 3, stats.Workflows)
	require.EqualValues(t, 3, stats.Rows["helix.runs"])
	require.EqualValues(t, 3, stats.Rows["helix.messages"])
	require.EqualValues(t, 2, stats.Rows["helix.streams"], "a's sub-agent writes into a's stream")
	for _, id := range []string{"a", "a-sub-1", "b"} {
		_, err := st.LoadState(ctx, id)
		require.ErrorIs(t, err, helix.ErrNotFound, id)
	}
	_, err = st.LoadState(ctx, "busy-sub-1")
	require.NoError(t, err)
}

// Concurrent deleters of overlapping batches do not deadlock (they lock
// the sessions in one order) and delete each tree once.
func TestDeleteSessionTreesConcurrent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newTestStore(t)
	ids := []string{"r1", "r2", "r3", "r4"}
	for _, id := range ids {
		_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: id, AgentType: "a"})
		require.NoError(t, err)
		_, err = st.CreateSession(ctx, store.CreateSessionParams{SessionID: id + "-sub-1", AgentType: "a", ParentSessionID: id})
		require.NoError(t, err)
		require.NoError(t, st.UpdateStatus(ctx, id, helix.SessionCompleted, nil))
		require.NoError(t, st.UpdateStatus(ctx, id+"-sub-1", helix.SessionCompleted, nil))
	}
	var wg sync.WaitGroup
	deleted := make([][]string, 2)
	errs := make([]error, 2)
	for i, batch := range [][]string{{"r1", "r2", "r3", "r4"}, {"r4", "r3", "r2", "r1"}} {
		wg.Go(func() {
			stats, err := st.DeleteSessionTrees(ctx, batch, &postgres.DeleteTreesOptions{SkipRunning: true})
			errs[i] = err
			if err == nil {
				deleted[i] = stats.Deleted
			}
		})
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.Len(t, append(deleted[0], deleted[1]...), 4, "each tree deleted once: %v", deleted)
}

// A session moved to active by a transaction that commits while the
// deletion waits for its row lock is seen active: the deletion locks the
// sessions before it checks them, so it never deletes a session whose run
// started after the check.
func TestDeleteSessionTreesSeesARunThatStartedMeanwhile(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := newTestStore(t)
	pool := st.Pool()
	_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: "s", AgentType: "a"})
	require.NoError(t, err)
	require.NoError(t, st.UpdateStatus(ctx, "s", helix.SessionCompleted, nil))

	start, err := pool.Begin(ctx) // Execute's transaction, continuing the session
	require.NoError(t, err)
	defer func() { _ = start.Rollback(context.WithoutCancel(ctx)) }()
	_, err = start.Exec(ctx, `UPDATE helix.sessions SET status = 'active', version = version + 1 WHERE session_id = 's'`)
	require.NoError(t, err)

	deleted := make(chan error, 1)
	go func() {
		_, err := st.DeleteSessionTrees(ctx, []string{"s"}, nil)
		deleted <- err
	}()
	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock')`).Scan(&waiting))
		return waiting
	}, 10*time.Second, 5*time.Millisecond, "the deletion waits for the session's row")
	require.NoError(t, start.Commit(ctx))
	require.ErrorIs(t, <-deleted, helix.ErrSessionRunning)
	s, err := st.LoadState(ctx, "s")
	require.NoError(t, err)
	require.Equal(t, helix.SessionActive, s.Status)
}
