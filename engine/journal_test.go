package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/workflows"
)

// lineWatch is a log writer that signals when a line containing want is
// written.
type lineWatch struct {
	want string
	once sync.Once
	seen chan struct{}
}

func (w *lineWatch) Write(p []byte) (int, error) {
	if strings.Contains(string(p), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

// await waits (at most 30 s) for a line containing want.
func (w *lineWatch) await(t *testing.T, what string) {
	t.Helper()
	select {
	case <-w.seen:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no line with %q was logged", what, w.want)
	}
}

// The step journal records only for the execution that owns the workflow:
// once another execution owns it (a takeover, a DBOS cancel or resume), the
// step that was running commits nothing: not its messages, not its records.
func TestJournalRecordsNothingOnceTheWorkflowIsAnotherExecutions(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	entered, release := make(chan struct{}), make(chan struct{})
	type in struct{}
	tool := helix.MustNewTool("slow", "waits", func(ctx context.Context, _ in, _ helix.ToolContext) (string, error) {
		close(entered)
		select {
		case <-release:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		return "done", nil
	})
	agent := &helix.Agent{Name: "journal-owner", Tools: []*helix.Tool{tool},
		Model: script(calls(call("t1", "slow", `{}`)), text("never reached"))}
	watch := &lineWatch{want: "run.taken_over", seen: make(chan struct{})}
	e := newEngineLogging(t, url, watch, agent)

	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "go"}, nil)
	require.NoError(t, err)
	<-entered // the model step is recorded; the tool runs

	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	defer pool.Close()
	tag, err := pool.Exec(t.Context(), `UPDATE dbos.workflow_status SET owner_xid = 'another-execution' WHERE workflow_uuid = $1`, h.WorkflowID)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	close(release)

	watch.await(t, "the execution went on recording after its workflow became another execution's")
	var names []string
	rows, err := pool.Query(t.Context(), `SELECT name FROM helix.step_journal_records
		WHERE workflow_id = $1 AND id >= $2 ORDER BY id`, h.WorkflowID, workflows.JournalBase)
	require.NoError(t, err)
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		names = append(names, n)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{steps.NameBeginRun, steps.NameCallModel}, names, "the tool and the commit are not recorded")
	st, err := e.Session(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Zero(t, st.StepCount, "the step did not commit")
	msgs, err := e.Messages(t.Context(), h.SessionID, nil)
	require.NoError(t, err)
	require.Len(t, msgs.Messages, 1, "only the user's message")
}

// A step's commit carries the records written with it in its checkpoint:
// the step's tool record and the commit's own are the
// checkpoint's journal, not a helix.step_journal row, and a recovery after
// the commit replays them from there: the tool is not run again, the
// commit not applied twice.
func TestJournalCommitRecordsInTheCheckpointReplay(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	var x executions
	agent := &helix.Agent{Name: "journal-rows", Tools: []*helix.Tool{noteTool(&x)}, Model: script(
		calls(call("n1", "note", `{"text":"a"}`)),
		func(helix.ModelRequest, helix.StreamCallbacks) (helix.StepResult, error) {
			return helix.StepResult{Type: helix.StepText, Content: "done"}, nil
		},
	)}
	// The process dies after the first step's commit (the test kit's crash
	// point, on the engine's probe).
	crash := helixtest.AfterCommit(1)
	first := helixtest.NewEngine(t, helixtest.EngineOptions{DatabaseURL: url, ExecutorID: "exec-rows", CrashAt: &crash, Quiet: true}, agent)
	h := first.Start(agent, "go")
	first.AwaitCrash()

	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	defer pool.Close()
	type row struct{ ID, N int }
	var got []row
	rows, err := pool.Query(t.Context(), `SELECT id, n FROM helix.step_journal WHERE workflow_id = $1 ORDER BY id`, h.WorkflowID)
	require.NoError(t, err)
	for rows.Next() {
		var r row
		require.NoError(t, rows.Scan(&r.ID, &r.N))
		got = append(got, r)
	}
	require.NoError(t, rows.Err())
	base := workflows.JournalBase
	require.Equal(t, []row{{base, 1}}, got, "one helix.step_journal row, the run's begin: the model call's record is "+
		"the assistant message row, the tool's and the commit's are the checkpoint's")
	var meta string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT m.meta::text FROM helix.messages m JOIN helix.sessions s ON s.key = m.session_key WHERE s.session_id = $1 AND m.seq = 1`,
		h.SessionID).Scan(&meta))
	require.True(t, strings.HasPrefix(meta, "[1,0,1,"), "turn 1, the run's own workflow, step 1 of the journal (after the begin): %s", meta)
	var checkpoint, carried string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT helix.checkpoint_id_of(s.session_id, c.step_count, c.id_ms, c.id_rand), c.journal
		FROM helix.checkpoints c JOIN helix.sessions s ON s.key = c.session_key
		WHERE s.session_id = $1 AND c.journal IS NOT NULL`, h.SessionID).Scan(&checkpoint, &carried))
	require.True(t, strings.HasPrefix(carried, fmt.Sprintf("[0,%d,", base+2)), "the run's own workflow, from the tool: %s", carried)
	require.NotContains(t, carried, checkpoint, "the commit's record does not repeat its checkpoint's ID")

	type record struct {
		ID   int
		Name string
	}
	var recs []record
	rows, err = pool.Query(t.Context(), `SELECT id, name, output, error, started_at, completed_at
		FROM helix.step_journal_records WHERE workflow_id = $1 ORDER BY id`, h.WorkflowID)
	require.NoError(t, err)
	for rows.Next() {
		var r record
		var output, stepErr *string
		var started, completed int64
		require.NoError(t, rows.Scan(&r.ID, &r.Name, &output, &stepErr, &started, &completed))
		require.Nil(t, stepErr, r.Name)
		require.NotNil(t, output, r.Name)
		require.True(t, json.Valid([]byte(*output)), "%s's output is its JSON, as written: %s", r.Name, *output)
		require.Positive(t, started, r.Name)
		require.GreaterOrEqual(t, completed, started, r.Name)
		recs = append(recs, r)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []record{{base, steps.NameBeginRun}, {base + 1, steps.NameCallModel}, {base + 2, steps.NameRunTool}, {base + 3, steps.NameCommitStep}},
		recs, "the view shows a row per record")
	var commit steps.CommitOutput
	var output string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT output FROM helix.step_journal_records WHERE workflow_id = $1 AND id = $2`,
		h.WorkflowID, base+3).Scan(&output))
	require.NoError(t, json.Unmarshal([]byte(output), &commit))
	require.Equal(t, steps.CommitOutput{CheckpointID: checkpoint, MessageCount: 3}, commit, "the view puts the checkpoint's ID back")

	second := first.Replacement(helixtest.ReplacementOptions{})
	res := second.Await(second.Attach(h))
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	require.JSONEq(t, `"done"`, string(res.Output))
	require.Equal(t, map[string]int{h.WorkflowID + "/n1": 1}, x.keys, "the recorded tool step was replayed, not run again")
	require.Len(t, second.Messages(h.SessionID), 4, "user, assistant, tool result, assistant: the commit applied once")
	second.RequireTranscriptOnce(h.SessionID)
	second.RequireStreamGapFree(h.SessionID)
}

// A commit whose acknowledgement is lost (the server committed, the
// connection ended before the client read the COMMIT's completion) is not
// applied again: the retry finds its records in the checkpoint the attempt
// wrote (a primary-key look-up of the checkpoint IDs its attempts
// rendered), whether the commit went out as one held statement or, with
// state patches, under the session's locks.
func TestJournalCommitWithALostAcknowledgementIsAppliedOnce(t *testing.T) {
	t.Parallel()
	for _, patches := range []bool{false, true} {
		t.Run(map[bool]string{false: "held", true: "locked"}[patches], func(t *testing.T) {
			t.Parallel()
			dbURL := pgtest.NewURL(t)
			var x executions
			tool := noteTool(&x)
			if !patches {
				tool = countTool("note", &x)
			}
			agent := &helix.Agent{Name: "journal-ack", Tools: []*helix.Tool{tool},
				Model: script(calls(call("n1", "note", `{"text":"a"}`)), text("done"))}
			e, h, buf := runLosingAnAck(t, dbURL, newAckLoss("helix.check_journal_owner"), agent)
			require.Equal(t, []string{"user", "assistant", "tool", "assistant"}, roles(allMessages(t, e, h.SessionID)),
				"the commit applied once")
			require.Equal(t, map[string]int{h.WorkflowID + "/n1": 1}, x.keys, "the tool ran once")
			requireNoStepFailed(t, buf)
		})
	}
}

// countTool is a tool named name that counts its executions by
// idempotency key in x.
func countTool(name string, x *executions, opts ...helix.ToolOption) *helix.Tool {
	return helix.MustNewTool(name, "Counts its runs", func(_ context.Context, _ struct {
		Text string `json:"text"`
	}, tc helix.ToolContext) (string, error) {
		x.record(tc.IdempotencyKey())
		return "noted", nil
	}, opts...)
}

// A queued run's segments each replay their own records from the run's
// checkpoints (helix.run_journals keeps a segment's): after a crash after a
// commit of the second segment, its recovery finds the second segment's
// records, not the first's (their IDs overlap: each workflow's start at
// JournalBase), runs no tool again and applies no commit twice.
func TestJournalQueuedSegmentsReplayTheirOwnRecords(t *testing.T) {
	t.Parallel()
	var x executions
	agent := &helix.Agent{Name: "journal-segments",
		Tools: []*helix.Tool{countTool("note", &x), countTool("charge", &x, helix.RequireApproval())},
		Model: script(calls(call("n1", "note", `{"text":"a"}`)), calls(call("c1", "charge", `{"text":"b"}`)),
			calls(call("n2", "note", `{"text":"c"}`)), text("done"))}
	crash := helixtest.AfterCommit(3)
	first := helixtest.NewEngine(t, helixtest.EngineOptions{CrashAt: &crash, Quiet: true,
		Queue: &engine.QueueConfig{WorkerConcurrency: 1, PollingInterval: 20 * time.Millisecond}}, agent)
	h := first.Start(agent, "go")
	first.AwaitPending(h.SessionID, "c1")
	first.Approve(h.SessionID, "c1")
	first.AwaitCrash()

	pool, err := pgxpool.New(t.Context(), first.URL())
	require.NoError(t, err)
	defer pool.Close()
	segments := queryStrings(t, pool, `SELECT split_part(substr(c.journal, 2), ',', 1) FROM helix.checkpoints c JOIN helix.sessions s ON s.key = c.session_key
		WHERE s.session_id = $1 AND c.journal IS NOT NULL ORDER BY c.created_seq`, h.SessionID)
	require.Equal(t, []string{"1", "2", "2"}, segments, "step 1 committed in the first segment; 2 and 3 in the second")
	require.Equal(t, []string{"1", "2"}, queryStrings(t, pool,
		`SELECT m.meta->>1 FROM helix.messages m JOIN helix.sessions s ON s.key = m.session_key WHERE s.session_id = $1 AND m.meta IS NOT NULL ORDER BY m.seq`, h.SessionID),
		"steps 1 and 3 recorded their model calls as their assistant rows, each naming its segment (step 2's waited for its approval)")

	second := first.Replacement(helixtest.ReplacementOptions{NewExecutorID: true})
	res := second.Await(second.Attach(h))
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	require.Equal(t, map[string]int{h.WorkflowID + "/n1": 1, h.WorkflowID + "/c1": 1, h.WorkflowID + "/n2": 1}, x.keys,
		"each tool ran once")
	require.Len(t, second.Messages(h.SessionID), 8, "user, then assistant and tool three times, then assistant")
	second.RequireTranscriptOnce(h.SessionID)
	second.RequireStreamGapFree(h.SessionID)
}

// A run with a sub-agent, crashed after a commit, recovers with the
// sub-agent's: each session replays its own records from its own
// checkpoints, no tool runs twice and no commit applies twice.
func TestJournalRunWithASubAgentReplaysAfterACrash(t *testing.T) {
	t.Parallel()
	var x executions
	child := &helix.Agent{Name: "journal-child", Description: "Notes things", Tools: []*helix.Tool{countTool("child_note", &x)},
		OutputSchema: json.RawMessage(summarySchema),
		Model:        script(calls(call("k1", "child_note", `{"text":"x"}`)), calls(call("fin", helix.FinishToolName, `{"summary":"s"}`)))}
	parent := &helix.Agent{Name: "journal-parent", Tools: []*helix.Tool{countTool("note", &x), helix.MustSubAgentTool(child, nil, nil)},
		Model: script(calls(call("n1", "note", `{"text":"a"}`), call("s1", "subagent__journal-child", `{"task":"t"}`)),
			calls(call("n2", "note", `{"text":"b"}`)), text("done"))}
	crash := helixtest.AfterCommit(2)
	first := helixtest.NewEngine(t, helixtest.EngineOptions{CrashAt: &crash, Quiet: true}, parent, child)
	h := first.Start(parent, "go")
	at := first.AwaitCrash()

	second := first.Replacement(helixtest.ReplacementOptions{})
	res := second.Await(second.Attach(h))
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	childID := h.SessionID + "-sub-s1"
	require.Equal(t, map[string]int{h.WorkflowID + "/n1": 1, h.WorkflowID + "/n2": 1, childWorkflow(t, second, childID) + "/k1": 1},
		x.keys, "each tool ran once (the crash was after step 2's commit of %s)", at.SessionID)
	require.Len(t, second.Messages(h.SessionID), 7, "user; assistant, two tool results; assistant, tool result; assistant")
	pool, err := pgxpool.New(t.Context(), second.URL())
	require.NoError(t, err)
	defer pool.Close()
	for id, want := range map[string]int{h.SessionID: 2, childID: 1} {
		var n int
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM helix.messages m JOIN helix.sessions s ON s.key = m.session_key WHERE s.session_id = $1 AND m.meta->>0 = '1'`,
			id).Scan(&n))
		require.Equal(t, want, n, "%s: its tool steps' model records are its own assistant rows, of its own run", id)
	}
	second.RequireTranscriptOnce(h.SessionID)
	second.RequireTranscriptOnce(childID)
	second.RequireStreamGapFree(h.SessionID)
}

