package engine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// A rolling deploy: the replica of v1 is replaced by one of v2 while a
// session waits for an approval, one runs (in its model call) and one
// waits in the queue. v1 stops; v2 takes its executor over and finishes
// all three, the approval given after the deploy, the approved tool run
// once. With the default, constant application version (a rebuild), and
// with a new version that adopts the old one (Config.AdoptVersions). And
// from a release before the storage format levels (v1's row records no
// level, so v1 writes level 0, as that release does), the deploy's order:
// v2 starts while v1 runs and writes what v1 reads (level 0); once v1
// stopped, v2 writes the newest formats, and the sessions v1 began finish
// on them.
func TestRollingDeploy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		old, new string
		adopt    []string
		previous bool
	}{
		{name: "same version", old: engine.DefaultApplicationVersion, new: engine.DefaultApplicationVersion},
		{name: "new version adopting the old", old: "shop-2026-11", new: "shop-2026-12", adopt: []string{"shop-2026-11"}},
		{name: "from a release before the format levels", old: engine.DefaultApplicationVersion, new: engine.DefaultApplicationVersion,
			previous: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := pgtest.NewURL(t)
			g := newGate()
			var runs sync.Map
			agents := func(prompt string) []*helix.Agent {
				return []*helix.Agent{payer(&runs), {Name: "worker", SystemPrompt: prompt, Model: g.model()}}
			}
			start := func(id, version string, adopt []string, log *syncBuffer) (*engine.Engine, []*helix.Agent) {
				logger := zerolog.New(log)
				e, err := engine.New(t.Context(), engine.Config{DatabaseURL: url, ExecutorID: id, ApplicationVersion: version,
					AdoptVersions: adopt, ExecutorLease: 2 * time.Second, Logger: &logger, ShutdownTimeout: 5 * time.Second,
					Queue: &engine.QueueConfig{WorkerConcurrency: 1, PollingInterval: 20 * time.Millisecond}})
				require.NoError(t, err)
				as := agents(fmt.Sprintf("You are release %s.", version))
				require.NoError(t, e.Register(as...))
				require.NoError(t, e.Launch(t.Context()))
				return e, as
			}
			pool, err := pgxpool.New(t.Context(), url)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			v1, v1Agents := start("replica-v1", tc.old, nil, &syncBuffer{})
			if tc.previous {
				_, err := pool.Exec(t.Context(), `UPDATE helix.executors SET format_level = NULL WHERE executor_id = 'replica-v1'`)
				require.NoError(t, err)
				awaitFormatLevel(t, v1, postgres.FormatLevelBase)
			}
			waiting, err := v1.Execute(t.Context(), v1Agents[0], engine.Input{Message: "pay bob"}, &engine.ExecuteOptions{SessionID: "waiting"})
			require.NoError(t, err)
			require.Equal(t, helix.AgentSuspendedClientTool, result(t, waiting).Status)
			running, err := v1.Execute(t.Context(), v1Agents[1], engine.Input{Message: "work"}, &engine.ExecuteOptions{SessionID: "running"})
			require.NoError(t, err)
			require.Equal(t, "running", g.entered(t))
			queued, err := v1.Execute(t.Context(), v1Agents[1], engine.Input{Message: "work"}, &engine.ExecuteOptions{SessionID: "queued"})
			require.NoError(t, err)
			q, err := v1.Queued(t.Context(), "queued")
			require.NoError(t, err)
			require.NotNil(t, q, "the third session waits in the queue from the moment Execute returns")

			// The deploy: v1 stops, v2 comes up (from a release before
			// the levels, v2 comes up first).
			if !tc.previous {
				require.NoError(t, v1.Shutdown(t.Context()))
			}
			v2log := &syncBuffer{}
			v2, _ := start("replica-v2", tc.new, tc.adopt, v2log)
			t.Cleanup(func() { require.NoError(t, v2.Shutdown(context.Background())) })
			if tc.previous {
				require.Equal(t, postgres.FormatLevelBase, postgres.FormatLevel(v2.FormatLevel()), "v1, alive, reads level 0 only")
				require.NoError(t, v1.Shutdown(t.Context()))
				awaitFormatLevel(t, v2, postgres.FormatLevelNewest)
			}
			require.Eventually(t, func() bool {
				var by string
				err := pool.QueryRow(t.Context(), `SELECT coalesce(taken_over_by, '') FROM helix.executors
					WHERE executor_id = 'replica-v1' AND recovered_at IS NOT NULL`).Scan(&by)
				return err == nil && by == "replica-v2"
			}, 20*time.Second, 20*time.Millisecond, "v2 takes v1's executor over")

			g.let("running")
			g.let("queued")
			require.False(t, submit(t, v2, "waiting", helix.Approve("t1", "ok")).AlreadyCompleted)
			for _, h := range []*engine.Handle{waiting, running, queued} {
				h2, err := v2.Run(t.Context(), h.SessionID, h.RunID)
				require.NoError(t, err)
				res := waitFor(t, h2, helix.AgentCompleted)
				require.NotEmpty(t, res.Output, h.SessionID)
			}
			require.EqualValues(t, 1, executions2(&runs, "t1"), "the approved tool ran once")
			var left int
			require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM dbos.workflow_status
				WHERE status IN ('PENDING', 'ENQUEUED') AND application_version <> $1`, tc.new).Scan(&left))
			require.Zero(t, left, "nothing of the old version is left pending")
			require.Contains(t, v2log.String(), `"event":"executor.took_over","executorId":"replica-v1"`)
			if tc.previous {
				var old, cur int
				require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE left(c.chunk::text, 2) IN ('{"', '[2')),
					count(*) FILTER (WHERE left(c.chunk::text, 2) = '[3')
					FROM helix.all_stream_chunks c JOIN helix.runs r ON r.run_id = c.run_id WHERE r.session_id = 'waiting'`).Scan(&old, &cur))
				require.Positive(t, old, "v1 wrote what it reads")
				require.Positive(t, cur, "v2 wrote format 3 once v1 was gone")
			}
		})
	}
}
