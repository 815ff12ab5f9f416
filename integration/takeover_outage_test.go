package integration_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/migrations"
	"github.com/helix-agents/helix-dbos/store"
)

// Postgres restarts while a takeover is in progress: the replica claimed
// the dead executor, and its recovery of the executor's workflows is
// running (held here by a lock on their rows) when every connection is
// cut. The recovery must be retried once the server is back, never given
// up: the sessions complete, exactly as after an uninterrupted takeover.
func TestTakeoverSurvivesPostgresRestartDuringRecovery(t *testing.T) {
	t.Parallel()
	server := serverURL(t)
	ref := crashReference(t, server)
	k := crashKills[3] // step 1 committed, step 2 not started
	require.Equal(t, crashKillBetween, k.point)
	pg := startChaosPostgres(t)
	_, err := migrations.Up(t.Context(), openDB(t, pg.url)) // the parent reads the helix tables from the start
	require.NoError(t, err)
	d := newCrashDBAt(t, pg.url)

	killed := startCrashChild(t, d.url, crashModeRun, k.point, 1, crashEnvLease+"="+crashTakeoverLease.String())
	killed.waitFor(t, "the kill point "+k.point, func(ctx context.Context) (bool, error) {
		stalled, err := d.hasChunk(ctx, crashBystander, 1, helix.ChunkTextDelta)
		if err != nil || !stalled {
			return false, err
		}
		return k.reached(ctx, d)
	})
	killed.kill(t)
	d.waitGone(t, killed.appName)
	d.moveElsewhere(t, crashExecutorID)
	seen := map[string][]store.StoredChunk{}
	for _, sid := range crashSessions {
		seen[sid] = d.chunks(t, sid)
	}

	// Hold the dead executor's workflow rows: the replica's recovery (an
	// UPDATE of those rows) waits on the lock.
	holder, err := d.pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(context.WithoutCancel(t.Context())) }()
	var held int
	require.NoError(t, holder.QueryRow(t.Context(), `SELECT count(*) FROM (SELECT 1 FROM dbos.workflow_status
		WHERE executor_id = $1 AND status = 'PENDING' FOR UPDATE) w`, crashExecutorID).Scan(&held))
	require.Equal(t, len(crashSessions), held)

	replica := startCrashChild(t, d.url, crashModeRecover, "", 2, crashEnvLease+"="+crashTakeoverLease.String(),
		crashEnvExecutor+"="+crashTakeoverID)
	replica.waitFor(t, "the claim, with its recovery waiting on the lock", func(ctx context.Context) (bool, error) {
		var claimed, waiting bool
		err := d.pool.QueryRow(ctx, `SELECT
			EXISTS (SELECT 1 FROM helix.executors WHERE executor_id = $1 AND taken_over_by = $2 AND recovered_at IS NULL),
			EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = $3 AND wait_event_type = 'Lock'
				AND query LIKE '%UPDATE%workflow_status%')`, crashExecutorID, crashTakeoverID, replica.appName).Scan(&claimed, &waiting)
		return claimed && waiting, err
	})

	pg.restart(t) // cuts the lock holder and the waiting recovery
	replica.wait(t)

	by, _ := d.takenOver(t, crashExecutorID)
	require.Equal(t, crashTakeoverID, by)
	var recovered int
	require.NoError(t, d.pool.QueryRow(t.Context(), `SELECT recovered_workflows FROM helix.executors WHERE executor_id = $1`,
		crashExecutorID).Scan(&recovered))
	require.Equal(t, len(crashSessions), recovered, "the retried recovery re-enqueued both sessions")
	t.Logf("the replica reported the interrupted recovery: %v", strings.Contains(replica.out.String(), "executor.takeover_failed"))
	d.requireRecovered(t, crashTarget, k, ref[crashTarget], seen[crashTarget])
	d.requireRecovered(t, crashBystander, crashBystanderKill, ref[crashBystander], seen[crashBystander])

	// The dead executor's row, for the operator.
	var at time.Time
	require.NoError(t, d.pool.QueryRow(t.Context(), `SELECT recovered_at FROM helix.executors WHERE executor_id = $1`, crashExecutorID).Scan(&at))
	require.False(t, at.IsZero())
}
