package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

// TestWaitingSmall runs the waiting-sessions mode end to end with a few
// sessions, its workers being this test binary (TestMain): every session
// waits, is recovered by the restarted worker, wakes once and completes,
// and the report is complete. It asserts no timing.
func TestWaitingSmall(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	var lines []string
	r, err := Waiting(t.Context(), WaitingConfig{DatabaseURL: url, Sessions: 20, WakeSamples: 5, Callers: 4,
		Worker: func() *exec.Cmd {
			cmd := exec.Command(exe)
			cmd.Env = append(os.Environ(), waitingWorkerEnv+"=1")
			return cmd
		},
		Progress: func(s string) { lines = append(lines, s) }})
	require.NoError(t, err)

	require.Equal(t, WaitingReportConfig{Sessions: 20, WakeSamples: 5, Callers: 4, Starters: waitingStarters}, r.Config)
	// Every session woke once, through its approved tool and then its
	// second model call, and completed with its two steps.
	require.Equal(t, WaitingOutcome{Completed: 20, Steps: 40, WokeOnce: 20, ToolRuns: 20, NextStepCalls: 20}, r.Outcome)
	// The restarted worker recovered every session, without calling the
	// model again for the step the killed one had played.
	require.Equal(t, 20, r.Restart.Recovered)
	require.Zero(t, r.Restart.ReplayedModelCalls)
	require.Positive(t, r.Restart.LaunchMS)
	require.Positive(t, r.Restart.IdleLaunchMS)
	for name, f := range map[string]WorkerFootprint{"idle": r.Idle, "waiting": r.Waiting, "recovered": r.Restart.Footprint} {
		require.Positive(t, f.RSSBytes, name)
		require.Positive(t, f.Goroutines, name)
		require.Positive(t, f.HeapInuseBytes, name)
	}
	// A waiting session holds memory, at least a goroutine, and rows.
	p := r.PerSession
	require.Positive(t, p.RSSBytes)
	require.GreaterOrEqual(t, p.Goroutines, 1.0)
	require.Positive(t, p.HeapBytes)
	require.Positive(t, p.DatabaseBytes)
	require.GreaterOrEqual(t, r.Restart.PerSession.Goroutines, 1.0)
	require.Greater(t, r.Database.BytesWaiting, r.Database.BytesBefore)

	require.Equal(t, 5, r.Wake.Samples)
	for name, d := range map[string]Distribution{"to tool": r.Wake.SubmitToTool, "to next step": r.Wake.SubmitToNextStep, "submit": r.Wake.Submit} {
		require.Equal(t, 5, d.Count, name)
		require.Positive(t, d.P50MS, name)
		require.LessOrEqual(t, d.P50MS, d.P99MS, name)
		require.LessOrEqual(t, d.P99MS, d.MaxMS, name)
	}
	// The tool runs before the model's next call, and both after the
	// submission's transaction.
	require.LessOrEqual(t, r.Wake.SubmitToTool.P50MS, r.Wake.SubmitToNextStep.P50MS)
	require.Equal(t, 15, r.Drain.Sessions)
	require.Equal(t, 4, r.Drain.Callers)
	require.Positive(t, r.Drain.ApprovalsPerSecond)
	require.Positive(t, r.Drain.CompletedPerSecond)
	require.LessOrEqual(t, r.Drain.SubmitWallS, r.Drain.CompleteWallS)
	require.Positive(t, r.Machine.PoolMaxConns)
	require.Contains(t, lines, "wake: 5 sessions approved one at a time")
	require.Contains(t, lines, "drain: 15 sessions approved by 4 concurrent callers")

	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var sessions, pending int
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE status = 'completed'),
		count(*) FILTER (WHERE pending_client_tool_calls <> '{}'::jsonb) FROM helix.sessions WHERE agent_type = $1`,
		WaitingAgentName).Scan(&sessions, &pending))
	require.Equal(t, 20, sessions)
	require.Zero(t, pending, "no call left waiting")

	b, err := json.Marshal(r)
	require.NoError(t, err)
	var back WaitingReport
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, *r, back)
	var text bytes.Buffer
	require.NoError(t, r.WriteText(&text))
	for _, want := range []string{"20 sessions waiting for an approval", "per waiting session:", "restart (SIGKILL, same executor ID)",
		"approval → next model call", "drain, 15 sessions by 4 concurrent callers", "outcome: 20 of 20 sessions completed"} {
		require.Contains(t, text.String(), want)
	}
}

// TestWaitingRefusesNoSessions checks the configuration's refusals.
func TestWaitingRefusesNoSessions(t *testing.T) {
	t.Parallel()
	_, err := Waiting(t.Context(), WaitingConfig{DatabaseURL: "postgres://x", Sessions: 0, Worker: func() *exec.Cmd { return nil }})
	require.ErrorContains(t, err, "waiting sessions must be >= 1 (--waiting N), got 0")
	_, err = Waiting(t.Context(), WaitingConfig{DatabaseURL: "postgres://x", Sessions: 3})
	require.ErrorContains(t, err, "WaitingConfig.Worker is nil")
}
