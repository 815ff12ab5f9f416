package engine_test

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/helixtest"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/steps"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/workflows"
)

// twoPayments asks for two approvals one after the other (t1, then t2):
// its run hibernates twice, the second time in its first continuation.
func twoPayments(runs *sync.Map) *helix.Agent {
	return &helix.Agent{Name: "payer-twice", Tools: []*helix.Tool{transferTool(runs)}, Model: script(
		calls(call("t1", "transfer", `{"to":"bob","amount":5}`)),
		calls(call("t2", "transfer", `{"to":"eve","amount":7}`)),
		text("paid both"),
	)}
}

// startHibernated starts a session of agent on a hibernating engine
// (executor id) of the database at url and waits until its run
// hibernated.
func startHibernated(t *testing.T, url, id string, agent *helix.Agent) (*engine.Engine, *engine.Handle, *pgxpool.Pool) {
	t.Helper()
	pool := appPool(t, url)
	e := hibernating(t, url, id, nil, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "pay"}, nil)
	require.NoError(t, err)
	awaitHibernated(t, pool, h.RunID)
	return e, h, pool
}

// leftOf counts what is left in the database of a session and of the
// workflows whose ID starts with workflowID (the run's own, its
// continuations): helix's session and run rows, step journal rows, DBOS
// workflows and their step outputs.
func leftOf(t *testing.T, pool *pgxpool.Pool, sessionID, workflowID string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for name, q := range map[string]string{
		"helix.sessions":         `SELECT count(*) FROM helix.sessions WHERE session_id = $1`,
		"helix.runs":             `SELECT count(*) FROM helix.runs WHERE session_id = $1`,
		"helix.step_journal":     `SELECT count(*) FROM helix.step_journal WHERE starts_with(workflow_id, $2)`,
		"dbos.workflow_status":   `SELECT count(*) FROM dbos.workflow_status WHERE starts_with(workflow_uuid, $2)`,
		"dbos.operation_outputs": `SELECT count(*) FROM dbos.operation_outputs WHERE starts_with(workflow_uuid, $2)`,
	} {
		var n int
		require.NoError(t, pool.QueryRow(t.Context(), q+` AND $1::text IS NOT NULL AND $2::text IS NOT NULL`, sessionID, workflowID).Scan(&n), name)
		if n > 0 {
			out[name] = n
		}
	}
	return out
}

// A hibernated session is a waiting session for the retention policy: no
// age and no expiry collects it (its workflow's SUCCESS in DBOS does not
// make it finished), and it completes when answered afterwards. Once it
// completed, a pass collects it whole: its continuation's workflow and
// journal too.
func TestRetentionKeepsHibernatedSessions(t *testing.T) {
	t.Parallel()
	runs := &sync.Map{}
	e, h, pool := startHibernated(t, pgtest.NewURL(t), "hib-ret", payer(runs))
	_, err := pool.Exec(t.Context(), `UPDATE helix.sessions SET expires_at = now() - interval '1 day' WHERE session_id = $1`, h.SessionID)
	require.NoError(t, err)
	all := engine.RetentionPolicy{Completed: time.Nanosecond, Failed: time.Nanosecond, Aborted: time.Nanosecond}
	for _, dry := range []bool{true, false} {
		res, err := e.CollectGarbage(t.Context(), all, &engine.GCOptions{DryRun: dry})
		require.NoError(t, err)
		require.Zero(t, res.Trees, "dry run %v: a hibernated session is kept", dry)
	}
	require.Equal(t, runState{hibernated: true, status: "SUCCESS"}, readRunState(t, pool, h.RunID))

	submit(t, e, h.SessionID, helix.Approve("t1", "ok"))
	out := result(t, h)
	require.Equal(t, helix.AgentCompleted, out.Status, out.Error)
	require.EqualValues(t, 1, executions2(runs, "t1"))
	require.Contains(t, leftOf(t, pool, h.SessionID, h.WorkflowID), "dbos.workflow_status")
	res, err := e.CollectGarbage(t.Context(), all, nil)
	require.NoError(t, err)
	require.Equal(t, 1, res.Trees)
	require.Equal(t, 2, res.Workflows, "the run's workflow and its continuation")
	require.Empty(t, leftOf(t, pool, h.SessionID, h.WorkflowID))
}

