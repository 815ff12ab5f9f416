package engine_test

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/steps"
)

// currentRunID returns the run ID of session sessionID's latest run.
func currentRunID(t *testing.T, pool *pgxpool.Pool, sessionID string) string {
	t.Helper()
	var id string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT run_id FROM helix.runs WHERE session_id = $1 ORDER BY turn DESC LIMIT 1`,
		sessionID).Scan(&id))
	return id
}

// firstRunOf waits until session sessionID has a run and returns its ID.
func firstRunOf(t *testing.T, pool *pgxpool.Pool, sessionID string) string {
	t.Helper()
	var id string
	require.Eventually(t, func() bool {
		return pool.QueryRow(t.Context(), `SELECT run_id FROM helix.runs WHERE session_id = $1 ORDER BY turn LIMIT 1`, sessionID).Scan(&id) == nil
	}, 30*time.Second, 10*time.Millisecond, "session %s never got a run", sessionID)
	return id
}

// hibernatedTree starts a parent agent (executor id) whose only step
// delegates to askingResearcher (call r1) on a hibernating engine of a
// fresh database, and waits until the child's run and the parent's
// hibernated.
func hibernatedTree(t *testing.T, name, id string) (e *engine.Engine, h *engine.Handle, pool *pgxpool.Pool, child string) {
	t.Helper()
	url := pgtest.NewURL(t)
	pool = appPool(t, url)
	parent := &helix.Agent{Name: name, Tools: []*helix.Tool{helix.MustSubAgentTool(askingResearcher(), nil, nil)},
		Model: script(calls(call("r1", "subagent__researcher", `{"task":"research"}`)), text("finished"))}
	e = hibernating(t, url, id, nil, parent)
	h, err := e.Execute(t.Context(), parent, engine.Input{Message: "go"}, nil)
	require.NoError(t, err)
	child = h.SessionID + "-sub-r1"
	awaitHibernated(t, pool, firstRunOf(t, pool, child))
	awaitHibernated(t, pool, h.RunID)
	return e, h, pool, child
}

// pendingWorkflows counts the DBOS workflows of sessionIDs' runs (their
// own and their continuations) that are pending: a process would hold or
// replay them.
func pendingWorkflows(t *testing.T, pool *pgxpool.Pool, sessionIDs ...string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM dbos.workflow_status w JOIN helix.runs r
		ON w.workflow_uuid = r.workflow_id OR w.workflow_uuid LIKE r.workflow_id || '-wake-%'
		WHERE w.status IN ('PENDING', 'ENQUEUED') AND r.session_id = ANY($1)`, sessionIDs).Scan(&n))
	return n
}

// Nested human in the loop through hibernated runs: a parent delegates to
// a sub-agent that asks its user (and to one that answers at once); the
// asking child hibernates, and so does the parent, which waits for it: no
// workflow of either is left running. The engine that started them stops;
// the answer, given to another engine, wakes the child, whose end wakes
// the parent, which takes both children's results and completes.
func TestHibernatedParentWaitsForItsSubAgent(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := appPool(t, url)
	parent := &helix.Agent{
		Name: "boss-h",
		Tools: []*helix.Tool{helix.MustSubAgentTool(askingResearcher(), nil, nil),
			helix.MustSubAgentTool(summarizer(func(string) {}), nil, nil)},
		Model: script(calls(call("r1", "subagent__researcher", `{"task":"research"}`),
			call("r2", "subagent__summarizer", `{"task":"notes"}`)), text("done")),
	}
	a := hibernating(t, url, "hib-n1", nil, parent)
	h, err := a.Execute(t.Context(), parent, engine.Input{Message: "go"}, nil)
	require.NoError(t, err)
	child := h.SessionID + "-sub-r1"
	childRun := func() string {
		var id string
		require.Eventually(t, func() bool {
			return pool.QueryRow(t.Context(), `SELECT run_id FROM helix.runs WHERE session_id = $1`, child).Scan(&id) == nil
		}, 30e9, 10e6)
		return id
	}()
	awaitHibernated(t, pool, childRun)
	awaitHibernated(t, pool, h.RunID)
	require.Zero(t, pendingWorkflows(t, pool, h.SessionID, child))
	res, err := h.Result(t.Context())
	require.NoError(t, err)
	require.Equal(t, helix.AgentSuspendedAwaitingChildren, res.Status, "a hibernated parent reports what it waits for, as a live one")
	require.NoError(t, a.Shutdown(t.Context()))

	b := hibernating(t, url, "hib-n2", nil, parent)
	sr := submit(t, b, h.SessionID, clientResult(t, "ask1", answer{Answer: "durability"}))
	require.Equal(t, child, sr.OwnerSessionID)
	hb, err := b.Run(t.Context(), h.SessionID, h.RunID)
	require.NoError(t, err)
	out := waitFor(t, hb, helix.AgentCompleted)
	require.Equal(t, helix.AgentCompleted, out.Status, out.Error)

	msgs := allMessages(t, b, h.SessionID)
	require.Len(t, msgs, 5) // user, assistant's two calls, their two results, "done"
	results := map[string]string{}
	for _, m := range msgs {
		if m.Role == helix.RoleTool {
			results[m.ToolCallID] = m.Content
		}
	}
	// Byte for byte what a parent waiting in place takes (the child's
	// outcome, not jsonb's rendering of the session's output).
	require.Equal(t, `{"summary":"about {\"answer\":\"durability\"}"}`, results["r1"])
	require.JSONEq(t, `{"summary":"short notes"}`, results["r2"])
	require.Equal(t, runState{wakes: 1, status: "SUCCESS", latest: "SUCCESS"}, readRunState(t, pool, childRun))
	require.Equal(t, runState{wakes: 1, status: "SUCCESS", latest: "SUCCESS"}, readRunState(t, pool, h.RunID))
	refs, err := b.SubSessions(t.Context(), h.SessionID)
	require.NoError(t, err)
	for _, r := range refs {
		require.Equal(t, helix.SubSessionCompleted, r.Status, r.SubSessionID)
	}
}

