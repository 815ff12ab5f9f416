package engine_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
	"github.com/helix-agents/helix-dbos/workflows"
)

// newQueuedEngineOn returns a launched engine on url that admits its runs
// through a queue configured by q.
func newQueuedEngineOn(t *testing.T, url string, q engine.QueueConfig, agents ...*helix.Agent) *engine.Engine {
	t.Helper()
	return newEngineWith(t, engine.Config{DatabaseURL: url, Queue: &q}, agents...)
}

// gate is a model that records which sessions called it, in order, and
// holds each call until the session is let go.
type gate struct {
	mu      sync.Mutex
	started []string
	enter   chan string
	release map[string]chan struct{}
}

func newGate() *gate {
	return &gate{enter: make(chan string, 100), release: map[string]chan struct{}{}}
}

func (g *gate) ch(session string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	c, ok := g.release[session]
	if !ok {
		c = make(chan struct{})
		g.release[session] = c
	}
	return c
}

// let lets session's model call (and any later one) return.
func (g *gate) let(session string) { close(g.ch(session)) }

func (g *gate) model() helix.Model {
	return helix.ModelFunc(func(ctx context.Context, req helix.ModelRequest, _ helix.StreamCallbacks) (helix.StepResult, error) {
		g.mu.Lock()
		g.started = append(g.started, req.AgentID)
		g.mu.Unlock()
		g.enter <- req.AgentID
		select {
		case <-g.ch(req.AgentID):
		case <-ctx.Done():
			return helix.StepResult{}, ctx.Err()
		}
		return helix.StepResult{Type: helix.StepText, Content: "done", StopReason: helix.StopEndTurn}, nil
	})
}

// entered waits for the next session to call the model.
func (g *gate) entered(t *testing.T) string {
	t.Helper()
	select {
	case s := <-g.enter:
		return s
	case <-time.After(30 * time.Second):
		t.Fatal("no session called the model within 30 s")
		return ""
	}
}

// segmentStatuses returns the DBOS statuses of the segments of the run
// whose workflow is workflowID, in order.
func segmentStatuses(t *testing.T, pool *pgxpool.Pool, workflowID string) []string {
	t.Helper()
	rows, _ := pool.Query(t.Context(), `SELECT status FROM dbos.workflow_status WHERE parent_workflow_id = $1
		AND starts_with(workflow_uuid, $1 || '-seg-') ORDER BY created_at`, workflowID)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// awaitSegmentStatuses waits until the segments of the queued run whose
// workflow is workflowID have the statuses want: a segment reports its
// outcome to its driver before DBOS records its own end, so the run's
// result (or its suspension) can come first.
func awaitSegmentStatuses(t *testing.T, pool *pgxpool.Pool, workflowID string, want []string, msg string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, want, segmentStatuses(t, pool, workflowID))
	}, 10*time.Second, 5*time.Millisecond, msg)
}

func testPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// A queued run that waits for a person holds no slot: with one slot, a
// session waiting for an approval lets another session run to its end;
// the approval then queues the run's next segment, which finishes it, the
// approved tool run once.
func TestQueuedRunWaitsForAPersonWithoutASlot(t *testing.T) {
	t.Parallel()
	var runs sync.Map
	pay := payer(&runs)
	chat := &helix.Agent{Name: "chat", Model: script(text("hello"))}
	url := pgtest.NewURL(t)
	e := newQueuedEngineOn(t, url, engine.QueueConfig{WorkerConcurrency: 1, PollingInterval: 20 * time.Millisecond}, pay, chat)
	pool := testPool(t, url)

	waiting, err := e.Execute(t.Context(), pay, engine.Input{Message: "pay bob"}, &engine.ExecuteOptions{SessionID: "waiting"})
	require.NoError(t, err)
	require.Equal(t, helix.AgentSuspendedClientTool, result(t, waiting).Status)

	other, err := e.Execute(t.Context(), chat, engine.Input{Message: "hi"}, &engine.ExecuteOptions{SessionID: "other"})
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, waitFor(t, other, helix.AgentCompleted).Status)
	awaitSegmentStatuses(t, pool, waiting.WorkflowID, []string{"SUCCESS"}, "the waiting run's first segment ended at the wait")

	require.False(t, submit(t, e, "waiting", helix.Approve("t1", "ok")).AlreadyCompleted)
	res := waitFor(t, waiting, helix.AgentCompleted)
	require.JSONEq(t, `"paid"`, string(res.Output))
	require.EqualValues(t, 1, executions2(&runs, "t1"), "the approved tool ran once")
	awaitSegmentStatuses(t, pool, waiting.WorkflowID, []string{"SUCCESS", "SUCCESS"}, "the answer queued a second segment")
	require.Equal(t, []string{"user", "assistant", "tool", "assistant"}, roles(allMessages(t, e, "waiting")))
}

