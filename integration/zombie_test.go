package integration_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

// A zombie is a process that stops answering for longer than its lease
// (SIGSTOP here; a long pause or a network partition elsewhere) and then
// comes back. Meanwhile a replica took its sessions over and finished
// them. The zombie must commit nothing more for them: its in-flight model
// calls are fenced (their late deltas never reach the stream, their
// checkpoints are refused), it logs one clear error per session and stops
// those loops, then rejoins the cluster and serves new work.
func TestZombieIsFenced(t *testing.T) {
	t.Parallel()
	server := serverURL(t)
	ref := crashReference(t, server)
	k := crashKills[0] // mid-stream in the model call of step 2
	require.Equal(t, crashKillModel, k.point)
	d := newCrashDB(t, server)
	lease := crashEnvLease + "=" + crashTakeoverLease.String()
	zombie := startCrashChild(t, d.url, crashModeZombie, k.point, 1, lease)
	zombie.waitFor(t, "the model calls to stall", func(ctx context.Context) (bool, error) {
		stalled, err := d.hasChunk(ctx, crashBystander, 1, helix.ChunkTextDelta)
		if err != nil || !stalled {
			return false, err
		}
		return k.reached(ctx, d)
	})
	require.NoError(t, zombie.cmd.Process.Signal(syscall.SIGSTOP))
	stoppedAt := d.now(t)
	// Resume it whatever happens, so that it can exit.
	t.Cleanup(func() { _ = zombie.cmd.Process.Signal(syscall.SIGCONT) })
	seen := map[string][]store.StoredChunk{}
	for _, sid := range crashSessions {
		seen[sid] = d.chunks(t, sid)
	}

	replica := startCrashChild(t, d.url, crashModeRecover, "", 2, lease, crashEnvExecutor+"="+crashTakeoverID)
	replica.wait(t)
	by, at := d.takenOver(t, crashExecutorID)
	require.Equal(t, crashTakeoverID, by)
	t.Logf("taken over %s after SIGSTOP (lease %s)", at.Sub(stoppedAt).Round(time.Millisecond), crashTakeoverLease)

	// The zombie comes back; its stalled model calls go on.
	_, err := d.pool.Exec(t.Context(), `INSERT INTO crash_release DEFAULT VALUES`)
	require.NoError(t, err)
	require.NoError(t, zombie.cmd.Process.Signal(syscall.SIGCONT))
	zombie.wait(t)

	out := zombie.out.String()
	require.Equal(t, 2, strings.Count(out, "run.taken_over"), "one error per session it was running:\n%s", out)
	require.Contains(t, out, "executor.taken_over")
	require.Contains(t, out, "executor.rejoined")
	for _, sid := range crashSessions {
		require.Contains(t, out, "sessionId="+sid)
	}
	// Nothing of the zombie's late work landed: the replica's outcome is
	// the reference outcome, with one resync per model attempt the SIGSTOP
	// interrupted.
	d.requireRecovered(t, crashTarget, k, ref[crashTarget], seen[crashTarget])
	d.requireRecovered(t, crashBystander, crashBystanderKill, ref[crashBystander], seen[crashBystander])

	// And it served new work after rejoining.
	st, err := d.st.LoadState(t.Context(), crashAfterZombie)
	require.NoError(t, err)
	require.Equal(t, helix.SessionCompleted, st.Status, st.Error)
}
