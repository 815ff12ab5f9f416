package engine_test

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/workflows"
)

// hibernatingQueued returns a launched engine on url, executor id, that
// admits its runs through a queue and whose waits hibernate after 50 ms
// (sweeps every 100 ms).
func hibernatingQueued(t *testing.T, url, id string, agents ...*helix.Agent) *engine.Engine {
	t.Helper()
	return newEngineWith(t, hibernatingQueuedConfig(url, id), agents...)
}

// hibernatingQueuedConfig is the configuration of hibernatingQueued.
func hibernatingQueuedConfig(url, id string) engine.Config {
	return engine.Config{DatabaseURL: url, ExecutorID: id, HibernateAfter: 50 * time.Millisecond,
		RecordedRunSweepInterval: 100 * time.Millisecond, Queue: &engine.QueueConfig{PollingInterval: 20 * time.Millisecond}}
}

// segment is a DBOS workflow of a queued run's segment: its ID, status,
// queue and the workflow that enqueued it.
type segment struct {
	id, status, queue, parent string
}

// runSegments lists the segments of the queued run whose workflow is
// driver, in order, whichever workflow enqueued them.
func runSegments(t *testing.T, pool *pgxpool.Pool, driver string) []segment {
	t.Helper()
	rows, _ := pool.Query(t.Context(), `SELECT workflow_uuid, status, coalesce(queue_name, ''), coalesce(parent_workflow_id, '')
		FROM dbos.workflow_status WHERE starts_with(workflow_uuid, $1) ORDER BY created_at`, workflows.SegmentPrefix(driver))
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (segment, error) {
		var s segment
		return s, r.Scan(&s.id, &s.status, &s.queue, &s.parent)
	})
	require.NoError(t, err)
	return out
}

// hibernatedQueued is a payer session on a hibernating queued engine of a
// fresh database, its driver hibernated.
type hibernatedQueued struct {
	e     *engine.Engine
	h     *engine.Handle
	runs  *sync.Map
	pool  *pgxpool.Pool
	url   string
	agent *helix.Agent
}

// hibernatedQueuedPayer starts a payer session (with hooks, when not nil)
// on a hibernating queued engine (executor id) of a fresh database and
// waits until its driver hibernated.
func hibernatedQueuedPayer(t *testing.T, id string, hooks *helix.Hooks) hibernatedQueued {
	t.Helper()
	q := hibernatedQueued{url: pgtest.NewURL(t), runs: &sync.Map{}}
	q.pool = appPool(t, q.url)
	q.agent = payer(q.runs)
	q.agent.Hooks = hooks
	q.e = hibernatingQueued(t, q.url, id, q.agent)
	var err error
	q.h, err = q.e.Execute(t.Context(), q.agent, engine.Input{Message: "pay bob"}, nil)
	require.NoError(t, err)
	awaitHibernated(t, q.pool, q.h.RunID)
	return q
}

// A queued run waiting for an approval hibernates: its driver's workflow
// ends (SUCCESS, the run's hibernated_at set), with no segment running.
// Its engine stops; another one receives the approval and starts the
// driver's continuation, which admits the run's next segment through the
// queue, under the driver's segment IDs; the run completes there, the
// approved tool run once, the hooks of the suspension fired once.
func TestQueuedRunHibernatesAndCompletesAfterApproval(t *testing.T) {
	t.Parallel()
	var hc hookCounts
	q := hibernatedQueuedPayer(t, "hibq-a", hc.hooks())
	h, pool, runs := q.h, q.pool, q.runs
	segs := runSegments(t, pool, h.WorkflowID)
	require.Len(t, segs, 1)
	require.Equal(t, "SUCCESS", segs[0].status, "no segment runs while the run hibernates")
	require.NoError(t, q.e.Shutdown(t.Context()))

	b := hibernatingQueued(t, q.url, "hibq-b", q.agent)
	require.Empty(t, submit(t, b, h.SessionID, helix.Approve("t1", "ok")).Remaining)
	hb, err := b.Run(t.Context(), h.SessionID, h.RunID)
	require.NoError(t, err)
	out := waitFor(t, hb, helix.AgentCompleted)
	require.JSONEq(t, `"paid"`, string(out.Output))
	require.EqualValues(t, 1, executions2(runs, "t1"), "the approved tool ran once")
	require.EqualValues(t, 1, hc.suspended.Load())
	require.EqualValues(t, 1, hc.resumed.Load())
	require.Equal(t, runState{wakes: 1, status: "SUCCESS", latest: "SUCCESS"}, readRunState(t, pool, h.RunID))
	want := []segment{
		{id: workflows.SegmentID(h.WorkflowID, 1), status: "SUCCESS", queue: engine.DefaultQueueName, parent: h.WorkflowID},
		{id: workflows.SegmentID(h.WorkflowID, 2), status: "SUCCESS", queue: engine.DefaultQueueName, parent: workflows.WakeID(h.WorkflowID, 1)},
	}
	// The last segment reports to the continuation before DBOS records its
	// own end: the run's result can come first.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, want, runSegments(t, pool, h.WorkflowID))
	}, 10*time.Second, 5*time.Millisecond, "the continuation admitted the run's second segment through the queue")
	require.Equal(t, []string{"user", "assistant", "tool", "assistant"}, roles(allMessages(t, b, h.SessionID)))
}

