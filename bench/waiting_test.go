package bench

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	url, r, lines := runWaiting(t, 0, nil)

	require.Equal(t, WaitingReportConfig{Sessions: 20, WakeSamples: 5, Callers: 4, Starters: waitingStarters, HibernateAfter: "never", ApproveVia: ApproveViaClient}, r.Config)
	require.Nil(t, r.Hibernation)
	require.True(t, r.Drained)
	// Every session woke once, through its approved tool and then its
	// second model call, and completed with its two steps.
	require.Equal(t, WaitingOutcome{Completed: 20, Steps: 40, WokeOnce: 20, ToolRuns: 20, NextStepCalls: 20}, r.Outcome)
	// The restarted worker recovered every session, without calling the
	// model again for the step the killed one had played.
	require.Equal(t, 20, r.Restart.Recovered)
	require.Equal(t, 20, r.Restart.Replayed)
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
	requireAllCompleted(t, url)
	requireReportRoundTrips(t, r, "20 sessions waiting for an approval, live waits", "per waiting session:",
		"restart (SIGKILL, same executor ID)", "worker B, recovered:", "approvals via an engine.Client", "approval → next model call",
		"drain, 15 sessions by 4 concurrent callers", "outcome: 20 of 20 sessions completed")
}

// TestWaitingHibernated runs the waiting-sessions mode with runs that
// hibernate after 200 ms: every run hibernates (no wait left in worker A),
// the restarted worker replays none of them, and each wakes once on its
// approval and completes. It asserts counts and structure, no timing.
func TestWaitingHibernated(t *testing.T) {
	t.Parallel()
	url, r, lines := runWaiting(t, 200*time.Millisecond, nil)

	require.Equal(t, "200ms", r.Config.HibernateAfter)
	h := r.Hibernation
	require.NotNil(t, h)
	// Every run hibernated, its workflow ended: worker A holds no wait,
	// and no goroutine per session.
	require.Equal(t, 20, h.Hibernated)
	require.Zero(t, h.LiveWaits)
	require.Positive(t, h.Footprint.RSSBytes)
	require.Positive(t, h.Footprint.Goroutines)
	require.Less(t, h.PerSession.Goroutines, 1.0)
	require.Positive(t, h.PerSession.DatabaseBytes)
	require.Positive(t, r.Database.BytesHibernated)
	// Where the bytes go: one session row and one run row per session,
	// the tables largest first.
	rel := map[string]RelationGrowth{}
	for i, g := range r.Database.Relations {
		rel[g.Table] = g
		if i > 0 {
			require.GreaterOrEqual(t, r.Database.Relations[i-1].Bytes, g.Bytes)
		}
	}
	require.InDelta(t, 1, rel["helix.sessions"].Rows, 0.001)
	require.InDelta(t, 1, rel["helix.runs"].Rows, 0.001)
	require.Positive(t, rel["helix.sessions"].Bytes)
	require.Contains(t, rel["helix.runs"].Indexes, "helix.runs_pkey")
	if !h.LiveCaught {
		require.Zero(t, r.Waiting)
	}
	// Worker B replays nothing: no wait, no model call, every run still
	// hibernated.
	rs := r.Restart
	require.Zero(t, rs.Replayed)
	require.Zero(t, rs.Recovered)
	require.Zero(t, rs.ReplayedModelCalls)
	require.Equal(t, 20, rs.Hibernated)
	require.Positive(t, rs.LaunchMS)
	require.Less(t, rs.PerSession.Goroutines, 1.0)
	// Each run woke once from hibernation, ran its approved tool and its
	// second model call once, and completed.
	require.Equal(t, WaitingOutcome{Completed: 20, Steps: 40, WokeOnce: 20, ToolRuns: 20, NextStepCalls: 20, HibernationWakes: 20}, r.Outcome)
	require.Equal(t, 5, r.Wake.Samples)
	require.Equal(t, 5, r.Wake.SubmitToNextStep.Count)
	require.Equal(t, 15, r.Drain.Sessions)
	require.Contains(t, lines, "hibernate: until all 20 runs hibernated (after 200ms of waiting) and their workflows ended")

	requireWokeOnce(t, url)
	requireReportRoundTrips(t, r, "20 sessions waiting for an approval, hibernated after 200ms", "worker A, 20 hibernated:",
		"per hibernated session:", "database per session, by table", "replayed: 0 (waits B holds), 20 runs still hibernated", "wake from hibernation, 5 sessions",
		"outcome: 20 of 20 sessions completed", "20 wakes from hibernation")
}

