package engine_test

import (
	"context"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// A process that stops mid-model-call (Shutdown cancels the step, which is
// never recorded) is replaced by one with the same executor ID: Launch
// recovers the workflow, the completed tool step is not re-run, the model
// step runs again, and the stream shows the lost attempt's text removed and
// a stream_resync in its place.
func TestRecoveryAfterStopMidModelCall(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	var x executions
	blocked := make(chan struct{})
	dead := make(chan struct{}) // closed once the first engine is shut down
	var attempts atomic.Int32
	build := func(block bool) *helix.Agent {
		return &helix.Agent{Name: "recoverable", Tools: []*helix.Tool{noteTool(&x)}, Model: script(
			calls(call("n1", "note", `{"text":"a"}`)),
			func(req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
				attempts.Add(1)
				cb.TextDelta("partial-")
				if block {
					close(blocked)
					<-dead // the process "dies" here: this attempt never completes
					return helix.StepResult{}, context.Canceled
				}
				cb.TextDelta("final answer")
				return helix.StepResult{Type: helix.StepText, Content: "partial-final answer"}, nil
			},
		)}
	}

	first, err := engine.New(t.Context(), engine.Config{DatabaseURL: url, ExecutorID: "exec-a", ShutdownTimeout: 200e6})
	require.NoError(t, err)
	a1 := build(true)
	require.NoError(t, first.Register(a1))
	require.NoError(t, first.Launch(t.Context()))
	h, err := first.Execute(t.Context(), a1, engine.Input{Message: "go"}, nil)
	require.NoError(t, err)
	<-blocked
	_ = first.Shutdown(context.Background()) // the blocked step is abandoned, not recorded
	close(dead)

	second := newEngineWithID(t, url, "exec-a", build(false))
	h2, err := second.Run(t.Context(), h.SessionID, h.RunID)
	require.NoError(t, err)
	res := result(t, h2)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	require.JSONEq(t, `"partial-final answer"`, string(res.Output))
	require.Equal(t, int32(2), attempts.Load(), "the unrecorded model call ran again")
	require.Equal(t, map[string]int{h.WorkflowID + "/n1": 1}, x.keys, "the recorded tool step was not re-run")

	chunks, err := engine.StoreOf(second).ReadChunks(t.Context(), h.SessionID, 0, 1000)
	require.NoError(t, err)
	var text strings.Builder
	resyncs := 0
	for _, c := range chunks {
		switch ch := c.Chunk.(type) {
		case *helix.TextDeltaChunk:
			text.WriteString(ch.Delta)
		case *helix.StreamResyncChunk:
			resyncs++
			require.Equal(t, helix.ResyncCrashRecovery, ch.Reason)
		}
	}
	require.Equal(t, "partial-final answer", text.String(), "the committed step's text once, the lost attempt removed")
	require.Equal(t, 1, resyncs)
	msgs := allMessages(t, second, h.SessionID)
	require.Len(t, msgs, 4, "no duplicate message")
}

func newEngineWithID(t *testing.T, url, executorID string, agents ...*helix.Agent) *engine.Engine {
	t.Helper()
	e, err := engine.New(t.Context(), engine.Config{DatabaseURL: url, ExecutorID: executorID})
	require.NoError(t, err)
	require.NoError(t, e.Register(agents...))
	require.NoError(t, e.Launch(t.Context()))
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	return e
}

// A launched engine records its executor in helix.executors and marks the
// row stopped at Shutdown. A recorded run whose workflow never started is
// started only by an engine that registers its agent: another one leaves
// it alone instead of failing it.
func TestLaunchHeartbeatAndForeignOrphans(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	defer pool.Close()
	agent := &helix.Agent{Name: "orphaned", Model: script(text("finally"))}

	// A run recorded with its session, as Execute does, whose workflow
	// was never started (its process died in between).
	st, err := postgres.New(pool)
	require.NoError(t, err)
	defer st.Close()
	_, err = st.CreateSession(t.Context(), store.CreateSessionParams{SessionID: "orphan-1", AgentType: "orphaned"})
	require.NoError(t, err)
	_, err = st.AppendMessages(t.Context(), "orphan-1", []helix.Message{helix.UserMessage("hi")})
	require.NoError(t, err)
	_, err = st.CreateRun(t.Context(), store.CreateRunParams{RunID: "r-orphan", SessionID: "orphan-1", WorkflowID: "orphan-1-turn-1"})
	require.NoError(t, err)

	other := newEngineWithID(t, url, "exec-other", &helix.Agent{Name: "unrelated", Model: script(text("x"))})
	var id, host string
	var pid int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT executor_id, hostname, pid FROM helix.executors`).Scan(&id, &host, &pid))
	require.Equal(t, "exec-other", id)
	require.Equal(t, os.Getpid(), pid)
	run, err := engine.StoreOf(other).GetRun(t.Context(), "r-orphan")
	require.NoError(t, err)
	require.Equal(t, helix.RunRunning, run.Status, "left alone by an engine without its agent")

	owner := newEngineWithID(t, url, "exec-owner", agent)
	h, err := owner.Run(t.Context(), "orphan-1", "r-orphan")
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, result(t, h).Status, "started by the engine that has its agent")

	require.NoError(t, other.Shutdown(t.Context()))
	var stopped bool
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT stopped_at IS NOT NULL FROM helix.executors WHERE executor_id = 'exec-other'`).Scan(&stopped))
	require.True(t, stopped, "a clean shutdown marks the executor's row stopped (peers take over what it left at once)")
}
