package engine_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

// passLog forwards the retention job's "gc.pass" log lines.
type passLog chan string

func (p passLog) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte(`"event":"gc.pass"`)) {
		select {
		case p <- string(b):
		default:
		}
	}
	return len(b), nil
}

// age moves a whole session tree's last activity back by d: both columns
// it is read from (a step's commit writes checkpointed_at, anything else
// updated_at).
func age(t *testing.T, pool *pgxpool.Pool, rootID string, d time.Duration) {
	t.Helper()
	_, err := pool.Exec(t.Context(), `UPDATE helix.sessions SET updated_at = now() - make_interval(secs => $2),
		checkpointed_at = CASE WHEN checkpointed_at IS NOT NULL THEN now() - make_interval(secs => $2) END
		WHERE root_session_id = $1`, rootID, d.Seconds())
	require.NoError(t, err)
}

// expire sets a root session's expires_at in the past.
func expire(t *testing.T, pool *pgxpool.Pool, rootID string) {
	t.Helper()
	_, err := pool.Exec(t.Context(), `UPDATE helix.sessions SET expires_at = now() - interval '1 minute' WHERE session_id = $1`, rootID)
	require.NoError(t, err)
}

func sessionExists(t *testing.T, pool *pgxpool.Pool, id string) bool {
	t.Helper()
	var ok bool
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM helix.sessions WHERE session_id = $1)`, id).Scan(&ok))
	return ok
}

// retentionFixture builds, on one database, a session of every kind the
// policy of TestRetentionJobDeletesOnlyWhatThePolicySays tells apart.
type retentionFixture struct {
	url                                                     string
	oldDone, oldTree, oldFailed, expiredDone                string // deleted
	youngDone, oldAborted, oldBusy, oldBusyChild, youngFail string // kept
	release                                                 chan struct{}
	traffic                                                 *helix.Agent
	runner                                                  *engine.Engine
}

func newRetentionFixture(t *testing.T) *retentionFixture {
	t.Helper()
	f := &retentionFixture{url: pgtest.NewURL(t), release: make(chan struct{})}
	f.traffic = &helix.Agent{Name: "quick", Model: script(text("done"))}
	failing := &helix.Agent{Name: "failing", Model: script(func(helix.ModelRequest, helix.StreamCallbacks) (helix.StepResult, error) {
		return helix.StepResult{}, &helix.ModelError{Code: "bad_request", Message: "no"}
	})}
	abortStarted, busyStarted := make(chan string, 1), make(chan string, 1)
	abortable := &helix.Agent{Name: "abortable", Tools: []*helix.Tool{gateTool(abortStarted, f.release)},
		Model: script(calls(call("w1", "wait", `{}`)), text("never"))}
	busy := &helix.Agent{Name: "busy", Tools: []*helix.Tool{gateTool(busyStarted, f.release)},
		Model: script(calls(call("w1", "wait", `{}`)), text("late"))}
	tree := deleteTree()
	e := newEngineWith(t, engine.Config{DatabaseURL: f.url}, f.traffic, failing, abortable, busy, tree)
	f.runner = e
	pool := engine.StoreOf(e).Pool()
	run := func(a *helix.Agent) string {
		id := uuid.NewString()
		h, err := e.Execute(t.Context(), a, engine.Input{Message: "go"}, &engine.ExecuteOptions{SessionID: id})
		require.NoError(t, err)
		result(t, h)
		return id
	}
	f.oldDone, f.youngDone, f.expiredDone = run(f.traffic), run(f.traffic), run(f.traffic)
	f.oldFailed, f.youngFail = run(failing), run(failing)
	f.oldTree, f.oldBusyChild = runTree(t, e, tree), runTree(t, e, tree)

	f.oldAborted = uuid.NewString()
	h, err := e.Execute(t.Context(), abortable, engine.Input{Message: "go"}, &engine.ExecuteOptions{SessionID: f.oldAborted})
	require.NoError(t, err)
	<-abortStarted
	require.NoError(t, h.Abort(t.Context(), "operator"))
	require.Equal(t, helix.AgentFailed, result(t, h).Status)

	f.oldBusy = uuid.NewString()
	_, err = e.Execute(t.Context(), busy, engine.Input{Message: "go"}, &engine.ExecuteOptions{SessionID: f.oldBusy})
	require.NoError(t, err)
	<-busyStarted

	for _, id := range []string{f.oldDone, f.oldTree, f.oldFailed, f.oldAborted, f.oldBusy, f.oldBusyChild} {
		age(t, pool, id, 2*time.Hour)
	}
	// A companion of oldBusyChild's tree runs again (its root ended long
	// ago): the tree is in use.
	_, err = pool.Exec(t.Context(), `UPDATE helix.sessions SET status = 'active' WHERE root_session_id = $1 AND session_id <> $1
		AND session_id = (SELECT min(session_id) FROM helix.sessions WHERE root_session_id = $1 AND session_id <> $1)`, f.oldBusyChild)
	require.NoError(t, err)
	expire(t, pool, f.expiredDone)
	expire(t, pool, f.oldBusy) // expired, but its run is in progress
	return f
}

// The retention job deletes exactly the trees its policy picks: old
// completed and failed trees (whole, sub-agent and companion included),
// and an expired idle session whatever its age; it keeps young ones, an
// aborted one (Aborted is 0: forever), a running one even though it
// expired, and an old tree whose companion is running, while other
// sessions run to completion on another engine meanwhile.
func TestRetentionJobDeletesOnlyWhatThePolicySays(t *testing.T) {
	t.Parallel()
	f := newRetentionFixture(t)
	defer close(f.release)
	pool := engine.StoreOf(f.runner).Pool()

	// Traffic on the first engine while the second one's job runs.
	stop := make(chan struct{})
	var traffic []string
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			id := uuid.NewString()
			h, err := f.runner.Execute(t.Context(), f.traffic, engine.Input{Message: "go"}, &engine.ExecuteOptions{SessionID: id})
			if err != nil {
				t.Error(err)
				return
			}
			traffic = append(traffic, id)
			if res, err := h.Result(t.Context()); err != nil || res.Status != helix.AgentCompleted {
				t.Error(err, res.Status)
				return
			}
		}
	})

	passes := make(passLog, 4)
	logger := zerolog.New(passes)
	newEngineWith(t, engine.Config{DatabaseURL: f.url, Logger: &logger, DisableTakeover: true,
		Retention: &engine.RetentionPolicy{Completed: time.Hour, Failed: time.Hour, Interval: time.Second, BatchSize: 2}})
	var line string
	select {
	case line = <-passes:
	case <-time.After(30 * time.Second):
		t.Fatal("no retention pass within 30s")
	}
	close(stop)
	wg.Wait()
	require.Contains(t, line, `"trees":4`, line)
	require.Contains(t, line, `"batches":`, line)

	for _, id := range []string{f.oldDone, f.oldTree, f.oldFailed, f.expiredDone} {
		require.False(t, sessionExists(t, pool, id), "session %s is deleted", id)
	}
	require.Empty(t, rowsWithPrefix(t, pool, f.oldTree), "no row of a deleted tree remains")
	for _, id := range []string{f.youngDone, f.youngFail, f.oldAborted, f.oldBusy, f.oldBusyChild} {
		require.True(t, sessionExists(t, pool, id), "session %s is kept", id)
	}
	require.NotEmpty(t, traffic)
	for _, id := range traffic {
		require.True(t, sessionExists(t, pool, id), "a session of the traffic is kept")
	}
}

// A dry run deletes nothing and counts what the real pass then deletes:
// the same trees, sessions, workflows and rows per table.
func TestCollectGarbageDryRunCountsWhatTheRealRunDeletes(t *testing.T) {
	t.Parallel()
	f := newRetentionFixture(t)
	defer close(f.release)
	pool := engine.StoreOf(f.runner).Pool()
	policy := engine.RetentionPolicy{Completed: time.Hour, Failed: time.Hour, BatchSize: 3}

	dry, err := f.runner.CollectGarbage(t.Context(), policy, &engine.GCOptions{DryRun: true})
	require.NoError(t, err)
	require.True(t, dry.DryRun)
	require.Equal(t, 4, dry.Trees)
	require.True(t, sessionExists(t, pool, f.oldDone), "a dry run deletes nothing")
	require.Positive(t, dry.TotalBytes())

	var progress []int
	real, err := f.runner.CollectGarbage(t.Context(), policy, &engine.GCOptions{Progress: func(r engine.GCResult) {
		progress = append(progress, r.Trees)
	}})
	require.NoError(t, err)
	require.False(t, real.DryRun)
	require.Equal(t, dry.Trees, real.Trees)
	require.Equal(t, dry.Sessions, real.Sessions)
	require.Equal(t, dry.Workflows, real.Workflows)
	require.Equal(t, dry.Rows, real.Rows)
	require.Equal(t, dry.TotalBytes(), real.TotalBytes())
	require.Equal(t, []int{3, 4}, progress, "progress after every batch of 3")
	require.False(t, sessionExists(t, pool, f.oldDone))

	again, err := f.runner.CollectGarbage(t.Context(), policy, nil)
	require.NoError(t, err)
	require.Zero(t, again.Trees, "nothing left to collect")
}

// A policy that deletes nothing, negative ages, a tiny interval and a
// batch out of range are refused at New with the field named.
func TestRetentionPolicyValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy engine.RetentionPolicy
		want   string
	}{
		{engine.RetentionPolicy{Completed: -time.Hour}, "Config.Retention.Completed must not be negative"},
		{engine.RetentionPolicy{Aborted: -1}, "Config.Retention.Aborted must not be negative"},
		{engine.RetentionPolicy{Completed: time.Hour, Interval: time.Millisecond}, "Config.Retention.Interval must be at least 1s"},
		{engine.RetentionPolicy{Completed: time.Hour, BatchSize: 5000}, "Config.Retention.BatchSize must be between 1 and 1000"},
		{engine.RetentionPolicy{KeepExpired: true}, "Config.Retention deletes nothing"},
	} {
		_, err := engine.New(t.Context(), engine.Config{DatabaseURL: "postgres://127.0.0.1:1/none", Retention: &tc.policy})
		require.ErrorContains(t, err, tc.want)
	}
	e := newEngine(t)
	_, err := e.CollectGarbage(context.Background(), engine.RetentionPolicy{Failed: -time.Second}, nil)
	require.ErrorContains(t, err, "RetentionPolicy.Failed must not be negative")
}

// A tree's age is its last activity: an old root whose companion was
// active a minute ago is kept, until the companion is old too; a paused or
// interrupted root is never picked by age.
func TestRetentionAgeIsTheTreesLastActivity(t *testing.T) {
	t.Parallel()
	tree := deleteTree()
	e := newEngineWith(t, engine.Config{DatabaseURL: pgtest.NewURL(t)}, tree)
	pool := engine.StoreOf(e).Pool()
	id := runTree(t, e, tree)
	age(t, pool, id, 2*time.Hour)
	_, err := pool.Exec(t.Context(), `UPDATE helix.sessions SET updated_at = now() - interval '1 minute'
		WHERE session_id = (SELECT max(session_id) FROM helix.sessions WHERE root_session_id = $1 AND session_id <> $1)`, id)
	require.NoError(t, err)
	policy := engine.RetentionPolicy{Completed: time.Hour}
	res, err := e.CollectGarbage(t.Context(), policy, &engine.GCOptions{DryRun: true})
	require.NoError(t, err)
	require.Zero(t, res.Trees, "a session of the tree was active a minute ago")

	age(t, pool, id, 2*time.Hour)
	res, err = e.CollectGarbage(t.Context(), policy, &engine.GCOptions{DryRun: true})
	require.NoError(t, err)
	require.Equal(t, 1, res.Trees)
	require.EqualValues(t, 3, res.Sessions, "the root, its sub-agent and its companion")

	_, err = pool.Exec(t.Context(), `UPDATE helix.sessions SET status = 'paused' WHERE session_id = $1`, id)
	require.NoError(t, err)
	age(t, pool, id, 2*time.Hour)
	res, err = e.CollectGarbage(t.Context(), engine.RetentionPolicy{Completed: time.Hour, Failed: time.Hour, Aborted: time.Hour}, nil)
	require.NoError(t, err)
	require.Zero(t, res.Trees, "a paused session can be resumed: kept whatever its age")
	require.True(t, sessionExists(t, pool, id))
}

// A pass runs on the one connection that holds its lock: an engine whose
// pool has the fewest connections it accepts (two, one being DBOS's
// listener) still completes its passes.
func TestRetentionPassNeedsOneConnection(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	quick := &helix.Agent{Name: "quick", Model: script(text("done"))}
	e := newEngineWith(t, engine.Config{DatabaseURL: url}, quick)
	h, err := e.Execute(t.Context(), quick, engine.Input{Message: "go"}, &engine.ExecuteOptions{SessionID: "old"})
	require.NoError(t, err)
	result(t, h)
	age(t, engine.StoreOf(e).Pool(), "old", 2*time.Hour)

	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	passes := make(passLog, 4)
	logger := zerolog.New(passes)
	newEngineWith(t, engine.Config{Pool: pool, Logger: &logger, DisableTakeover: true,
		Retention: &engine.RetentionPolicy{Completed: time.Hour, Interval: time.Second}})
	select {
	case line := <-passes:
		require.Contains(t, line, `"trees":1`, line)
	case <-time.After(30 * time.Second):
		t.Fatal("no retention pass within 30s on a pool of two connections")
	}
	require.False(t, sessionExists(t, engine.StoreOf(e).Pool(), "old"))
}
