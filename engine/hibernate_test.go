package engine_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/helixtest"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/steps"
	"github.com/helix-agents/helix-dbos/workflows"
)

// hibernating returns a launched engine on url, executor id, whose runs
// hibernate after 50 ms of waiting and whose sweeps run every 100 ms (a
// clock, when given, times the deadlines).
func hibernating(t *testing.T, url, id string, clock engine.Clock, agents ...*helix.Agent) *engine.Engine {
	t.Helper()
	return newEngineWith(t, engine.Config{DatabaseURL: url, ExecutorID: id, HibernateAfter: 50 * time.Millisecond,
		RecordedRunSweepInterval: 100 * time.Millisecond, Clock: clock}, agents...)
}

// runState is what the database says of a run's hibernation: whether it
// is hibernated, its wakes, and the DBOS status of its own workflow and of
// its last continuation ("" when DBOS has none).
type runState struct {
	hibernated     bool
	wakes          int
	status, latest string
}

func readRunState(t *testing.T, pool *pgxpool.Pool, runID string) runState {
	t.Helper()
	var s runState
	var wf string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT hibernated_at IS NOT NULL, wakes, workflow_id,
		COALESCE((SELECT status FROM dbos.workflow_status WHERE workflow_uuid = r.workflow_id), '')
		FROM helix.runs r WHERE run_id = $1`, runID).Scan(&s.hibernated, &s.wakes, &wf, &s.status))
	if s.wakes > 0 {
		err := pool.QueryRow(t.Context(), `SELECT status FROM dbos.workflow_status WHERE workflow_uuid = $1`,
			workflows.WakeID(wf, s.wakes)).Scan(&s.latest)
		if err != nil {
			s.latest = ""
		}
	}
	return s
}

// awaitHibernated waits until run runID is hibernated and its workflow
// (or continuation) ended: no process runs it.
func awaitHibernated(t *testing.T, pool *pgxpool.Pool, runID string) runState {
	t.Helper()
	var s runState
	require.Eventually(t, func() bool {
		s = readRunState(t, pool, runID)
		ended := s.status == "SUCCESS" && (s.wakes == 0 || s.latest == "SUCCESS")
		return s.hibernated && ended
	}, 30*time.Second, 10*time.Millisecond, "run %s never hibernated: %+v", runID, s)
	return s
}

// hibernatedPayer starts a payer session on a hibernating engine (executor
// id) of a fresh database and waits until its run hibernated.
func hibernatedPayer(t *testing.T, id string) (*engine.Engine, *engine.Handle, *sync.Map) {
	t.Helper()
	url := pgtest.NewURL(t)
	runs := &sync.Map{}
	agent := payer(runs)
	e := hibernating(t, url, id, nil, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "pay bob"}, nil)
	require.NoError(t, err)
	awaitHibernated(t, appPool(t, url), h.RunID)
	return e, h, runs
}

// hookCounts counts a session's suspension and resumption hooks.
type hookCounts struct{ suspended, resumed atomic.Int32 }

func (c *hookCounts) hooks() *helix.Hooks {
	return &helix.Hooks{
		OnAgentSuspended: func(context.Context, helix.HookContext, helix.Suspension) error { c.suspended.Add(1); return nil },
		OnAgentResumed:   func(context.Context, helix.HookContext, string) error { c.resumed.Add(1); return nil },
	}
}

// A run waiting for an approval hibernates: its workflow ends. Its engine
// stops; another one, which never ran the session, receives the approval,
// wakes the run in a continuation, and the run completes there: the
// approved tool ran once, and the suspension and resumption hooks fired
// once each.
func TestHibernatedApprovalCompletesOnAnotherEngine(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := appPool(t, url)
	var runs sync.Map
	var hc hookCounts
	agent := payer(&runs)
	agent.Hooks = hc.hooks()
	a := hibernating(t, url, "hib-a", nil, agent)
	h, err := a.Execute(t.Context(), agent, engine.Input{Message: "pay bob"}, nil)
	require.NoError(t, err)
	awaitHibernated(t, pool, h.RunID)
	require.NoError(t, a.Shutdown(t.Context()))

	b := hibernating(t, url, "hib-b", nil, agent)
	res := submit(t, b, h.SessionID, helix.Approve("t1", "ok"))
	require.Empty(t, res.Remaining)
	hb, err := b.Run(t.Context(), h.SessionID, h.RunID)
	require.NoError(t, err)
	out := result(t, hb)
	require.Equal(t, helix.AgentCompleted, out.Status, out.Error)
	require.EqualValues(t, 1, executions2(&runs, "t1"))
	require.EqualValues(t, 1, hc.suspended.Load())
	require.EqualValues(t, 1, hc.resumed.Load())
	s := readRunState(t, pool, h.RunID)
	require.Equal(t, runState{wakes: 1, status: "SUCCESS", latest: "SUCCESS"}, s)
}

// The engine that receives the approval of a hibernated run starts the
// run's continuation itself, before SubmitToolResult returns (it does not
// wait to hear of the wake); an approval from a Client, which runs no
// workflow, wakes the run too: an engine starts the continuation on
// hearing of the wake. Each run wakes once and completes.
func TestHibernatedApprovalStartsContinuation(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := appPool(t, url)
	var runs sync.Map
	agent := payer(&runs)
	e := hibernating(t, url, "hib-start", nil, agent)
	h1, err := e.Execute(t.Context(), agent, engine.Input{Message: "pay bob"}, nil)
	require.NoError(t, err)
	h2, err := e.Execute(t.Context(), agent, engine.Input{Message: "pay bob again"}, nil)
	require.NoError(t, err)
	awaitHibernated(t, pool, h1.RunID)
	awaitHibernated(t, pool, h2.RunID)

	submit(t, e, h1.SessionID, helix.Approve("t1", "ok"))
	var wf string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT workflow_id FROM helix.runs WHERE run_id = $1`, h1.RunID).Scan(&wf))
	var started bool
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM dbos.workflow_status WHERE workflow_uuid = $1)`,
		workflows.WakeID(wf, 1)).Scan(&started))
	require.True(t, started, "the continuation's workflow exists once SubmitToolResult returned")

	c, err := engine.NewClient(t.Context(), engine.ClientConfig{Pool: pool})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	res, err := c.SubmitToolResult(t.Context(), h2.SessionID, helix.Approve("t1", "ok"))
	require.NoError(t, err)
	require.False(t, res.AlreadyCompleted)

	for _, h := range []*engine.Handle{h1, h2} {
		out := result(t, h)
		require.Equal(t, helix.AgentCompleted, out.Status, out.Error)
		require.Equal(t, runState{wakes: 1, status: "SUCCESS", latest: "SUCCESS"}, readRunState(t, pool, h.RunID))
	}
}

// Two approvals of one step, answered at once from two goroutines (and
// each twice) while the run hibernates: each answer is delivered once,
// each approved tool runs once, and the run completes.
func TestHibernatedRunTakesConcurrentAnswersOnce(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := appPool(t, url)
	var runs sync.Map
	agent := &helix.Agent{Name: "payer2", Tools: []*helix.Tool{transferTool(&runs)}, Model: script(
		calls(call("t1", "transfer", `{"to":"bob","amount":5}`), call("t2", "transfer", `{"to":"eve","amount":7}`)),
		text("paid"),
	)}
	e := hibernating(t, url, "hib-c", nil, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "pay both"}, nil)
	require.NoError(t, err)
	awaitHibernated(t, pool, h.RunID)

	var wg sync.WaitGroup
	var accepted atomic.Int32
	for _, id := range []string{"t1", "t2", "t1", "t2"} {
		wg.Go(func() {
			res, err := e.SubmitToolResult(t.Context(), h.SessionID, helix.Approve(id, "ok"))
			var se *helix.SubmissionError
			switch {
			case err == nil && !res.AlreadyCompleted:
				accepted.Add(1)
			case err == nil, errors.As(err, &se):
			default:
				t.Errorf("submit %s: %v", id, err)
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 2, accepted.Load(), "each call's answer was taken once")
	out := result(t, h)
	require.Equal(t, helix.AgentCompleted, out.Status, out.Error)
	require.EqualValues(t, 1, executions2(&runs, "t1"))
	require.EqualValues(t, 1, executions2(&runs, "t2"))
}

// askerWithDeadline is agent name, which asks the user (a client tool with
// a one-hour deadline) and then says it got no answer; seen is called at
// its second model call with whether the call's deadline passed (the last
// message is the call's timeout).
func askerWithDeadline(name string, seen func(timedOut bool)) *helix.Agent {
	return &helix.Agent{Name: name, Tools: []*helix.Tool{askUser(helix.ClientTimeout(time.Hour))}, Model: script(
		calls(call("q1", "ask_user", `{"question":"colour?"}`)),
		func(req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
			last := req.Messages[len(req.Messages)-1]
			seen(last.Role == helix.RoleTool && strings.Contains(last.Content, "did not return a result"))
			return text("no answer")(req, cb)
		},
	)}
}

// A client tool's deadline wakes its hibernated run while the engine that
// started it is gone: the sweep of another engine wakes it once the
// deadline passed on the engines' clock, and the model sees the timeout.
func TestHibernatedClientToolDeadlineFires(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := appPool(t, url)
	clock := &helixtest.Clock{}
	var timedOut atomic.Bool
	agent := askerWithDeadline("asker-h", timedOut.Store)
	a := hibernating(t, url, "hib-d", clock, agent)
	h, err := a.Execute(t.Context(), agent, engine.Input{Message: "ask"}, nil)
	require.NoError(t, err)
	awaitHibernated(t, pool, h.RunID)
	require.NoError(t, a.Shutdown(t.Context()))

	b := hibernating(t, url, "hib-e", clock, agent)
	clock.Advance(2 * time.Hour)
	hb, err := b.Run(t.Context(), h.SessionID, h.RunID)
	require.NoError(t, err)
	out, err := awaitResult(t, hb)
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, out.Status, out.Error)
	require.True(t, timedOut.Load(), "the model saw the call time out")
}

// An interrupt wakes a hibernated run, which ends interrupted with its
// step kept; Resume continues it, and the approval given then completes it.
func TestHibernatedRunInterruptedThenResumed(t *testing.T) {
	t.Parallel()
	e, h, runs := hibernatedPayer(t, "hib-f")
	require.NoError(t, e.Interrupt(t.Context(), h.SessionID, "stop"))
	out, err := awaitResult(t, h)
	require.NoError(t, err)
	require.Equal(t, helix.AgentInterrupted, out.Status, out.Error)

	h2 := resumeAndApprove(t, e, h.SessionID)
	out = result(t, h2)
	require.Equal(t, helix.AgentCompleted, out.Status, out.Error)
	require.EqualValues(t, 1, executions2(runs, "t1"))
}

// Aborting a hibernated session ends it; nothing of it runs again, and a
// late answer is refused.
func TestHibernatedSessionAborted(t *testing.T) {
	t.Parallel()
	e, h, runs := hibernatedPayer(t, "hib-g")
	require.NoError(t, e.Abort(t.Context(), h.SessionID, "no longer needed"))
	out := result(t, h)
	require.Equal(t, helix.AgentFailed, out.Status)
	_, err := e.SubmitToolResult(t.Context(), h.SessionID, helix.Approve("t1", "late"))
	require.Error(t, err)
	require.EqualValues(t, 0, executions2(runs, "t1"))
}

// A restart of the engine that hibernated sessions (the same executor ID)
// replays none of them: their workflows ended, and DBOS recovers nothing;
// the model is not called again.
func TestRestartReplaysNoHibernatedSession(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := appPool(t, url)
	var runs sync.Map
	agent := payer(&runs)
	modelCalls := countModelCalls(agent)
	a := hibernating(t, url, "hib-h", nil, agent)
	var hs []*engine.Handle
	for range 5 {
		h, err := a.Execute(t.Context(), agent, engine.Input{Message: "pay bob"}, nil)
		require.NoError(t, err)
		hs = append(hs, h)
	}
	for _, h := range hs {
		awaitHibernated(t, pool, h.RunID)
	}
	require.NoError(t, a.Shutdown(t.Context()))
	calls := modelCalls.Load()

	b := hibernating(t, url, "hib-h", nil, agent)
	var pending int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM dbos.workflow_status w JOIN helix.runs r ON r.workflow_id = w.workflow_uuid
		WHERE w.status IN ('PENDING', 'ENQUEUED') AND r.session_id = ANY($1)`, sessionIDs(hs)).Scan(&pending))
	require.Zero(t, pending, "no hibernated session's workflow is pending")
	for _, h := range hs {
		s := readRunState(t, pool, h.RunID)
		require.True(t, s.hibernated)
		require.Zero(t, s.wakes)
	}
	require.Equal(t, calls, modelCalls.Load(), "the restart called no model")
	// And each still completes when answered.
	submit(t, b, hs[0].SessionID, helix.Approve("t1", "ok"))
	hb, err := b.Run(t.Context(), hs[0].SessionID, hs[0].RunID)
	require.NoError(t, err)
	out := result(t, hb)
	require.Equal(t, helix.AgentCompleted, out.Status, out.Error)
}

