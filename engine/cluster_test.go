package engine_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
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
	host, err := os.Hostname()
	require.NoError(t, err)
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	holder := func(id, host string, pid int, age time.Duration) {
		t.Helper()
		_, err := pool.Exec(t.Context(), `INSERT INTO helix.executors (executor_id, application_version, hostname, pid, started_at, heartbeat_at)
			VALUES ($1, 'v', $2, $3, now(), now() - make_interval(secs => $4))`, id, host, pid, age.Seconds())
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

	holder("elsewhere-stale", "another-host", 4242, engine.ExecutorStale+time.Second)
	require.NoError(t, launch("elsewhere-stale"), "a holder elsewhere is taken over once its heartbeat is stale")

	var pid int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT pid FROM helix.executors WHERE executor_id = 'here-dead'`).Scan(&pid))
	require.Equal(t, os.Getpid(), pid)
}