// A client tool's deadline fires for a hibernated queued run while the
// engine that started it is gone: another engine's sweep wakes the
// driver at the deadline, and the model sees the call time out.
func TestQueuedRunHibernatedClientToolDeadlineFires(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := appPool(t, url)
	var timedOut atomic.Bool
	agent := &helix.Agent{Name: "asker-q", Tools: []*helix.Tool{askUser(helix.ClientTimeout(2 * time.Second))}, Model: script(
		calls(call("q1", "ask_user", `{"question":"colour?"}`)),
		func(req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
			last := req.Messages[len(req.Messages)-1]
			timedOut.Store(last.Role == helix.RoleTool && strings.Contains(last.Content, "did not return a result"))
			return text("no answer")(req, cb)
		},
	)}
	a := hibernatingQueued(t, url, "hibq-c", agent)
	h, err := a.Execute(t.Context(), agent, engine.Input{Message: "ask"}, nil)
	require.NoError(t, err)
	awaitHibernated(t, pool, h.RunID)
	require.NoError(t, a.Shutdown(t.Context()))

	b := hibernatingQueued(t, url, "hibq-d", agent)
	hb, err := b.Run(t.Context(), h.SessionID, h.RunID)
	require.NoError(t, err)
	waitFor(t, hb, helix.AgentCompleted)
	require.True(t, timedOut.Load(), "the model saw the call time out")
	require.Equal(t, runState{wakes: 1, status: "SUCCESS", latest: "SUCCESS"}, readRunState(t, pool, h.RunID))
	require.Len(t, runSegments(t, pool, h.WorkflowID), 2)
}

// An interrupt wakes a hibernated queued run, which ends interrupted;
// Resume continues it, and the approval given then completes it.
func TestQueuedRunHibernatedInterruptedThenResumed(t *testing.T) {
	t.Parallel()
	q := hibernatedQueuedPayer(t, "hibq-e", nil)
	e, h, runs, pool := q.e, q.h, q.runs, q.pool
	require.NoError(t, e.Interrupt(t.Context(), h.SessionID, "stop"))
	waitFor(t, h, helix.AgentInterrupted)
	s := readRunState(t, pool, h.RunID)
	require.Equal(t, 1, s.wakes, "the interrupt woke the driver")
	require.Equal(t, "SUCCESS", s.latest)

	h2 := resumeAndApprove(t, e, h.SessionID)
	waitFor(t, h2, helix.AgentCompleted)
	require.EqualValues(t, 1, executions2(runs, "t1"))
}

// Aborting a hibernated queued run ends it: nothing of it runs again, no
// segment is left queued, and a late answer is refused.
func TestQueuedRunHibernatedAborted(t *testing.T) {
	t.Parallel()
	q := hibernatedQueuedPayer(t, "hibq-f", nil)
	e, h, runs, pool := q.e, q.h, q.runs, q.pool
	require.NoError(t, e.Abort(t.Context(), h.SessionID, "no longer needed"))
	out := result(t, h)
	require.Equal(t, helix.AgentFailed, out.Status)
	require.Contains(t, out.Error, "no longer needed")
	_, err := e.SubmitToolResult(t.Context(), h.SessionID, helix.Approve("t1", "late"))
	require.Error(t, err)
	require.EqualValues(t, 0, executions2(runs, "t1"))
	for _, s := range runSegments(t, pool, h.WorkflowID) {
		require.Contains(t, []string{"SUCCESS", "CANCELLED"}, s.status, "segment %s", s.id)
	}
	require.Len(t, runSegments(t, pool, h.WorkflowID), 1, "no segment was enqueued after the abort")
}