// Deleting a hibernated session is refused like deleting a live waiting
// one; forced, it leaves nothing behind: not the run's workflow, nor its
// continuation (woken by the first approval, hibernated again for the
// second), nor their journals. A later answer is refused.
func TestDeleteHibernatedSession(t *testing.T) {
	t.Parallel()
	var runs sync.Map
	e, h, pool := startHibernated(t, pgtest.NewURL(t), "hib-del", twoPayments(&runs))
	submit(t, e, h.SessionID, helix.Approve("t1", "ok"))
	require.Eventually(t, func() bool {
		s := readRunState(t, pool, h.RunID)
		return s.hibernated && s.wakes == 1 && s.latest == "SUCCESS"
	}, 30*time.Second, 10*time.Millisecond, "the continuation hibernated for t2")

	_, err := e.DeleteSession(t.Context(), h.SessionID, nil)
	require.ErrorIs(t, err, helix.ErrSessionRunning)
	stats, err := e.DeleteSession(t.Context(), h.SessionID, &engine.DeleteOptions{Force: true})
	require.NoError(t, err)
	require.Equal(t, []string{h.SessionID}, stats.Deleted)
	require.Equal(t, 2, stats.Workflows, "the run's workflow and its continuation")
	require.Empty(t, leftOf(t, pool, h.SessionID, h.WorkflowID))
	requireAnswerRefused(t, e, h.SessionID, "t2")
	require.EqualValues(t, 1, executions2(&runs, "t1"))
	require.Zero(t, executions2(&runs, "t2"))
}

// requireAnswerRefused requires an answer to call id of the deleted
// session to fail with an error that names the session.
func requireAnswerRefused(t *testing.T, e *engine.Engine, sessionID, id string) {
	t.Helper()
	_, err := e.SubmitToolResult(t.Context(), sessionID, helix.Approve(id, "late"))
	require.Error(t, err)
	require.ErrorIs(t, err, helix.ErrNotFound)
	require.Contains(t, err.Error(), sessionID)
}

