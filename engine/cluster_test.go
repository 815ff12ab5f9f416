package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/internal/process"
	"github.com/helix-agents/helix-dbos/migrations"
)

// A cluster's first deploy: replicas start at the same instant on an empty
// database. DBOS's own system-schema migrations take no lock (two creators
// of schema dbos collide on a unique index); every replica must come up
// anyway, and then run sessions.
func TestReplicasStartTogetherOnAnEmptyDatabase(t *testing.T) {
	t.Parallel()
	url := pgtest.NewEmptyURL(t)
	agent := &helix.Agent{Name: "hello", Model: script(text("hi"))}
	const replicas = 6
	engines := make([]*engine.Engine, replicas)
	errs := make([]error, replicas)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Go(func() {
			<-start
			e, err := engine.New(t.Context(), engine.Config{DatabaseURL: url, ExecutorID: fmt.Sprintf("replica-%d", i)})
			if err == nil {
				engines[i] = e
				if err = e.Register(agent); err == nil {
					err = e.Launch(t.Context())
				}
			}
			errs[i] = err
		})
	}
	close(start)
	wg.Wait()
	for i, e := range engines {
		if e != nil {
			t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
		}
		require.NoError(t, errs[i], "replica %d", i)
	}
	for i, e := range engines {
		h, err := e.Execute(t.Context(), agent, engine.Input{Message: "hello"}, nil)
		require.NoError(t, err, "replica %d", i)
		require.Equal(t, helix.AgentCompleted, result(t, h).Status, "replica %d", i)
	}
}