// Three levels: a grandchild asks its user and hibernates; its parent (a
// sub-agent) and the root hibernate in turn. The answer wakes the
// grandchild; each end wakes the level above, and the root completes with
// the answer passed up.
func TestHibernatedChainOfSubAgents(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := appPool(t, url)
	middle := &helix.Agent{
		Name: "middle", OutputSchema: json.RawMessage(summarySchema),
		Tools: []*helix.Tool{helix.MustSubAgentTool(askingResearcher(), nil, nil)},
		Model: script(calls(call("g1", "subagent__researcher", `{"task":"dig"}`)),
			func(req helix.ModelRequest, _ helix.StreamCallbacks) (helix.StepResult, error) {
				out, _ := json.Marshal(map[string]string{"summary": "relayed " + req.Messages[len(req.Messages)-1].Content})
				return helix.StepResult{Type: helix.StepToolCalls, StopReason: helix.StopToolUse,
					ToolCalls: []helix.ToolCall{{ID: "fin", Name: helix.FinishToolName, Arguments: out}}}, nil
			}),
	}
	root := &helix.Agent{Name: "root-h", Tools: []*helix.Tool{helix.MustSubAgentTool(middle, nil, nil)},
		Model: script(calls(call("m1", "subagent__middle", `{"task":"go"}`)), text("done"))}
	e := hibernating(t, url, "hib-n3", nil, root)
	h, err := e.Execute(t.Context(), root, engine.Input{Message: "go"}, nil)
	require.NoError(t, err)
	mid := h.SessionID + "-sub-m1"
	grand := mid + "-sub-g1"
	require.Eventually(t, func() bool {
		var n int
		return pool.QueryRow(t.Context(), `SELECT count(*) FROM helix.runs WHERE session_id = $1`, grand).Scan(&n) == nil && n == 1
	}, 30e9, 10e6)
	for _, id := range []string{currentRunID(t, pool, grand), currentRunID(t, pool, mid), h.RunID} {
		awaitHibernated(t, pool, id)
	}
	require.Zero(t, pendingWorkflows(t, pool, h.SessionID, mid, grand))

	submit(t, e, h.SessionID, clientResult(t, "ask1", answer{Answer: "chains"}))
	out := waitFor(t, h, helix.AgentCompleted)
	require.Equal(t, helix.AgentCompleted, out.Status, out.Error)
	msgs := allMessages(t, e, h.SessionID)
	var relayed struct{ Summary string }
	require.NoError(t, json.Unmarshal([]byte(msgs[2].Content), &relayed))
	require.Equal(t, `relayed {"summary":"about {\"answer\":\"chains\"}"}`, relayed.Summary, "each level took the exact output of the one below")
	for _, id := range []string{grand, mid, h.SessionID} {
		require.Equal(t, 1, readRunState(t, pool, currentRunID(t, pool, id)).wakes, id)
	}
}

