package engine_test

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/steps"
	"github.com/helix-agents/helix-dbos/workflows"
)

// A session's workflow cancelled with DBOS's own client (what `dbos
// workflow cancel` does) leaves the session in a true state: an answer sent
// before the engine noticed is refused, not "delivered" to nobody; the
// engine's sweep then aborts the session with the reason, and every later
// answer is refused too. The tool never runs.
func TestDBOSCancelAbortsTheSession(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	var runs sync.Map
	agent := payer(&runs)
	e := newEngineOn(t, url, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "pay bob"}, nil)
	require.NoError(t, err)
	require.Equal(t, helix.AgentSuspendedClientTool, result(t, h).Status)

	client := dbosClient(t, url)
	require.NoError(t, dbos.CancelWorkflow(client, h.WorkflowID))

	refused := func(what string) {
		t.Helper()
		_, err := e.SubmitToolResult(t.Context(), h.SessionID, helix.Approve("t1", "fine"))
		var se *helix.SubmissionError
		require.ErrorAs(t, err, &se, what)
		require.Equal(t, helix.SubmissionNotWaiting, se.Code, what)
		require.Contains(t, se.Error(), "cancelled with DBOS's tools", what)
	}
	refused("an answer right after the cancel")

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := e.Session(ctx, h.SessionID)
		require.NoError(t, err)
		if st.Status != helix.SessionActive {
			require.Equal(t, helix.SessionFailed, st.Status)
			require.Contains(t, st.Error, "aborted: its workflow "+h.WorkflowID+" was cancelled with DBOS's tools")
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the session stayed active after its workflow was cancelled through DBOS")
		case <-tick.C:
		}
	}
	runsOf, err := e.Runs(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Equal(t, helix.RunFailed, runsOf[len(runsOf)-1].Status)
	require.Equal(t, helix.CodeAborted, runsOf[len(runsOf)-1].ErrorCode)
	refused("an answer after the abort")
	require.Zero(t, executions2(&runs, "t1"), "the tool never ran")
	res, err := h.Result(t.Context())
	require.NoError(t, err)
	require.Equal(t, helix.AgentFailed, res.Status)
}

// A fork of a session's workflow made with DBOS's tools (ForkWorkflow,
// `dbos workflow fork`), from its first step or a later one, runs nothing:
// its outcome says why and names the helix way (retry, branch); the
// session, its runs and its messages stay as they were.
func TestDBOSForkRunsNothing(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	var x executions
	agent := &helix.Agent{
		Name:  "noter",
		Tools: []*helix.Tool{noteTool(&x)},
		Model: script(calls(call("n1", "note", `{"text":"a"}`)), text("noted")),
	}
	e := newEngineOn(t, url, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "note a"}, nil)
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, result(t, h).Status)
	before := allMessages(t, e, h.SessionID)

	client := dbosClient(t, url)
	for _, from := range []uint{0, 3} {
		requireForkRunsNothing(t, client, h.WorkflowID, from)
	}
	requireForkedSessionUntouched(t, e, h, before, &x)
}

// requireForkRunsNothing forks workflow id from step from with DBOS's
// client and requires the copy's outcome to say it ran nothing.
func requireForkRunsNothing(t *testing.T, client dbos.Client, id string, from uint) {
	t.Helper()
	fork, err := dbos.ForkWorkflow[steps.Outcome](client, dbos.ForkWorkflowInput{OriginalWorkflowID: id, StartStep: from})
	require.NoError(t, err)
	out, err := fork.GetResult(dbos.WithHandleTimeout(30 * time.Second))
	require.NoError(t, err, "fork of %s from step %d", id, from)
	require.Equal(t, helix.RunFailed, out.Status, "fork of %s from step %d", id, from)
	require.Contains(t, out.Error, "(a DBOS fork): it runs nothing", "fork of %s from step %d", id, from)
}