// The partition limit keeps a tenant with a backlog from taking every
// slot: with two slots and at most one per partition, a small tenant's
// session starts while the large tenant's first session still runs and
// its others wait.
func TestQueuePartitionsKeepATenantFromStarvingAnother(t *testing.T) {
	t.Parallel()
	g := newGate()
	agent := &helix.Agent{Name: "tenant", Model: g.model()}
	url := pgtest.NewURL(t)
	e := newQueuedEngineOn(t, url, engine.QueueConfig{WorkerConcurrency: 2, PartitionWorkerConcurrency: 1, PollingInterval: 20 * time.Millisecond}, agent)

	var big []*engine.Handle
	for i := range 6 {
		h, err := e.Execute(t.Context(), agent, engine.Input{Message: "work"}, &engine.ExecuteOptions{SessionID: fmt.Sprintf("big-%d", i), UserID: "big"})
		require.NoError(t, err)
		big = append(big, h)
	}
	first := g.entered(t)
	require.Contains(t, first, "big-")
	small, err := e.Execute(t.Context(), agent, engine.Input{Message: "work"}, &engine.ExecuteOptions{SessionID: "small-0", UserID: "small"})
	require.NoError(t, err)
	require.Equal(t, "small-0", g.entered(t), "the small tenant's session takes the second slot, not the large tenant's next")
	g.let("small-0")
	waitFor(t, small, helix.AgentCompleted)

	for _, h := range big {
		g.let(h.SessionID)
	}
	for _, h := range big {
		waitFor(t, h, helix.AgentCompleted)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	require.Len(t, g.started, 7, "every session called the model once")
}

// The queue's rate limit caps the segments it starts per period, across
// the cluster (two engines here): DBOS's own start times show no window of
// one period with more starts than the limit.
func TestQueueRateLimit(t *testing.T) {
	t.Parallel()
	agent := &helix.Agent{Name: "limited", Model: script(text("ok"))}
	url := pgtest.NewURL(t)
	q := engine.QueueConfig{RateLimit: 2, RatePeriod: 500 * time.Millisecond, PollingInterval: 20 * time.Millisecond}
	engines := []*engine.Engine{newQueuedEngineOn(t, url, q, agent), newQueuedEngineOn(t, url, q, agent)}
	pool := testPool(t, url)
	var hs []*engine.Handle
	for i := range 8 {
		h, err := engines[i%2].Execute(t.Context(), agent, engine.Input{Message: "go"}, &engine.ExecuteOptions{SessionID: fmt.Sprintf("limited-%d", i)})
		require.NoError(t, err)
		hs = append(hs, h)
	}
	for _, h := range hs {
		waitFor(t, h, helix.AgentCompleted)
	}
	rows, _ := pool.Query(t.Context(), `SELECT started_at_epoch_ms FROM dbos.workflow_status
		WHERE queue_name = $1 ORDER BY started_at_epoch_ms`, engine.DefaultQueueName)
	starts, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, starts, 8)
	for i := 0; i+q.RateLimit < len(starts); i++ {
		require.GreaterOrEqual(t, starts[i+q.RateLimit]-starts[i], q.RatePeriod.Milliseconds(),
			"starts %d and %d are less than a period apart: %v", i, i+q.RateLimit, starts)
	}
}

