package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

// TestRunSmall runs every phase at a tiny size and checks that the report
// is complete and consistent with what the database holds. It asserts no
// timing.
func TestRunSmall(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	var lines []string
	cfg := Config{DatabaseURL: url, Steps: 12, Sessions: 3, StepsPerSession: 4, FloorSteps: 5, WarmupSteps: 3, HITLSamples: 4,
		StreamSessions: 4, StreamDeltas: 10, Progress: func(s string) { lines = append(lines, s) }}
	r, err := Run(t.Context(), cfg)
	require.NoError(t, err)

	require.Equal(t, ReportConfig{Steps: 12, Sessions: 3, StepsPerSession: 4, FloorSteps: 5, HITLSamples: 4,
		StreamSessions: 4, StreamDeltas: 10}, r.Config)
	require.Equal(t, 11, r.Sequential.Overhead.Count, "one sample between each pair of steps")
	require.Equal(t, 12, r.Concurrent.Steps)
	require.Equal(t, 3*3, r.Concurrent.Overhead.Count)
	require.Equal(t, 5, r.Floors.Commit.Count)
	require.Equal(t, 5, r.Floors.RoundTrip.Count)
	require.Equal(t, 4, r.Floors.DBOSStep.Count)
	require.Equal(t, 4, r.Floors.DBOSAgentStep.Count)
	for name, d := range map[string]Distribution{
		"sequential": r.Sequential.Overhead, "concurrent": r.Concurrent.Overhead, "commit": r.Floors.Commit.Distribution, "round trip": r.Floors.RoundTrip.Distribution,
		"dbos step": r.Floors.DBOSStep.Distribution, "skeleton": r.Floors.DBOSAgentStep.Distribution,
		"hitl": r.HITL.SubmitToNextStep, "hitl submit": r.HITL.Submit, "streaming": r.Streaming.ChunkToReader,
	} {
		require.Positive(t, d.P50MS, name)
		require.LessOrEqual(t, d.P50MS, d.P95MS, name)
		require.LessOrEqual(t, d.P95MS, d.P99MS, name)
		require.LessOrEqual(t, d.P99MS, d.MaxMS, name)
	}
	require.Positive(t, r.Concurrent.StepsPerSecond)
	require.Positive(t, r.Sequential.LateEarlyRatio)
	// The step journal records an agent step in fewer statements than the
	// DBOS operations of the same step (two RunAsSteps and a transaction).
	require.Less(t, r.Sequential.SQL.StatementsPerStep, r.Floors.DBOSAgentStep.SQL.StatementsPerStep)
	require.NotEmpty(t, r.Sequential.SQL.Top)
	require.InDelta(t, 1, r.Floors.Commit.SQL.StatementsPerStep, 0.01, "one statement per commit")
	require.Equal(t, 4, r.HITL.Sessions)
	require.Equal(t, 4, r.HITL.Resume.Count)
	// A sample spans the submission: it outlasts the submit call, and both
	// the submission's statements and the woken run's are in it.
	require.Greater(t, r.HITL.SubmitToNextStep.P50MS, r.HITL.Submit.P50MS)
	require.Greater(t, r.HITL.SQL.StatementsPerStep, r.Sequential.SQL.StatementsPerStep)
	// The sequential session wrote rows, WAL and transactions, and kept
	// its messages.
	st := r.Sequential.Storage
	require.Positive(t, st.BytesPerStep)
	require.Positive(t, st.WALBytesPerStep)
	require.Positive(t, st.WriteXactsPerStep)
	require.Positive(t, st.MessageBytesPerStep)
	// Every delta of every stream was read once; the batches wrote them
	// all, several to an insert at most.
	sm := r.Streaming
	require.Equal(t, 4, sm.Streams)
	require.Equal(t, 10, sm.DeltasPerStream)
	require.Equal(t, 4*10, sm.Deltas)
	require.Equal(t, 4*10, sm.ChunkToReader.Count)
	require.Positive(t, sm.Inserts)
	require.Positive(t, sm.InsertsPerDelta)
	require.LessOrEqual(t, sm.InsertsPerDelta, 1.0)
	require.Positive(t, sm.SQL.StatementsPerStep)
	require.Len(t, r.Targets, 7)
	require.Equal(t, "human in the loop: submission → next model call, p50", r.Targets[4].Name)
	require.Equal(t, r.HITL.SubmitToNextStep.P50MS, r.Targets[4].Measured)
	require.Equal(t, "token streaming: chunk to reader p99, 4 streams", r.Targets[5].Name)
	require.Equal(t, sm.ChunkToReader.P99MS, r.Targets[5].Measured)
	require.Equal(t, "token streaming: inserts per delta", r.Targets[6].Name)
	require.Equal(t, sm.InsertsPerDelta, r.Targets[6].Measured)
	require.NotEmpty(t, r.Machine.Postgres)
	require.Positive(t, r.Machine.PoolMaxConns)
	require.Contains(t, lines, "sequential: one session of 12 steps")
	require.Contains(t, lines, "human in the loop: 4 sessions suspended on a client tool, answered one at a time")
	require.Contains(t, lines, "token streaming: 4 streams of 10 deltas, one every 20ms")

	// The sessions are in the database, completed with every step; the
	// probe table is gone.
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var sessions, steps int
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT count(*), coalesce(sum(step_count), 0) FROM helix.sessions
		WHERE agent_type = $1 AND status = 'completed'`, AgentName).Scan(&sessions, &steps))
	require.Equal(t, 1+1+3, sessions, "warm-up, sequential and concurrent sessions")
	require.Equal(t, 3+12+3*4, steps)
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT count(*), coalesce(sum(step_count), 0) FROM helix.sessions
		WHERE agent_type = $1 AND status = 'completed'`, HITLAgentName).Scan(&sessions, &steps))
	require.Equal(t, warmupHITLSessions+4, sessions, "warm-up and measured human-in-the-loop sessions")
	require.Equal(t, (warmupHITLSessions+4)*2, steps)
	var deltas int
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT count(DISTINCT s.session_id), COALESCE(sum(c.n), 0) FROM helix.sessions s
		LEFT JOIN helix.streams t ON t.stream_id = s.session_id LEFT JOIN helix.stream_chunks c ON c.stream_key = t.key
		WHERE s.agent_type = $1`, StreamAgentType).Scan(&sessions, &deltas))
	require.Equal(t, 4, sessions, "one session per stream")
	require.Equal(t, 4*10, deltas, "every delta stored once")
	var probe *string
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT to_regclass($1)::text`, ProbeTable).Scan(&probe))
	require.Nil(t, probe)

	b, err := json.Marshal(r)
	require.NoError(t, err)
	var back Report
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, r.Sequential.Overhead, back.Sequential.Overhead)
	require.Equal(t, r.Sequential.Storage, back.Sequential.Storage)
	require.Equal(t, r.Streaming.ChunkToReader, back.Streaming.ChunkToReader)
	require.Equal(t, r.Targets, back.Targets)

	var text bytes.Buffer
	require.NoError(t, r.WriteText(&text))
	for _, want := range []string{"floor: round trip", "floor: single-row commit", "floor: DBOS agent-step skeleton", "engine: sequential, 12 steps",
		"engine: 3 sessions × 4 steps", "aggregate steps/s, 3 concurrent sessions", "statements per agent step",
		"submission → next model call", "SubmitToolResult", "statements per answer", "sequential storage per step",
		"chunk → reader, 4 streams × 10 deltas", "inserts per delta"} {
		require.Contains(t, text.String(), want)
	}
}