// requireForkedSessionUntouched requires the session of h, whose one run
// completed after its note tool ran once, to be as it was (messages
// before) after forks of its workflows.
func requireForkedSessionUntouched(t *testing.T, e *engine.Engine, h *engine.Handle, before []helix.Message, x *executions) {
	t.Helper()
	st, err := e.Session(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Equal(t, helix.SessionCompleted, st.Status)
	require.Equal(t, before, allMessages(t, e, h.SessionID))
	runsOf, err := e.Runs(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Len(t, runsOf, 1)
	require.Equal(t, helix.RunCompleted, runsOf[0].Status)
	require.Len(t, x.keys, 1)
	for _, n := range x.keys {
		require.Equal(t, 1, n, "the tool ran once, in the original")
	}
}

// A session aborted because its workflow was cancelled with DBOS's tools
// runs again when that workflow is resumed with them (`dbos workflow
// resume`, ResumeWorkflow through a DBOS client): the session is active, its
// run waits for its approval again (announced anew in the stream), the
// answer is taken and the approved tool runs once. Direct, and through a
// queue.
func TestDBOSResumeRevivesTheSession(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		queue  *engine.QueueConfig
		resume func(h *engine.Handle) string
	}{
		{name: "direct", resume: func(h *engine.Handle) string { return h.WorkflowID }},
		{name: "queued, resuming the run's workflow", queue: &engine.QueueConfig{PollingInterval: 20 * time.Millisecond},
			resume: func(h *engine.Handle) string { return h.WorkflowID }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := pgtest.NewURL(t)
			var runs sync.Map
			agent := payer(&runs)
			e, err := engine.New(t.Context(), engine.Config{DatabaseURL: url, Queue: tc.queue})
			require.NoError(t, err)
			require.NoError(t, e.Register(agent))
			require.NoError(t, e.Launch(t.Context()))
			t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
			h, err := e.Execute(t.Context(), agent, engine.Input{Message: "pay bob"}, nil)
			require.NoError(t, err)
			require.Equal(t, helix.AgentSuspendedClientTool, result(t, h).Status)

			client := dbosClient(t, url)
			require.NoError(t, dbos.CancelWorkflow(client, h.WorkflowID))
			require.Eventually(t, func() bool {
				st, err := e.Session(t.Context(), h.SessionID)
				require.NoError(t, err)
				return st.Status == helix.SessionFailed
			}, 30*time.Second, 20*time.Millisecond, "the cancel sweep aborts the session")

			_, err = dbos.ResumeWorkflow[steps.Outcome](client, tc.resume(h))
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				st, err := e.Session(t.Context(), h.SessionID)
				require.NoError(t, err)
				return st.Status == helix.SessionActive
			}, 30*time.Second, 20*time.Millisecond, "the resumed workflow revives its session")
			runsOf, err := e.Runs(t.Context(), h.SessionID)
			require.NoError(t, err)
			require.Len(t, runsOf, 1, "the same run goes on")
			require.Equal(t, helix.RunSuspendedClientTool, runsOf[0].Status)
			require.Empty(t, runsOf[0].ErrorCode)

			res, err := e.SubmitToolResult(t.Context(), h.SessionID, helix.Approve("t1", "fine"))
			require.NoError(t, err, "the revived run takes its answer")
			require.False(t, res.AlreadyCompleted)
			out := waitFor(t, h, helix.AgentCompleted)
			require.JSONEq(t, `"paid"`, string(out.Output))
			require.EqualValues(t, 1, executions2(&runs, "t1"), "the approved tool ran once")

			var requests []string
			chunks, err := engine.StoreOf(e).ReadChunks(t.Context(), h.SessionID, 0, 1000)
			require.NoError(t, err)
			for _, sc := range chunks {
				switch c := sc.Chunk.(type) {
				case *helix.ToolApprovalRequestChunk:
					requests = append(requests, "request "+c.ToolCallID)
				case *helix.ToolEndChunk:
					requests = append(requests, "end "+c.ToolCallID+" "+c.ErrorCode)
				}
			}
			require.Equal(t, []string{"request t1", "end t1 aborted", "request t1", "end t1 "}, requests,
				"the abort ended the call, the revival asked for it again, the approved tool ended it")
		})
	}
}

// The execution of a session's workflow that DBOS's tools cancelled still
// waits for its approval in this process when the workflow is resumed:
// the resumed execution revives the session, then takes its fencing ticket
// here. An approval that comes in between (held here: the resumed execution
// waits where it logs the revival, before its ticket) wakes both; the
// cancelled execution, which no longer owns the workflow, ends without
// running the tool, and the resumed one runs it, once.
func TestDBOSResumeLeavesTheApprovalToTheResumedExecution(t *testing.T) {
	t.Parallel()
	w := &logHold{lineWatch: lineWatch{want: "run.taken_over", seen: make(chan struct{})},
		hold: "session.resumed_through_dbos", held: make(chan struct{}), release: make(chan struct{})}
	p := waitingPayment(t, w)
	t.Cleanup(w.let) // before the engine's shutdown: a failed test leaves no execution held
	client := dbosClient(t, p.url)
	require.NoError(t, dbos.CancelWorkflow(client, p.h.WorkflowID))
	require.Eventually(t, func() bool {
		st, err := p.e.Session(t.Context(), p.h.SessionID)
		require.NoError(t, err)
		return st.Status == helix.SessionFailed
	}, 30*time.Second, 20*time.Millisecond, "the cancel sweep aborts the session")
	_, err := dbos.ResumeWorkflow[steps.Outcome](client, p.h.WorkflowID)
	require.NoError(t, err)
	select {
	case <-w.held:
	case <-time.After(30 * time.Second):
		t.Fatal("the resumed execution did not revive the session")
	}

	res, err := p.e.SubmitToolResult(t.Context(), p.h.SessionID, helix.Approve("t1", "fine"))
	require.NoError(t, err, "the revived session takes the answer")
	require.False(t, res.AlreadyCompleted)
	w.await(t, "the cancelled execution ends once the answer woke it")
	require.Zero(t, executions2(&p.runs, "t1"), "the cancelled execution did not run the tool")

	w.let()
	out := waitFor(t, p.h, helix.AgentCompleted)
	require.JSONEq(t, `"paid"`, string(out.Output))
	require.EqualValues(t, 1, executions2(&p.runs, "t1"), "the resumed execution ran the tool, once")
}