// A session aborted while it waits in the queue leaves it at once and
// never runs: its segment is cancelled, its model never called.
func TestAbortWhileQueued(t *testing.T) {
	t.Parallel()
	s := queueBehindABusySession(t, "queued")
	e, g, pool, busy, queued := s.e, s.g, s.pool, s.busy, s.queued
	q, err := e.Queued(t.Context(), "queued")
	require.NoError(t, err)
	require.NotNil(t, q, "the session waits in the queue")
	require.Equal(t, engine.DefaultQueueName, q.Queue)
	require.Equal(t, engine.DefaultPartitionKey, q.PartitionKey, "no user, no partition key: the default partition")
	require.Zero(t, q.Ahead)
	q, err = e.Queued(t.Context(), "busy")
	require.NoError(t, err)
	require.Nil(t, q, "a running session is not queued")

	require.NoError(t, e.Abort(t.Context(), "queued", "changed my mind"))
	res := waitFor(t, queued, helix.AgentFailed)
	require.Contains(t, res.Error, "changed my mind")
	require.Equal(t, []string{"CANCELLED"}, segmentStatuses(t, pool, queued.WorkflowID), "the abort took the run off the queue")

	g.let("busy")
	waitFor(t, busy, helix.AgentCompleted)
	g.mu.Lock()
	defer g.mu.Unlock()
	require.Equal(t, []string{"busy"}, g.started, "the aborted session never called its model")
	q, err = e.Queued(t.Context(), "queued")
	require.NoError(t, err)
	require.Nil(t, q)
	chunks := streamChunks(t, queued)
	require.NotEmpty(t, chunks)
	rq, ok := chunks[0].(*helix.RunQueuedChunk)
	require.True(t, ok, "a queued run's stream says so first, got %T", chunks[0])
	require.Equal(t, queued.RunID, rq.RunID)
	require.Equal(t, engine.DefaultQueueName, rq.Queue)
}

// A fork of a queued run's workflow or of one of its segments, made with
// DBOS's tools, runs nothing: a driver's copy would replay the original's
// segments, a segment's copy would run its steps again.
func TestDBOSForkOfAQueuedRunRunsNothing(t *testing.T) {
	t.Parallel()
	var x executions
	agent := &helix.Agent{
		Name:  "noter",
		Tools: []*helix.Tool{noteTool(&x)},
		Model: script(calls(call("n1", "note", `{"text":"a"}`)), text("noted")),
	}
	url := pgtest.NewURL(t)
	e := newQueuedEngineOn(t, url, engine.QueueConfig{PollingInterval: 20 * time.Millisecond}, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "note a"}, nil)
	require.NoError(t, err)
	waitFor(t, h, helix.AgentCompleted)
	before := allMessages(t, e, h.SessionID)

	client := dbosClient(t, url)
	for _, f := range []struct {
		id   string
		from uint
	}{{h.WorkflowID, 0}, {h.WorkflowID, 2}, {workflows.SegmentID(h.WorkflowID, 1), 0}, {workflows.SegmentID(h.WorkflowID, 1), 3}} {
		requireForkRunsNothing(t, client, f.id, f.from)
	}
	requireForkedSessionUntouched(t, e, h, before, &x)
}

// Execute twice with one session ID, at once: one run, one model call.
// A retried start of a queued session is refused as running, and the
// session runs once.
func TestQueuedStartIsIdempotent(t *testing.T) {
	t.Parallel()
	g := newGate()
	agent := &helix.Agent{Name: "once", Model: g.model()}
	url := pgtest.NewURL(t)
	e := newQueuedEngineOn(t, url, engine.QueueConfig{PollingInterval: 20 * time.Millisecond}, agent)
	const tries = 4
	errs := make([]error, tries)
	handles := make([]*engine.Handle, tries)
	var wg sync.WaitGroup
	for i := range tries {
		wg.Go(func() {
			handles[i], errs[i] = e.Execute(t.Context(), agent, engine.Input{Message: "once"}, &engine.ExecuteOptions{SessionID: "once"})
		})
	}
	wg.Wait()
	var won *engine.Handle
	for i, err := range errs {
		if err == nil {
			require.Nil(t, won, "two starts won")
			won = handles[i]
			continue
		}
		var running *helix.AgentAlreadyRunningError
		require.ErrorAs(t, err, &running)
	}
	require.NotNil(t, won)
	require.Equal(t, "once", g.entered(t))
	g.let("once")
	waitFor(t, won, helix.AgentCompleted)
	g.mu.Lock()
	defer g.mu.Unlock()
	require.Equal(t, []string{"once"}, g.started)
}