// replayHibernated checks that the last journal record of each workflow
// of records (hibernated, its engine stopped) is named as records says (a
// hibernation by helix.hibernate writes none: the run's row records it), then
// sets the workflows back to PENDING without their outputs (as a crash
// after their hibernations' commits, before DBOS recorded their ends,
// leaves them), launches an engine (start: the same executor ID, which
// recovers them) and waits until each ended again with the output it had,
// its journal unchanged (the replay ran no step).
func replayHibernated(t *testing.T, pool *pgxpool.Pool, start func() *engine.Engine, records map[string]string) *engine.Engine {
	t.Helper()
	journal := func(wf string) []string {
		rows, err := pool.Query(t.Context(), `SELECT name FROM helix.step_journal_row_records WHERE workflow_id = $1 ORDER BY id`, wf)
		require.NoError(t, err)
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return names
	}
	outputs, kept := map[string]string{}, map[string][]string{}
	for wf, name := range records {
		kept[wf] = journal(wf)
		require.NotEmpty(t, kept[wf], "workflow %s has a journal", wf)
		require.Equal(t, name, kept[wf][len(kept[wf])-1], "workflow %s's journal ends with %s", wf, name)
		require.NotContains(t, kept[wf], steps.NameHibernate, "workflow %s: its hibernation is recorded by its run's row", wf)
		var out string
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT output FROM dbos.workflow_output WHERE workflow_uuid = $1`, wf).Scan(&out))
		outputs[wf] = out
	}
	wfs := slices.Collect(maps.Keys(records))
	_, err := pool.Exec(t.Context(), `UPDATE dbos.workflow_status SET status = 'PENDING', output = NULL, completed_at = NULL
		WHERE workflow_uuid = ANY($1)`, wfs)
	require.NoError(t, err)
	_, err = pool.Exec(t.Context(), `DELETE FROM dbos.workflow_output WHERE workflow_uuid = ANY($1)`, wfs)
	require.NoError(t, err)
	e := start()
	for wf := range records {
		var out string
		require.Eventually(t, func() bool {
			return pool.QueryRow(t.Context(), `SELECT o.output FROM dbos.workflow_status w JOIN dbos.workflow_output o USING (workflow_uuid)
				WHERE w.workflow_uuid = $1 AND w.status = 'SUCCESS'`, wf).Scan(&out) == nil
		}, 30*time.Second, 10*time.Millisecond, "workflow %s is recovered and ends", wf)
		require.Equal(t, outputs[wf], out, "workflow %s returns the outcome it returned the first time", wf)
		require.Equal(t, kept[wf], journal(wf), "workflow %s: the replay recorded nothing", wf)
	}
	return e
}

// countModelCalls makes agent's model count its calls.
func countModelCalls(agent *helix.Agent) *atomic.Int32 {
	var n atomic.Int32
	inner := agent.Model
	agent.Model = helix.ModelFunc(func(ctx context.Context, req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
		n.Add(1)
		return inner.GenerateStep(ctx, req, cb)
	})
	return &n
}

// A recovery of a hibernated run's workflow after an answer woke its run
// but before any engine took the answer (its continuation not started):
// the recovered workflow finds its run woken since (its wakes past its
// own) and ends as it did the first time, recording nothing and leaving
// the answer to the continuation, in which the approved tool runs, once.
func TestReplayOfHibernatedWorkflowLeavesTheAnswerToItsContinuation(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	var runs sync.Map
	agent := payer(&runs)
	a, h, pool := startHibernated(t, url, "hib-woken", agent)
	require.NoError(t, a.Shutdown(t.Context()))
	c, err := engine.NewClient(t.Context(), engine.ClientConfig{Pool: pool})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_, err = c.SubmitToolResult(t.Context(), h.SessionID, helix.Approve("t1", "ok"))
	require.NoError(t, err)
	s := readRunState(t, pool, h.RunID)
	require.Equal(t, 1, s.wakes, "the answer woke the run")
	require.False(t, s.hibernated)

	b := replayHibernated(t, pool, func() *engine.Engine { return hibernating(t, url, "hib-woken", nil, agent) },
		map[string]string{h.WorkflowID: steps.NameSuspendStep})
	hb, err := b.Run(t.Context(), h.SessionID, h.RunID)
	require.NoError(t, err)
	out := result(t, hb)
	require.Equal(t, helix.AgentCompleted, out.Status, out.Error)
	require.EqualValues(t, 1, executions2(&runs, "t1"))
	require.Equal(t, runState{wakes: 1, status: "SUCCESS", latest: "SUCCESS"}, readRunState(t, pool, h.RunID),
		"woken once, never hibernated again")
}

// A recovery of a hibernated run's workflow once the deadline of the call
// its run waits for has passed (no engine ran meanwhile, nothing woke the
// run): the recovered workflow finds its run asleep (postgres.Answer.Asleep)
// and ends as it did the first time, hibernated, recording nothing; the
// deadline is the continuation's, and the model sees the call time out
// once.
func TestReplayOfHibernatedWorkflowLeavesTheDeadlineToItsContinuation(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := appPool(t, url)
	clock := &helixtest.Clock{}
	var timeouts atomic.Int32
	agent := askerWithDeadline("asker-hr", func(timedOut bool) {
		if timedOut {
			timeouts.Add(1)
		}
	})
	a := hibernating(t, url, "hib-dr", clock, agent)
	h, err := a.Execute(t.Context(), agent, engine.Input{Message: "ask"}, nil)
	require.NoError(t, err)
	awaitHibernated(t, pool, h.RunID)
	require.NoError(t, a.Shutdown(t.Context()))
	clock.Advance(2 * time.Hour)

	b := replayHibernated(t, pool, func() *engine.Engine { return hibernating(t, url, "hib-dr", clock, agent) },
		map[string]string{h.WorkflowID: steps.NameSuspendStep})
	hb, err := b.Run(t.Context(), h.SessionID, h.RunID)
	require.NoError(t, err)
	out, err := awaitResult(t, hb)
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, out.Status, out.Error)
	require.EqualValues(t, 1, timeouts.Load(), "the model saw the call time out once")
	require.Equal(t, 1, readRunState(t, pool, h.RunID).wakes)
}

func sessionIDs(hs []*engine.Handle) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.SessionID
	}
	return out
}

// A hibernation writes no journal record: the run's row records it. A
// crash after the hibernation's commit but before
// DBOS recorded the workflow's end (here: the workflows of the run and of
// its first continuation, both hibernated, set back to PENDING without
// their outputs) recovers the workflows: each finds its run asleep (the
// run's own workflow, whose run was woken since, too) and returns the
// outcome it returned the first time, byte for byte, recording nothing; no
// model or tool runs again, and no answer is taken twice. The session then
// completes when answered.
func TestReplayOfHibernatedWorkflowReturnsItsOutcome(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := appPool(t, url)
	var runs sync.Map
	agent := twoPayments(&runs)
	modelCalls := countModelCalls(agent)
	a, h, _ := startHibernated(t, url, "hib-replay", agent)
	submit(t, a, h.SessionID, helix.Approve("t1", "ok"))
	wake := workflows.WakeID(h.WorkflowID, 1)
	require.Eventually(t, func() bool {
		s := readRunState(t, pool, h.RunID)
		return s.hibernated && s.wakes == 1 && s.latest == "SUCCESS"
	}, 30*time.Second, 10*time.Millisecond, "continuation 1 hibernates waiting for t2")
	require.NoError(t, a.Shutdown(t.Context()))

	calls := modelCalls.Load()
	b := replayHibernated(t, pool, func() *engine.Engine { return hibernating(t, url, "hib-replay", nil, agent) },
		map[string]string{h.WorkflowID: steps.NameSuspendStep, wake: steps.NameSuspendStep})
	require.Equal(t, calls, modelCalls.Load(), "the replays called no model")
	require.EqualValues(t, 1, executions2(&runs, "t1"))
	require.Equal(t, runState{hibernated: true, wakes: 1, status: "SUCCESS", latest: "SUCCESS"}, readRunState(t, pool, h.RunID))

	submit(t, b, h.SessionID, helix.Approve("t2", "ok"))
	hb, err := b.Run(t.Context(), h.SessionID, h.RunID)
	require.NoError(t, err)
	out := result(t, hb)
	require.Equal(t, helix.AgentCompleted, out.Status, out.Error)
	require.EqualValues(t, 1, executions2(&runs, "t1"))
	require.EqualValues(t, 1, executions2(&runs, "t2"))

	// The run's own workflow recovered once its run was woken twice and
	// completed: it still ends as it did, taking no answer, running nothing.
	require.NoError(t, b.Shutdown(t.Context()))
	calls = modelCalls.Load()
	replayHibernated(t, pool, func() *engine.Engine { return hibernating(t, url, "hib-replay", nil, agent) },
		map[string]string{h.WorkflowID: steps.NameSuspendStep})
	require.Equal(t, calls, modelCalls.Load(), "the replay called no model")
	require.EqualValues(t, 1, executions2(&runs, "t1"))
	require.EqualValues(t, 1, executions2(&runs, "t2"))
	st := readRunState(t, pool, h.RunID)
	require.False(t, st.hibernated)
	require.Equal(t, 2, st.wakes)
}