// A run woken while no engine that defines its agent is up has a
// continuation due that nobody started: a forced delete removes the
// session, and the continuation is never started.
func TestDeleteWokenRunNotStarted(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	var runs sync.Map
	agent := payer(&runs)
	a, h, pool := startHibernated(t, url, "hib-woken-a", agent)
	require.NoError(t, a.Shutdown(t.Context()))

	// An engine of another agent only: it does not start the payer's
	// continuation.
	other := &helix.Agent{Name: "other", Model: script(text("hi"))}
	b := hibernating(t, url, "hib-woken-b", nil, other)
	var woke *string // the wake's announcement, NULL when it woke nothing
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT helix.wake_run($1)`, h.WorkflowID).Scan(&woke))
	require.NotNil(t, woke)
	run, err := b.Runs(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.NotNil(t, run[0].WokenAt, "woken, its continuation not begun")
	require.Nil(t, run[0].HibernatedAt)

	stats, err := b.DeleteSession(t.Context(), h.SessionID, &engine.DeleteOptions{Force: true})
	require.NoError(t, err)
	require.Equal(t, []string{h.SessionID}, stats.Deleted)
	require.Empty(t, leftOf(t, pool, h.SessionID, h.WorkflowID))
	requireAnswerRefused(t, b, h.SessionID, "t1")
	// An engine that defines the agent finds nothing to start.
	c := hibernating(t, url, "hib-woken-c", nil, agent)
	left, err := c.Runs(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Empty(t, left)
	require.Empty(t, leftOf(t, pool, h.SessionID, h.WorkflowID))
	require.Zero(t, executions2(&runs, "t1"))
}

// retryAndBranch is what retry and branch do from a session waiting for
// an approval, live or hibernated.
type retryAndBranch struct {
	RetryRefused    string // the refusal of a retry while it waits
	BranchStatus    helix.AgentStatus
	BranchPending   int // calls the branch waits for
	RetriedStatus   helix.AgentStatus
	RetriedMessages int
	Executions      int32
}

// waitingRetryAndBranch runs a payer session until it waits for its
// approval on an engine whose runs hibernate after hibernateAfter
// (negative: never), then: a retry (refused, the session runs), a branch
// from its latest checkpoint (a new session), an abort, a retry of the
// aborted session, which waits again and completes when approved.
func waitingRetryAndBranch(t *testing.T, id string, hibernateAfter time.Duration) retryAndBranch {
	url := pgtest.NewURL(t)
	pool := appPool(t, url)
	var runs sync.Map
	agent := payer(&runs)
	e := newEngineWith(t, engine.Config{DatabaseURL: url, ExecutorID: id, HibernateAfter: hibernateAfter,
		RecordedRunSweepInterval: 100 * time.Millisecond}, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "pay bob"}, nil)
	require.NoError(t, err)
	if hibernateAfter > 0 {
		awaitHibernated(t, pool, h.RunID)
	} else {
		require.Equal(t, helix.AgentSuspendedClientTool, result(t, h).Status)
	}
	var out retryAndBranch
	_, err = e.Retry(t.Context(), h.SessionID, nil)
	var running *helix.AgentAlreadyRunningError
	require.ErrorAs(t, err, &running)
	out.RetryRefused = err.Error()[strings.Index(err.Error(), " is already"):]

	b, err := e.Execute(t.Context(), agent, engine.Input{}, &engine.ExecuteOptions{
		SessionID: h.SessionID + "-branch", Branch: &engine.Branch{FromSessionID: h.SessionID}})
	require.NoError(t, err)
	res := result(t, b)
	out.BranchStatus = res.Status
	pending, err := e.PendingToolCalls(t.Context(), b.SessionID)
	require.NoError(t, err)
	out.BranchPending = len(pending)
	if len(pending) > 0 {
		submit(t, e, b.SessionID, helix.Approve(pending[0].ToolCallID, "ok"))
		res = result(t, b)
		require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	}

	require.NoError(t, e.Abort(t.Context(), h.SessionID, "start over"))
	h2, err := e.Retry(t.Context(), h.SessionID, nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		p, err := e.PendingToolCalls(t.Context(), h.SessionID)
		return err == nil && len(p) == 1 && p[0].ToolCallID == "t1"
	}, 30*time.Second, 10*time.Millisecond)
	submit(t, e, h.SessionID, helix.Approve("t1", "ok"))
	res = result(t, h2)
	out.RetriedStatus = res.Status
	out.RetriedMessages = len(allMessages(t, e, h.SessionID))
	out.Executions = executions2(&runs, "t1")
	return out
}

// Retry and branch behave from a hibernated session exactly as from a
// live waiting one: a retry is refused while it waits, a branch from its
// latest checkpoint runs on its own, and an aborted session retried waits
// again and completes, the approved tool running once per session.
func TestRetryAndBranchFromHibernatedSession(t *testing.T) {
	t.Parallel()
	var live, hib retryAndBranch
	var wg sync.WaitGroup
	wg.Go(func() { live = waitingRetryAndBranch(t, "hib-rb-live", -1) })
	wg.Go(func() { hib = waitingRetryAndBranch(t, "hib-rb-hib", 50*time.Millisecond) })
	wg.Wait()
	require.Equal(t, helix.AgentCompleted, live.RetriedStatus)
	require.Equal(t, live, hib)
}

// The continuation of a woken run runs in the session's trace: its run
// span has the session's stored span as parent, as the first execution's
// has, and says which continuation it is.
func TestTraceContinuesAfterHibernation(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	var runs sync.Map
	agent := payer(&runs)
	e := tracedEngine(t, rec, helixtest.EngineOptions{Quiet: true, Configure: func(c *engine.Config) {
		c.HibernateAfter, c.RecordedRunSweepInterval = 50*time.Millisecond, 100*time.Millisecond
	}}, agent)
	h := e.Start(agent, "pay bob")
	awaitHibernated(t, appPool(t, e.URL()), h.RunID)
	e.Approve(h.SessionID, "t1")
	require.Equal(t, helix.AgentCompleted, e.Await(h).Status)
	rec.awaitEnded(t, "invoke_agent", 2)

	st, err := e.Session(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.NotNil(t, st.TracingContext)
	spans := withAttr(rec.named("invoke_agent"), steps.AttrRunID, attribute.StringValue(h.RunID))
	require.Len(t, spans, 2, "the first execution and the continuation")
	for _, s := range spans {
		require.Equal(t, st.TracingContext.TraceID, s.SpanContext().TraceID().String())
		require.Equal(t, st.TracingContext.RootSpanID, s.Parent().SpanID().String())
	}
	require.False(t, attr(spans[0], steps.AttrWake).Type() != attribute.INVALID, "the first execution is no continuation")
	require.EqualValues(t, 1, attr(spans[1], steps.AttrWake).AsInt64())
	require.Len(t, rec.named("execute_tool transfer"), 1)
}

// DBOS's tools on a hibernated run: its workflow shows SUCCESS and
// cancelling it changes nothing (the session still completes when
// answered); a fork of it or of its continuation runs nothing; a
// continuation cancelled with them while it waits aborts the session, as
// a live wait's cancelled workflow does.
func TestDBOSToolsOnHibernatedRun(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	var runs sync.Map
	agent := twoPayments(&runs)
	a, h, pool := startHibernated(t, url, "hib-dbos-a", agent)
	client := dbosClient(t, url)

	ws, err := dbos.ListWorkflows(client, dbos.WithFilterWorkflowIDs(h.WorkflowID))
	require.NoError(t, err)
	require.Len(t, ws, 1)
	require.Equal(t, dbos.WorkflowStatusSuccess, ws[0].Status)
	require.NoError(t, dbos.CancelWorkflow(client, h.WorkflowID))
	requireForkRunsNothing(t, client, h.WorkflowID, 0)
	st, err := a.Session(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Equal(t, helix.SessionActive, st.Status)

	// The first approval wakes it on an engine that keeps its waits
	// live: continuation 1 waits for t2 in its workflow.
	require.NoError(t, a.Shutdown(t.Context()))
	b := newEngineWith(t, engine.Config{DatabaseURL: url, ExecutorID: "hib-dbos-b", HibernateAfter: -1,
		RecordedRunSweepInterval: 100 * time.Millisecond}, agent)
	submit(t, b, h.SessionID, helix.Approve("t1", "ok"))
	wake := workflows.WakeID(h.WorkflowID, 1)
	require.Eventually(t, func() bool {
		p, err := b.PendingToolCalls(t.Context(), h.SessionID)
		return err == nil && slices.ContainsFunc(p, func(c store.PendingClientToolCall) bool { return c.ToolCallID == "t2" }) &&
			readRunState(t, pool, h.RunID).latest == "PENDING"
	}, 30*time.Second, 10*time.Millisecond, "continuation 1 waits for t2")
	requireForkRunsNothing(t, client, wake, 0)

	require.NoError(t, dbos.CancelWorkflow(client, wake))
	require.Eventually(t, func() bool {
		st, err := b.Session(t.Context(), h.SessionID)
		return err == nil && st.Status == helix.SessionFailed
	}, 30*time.Second, 10*time.Millisecond, "the cancel sweep aborts the session")
	st, err = b.Session(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Contains(t, st.Error, "its workflow "+wake+" was cancelled with DBOS's tools")
	_, err = b.SubmitToolResult(t.Context(), h.SessionID, helix.Approve("t2", "late"))
	var se *helix.SubmissionError
	require.True(t, errors.As(err, &se), "%v", err)
	require.EqualValues(t, 1, executions2(&runs, "t1"))
	require.Zero(t, executions2(&runs, "t2"))
}
