package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/store"
)

// Modes and kill points of the human-in-the-loop crash tests; the child is
// the crash child (crash_child_test.go) running hitlAgent.
const (
	hitlModeRun     = "hitl-run"
	hitlModeRecover = "hitl-recover"
	// hitlKillWaiting kills the process while the run waits for both
	// answers.
	hitlKillWaiting = "waiting"
	// hitlKillConsumed kills the process after both answers were consumed,
	// while the approved tool runs.
	hitlKillConsumed = "consumed"
	// hitlKillHibernated kills the process once the run hibernated (its
	// workflow ended): the answers wake it in a continuation that another
	// process starts.
	hitlKillHibernated = "hibernated"

	hitlTarget = "hitl-target"
	hitlInput  = "Record s1, ask the user, then confirm."
)

// hitlAgent's one step calls a server tool, a client tool and an
// approval-gated tool; the second step answers. The gated tool stalls the
// killed process (gen 1) at its start at the hitlKillConsumed point.
func (r *crashRig) hitlAgent() *helix.Agent {
	type recordIn struct {
		Item string `json:"item"`
	}
	record := func(name string, opts ...helix.ToolOption) *helix.Tool {
		return helix.MustNewTool(name, "Record an item durably", func(ctx context.Context, in recordIn, tc helix.ToolContext) (map[string]string, error) {
			if err := r.toolRun(ctx, tc, "start"); err != nil {
				return nil, err
			}
			if err := r.stall(ctx, name == "confirm" && r.point == hitlKillConsumed); err != nil {
				return nil, err
			}
			if err := r.toolRun(ctx, tc, "done"); err != nil {
				return nil, err
			}
			return map[string]string{"recorded": in.Item}, nil
		}, opts...)
	}
	type q struct {
		Question string `json:"question"`
	}
	type a struct {
		Answer string `json:"answer"`
	}
	steps := []helix.StepResult{
		{Type: helix.StepToolCalls, Content: "Recording, asking and confirming.", StopReason: helix.StopToolUse, ToolCalls: []helix.ToolCall{
			{ID: "s1", Name: "record", Arguments: json.RawMessage(`{"item":"s1"}`)},
			{ID: "c1", Name: "ask", Arguments: json.RawMessage(`{"question":"go?"}`)},
			{ID: "g1", Name: "confirm", Arguments: json.RawMessage(`{"item":"g1"}`)},
		}},
		{Type: helix.StepText, Content: "All done.", StopReason: helix.StopEndTurn},
	}
	model := helix.ModelFunc(func(ctx context.Context, req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
		n := 0
		for _, m := range req.Messages {
			if m.Role == helix.RoleAssistant {
				n++
			}
		}
		if _, err := r.pool.Exec(ctx, `INSERT INTO crash_model_calls (session_id, step, gen) VALUES ($1, $2, $3)`, req.AgentID, n+1, r.gen); err != nil {
			return helix.StepResult{}, err
		}
		cb.TextDelta(steps[n].Content)
		return steps[n], nil
	})
	return &helix.Agent{
		Name:  "hitl-recorder",
		Model: model,
		Tools: []*helix.Tool{
			record("record"),
			helix.MustNewClientTool[q, a]("ask", "Ask the user"),
			record("confirm", helix.RequireApproval()),
		},
	}
}

// TestHITLCrashRecovery kills the engine's process while a run waits for
// human input, or right after it consumed the answers, and lets a new
// process with the same executor ID finish the session. In the first case
// the answers are submitted while no process runs the session: they wait
// in Postgres and the recovered run consumes them. In both, each answer is
// delivered once, nothing is lost, the server tool of the suspended step is
// never re-run, and the approved tool's effect completes once.
func TestHITLCrashRecovery(t *testing.T) {
	t.Parallel()
	server := serverURL(t)
	for _, point := range []string{hitlKillWaiting, hitlKillConsumed, hitlKillHibernated} {
		for _, to := range crashTakeovers {
			t.Run(point+"/"+to.name, func(t *testing.T) {
				t.Parallel()
				testHITLCrash(t, server, point, to)
			})
		}
	}
}