// Interrupting a root session whose run and sub-agent hibernated: the
// interrupt wakes the child, which ends interrupted; its end wakes the
// parent, which ends interrupted with the child recorded for its resume
// (the γ-cascade, as for a live wait). Resume re-spawns the child, which
// asks again; the answer completes both.
func TestHibernatedParentInterruptedWithItsSubAgent(t *testing.T) {
	t.Parallel()
	e, h, _, child := hibernatedTree(t, "boss-i", "hib-n4")

	require.NoError(t, e.Interrupt(t.Context(), h.SessionID, "stop everything"))
	res := waitFor(t, h, helix.AgentInterrupted)
	require.Equal(t, "stop everything", res.Error)
	cs, err := e.Session(t.Context(), child)
	require.NoError(t, err)
	require.Equal(t, helix.SessionFailed, cs.Status)
	require.Equal(t, helix.FailureReasonParentSuspended, cs.FailureReason)

	h2, err := e.Resume(t.Context(), h.SessionID, nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		res, err := h2.Result(t.Context())
		return err == nil && res.Status == helix.AgentSuspendedAwaitingChildren
	}, 30e9, 10e6, "the re-spawned child asks again")
	submit(t, e, h.SessionID, clientResult(t, "ask1", answer{Answer: "again"}))
	res = waitFor(t, h2, helix.AgentCompleted)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	msgs := allMessages(t, e, h.SessionID)
	require.JSONEq(t, `{"summary":"about {\"answer\":\"again\"}"}`, msgs[len(msgs)-2].Content)
}

// clerk is a companion that asks for approval of one transfer (call t1),
// then answers "paid".
func clerk(runs *sync.Map) *helix.Agent {
	return &helix.Agent{
		Name: "clerk", OutputSchema: json.RawMessage(answerSchema), Tools: []*helix.Tool{transferTool(runs)},
		Model: script(calls(call("t1", "transfer", `{"to":"bob","amount":5}`)),
			func(helix.ModelRequest, helix.StreamCallbacks) (helix.StepResult, error) {
				return helix.StepResult{Type: helix.StepToolCalls, StopReason: helix.StopToolUse,
					ToolCalls: []helix.ToolCall{{ID: "fin", Name: helix.FinishToolName, Arguments: json.RawMessage(`{"answer":"paid"}`)}}}, nil
			}),
	}
}

// A blocking companion that waits for an approval hibernates, and so does
// its parent, which waits for it; the approval wakes the companion, whose
// end wakes the parent, which takes the companion's answer inline (not
// delivered again as a message).
func TestHibernatedBlockingCompanion(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := appPool(t, url)
	var runs sync.Map
	parent := &helix.Agent{Name: "lead-h", PersistentAgents: []helix.PersistentAgent{{Agent: clerk(&runs)}},
		Model: script(calls(call("c1", helix.CompanionSpawnAgent, `{"agentType":"clerk","name":"k","message":"pay bob"}`)), text("done"))}
	e := hibernating(t, url, "hib-n5", nil, parent)
	h, err := e.Execute(t.Context(), parent, engine.Input{Message: "go"}, nil)
	require.NoError(t, err)
	comp := h.SessionID + "-agent-k"
	awaitHibernated(t, pool, firstRunOf(t, pool, comp))
	awaitHibernated(t, pool, h.RunID)
	require.Zero(t, pendingWorkflows(t, pool, h.SessionID, comp))

	submit(t, e, h.SessionID, helix.Approve("t1", "ok"))
	out := waitFor(t, h, helix.AgentCompleted)
	require.Equal(t, helix.AgentCompleted, out.Status, out.Error)
	require.Equal(t, `{"answer":"paid"}`, toolResults(t, e, h.SessionID)["c1"])
	require.EqualValues(t, 1, executions2(&runs, "t1"))
	require.True(t, companionRef(t, e, h.SessionID, "k").CompletionDelivered)
	for _, m := range allMessages(t, e, h.SessionID) {
		require.NotContains(t, m.Content, "[companion", "a blocking outcome is not delivered again as a message")
	}
}