// A hibernated queued run whose continuation goes on to a step with a
// sub-agent: the sub-agent's queued run reports its outcome to the
// continuation (the workflow that waits for it), not to the ended driver,
// and the run completes; no message is left untaken for the driver.
func TestQueuedRunHibernatedThenRunsASubAgent(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := appPool(t, url)
	var runs sync.Map
	lead := &helix.Agent{
		Name:  "lead-q",
		Tools: []*helix.Tool{transferTool(&runs), helix.MustSubAgentTool(summarizer(func(string) {}), nil, nil)},
		Model: script(
			calls(call("t1", "transfer", `{"to":"bob","amount":5}`)),
			calls(call("s1", "subagent__summarizer", `{"task":"alpha"}`)),
			text("paid and summarized"),
		),
	}
	e := hibernatingQueued(t, url, "hibq-g", lead)
	h, err := e.Execute(t.Context(), lead, engine.Input{Message: "pay, then summarize"}, nil)
	require.NoError(t, err)
	awaitHibernated(t, pool, h.RunID)
	submit(t, e, h.SessionID, helix.Approve("t1", "ok"))
	waitFor(t, h, helix.AgentCompleted)
	msgs := allMessages(t, e, h.SessionID)
	require.JSONEq(t, `{"summary":"short alpha"}`, msgs[len(msgs)-2].Content, "the child's output is the tool result")
	require.EqualValues(t, 1, executions2(&runs, "t1"))

	var untaken, taken int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE destination_uuid = $1 AND NOT consumed),
		count(*) FILTER (WHERE destination_uuid = $2 AND consumed) FROM dbos.notifications`,
		h.WorkflowID, workflows.WakeID(h.WorkflowID, 1)).Scan(&untaken, &taken))
	require.Zero(t, untaken, "no report was sent to the ended driver")
	require.Equal(t, 3, taken, "the continuation took its two segments' reports and the sub-agent's")
}

// resumeAndApprove resumes the interrupted session sessionID, waits until
// its call t1 waits again, approves it and returns the resumed run.
func resumeAndApprove(t *testing.T, e *engine.Engine, sessionID string) *engine.Handle {
	t.Helper()
	h, err := e.Resume(t.Context(), sessionID, nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		pending, err := e.PendingToolCalls(t.Context(), sessionID)
		return err == nil && len(pending) == 1
	}, 30*time.Second, 10*time.Millisecond)
	submit(t, e, sessionID, helix.Approve("t1", "ok"))
	return h
}

// A database outage longer than a step's retries, beginning as a woken
// queued run's continuation reads where its driver stopped (its last
// segment), is waited out: the step used to fail after its retries (about
// three seconds), ending the continuation failed in DBOS with its run left
// running.
func TestQueuedRunWokenDuringAnOutageCompletes(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := appPool(t, url)
	var runs sync.Map
	agent := payer(&runs)
	var buf syncBuffer
	p, proxied := newCutProxy(t, url)
	loss := newAckLossOn("coalesce(max(substr(workflow_uuid", "SELECT 1\x00")
	loss.then = p.goDown
	p.mu.Lock()
	p.loss = loss
	p.mu.Unlock()
	log := zerolog.New(&buf)
	cfg := hibernatingQueuedConfig(proxied, "hibq-outage")
	cfg.Logger = &log
	e := newEngineWith(t, cfg, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "pay bob"}, nil)
	require.NoError(t, err)
	awaitHibernated(t, pool, h.RunID)
	answered := make(chan error, 1)
	go func() {
		_, err := e.SubmitToolResult(t.Context(), h.SessionID, helix.Approve("t1", "fine"))
		answered <- err
	}()
	<-loss.lost
	<-time.After(outage) // the scenario's input, not a wait for a condition
	p.setDown(false)
	require.NoError(t, <-answered)

	res := result(t, h)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	require.EqualValues(t, 1, executions2(&runs, "t1"))
	require.Contains(t, buf.String(), `"event":"workflow.outage_retry"`, "the continuation waited the outage out")
	requireNoStepFailed(t, &buf)
}