// newHarness returns a launched bench harness on a fresh database.
func benchHarness(b *testing.B, maxSteps int) *harness {
	b.Helper()
	cfg := Config{DatabaseURL: pgtest.NewURL(b)}
	require.NoError(b, cfg.withDefaults())
	h, err := newHarness(b.Context(), cfg, maxSteps)
	require.NoError(b, err)
	b.Cleanup(func() { h.close(context.Background()) })
	return h
}

func reportDistribution(b *testing.B, d Distribution) {
	b.ReportMetric(d.P50MS, "p50-ms")
	b.ReportMetric(d.P95MS, "p95-ms")
	b.ReportMetric(d.P99MS, "p99-ms")
}

// BenchmarkAgentStep measures the engine overhead per agent step of one
// session of b.N+1 steps (b.N samples); use -benchtime=1000x. With 200
// steps or more it also reports the late/early overhead ratio.
func BenchmarkAgentStep(b *testing.B) {
	h := benchHarness(b, b.N+1)
	b.ResetTimer()
	s, err := h.sequential(b.Context(), b.N+1)
	b.StopTimer()
	require.NoError(b, err)
	reportDistribution(b, s.Overhead)
	b.ReportMetric(s.SQL.StatementsPerStep, "statements/step")
	if b.N >= 200 {
		b.ReportMetric(s.LateEarlyRatio, "late/early")
	}
}

// BenchmarkAgentStepConcurrent runs 32 sessions of b.N/32 steps together
// (use -benchtime=3200x) and reports the aggregate steps/s and the
// per-step overhead under that load.
func BenchmarkAgentStepConcurrent(b *testing.B) {
	const sessions = 32
	per := max(2, b.N/sessions)
	h := benchHarness(b, per)
	b.ResetTimer()
	c, err := h.concurrent(b.Context(), sessions, per)
	b.StopTimer()
	require.NoError(b, err)
	reportDistribution(b, c.Overhead)
	b.ReportMetric(c.StepsPerSecond, "steps/s")
}