// Two live processes must never share an executor ID (DBOS recovers an ID's
// workflows in whichever process launches with it): Launch refuses an ID
// whose holder is alive, on another machine or on this one, and takes over
// at once the ID of a holder on this machine whose process is gone, and
// that of a holder elsewhere once its heartbeat is stale.
func TestLaunchRefusesAnExecutorIDInUse(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	here, err := os.Hostname()
	require.NoError(t, err)
	host := here
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	holder := func(id, host string, pid int, age time.Duration) {
		t.Helper()
		ns := "another-machine"
		if host == here {
			ns = process.Namespace()
		}
		_, err := pool.Exec(t.Context(), `INSERT INTO helix.executors (executor_id, application_version, hostname, pid, pid_namespace, started_at, heartbeat_at)
			VALUES ($1, 'v', $2, $3, $4, now(), now() - make_interval(secs => $5))`, id, host, pid, ns, age.Seconds())
		require.NoError(t, err)
	}
	launch := func(id string) error {
		t.Helper()
		e, err := engine.New(t.Context(), engine.Config{DatabaseURL: url, ExecutorID: id})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
		return e.Launch(t.Context())
	}

	holder("elsewhere", "another-host", 4242, time.Second)
	err = launch("elsewhere")
	inUse, ok := errors.AsType[*engine.ExecutorInUseError](err)
	require.True(t, ok, "%v", err)
	require.Equal(t, "another-host", inUse.Host)
	require.Equal(t, 4242, inUse.PID)
	require.ErrorContains(t, err, `executor ID "elsewhere" is in use by process 4242 on another-host`)

	holder("here-alive", host, os.Getppid(), time.Second)
	_, ok = errors.AsType[*engine.ExecutorInUseError](launch("here-alive"))
	require.True(t, ok, "a live process on this machine holds it")

	holder("here-dead", host, dead.Process.Pid, time.Second)
	require.NoError(t, launch("here-dead"), "a dead holder on this machine is taken over at once")

	holder("elsewhere-stale", "another-host", 4242, engine.DefaultExecutorLease+time.Second)
	require.NoError(t, launch("elsewhere-stale"), "a holder elsewhere is taken over once its heartbeat is stale")

	var pid int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT pid FROM helix.executors WHERE executor_id = 'here-dead'`).Scan(&pid))
	require.Equal(t, os.Getpid(), pid)
}

// A replica that stops for good (a rolling deploy, a scale-down) leaves
// sessions waiting for approvals. Its row is marked stopped, and exactly
// one of the live replicas, all sweeping at once, claims it and recovers
// every pending workflow; the approvals, given through any replica, are
// delivered once and each approved tool runs once.
func TestStoppedReplicaIsTakenOverOnceByOneOfItsPeers(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	var runs sync.Map
	const sessions = 5
	agent := func() *helix.Agent {
		return &helix.Agent{
			Name: "banker", Tools: []*helix.Tool{transferTool(&runs)}, InitialState: json.RawMessage(`{"notes":[]}`),
			Model: script(calls(call("t1", "transfer", `{"to":"bob","amount":5}`)), text("sent")),
		}
	}
	type replica struct {
		e   *engine.Engine
		log *syncBuffer
	}
	start := func(id string, a *helix.Agent) replica {
		t.Helper()
		r := replica{log: &syncBuffer{}}
		logger := zerolog.New(r.log)
		e, err := engine.New(t.Context(), engine.Config{DatabaseURL: url, ExecutorID: id, ExecutorLease: 2 * time.Second, Logger: &logger})
		require.NoError(t, err)
		require.NoError(t, e.Register(a))
		require.NoError(t, e.Launch(t.Context()))
		r.e = e
		return r
	}
	a := agent()
	leaving := start("leaving", a)
	for i := range sessions {
		h, err := leaving.e.Execute(t.Context(), a, engine.Input{Message: "pay"}, &engine.ExecuteOptions{SessionID: fmt.Sprintf("pay-%d", i)})
		require.NoError(t, err)
		require.Equal(t, helix.AgentSuspendedClientTool, result(t, h).Status)
	}
	peers := make([]replica, 4)
	for i := range peers {
		peers[i] = start(fmt.Sprintf("peer-%d", i), agent())
		t.Cleanup(func() { require.NoError(t, peers[i].e.Shutdown(context.Background())) })
	}
	require.NoError(t, leaving.e.Shutdown(t.Context()))

	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var by string
	var recovered int
	require.Eventually(t, func() bool {
		err := pool.QueryRow(t.Context(), `SELECT coalesce(taken_over_by, ''), coalesce(recovered_workflows, -1)
			FROM helix.executors WHERE executor_id = 'leaving' AND recovered_at IS NOT NULL`).Scan(&by, &recovered)
		return err == nil
	}, 20*time.Second, 20*time.Millisecond, "a peer takes the stopped replica over")
	require.Equal(t, sessions, recovered, "every waiting session's workflow is recovered")
	claims := 0
	for _, p := range peers {
		claims += strings.Count(p.log.String(), `"event":"executor.took_over","executorId":"leaving"`)
	}
	require.Equal(t, 1, claims, "one peer claims it (by %s)", by)

	for i := range sessions {
		sid := fmt.Sprintf("pay-%d", i)
		p := peers[i%len(peers)].e
		res, err := p.SubmitToolResult(t.Context(), sid, helix.Approve("t1", "ok"))
		require.NoError(t, err)
		require.False(t, res.AlreadyCompleted)
		h, err := p.Run(t.Context(), sid, "")
		require.NoError(t, err)
		waitFor(t, h, helix.AgentCompleted)
	}
	// Every session's call has the ID t1: the tool ran once per session.
	require.EqualValues(t, sessions, executions2(&runs, "t1"), "each approved tool ran exactly once")
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A workflow can be pending under an executor that was already taken over
// and recovered: the executor, draining or frozen, dequeued its own
// re-enqueued workflow before it stopped for good. Such a straggler is
// claimed again once the first recovery is a lease old, and its session
// completes.
func TestStragglerOfAnExecutorTakenOverIsTakenOverAgain(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	var runs sync.Map
	agent := func() *helix.Agent {
		return &helix.Agent{
			Name: "banker", Tools: []*helix.Tool{transferTool(&runs)}, InitialState: json.RawMessage(`{"notes":[]}`),
			Model: script(calls(call("t1", "transfer", `{"to":"bob","amount":5}`)), text("sent")),
		}
	}
	a := agent()
	drainer, err := engine.New(t.Context(), engine.Config{DatabaseURL: url, ExecutorID: "drainer", ExecutorLease: 2 * time.Second})
	require.NoError(t, err)
	require.NoError(t, drainer.Register(a))
	require.NoError(t, drainer.Launch(t.Context()))
	h, err := drainer.Execute(t.Context(), a, engine.Input{Message: "pay"}, &engine.ExecuteOptions{SessionID: "straggler"})
	require.NoError(t, err)
	require.Equal(t, helix.AgentSuspendedClientTool, result(t, h).Status)
	require.NoError(t, drainer.Shutdown(t.Context()))

	// The state such an executor leaves: its row says it was taken over and
	// recovered an hour ago, yet a workflow is pending under its ID.
	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(t.Context(), `UPDATE helix.executors SET taken_over_by = 'earlier-peer', taken_over_at = now() - interval '1 hour',
		recovered_at = now() - interval '1 hour', recovered_workflows = 1 WHERE executor_id = 'drainer'`)
	require.NoError(t, err)
	var pending int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM dbos.workflow_status WHERE executor_id = 'drainer' AND status = 'PENDING'`).Scan(&pending))
	require.Equal(t, 1, pending)

	peer, err := engine.New(t.Context(), engine.Config{DatabaseURL: url, ExecutorID: "peer", ExecutorLease: 2 * time.Second})
	require.NoError(t, err)
	require.NoError(t, peer.Register(agent()))
	require.NoError(t, peer.Launch(t.Context()))
	t.Cleanup(func() { require.NoError(t, peer.Shutdown(context.Background())) })
	require.Eventually(t, func() bool {
		var by string
		err := pool.QueryRow(t.Context(), `SELECT taken_over_by FROM helix.executors WHERE executor_id = 'drainer' AND recovered_at > now() - interval '1 minute'`).Scan(&by)
		return err == nil && by == "peer"
	}, 20*time.Second, 20*time.Millisecond, "the peer claims the straggler")

	res, err := peer.SubmitToolResult(t.Context(), "straggler", helix.Approve("t1", "ok"))
	require.NoError(t, err)
	require.False(t, res.AlreadyCompleted)
	h, err = peer.Run(t.Context(), "straggler", "")
	require.NoError(t, err)
	waitFor(t, h, helix.AgentCompleted)
	require.EqualValues(t, 1, executions2(&runs, "t1"), "the approved tool ran once")
}

// Launch refuses a database migrated by a pre-release helix-dbos (its
// version table, helix.goose_db_version, is there) loudly, with
// migrations.ErrPreReleaseSchema and what to do, whether it runs the
// migrations or not (Config.SkipMigrations), instead of running on a
// schema it half understands.
func TestLaunchRefusesAPreReleaseSchema(t *testing.T) {
	t.Parallel()
	url := pgtest.NewEmptyURL(t)
	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(t.Context(), `CREATE SCHEMA helix;
		CREATE TABLE helix.goose_db_version (id serial PRIMARY KEY, version_id bigint NOT NULL, is_applied boolean NOT NULL)`)
	require.NoError(t, err)
	for _, skip := range []bool{false, true} {
		e, err := engine.New(t.Context(), engine.Config{DatabaseURL: url, ExecutorID: fmt.Sprintf("pre-release-%t", skip), SkipMigrations: skip})
		require.NoError(t, err)
		err = e.Launch(t.Context())
		require.ErrorIs(t, err, migrations.ErrPreReleaseSchema, "SkipMigrations %t", skip)
		require.ErrorContains(t, err, "pre-release helix-dbos")
		require.NoError(t, e.Shutdown(context.Background()))
	}
}