// TestWaitingNoDrain runs the waiting-sessions mode with hibernating runs
// and no drain, and the workers' CPU profiles asked for: the restarted
// worker replays none of the runs and stops, the report has no wake and no
// drain, the 20 sessions are left hibernated and unanswered in the
// database, and worker B's profile is complete.
func TestWaitingNoDrain(t *testing.T) {
	t.Parallel()
	profile := filepath.Join(t.TempDir(), "cpu")
	url, r, lines := runWaiting(t, 200*time.Millisecond, func(cfg *WaitingConfig) {
		cfg.NoDrain = true
		worker := cfg.Worker
		cfg.Worker = func() *exec.Cmd {
			cmd := worker()
			cmd.Env = append(cmd.Env, WorkerCPUProfileEnv+"="+profile)
			return cmd
		}
	})

	require.False(t, r.Drained)
	require.Zero(t, r.Wake)
	require.Zero(t, r.Drain)
	require.Equal(t, WaitingOutcome{LeftWaiting: 20}, r.Outcome)
	b, err := json.Marshal(r)
	require.NoError(t, err)
	var keys map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &keys))
	require.NotContains(t, keys, "wake")
	require.NotContains(t, keys, "drain")
	require.JSONEq(t, "false", string(keys["drained"]))
	// The restart is measured as in a drained run: worker B replays
	// nothing, every run still hibernated.
	require.Equal(t, 20, r.Hibernation.Hibernated)
	require.Zero(t, r.Restart.Replayed)
	require.Zero(t, r.Restart.ReplayedModelCalls)
	require.Equal(t, 20, r.Restart.Hibernated)
	require.Positive(t, r.Restart.LaunchMS)
	require.Contains(t, lines, "wake and drain skipped (--waiting-drain=false): 20 sessions are left hibernated in the scratch database, unanswered")
	require.NotContains(t, lines, "wake: 5 sessions approved one at a time")

	// The sessions are still there, waiting: each call unanswered, each run
	// hibernated and never woken, nothing completed.
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	var unanswered, completed, hibernated int
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT
		(SELECT count(*) FROM helix.sessions s, jsonb_each(s.pending_client_tool_calls) p WHERE s.agent_type = $1 AND NOT p.value ? 'submission'),
		(SELECT count(*) FROM helix.sessions WHERE agent_type = $1 AND status = 'completed'),
		(SELECT count(*) FROM helix.runs r JOIN helix.sessions s USING (session_id)
			WHERE s.agent_type = $1 AND r.hibernated_at IS NOT NULL AND r.wakes = 0)`,
		WaitingAgentName).Scan(&unanswered, &completed, &hibernated))
	require.Equal(t, 20, unanswered)
	require.Zero(t, completed)
	require.Equal(t, 20, hibernated)
	requireReportRoundTrips(t, r, "replayed: 0 (waits B holds), 20 runs still hibernated",
		"wake and drain: skipped (--waiting-drain=false); 20 of 20 sessions left waiting in the database")

	// Worker B stopped cleanly: its profile is complete (the gzip stream
	// ends with its trailer). Worker A's, killed, exists but may be cut.
	requireCompleteProfile(t, profile+".B.pprof")
	requireCompleteProfile(t, profile+".migrate.pprof")
	require.FileExists(t, profile+".A.pprof")
}

// TestWaitingApproveViaEngine runs the waiting-sessions mode with
// hibernating runs whose approvals worker B's own engine submits, 4 at a
// time in the drain: each run wakes once and completes, and every wake is
// sampled.
func TestWaitingApproveViaEngine(t *testing.T) {
	t.Parallel()
	url, r, _ := runWaiting(t, 200*time.Millisecond, func(cfg *WaitingConfig) { cfg.ApproveVia, cfg.WakeIsolated = ApproveViaEngine, true })

	require.Equal(t, ApproveViaEngine, r.Config.ApproveVia)
	require.True(t, r.Wake.Isolated, "each wake sample waited for its session to complete")
	var text strings.Builder
	require.NoError(t, r.WriteText(&text))
	require.Contains(t, text.String(), "each on an idle worker")
	require.True(t, r.Drained)
	require.Zero(t, r.Restart.Replayed)
	require.Equal(t, WaitingOutcome{Completed: 20, Steps: 40, WokeOnce: 20, ToolRuns: 20, NextStepCalls: 20, HibernationWakes: 20}, r.Outcome)
	require.Equal(t, 5, r.Wake.Samples)
	for name, d := range map[string]Distribution{"to tool": r.Wake.SubmitToTool, "to next step": r.Wake.SubmitToNextStep, "submit": r.Wake.Submit} {
		require.Equal(t, 5, d.Count, name)
		require.Positive(t, d.P50MS, name)
	}
	require.Equal(t, 15, r.Drain.Sessions)
	require.Positive(t, r.Drain.ApprovalsPerSecond)
	require.Positive(t, r.Drain.CompletedPerSecond)
	requireWokeOnce(t, url)
	requireReportRoundTrips(t, r, "approvals via worker B's engine", "wake from hibernation, 5 sessions",
		"outcome: 20 of 20 sessions completed", "20 wakes from hibernation")
}

// requireCompleteProfile checks that path holds a whole gzip stream (a
// pprof profile, flushed and closed).
func requireCompleteProfile(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	z, err := gzip.NewReader(f)
	require.NoError(t, err, path)
	n, err := io.Copy(io.Discard, z)
	require.NoError(t, err, path)
	require.Positive(t, n, path)
}

// requireWokeOnce checks that the 20 sessions completed and that each run
// woke once from hibernation, its continuation succeeded.
func requireWokeOnce(t *testing.T, url string) {
	t.Helper()
	conn := requireAllCompleted(t, url)
	var once, continued int
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE r.wakes = 1 AND r.hibernated_at IS NULL AND r.woken_at IS NULL),
		count(*) FILTER (WHERE w.status = 'SUCCESS') FROM helix.runs r JOIN helix.sessions s USING (session_id)
		LEFT JOIN dbos.workflow_status w ON w.workflow_uuid = helix.wake_workflow_id(r.workflow_id, 1) WHERE s.agent_type = $1`,
		WaitingAgentName).Scan(&once, &continued))
	require.Equal(t, 20, once, "every run woke once")
	require.Equal(t, 20, continued, "every run's continuation succeeded")
}