// waitForResult on a non-blocking companion whose run hibernated waits for
// the continuation that ends it: the approval given during the wait wakes
// the companion, and the wait returns its answer.
func TestWaitForResultOfHibernatedCompanion(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := appPool(t, url)
	var runs sync.Map
	gate := make(chan struct{})
	parent := &helix.Agent{Name: "lead-w",
		// (The advisor, a blocking companion, offers waitForResult.)
		PersistentAgents: []helix.PersistentAgent{{Agent: clerk(&runs), Mode: helix.CompanionNonBlocking}, {Agent: consultant("advisor", nil, 0)}},
		Model: script(calls(call("c1", helix.CompanionSpawnAgent, `{"agentType":"clerk","name":"k","message":"pay bob"}`)),
			func(req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
				<-gate
				return calls(call("w1", helix.CompanionWaitForResult, `{"name":"k","timeoutSeconds":60}`))(req, cb)
			},
			text("done"))}
	e := hibernating(t, url, "hib-n6", nil, parent)
	h, err := e.Execute(t.Context(), parent, engine.Input{Message: "go"}, nil)
	require.NoError(t, err)
	comp := h.SessionID + "-agent-k"
	awaitHibernated(t, pool, firstRunOf(t, pool, comp))
	close(gate)
	// Approve once the parent waits (DBOS records the wait's deadline
	// before it waits): the wait sees the companion's wake and end.
	require.Eventually(t, func() bool {
		var n int
		return pool.QueryRow(t.Context(), `SELECT count(*) FROM dbos.operation_outputs o JOIN helix.runs r ON o.workflow_uuid = r.workflow_id
			WHERE r.run_id = $1 AND o.function_name = 'DBOS.sleep'`, h.RunID).Scan(&n) == nil && n == 1
	}, 30e9, 10e6)
	submit(t, e, h.SessionID, helix.Approve("t1", "ok"))
	out := waitFor(t, h, helix.AgentCompleted)
	require.Equal(t, helix.AgentCompleted, out.Status, out.Error)
	var got struct {
		Status string          `json:"status"`
		Output json.RawMessage `json:"output"`
	}
	w1 := toolResults(t, e, h.SessionID)["w1"]
	require.NoError(t, json.Unmarshal([]byte(w1), &got), w1)
	require.Equal(t, "completed", got.Status, w1)
	require.JSONEq(t, `{"answer":"paid"}`, string(got.Output))
	require.EqualValues(t, 1, executions2(&runs, "t1"))
}

// Aborting a root session whose run and sub-agent hibernated ends both:
// no workflow of either is left, nothing stays hibernated or woken, and a
// late answer is refused.
func TestHibernatedParentAbortedWithItsSubAgent(t *testing.T) {
	t.Parallel()
	e, h, pool, child := hibernatedTree(t, "boss-a", "hib-n7")

	require.NoError(t, e.Abort(t.Context(), h.SessionID, "no longer needed"))
	out := result(t, h)
	require.Equal(t, helix.AgentFailed, out.Status)
	cs, err := e.Session(t.Context(), child)
	require.NoError(t, err)
	require.Equal(t, helix.SessionFailed, cs.Status)
	_, err = e.SubmitToolResult(t.Context(), h.SessionID, clientResult(t, "ask1", answer{Answer: "late"}))
	require.Error(t, err)
	require.Eventually(t, func() bool { return pendingWorkflows(t, pool, h.SessionID, child) == 0 }, 30e9, 10e6)
	var asleep int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM helix.runs WHERE session_id = ANY($1)
		AND (hibernated_at IS NOT NULL OR woken_at IS NOT NULL) AND status NOT IN ('completed', 'failed', 'interrupted')`,
		[]string{h.SessionID, child}).Scan(&asleep))
	require.Zero(t, asleep, "nothing of the aborted tree waits to be woken")
}

// A parent that hibernated for its sub-agent (helix.hibernate_for_children)
// and the sub-agent that hibernated for its user, recovered after a crash
// between their hibernations' commits and
// DBOS's record of their ends, both return the outcomes they returned, and
// the tree still completes when the user answers.
func TestReplayOfHibernatedParentReturnsItsOutcome(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := appPool(t, url)
	parent := &helix.Agent{Name: "boss-replay", Tools: []*helix.Tool{helix.MustSubAgentTool(askingResearcher(), nil, nil)},
		Model: script(calls(call("r1", "subagent__researcher", `{"task":"research"}`)), text("finished"))}
	a := hibernating(t, url, "hib-replay-n", nil, parent)
	h, err := a.Execute(t.Context(), parent, engine.Input{Message: "go"}, nil)
	require.NoError(t, err)
	child := h.SessionID + "-sub-r1"
	childRun := firstRunOf(t, pool, child)
	awaitHibernated(t, pool, childRun)
	awaitHibernated(t, pool, h.RunID)
	require.NoError(t, a.Shutdown(t.Context()))
	var childWF string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT workflow_id FROM helix.runs WHERE run_id = $1`, childRun).Scan(&childWF))

	b := replayHibernated(t, pool, func() *engine.Engine { return hibernating(t, url, "hib-replay-n", nil, parent) },
		map[string]string{h.WorkflowID: steps.NameHibernateForChildren, childWF: steps.NameSuspendStep})
	require.Equal(t, runState{hibernated: true, status: "SUCCESS"}, readRunState(t, pool, h.RunID))
	require.Equal(t, runState{hibernated: true, status: "SUCCESS"}, readRunState(t, pool, childRun))

	submit(t, b, h.SessionID, clientResult(t, "ask1", answer{Answer: "durability"}))
	hb, err := b.Run(t.Context(), h.SessionID, h.RunID)
	require.NoError(t, err)
	out := waitFor(t, hb, helix.AgentCompleted)
	require.Equal(t, helix.AgentCompleted, out.Status, out.Error)
}