func testHITLCrash(t *testing.T, server, point string, to crashTakeover) {
	d := newCrashDB(t, server)
	killedEnv, recoveringEnv := to.killedEnv, to.recoveringEnv
	if point == hitlKillHibernated {
		hib := crashEnvHibernate + "=200ms"
		killedEnv, recoveringEnv = append(slices.Clone(killedEnv), hib), append(slices.Clone(recoveringEnv), hib)
	}
	killed := startCrashChild(t, d.url, hitlModeRun, point, 1, killedEnv...)
	killed.waitFor(t, "the run to suspend", func(ctx context.Context) (bool, error) {
		var status string
		err := d.pool.QueryRow(ctx, `SELECT status FROM helix.runs WHERE session_id = $1`, hitlTarget).Scan(&status)
		if isNoRowsErr(err) {
			return false, nil
		}
		return status == string(helix.RunSuspendedClientTool), err
	})
	// A process that takes submissions but runs none of the
	// session's workflows: a client. (An engine would not do: DBOS
	// recovers a workflow by putting it on its internal queue,
	// which any launched engine of the application version polls,
	// and this one has not registered the agent.)
	sub, err := engine.NewClient(t.Context(), engine.ClientConfig{DatabaseURL: d.url})
	require.NoError(t, err)
	defer func() { require.NoError(t, sub.Close()) }()
	answer := func() {
		r, err := helix.ClientToolResult("c1", map[string]string{"answer": "yes"})
		require.NoError(t, err)
		for _, s := range []helix.ToolSubmission{r, helix.Approve("g1", "ok")} {
			res, err := sub.SubmitToolResult(t.Context(), hitlTarget, s)
			require.NoError(t, err)
			require.False(t, res.AlreadyCompleted)
		}
	}
	var killedAt time.Time
	switch point {
	case hitlKillWaiting:
		killed.kill(t)
		killedAt = d.now(t)
		d.waitGone(t, killed.appName)
		to.afterKill(t, d)
		answer() // nothing runs the session now: it is between owners
		require.Equal(t, "PENDING", d.workflowStatus(t, hitlTarget))
	case hitlKillHibernated:
		killed.waitFor(t, "the run to hibernate", func(ctx context.Context) (bool, error) {
			var hibernated bool
			err := d.pool.QueryRow(ctx, `SELECT hibernated_at IS NOT NULL FROM helix.runs WHERE session_id = $1`, hitlTarget).Scan(&hibernated)
			return hibernated && d.workflowStatus(t, hitlTarget) == "SUCCESS", err
		})
		killed.kill(t)
		killedAt = d.now(t)
		d.waitGone(t, killed.appName)
		to.afterKill(t, d)
		answer() // no process holds the session, and none needs to be taken over
	default:
		answer()
		killed.waitFor(t, "the approved tool to start", func(ctx context.Context) (bool, error) {
			var n int
			err := d.pool.QueryRow(ctx, `SELECT count(*) FROM crash_tool_runs WHERE tool_call_id = 'g1' AND phase = 'start'`).Scan(&n)
			return n == 1, err
		})
		killed.kill(t)
		killedAt = d.now(t)
		d.waitGone(t, killed.appName)
		to.afterKill(t, d)
	}

	recovering := startCrashChild(t, d.url, hitlModeRecover, "", 2, recoveringEnv...)
	recovering.wait(t)
	if point != hitlKillHibernated {
		// A hibernated session needs no takeover: the recovering process
		// may finish it before its sweep claims the dead executor.
		to.check(t, d, killedAt)
	}

	st, err := d.st.LoadState(t.Context(), hitlTarget)
	require.NoError(t, err)
	require.Equal(t, helix.SessionCompleted, st.Status, st.Error)
	require.Empty(t, st.PendingClientToolCalls)
	runs, err := d.st.ListRuns(t.Context(), hitlTarget)
	require.NoError(t, err)
	require.Len(t, runs, 1, "the suspended run itself finished")
	if point == hitlKillHibernated {
		require.Equal(t, 1, runs[0].Wakes, "one continuation took both answers")
	}
	require.Equal(t, "SUCCESS", d.workflowStatus(t, hitlTarget))

	msgs := d.messages(t, hitlTarget)
	var shape []string
	for _, m := range msgs {
		shape = append(shape, string(m.Role)+":"+m.ToolCallID)
	}
	require.Equal(t, []string{"user:", "assistant:", "tool:s1", "tool:c1", "tool:g1", "assistant:"}, shape,
		"no message lost or repeated, results in the model's order")
	require.JSONEq(t, `{"answer":"yes"}`, msgs[3].Content)
	require.JSONEq(t, `{"recorded":"g1"}`, msgs[4].Content)

	require.Equal(t, map[int][]int{1: {1}, 2: {2}}, d.modelCalls(t, hitlTarget), "each model step ran once")
	tools := d.toolRuns(t, hitlTarget)
	require.Equal(t, []int{1}, tools["s1"].starts, "the server tool ran once, before the suspension")
	require.Equal(t, []int{1}, tools["s1"].dones)
	wantStarts := []int{2}
	if point == hitlKillConsumed {
		wantStarts = []int{1, 2} // killed mid-tool: run again, same key
	}
	require.Equal(t, wantStarts, tools["g1"].starts)
	require.Equal(t, []int{2}, tools["g1"].dones, "the approved tool's effect completed once")
	require.Len(t, tools["g1"].keys, 1, "one idempotency key across processes")

	var answers, sent, consumed int
	require.NoError(t, d.pool.QueryRow(t.Context(), `SELECT count(*) FROM helix.usage WHERE session_id = $1 AND source_type = $2`,
		hitlTarget, store.UsageClientToolWaitMS).Scan(&answers))
	require.Equal(t, 2, answers, "each answer recorded once")
	require.NoError(t, d.pool.QueryRow(t.Context(), `SELECT count(*), count(*) FILTER (WHERE consumed)
		FROM dbos.notifications WHERE destination_uuid = $1`, runs[0].WorkflowID).Scan(&sent, &consumed))
	wantSent := 2 // one message per answer
	if point == hitlKillHibernated {
		// The first answer woke the hibernated run and left no message
		// (its continuation read it from the session's pending call); the
		// second found the run woken.
		wantSent = 1
	}
	require.Equal(t, wantSent, sent, "one message per answer to a run that was not hibernated")
	require.Equal(t, wantSent, consumed, "each consumed once")

	count := map[helix.ChunkType]int{}
	ends := map[string]int{}
	for _, c := range d.chunks(t, hitlTarget) {
		count[c.Chunk.ChunkType()]++
		if e, ok := c.Chunk.(*helix.ToolEndChunk); ok {
			ends[e.ToolCallID]++
		}
	}
	require.Equal(t, 1, count[helix.ChunkToolApprovalRequest])
	require.Equal(t, 1, count[helix.ChunkToolApprovalResponse], "the approval was delivered once")
	require.Equal(t, map[string]int{"s1": 1, "c1": 1, "g1": 1}, ends, "one tool_end per call")
	require.Zero(t, count[helix.ChunkStreamResync], "no model attempt was lost")
}

func isNoRowsErr(err error) bool { return errors.Is(err, pgx.ErrNoRows) }