// Sub-agents are queued runs of their own, and a parent never holds a slot
// while it waits for them: with one slot, two parents that each delegate
// to two sub-agents at once finish. Each parent runs two segments (its
// step up to the dispatch, then the step's end with the children's
// outcomes) and each child one.
func TestQueuedSubAgentsNeverDeadlock(t *testing.T) {
	t.Parallel()
	sum := summarizer(func(string) {})
	parent := &helix.Agent{
		Name:  "lead",
		Tools: []*helix.Tool{helix.MustSubAgentTool(sum, nil, nil)},
		Model: script(
			calls(call("s1", "subagent__summarizer", `{"task":"alpha"}`), call("s2", "subagent__summarizer", `{"task":"beta"}`)),
			text("both summarized"),
		),
	}
	url := pgtest.NewURL(t)
	e := newQueuedEngineOn(t, url, engine.QueueConfig{WorkerConcurrency: 1, PollingInterval: 20 * time.Millisecond}, parent)
	pool := testPool(t, url)
	var hs []*engine.Handle
	for i := range 2 {
		h, err := e.Execute(t.Context(), parent, engine.Input{Message: "summarize"}, &engine.ExecuteOptions{SessionID: fmt.Sprintf("lead-%d", i)})
		require.NoError(t, err)
		hs = append(hs, h)
	}
	for _, h := range hs {
		res := waitFor(t, h, helix.AgentCompleted)
		require.JSONEq(t, `"both summarized"`, string(res.Output))
		msgs := allMessages(t, e, h.SessionID)
		require.JSONEq(t, `{"summary":"short alpha"}`, msgs[2].Content)
		require.JSONEq(t, `{"summary":"short beta"}`, msgs[3].Content)
	}
	var queued int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM dbos.workflow_status WHERE queue_name = $1`,
		engine.DefaultQueueName).Scan(&queued))
	require.Equal(t, 2*(2+2), queued, "per parent: two segments of its own, one per child")
}

// A run recorded as admitted through a queue, whose process died before
// starting it, is started through that queue by whichever engine finds
// it, even one configured without a queue: its admission is recorded with
// it.
func TestQueuedOrphanKeepsItsAdmission(t *testing.T) {
	t.Parallel()
	agent := &helix.Agent{Name: "orphaned", Model: script(text("finally"))}
	url := pgtest.NewURL(t)
	// The queue exists in DBOS's database, as a queued engine leaves it.
	newQueuedEngineOn(t, url, engine.QueueConfig{Name: "tenants", PollingInterval: 20 * time.Millisecond}, agent)
	pool := testPool(t, url)
	st, err := postgres.New(pool)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	_, err = st.CreateSession(t.Context(), store.CreateSessionParams{SessionID: "orphan-q", AgentType: "orphaned"})
	require.NoError(t, err)
	_, err = st.AppendMessages(t.Context(), "orphan-q", []helix.Message{helix.UserMessage("hi")})
	require.NoError(t, err)
	_, err = st.CreateRun(t.Context(), store.CreateRunParams{RunID: "r-orphan-q", SessionID: "orphan-q", WorkflowID: "orphan-q-turn-1",
		Admission: &store.Admission{Queue: "tenants", PartitionKey: "acme"}})
	require.NoError(t, err)

	direct := newEngineOn(t, url, agent) // no queue of its own; starts orphans at Launch
	h, err := direct.Run(t.Context(), "orphan-q", "r-orphan-q")
	require.NoError(t, err)
	waitFor(t, h, helix.AgentCompleted)
	var queue, partition string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT queue_name, queue_partition_key FROM dbos.workflow_status WHERE workflow_uuid = $1`,
		workflows.SegmentID("orphan-q-turn-1", 1)).Scan(&queue, &partition))
	require.Equal(t, []string{"tenants", "acme"}, []string{queue, partition}, "admitted as recorded")
}