// An execution waiting for an approval whose workflow became another
// execution's meanwhile (resumed or recovered by another engine: no newer
// execution in this process fences it) does not run the approved tool
// when the answer wakes it: it ends, and the owner runs the tool.
func TestAWaitingExecutionThatLostItsWorkflowDoesNotRunTheTool(t *testing.T) {
	t.Parallel()
	w := &lineWatch{want: "run.taken_over", seen: make(chan struct{})}
	p := waitingPayment(t, w)
	pool, err := pgxpool.New(t.Context(), p.url)
	require.NoError(t, err)
	defer pool.Close()
	tag, err := pool.Exec(t.Context(), `UPDATE dbos.workflow_status SET owner_xid = 'another-execution' WHERE workflow_uuid = $1`, p.h.WorkflowID)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())

	_, err = p.e.SubmitToolResult(t.Context(), p.h.SessionID, helix.Approve("t1", "fine"))
	require.NoError(t, err)
	w.await(t, "the execution ends once the answer woke it")
	require.Zero(t, executions2(&p.runs, "t1"), "the execution that lost its workflow did not run the tool")
}

// payment is a payer's session waiting for the approval of its transfer
// t1, on an engine of its own that logs to a test's writer.
type payment struct {
	url  string
	e    *engine.Engine
	h    *engine.Handle
	runs sync.Map
}

func waitingPayment(t *testing.T, log io.Writer) *payment {
	t.Helper()
	p := &payment{url: pgtest.NewURL(t)}
	agent := payer(&p.runs)
	p.e = newEngineLogging(t, p.url, log, agent)
	var err error
	p.h, err = p.e.Execute(t.Context(), agent, engine.Input{Message: "pay bob"}, nil)
	require.NoError(t, err)
	require.Equal(t, helix.AgentSuspendedClientTool, result(t, p.h).Status)
	return p
}

// logHold is a lineWatch that also holds the goroutine that writes a line
// containing hold, until let.
type logHold struct {
	lineWatch
	hold          string
	held, release chan struct{}
	heldOnce      sync.Once
	letOnce       sync.Once
}

func (w *logHold) Write(p []byte) (int, error) {
	n, err := w.lineWatch.Write(p)
	if strings.Contains(string(p), w.hold) {
		w.heldOnce.Do(func() { close(w.held) })
		<-w.release
	}
	return n, err
}

func (w *logHold) let() { w.letOnce.Do(func() { close(w.release) }) }

// A queued session whose workflow was cancelled with DBOS's tools while it
// waited in the queue (its segment cancelled with it by the abort) runs
// once its segment is resumed with them: the revival resumes its driver
// too, and it runs when the slot frees.
func TestDBOSResumeOfAQueuedSegment(t *testing.T) {
	t.Parallel()
	s := queueBehindABusySession(t, "later")
	e, g, pool, busy, h := s.e, s.g, s.pool, s.busy, s.queued

	client := dbosClient(t, s.url)
	require.NoError(t, dbos.CancelWorkflow(client, h.WorkflowID))
	require.Eventually(t, func() bool {
		st, err := e.Session(t.Context(), "later")
		require.NoError(t, err)
		return st.Status == helix.SessionFailed
	}, 30*time.Second, 20*time.Millisecond, "the cancel sweep aborts the session")
	require.Equal(t, []string{"CANCELLED"}, segmentStatuses(t, pool, h.WorkflowID), "the abort cancelled the queued segment")

	_, err := dbos.ResumeWorkflow[steps.Outcome](client, workflows.SegmentID(h.WorkflowID, 1), dbos.WithResumeQueue(engine.DefaultQueueName))
	require.NoError(t, err)
	g.let("busy")
	waitFor(t, busy, helix.AgentCompleted)
	require.Equal(t, "later", g.entered(t), "the resumed segment runs once the slot frees")
	g.let("later")
	h2, err := e.Run(t.Context(), "later", h.RunID)
	require.NoError(t, err)
	waitFor(t, h2, helix.AgentCompleted)
	var driver string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT status FROM dbos.workflow_status WHERE workflow_uuid = $1`, h.WorkflowID).Scan(&driver))
	require.Equal(t, "SUCCESS", driver, "the revival resumed the driver, which took the segment's outcome")
}

// dbosClient returns a DBOS client on the database at url (what DBOS's
// own tools use), shut down at cleanup.
func dbosClient(t *testing.T, url string) dbos.Client {
	t.Helper()
	client, err := dbos.NewClient(t.Context(), dbos.ClientConfig{DatabaseURL: url, AppName: engine.DefaultAppName})
	require.NoError(t, err)
	t.Cleanup(func() { _ = dbos.Shutdown(client, 5*time.Second) })
	return client
}