// BenchmarkHITLSubmitToNextStep runs b.N human-in-the-loop sessions one
// after the other (use -benchtime=200x) and reports the time from just
// before SubmitToolResult to the model's next call, and the submit call's
// own time.
func BenchmarkHITLSubmitToNextStep(b *testing.B) {
	h := benchHarness(b, DefaultWarmupSteps)
	// Warm the pool's connections and their prepared statements.
	_, err := h.sequential(b.Context(), DefaultWarmupSteps)
	require.NoError(b, err)
	_, err = h.hitl(b.Context(), warmupHITLSessions)
	require.NoError(b, err)
	b.ResetTimer()
	hl, err := h.hitl(b.Context(), b.N)
	b.StopTimer()
	require.NoError(b, err)
	reportDistribution(b, hl.SubmitToNextStep)
	b.ReportMetric(hl.Submit.P50MS, "submit-p50-ms")
	b.ReportMetric(hl.Submit.P95MS, "submit-p95-ms")
	b.ReportMetric(hl.SQL.StatementsPerStep, "statements/answer")
}

// BenchmarkDBOSStep is the floor of one no-op DBOS step.
func BenchmarkDBOSStep(b *testing.B) {
	h := benchHarness(b, 2)
	b.ResetTimer()
	f, err := h.workflowFloor(b.Context(), h.floors.noop, b.N+1)
	b.StopTimer()
	require.NoError(b, err)
	reportDistribution(b, f.Distribution)
}

// BenchmarkDBOSAgentStepSkeleton is the floor of the DBOS operations of one
// agent step with no work in them.
func BenchmarkDBOSAgentStepSkeleton(b *testing.B) {
	h := benchHarness(b, 2)
	b.ResetTimer()
	f, err := h.workflowFloor(b.Context(), h.floors.skeleton, b.N+1)
	b.StopTimer()
	require.NoError(b, err)
	reportDistribution(b, f.Distribution)
}

// BenchmarkRoundTrip is the floor of one statement on the pool.
func BenchmarkRoundTrip(b *testing.B) {
	h := benchHarness(b, 2)
	b.ResetTimer()
	f, err := h.roundTripFloor(b.Context(), b.N)
	b.StopTimer()
	require.NoError(b, err)
	reportDistribution(b, f.Distribution)
}

// BenchmarkCommit is the floor of one single-row INSERT commit on the pool.
func BenchmarkCommit(b *testing.B) {
	h := benchHarness(b, 2)
	ctx, cancel := context.WithTimeout(b.Context(), 10*time.Minute)
	defer cancel()
	b.ResetTimer()
	f, err := h.commitFloor(ctx, b.N)
	b.StopTimer()
	require.NoError(b, err)
	reportDistribution(b, f.Distribution)
}

// TestChurnSmall runs the churn mode for a few seconds and checks that its
// report is complete: every hot table sampled, the retention job's passes
// counted, the text written. It asserts no timing and no plateau.
func TestChurnSmall(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	r, err := Churn(t.Context(), ChurnConfig{DatabaseURL: url, Duration: 4 * time.Second, Retention: time.Second, Interval: time.Second,
		Sessions: 2, Steps: 3, Sample: time.Second})
	require.NoError(t, err)
	require.Positive(t, r.Sessions)
	require.GreaterOrEqual(t, r.GC.Passes, 1, "the first pass runs at Launch")
	require.GreaterOrEqual(t, len(r.Totals), 3, "a sample at the start, every second, and at the end")
	byName := map[string]ChurnTable{}
	for _, tb := range r.Tables {
		byName[tb.Name] = tb
	}
	for _, name := range []string{"helix.sessions", "helix.messages", "helix.checkpoints", "helix.step_journal", "helix.runs",
		"dbos.workflow_status", "dbos.operation_outputs"} {
		require.Contains(t, byName, name)
	}
	sessions := byName["helix.sessions"]
	require.Zero(t, sessions.Rows[0])
	// Every session the mode started completed; those left are the ones
	// the retention job has not deleted yet (a pass may end between the
	// last sample and the report: no equality).
	require.LessOrEqual(t, sessions.Rows[2], int64(r.Sessions))
	require.LessOrEqual(t, r.GC.Sessions, int64(r.Sessions))
	var text bytes.Buffer
	require.NoError(t, r.WriteText(&text))
	require.Contains(t, text.String(), "helix.sessions")
	require.Contains(t, text.String(), "retention job:")
	js, err := json.Marshal(r)
	require.NoError(t, err)
	require.Contains(t, string(js), `"msPerSession"`)
}