// A sub-agent that waits for a person holds no slot either: its run is a
// queued run of its own, and its parent's segment ended once the step's
// tools ran. With one slot, another session runs to its end while the
// sub-agent waits; the answer finishes the child, then the parent.
func TestQueuedSubAgentWaitsForAPersonWithoutASlot(t *testing.T) {
	t.Parallel()
	researcher := askingResearcher()
	var x executions
	boss := &helix.Agent{
		Name:  "boss",
		Tools: []*helix.Tool{helix.MustSubAgentTool(researcher, nil, nil), noteTool(&x)},
		Model: script(calls(call("r1", "subagent__researcher", `{"task":"research"}`), call("n1", "note", `{"text":"x"}`)), text("done")),
	}
	chat := &helix.Agent{Name: "chat", Model: script(text("hello"))}
	url := pgtest.NewURL(t)
	e := newQueuedEngineOn(t, url, engine.QueueConfig{WorkerConcurrency: 1, PollingInterval: 20 * time.Millisecond}, boss, chat)
	h, err := e.Execute(t.Context(), boss, engine.Input{Message: "go"}, &engine.ExecuteOptions{SessionID: "boss"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		calls, err := e.PendingToolCalls(t.Context(), "boss")
		require.NoError(t, err)
		return len(calls) == 1
	}, 30*time.Second, 10*time.Millisecond, "the sub-agent waits for its user")

	other, err := e.Execute(t.Context(), chat, engine.Input{Message: "hi"}, &engine.ExecuteOptions{SessionID: "other"})
	require.NoError(t, err)
	waitFor(t, other, helix.AgentCompleted)

	submit(t, e, "boss", clientResult(t, "ask1", answer{Answer: "durability"}))
	res := waitFor(t, h, helix.AgentCompleted)
	require.JSONEq(t, `"done"`, string(res.Output))
	msgs := allMessages(t, e, "boss")
	require.Equal(t, []string{"user", "assistant", "tool", "tool", "assistant"}, roles(msgs))
	require.JSONEq(t, `{"summary":"about {\"answer\":\"durability\"}"}`, msgs[2].Content)
	require.Len(t, x.keys, 1)
	for _, n := range x.keys {
		require.Equal(t, 1, n, "the parent's tool ran once")
	}
}

// A resumed run is admitted as the run it continues: same partition and
// priority, not the session's defaults.
func TestQueuedResumeKeepsItsPartition(t *testing.T) {
	t.Parallel()
	agent := &helix.Agent{Name: "asker", Tools: []*helix.Tool{askUser()},
		Model: script(calls(call("c", "ask_user", `{"question":"?"}`)), text("thanks"))}
	url := pgtest.NewURL(t)
	e := newQueuedEngineOn(t, url, engine.QueueConfig{PollingInterval: 20 * time.Millisecond}, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "go"}, &engine.ExecuteOptions{UserID: "u-1", PartitionKey: "acme", Priority: 7})
	require.NoError(t, err)
	require.Equal(t, helix.AgentSuspendedClientTool, result(t, h).Status)
	require.NoError(t, e.Interrupt(t.Context(), h.SessionID, "later"))
	waitFor(t, h, helix.AgentInterrupted)
	h2, err := e.Resume(t.Context(), h.SessionID, nil)
	require.NoError(t, err)
	require.NotEqual(t, h.RunID, h2.RunID)
	submit(t, e, h.SessionID, clientResult(t, "c", answer{Answer: "ok"}))
	waitFor(t, h2, helix.AgentCompleted)
	runs, err := e.Runs(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Len(t, runs, 2)
	for _, r := range runs {
		require.Equal(t, &store.Admission{Queue: engine.DefaultQueueName, PartitionKey: "acme", Priority: 7}, r.Admission, r.RunID)
	}
}

// oneSlot is a queued engine with one slot, taken by session "busy" (held
// in its model call by g), and a second session waiting in the queue.
type oneSlot struct {
	e            *engine.Engine
	g            *gate
	url          string
	pool         *pgxpool.Pool
	busy, queued *engine.Handle
}

// queueBehindABusySession returns a oneSlot whose queued session is id.
func queueBehindABusySession(t *testing.T, id string) oneSlot {
	t.Helper()
	s := oneSlot{g: newGate(), url: pgtest.NewURL(t)}
	agent := &helix.Agent{Name: "queued", Model: s.g.model()}
	s.e = newQueuedEngineOn(t, s.url, engine.QueueConfig{WorkerConcurrency: 1, PollingInterval: 20 * time.Millisecond}, agent)
	s.pool = testPool(t, s.url)
	var err error
	s.busy, err = s.e.Execute(t.Context(), agent, engine.Input{Message: "work"}, &engine.ExecuteOptions{SessionID: "busy"})
	require.NoError(t, err)
	require.Equal(t, "busy", s.g.entered(t))
	s.queued, err = s.e.Execute(t.Context(), agent, engine.Input{Message: "work"}, &engine.ExecuteOptions{SessionID: id})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return slices.Equal(segmentStatuses(t, s.pool, s.queued.WorkflowID), []string{"ENQUEUED"})
	}, 10*time.Second, 10*time.Millisecond)
	return s
}