// runWaiting runs one of the small end-to-end runs on a new database: 20
// sessions, whose workers are this test binary (TestMain), the runs
// hibernating after hibernateAfter if positive, the configuration then
// changed by change if not nil. It returns the database's URL, the report
// and the progress lines.
func runWaiting(t *testing.T, hibernateAfter time.Duration, change func(*WaitingConfig)) (string, *WaitingReport, []string) {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	url := pgtest.NewURL(t)
	var lines []string
	cfg := WaitingConfig{DatabaseURL: url, Sessions: 20, WakeSamples: 5, Callers: 4, HibernateAfter: hibernateAfter,
		Worker: func() *exec.Cmd {
			cmd := exec.Command(exe)
			cmd.Env = append(os.Environ(), waitingWorkerEnv+"=1")
			return cmd
		},
		Progress: func(s string) { lines = append(lines, s) }}
	if change != nil {
		change(&cfg)
	}
	r, err := Waiting(t.Context(), cfg)
	require.NoError(t, err)
	return url, r, lines
}

// requireAllCompleted checks that the 20 sessions completed with no call
// left waiting, and returns a connection to url.
func requireAllCompleted(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	var sessions, pending int
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE status = 'completed'),
		count(*) FILTER (WHERE pending_client_tool_calls <> '{}'::jsonb) FROM helix.sessions WHERE agent_type = $1`,
		WaitingAgentName).Scan(&sessions, &pending))
	require.Equal(t, 20, sessions)
	require.Zero(t, pending, "no call left waiting")
	return conn
}

// requireReportRoundTrips checks that r survives JSON and that its text
// holds each of want.
func requireReportRoundTrips(t *testing.T, r *WaitingReport, want ...string) {
	t.Helper()
	b, err := json.Marshal(r)
	require.NoError(t, err)
	var back WaitingReport
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, *r, back)
	var text bytes.Buffer
	require.NoError(t, r.WriteText(&text))
	for _, w := range want {
		require.Contains(t, text.String(), w)
	}
}

// TestWaitingRefusesNoSessions checks the configuration's refusals.
func TestWaitingRefusesNoSessions(t *testing.T) {
	t.Parallel()
	_, err := Waiting(t.Context(), WaitingConfig{DatabaseURL: "postgres://x", Sessions: 0, Worker: func() *exec.Cmd { return nil }})
	require.ErrorContains(t, err, "waiting sessions must be >= 1 (--waiting N), got 0")
	_, err = Waiting(t.Context(), WaitingConfig{DatabaseURL: "postgres://x", Sessions: 3})
	require.ErrorContains(t, err, "WaitingConfig.Worker is nil")
	_, err = Waiting(t.Context(), WaitingConfig{DatabaseURL: "postgres://x", Sessions: 3, ApproveVia: "replica", Worker: func() *exec.Cmd { return nil }})
	require.ErrorContains(t, err, `the approvals' route (--waiting-approve-via) must be "client" or "engine", got "replica"`)
}