// childWorkflow is the workflow of a sub-agent session's run.
func childWorkflow(t *testing.T, e *helixtest.Engine, sessionID string) string {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), e.URL())
	require.NoError(t, err)
	defer pool.Close()
	var wf string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT workflow_id FROM helix.runs WHERE session_id = $1`, sessionID).Scan(&wf))
	return wf
}

// queryStrings returns the text column of the rows sql reads.
func queryStrings(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), sql, args...)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

// A waiting run's records leave out what their workflow implies: the
// begin's its session, run, workflow, stream and root; the suspension's
// calls their run, workflow, owner session, approval ID and output schema
// (the session's row keeps a client tool's schema, which validates its
// result; an approval has none). A replacement engine that replays them
// after a crash puts them back: the approved tool runs once, the client's
// result is validated, and the session completes.
func TestWaitingRunRecordsLeaveOutWhatTheWorkflowImplies(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	var runs sync.Map
	agent := &helix.Agent{Name: "compact-waits", Tools: []*helix.Tool{askUser(), transferTool(&runs, helix.RequireApproval())},
		Model: script(calls(call("ask1", "ask_user", `{"question":"which?"}`), call("t1", "transfer", `{"to":"bob","amount":5}`)),
			text("done"))}
	never := -time.Duration(1)
	first := helixtest.NewEngine(t, helixtest.EngineOptions{DatabaseURL: url, ExecutorID: "exec-compact", Quiet: true,
		Configure: func(c *engine.Config) { c.HibernateAfter = never }}, agent)
	h := first.Start(agent, "go")
	first.AwaitPending(h.SessionID, "t1")

	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	defer pool.Close()
	record := func(name string) map[string]any {
		t.Helper()
		var output string
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT output FROM helix.step_journal_records WHERE workflow_id = $1 AND name = $2`,
			h.WorkflowID, name).Scan(&output))
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(output), &v), output)
		return v
	}
	rs, err := pool.Query(t.Context(), `SELECT name FROM helix.step_journal_row_records WHERE workflow_id = $1 ORDER BY id`, h.WorkflowID)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rs, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{steps.NameBeginRun, steps.NameCallModel, steps.NameSuspendStep}, names)
	var journalRows int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM helix.step_journal WHERE workflow_id = $1`, h.WorkflowID).Scan(&journalRows))
	require.Equal(t, 1, journalRows, "the begin, which wrote nothing, waited for the suspension's write: one journal row")
	var chunkRows, chunks int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*), coalesce(sum(c.n), 0) FROM helix.stream_chunks c
		JOIN helix.streams s ON s.key = c.stream_key WHERE s.stream_id = $1`, h.SessionID).Scan(&chunkRows, &chunks))
	require.Equal(t, 1, chunkRows, "the suspension's chunks (%d in all) share the row of its model call's", chunks)
	require.Equal(t, 4, chunks, "the step's start, its two calls and the approval's request")
	begin := record(steps.NameBeginRun)
	for _, k := range []string{"sessionId", "runId", "workflowId", "streamId", "rootSessionId"} {
		require.NotContains(t, begin, k, "the begin's record leaves out what the workflow's input implies")
	}
	require.Equal(t, agent.Name, begin["agentType"])
	suspended := record(steps.NameSuspendStep)["pending"].([]any)
	require.Len(t, suspended, 2)
	for _, c := range suspended {
		for _, k := range []string{"runId", "workflowId", "ownerSessionId", "approvalId", "outputSchema"} {
			require.NotContains(t, c, k, "the suspension's record leaves out what its run implies")
		}
	}
	pending := map[string]store.PendingClientToolCall{}
	for _, c := range first.Pending(h.SessionID) {
		pending[c.ToolCallID] = c
	}
	require.NotEmpty(t, pending["ask1"].OutputSchema, "a client tool's schema validates its result")
	require.Empty(t, pending["t1"].OutputSchema, "an approval has no result to validate")
	require.Equal(t, h.RunID+"::t1", pending["t1"].ApprovalID)

	first.Crash()
	second := first.Replacement(helixtest.ReplacementOptions{})
	_, err = second.Engine.SubmitToolResult(t.Context(), h.SessionID, clientResult(t, "ask1", map[string]int{"answer": 7}))
	var se *helix.SubmissionError
	require.ErrorAs(t, err, &se, "the client's result is validated against the tool's schema")
	second.Answer(h.SessionID, "ask1", answer{Answer: "that one"})
	second.Approve(h.SessionID, "t1")
	res := second.Await(second.Attach(h))
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	n, _ := runs.Load("t1")
	require.EqualValues(t, 1, n.(*atomic.Int32).Load(), "the approved tool ran once")
}
