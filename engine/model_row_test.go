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

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/helixtest"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/steps"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// rawArgs records the arguments each run of a tool got, by tool call ID,
// as bytes.
type rawArgs struct {
	mu   sync.Mutex
	seen map[string][]string
}

func (r *rawArgs) tool(t *testing.T) *helix.Tool {
	tool, err := helix.NewRawTool("probe", "Records its arguments", json.RawMessage(`{"type":"object"}`), nil,
		func(_ context.Context, args json.RawMessage, tc helix.ToolContext) (json.RawMessage, error) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.seen == nil {
				r.seen = map[string][]string{}
			}
			r.seen[tc.ToolCallID()] = append(r.seen[tc.ToolCallID()], string(args))
			return json.RawMessage(`"ok"`), nil
		})
	require.NoError(t, err)
	return tool
}

// runs returns a copy of what the tool saw.
func (r *rawArgs) runs() map[string][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]string{}
	for k, v := range r.seen {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// modelRowAgent calls the probe tool at each of its first steps (arguments
// with unsorted keys, spaces and a '<', which jsonb and json.Marshal each
// write their own way), then answers.
func modelRowAgent(tool *helix.Tool, steps int) *helix.Agent {
	script := make([]func(helix.ModelRequest, helix.StreamCallbacks) (helix.StepResult, error), 0, steps+1)
	for i := 1; i <= steps; i++ {
		script = append(script, calls(call(fmt.Sprintf("c%d", i), "probe", fmt.Sprintf(`{"z": %d,  "a": "<b>", "m": {"y": 1, "b": [2, 1]}}`, i))))
	}
	return &helix.Agent{Name: "model-rows", Tools: []*helix.Tool{tool}, MaxSteps: steps + 2, Model: scriptOf(append(script, text("done")))}
}

func scriptOf(s []func(helix.ModelRequest, helix.StreamCallbacks) (helix.StepResult, error)) helix.Model {
	return script(s...)
}

// At FormatLevelModelMessages a step whose tools run application code
// records its model call as the step's assistant message row: no
// helix.call_model record in helix.step_journal, a row with meta per step.
// Crashes after a model call (the row pending) and after a tool (its
// record lost) replay the rows: the model is called once per step, each
// tool call runs with the same bytes in every execution, and the
// transcript holds each message once.
func TestModelRecordIsTheAssistantRow(t *testing.T) {
	t.Parallel()
	const toolSteps = 5
	for _, crash := range []helixtest.CrashPoint{helixtest.AfterModelCall(3), helixtest.AfterTool("probe"), helixtest.AfterCommit(2)} {
		t.Run(crash.String(), func(t *testing.T) {
			t.Parallel()
			url := pgtest.NewURL(t)
			var args rawArgs
			var mc modelCalls
			agent := modelRowAgent(args.tool(t), toolSteps)
			agent.Model = mc.Wrap(agent.Model)
			first := helixtest.NewEngine(t, helixtest.EngineOptions{DatabaseURL: url, CrashAt: &crash, Quiet: true}, agent)
			require.GreaterOrEqual(t, postgres.FormatLevel(first.FormatLevel()), postgres.FormatLevelModelMessages)
			h := first.Start(agent, "go")
			first.AwaitCrash()
			second := first.Replacement(helixtest.ReplacementOptions{})
			res := second.Await(second.Attach(h))
			require.Equal(t, helix.AgentCompleted, res.Status, res.Error)

			for step := 1; step <= toolSteps+1; step++ {
				require.Equal(t, 1, mc.Of(step), "the model call of step %d ran once", step)
			}
			runs := args.runs()
			require.Len(t, runs, toolSteps)
			for id, seen := range runs {
				require.NotEmpty(t, seen, id)
				for _, s := range seen[1:] {
					require.Equal(t, seen[0], s, "call %s: every execution ran the tool with the same bytes", id)
				}
			}
			if crash.At == helixtest.AfterTool("probe").At {
				require.Len(t, runs["c1"], 2, "the tool whose record was lost ran again")
			}

			pool, err := pgxpool.New(t.Context(), url)
			require.NoError(t, err)
			defer pool.Close()
			var journalModel, rows, pending int
			require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM helix.step_journal_row_records
				WHERE workflow_id = $1 AND name = $2`, h.WorkflowID, steps.NameCallModel).Scan(&journalModel))
			require.Zero(t, journalModel, "no model call's record in helix.step_journal")
			require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE m.meta IS NOT NULL),
					count(*) FILTER (WHERE m.seq >= s.message_count)
				FROM helix.all_messages m JOIN helix.sessions s USING (session_id) WHERE m.session_id = $1`, h.SessionID).Scan(&rows, &pending))
			require.Equal(t, toolSteps, rows, "a model record per tool step, in its assistant row")
			require.Zero(t, pending, "no row left pending")
			var view int
			require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM helix.step_journal_records
				WHERE workflow_id = $1 AND name = $2`, h.WorkflowID, steps.NameCallModel).Scan(&view))
			require.Equal(t, toolSteps+1, view, "helix.step_journal_records shows the rows' records, and the answer's (its commit's checkpoint's)")

			msgs := second.Messages(h.SessionID)
			require.Len(t, msgs, 1+2*toolSteps+1, "user, (assistant, tool result) per tool step, the answer")
			for i := 1; i <= toolSteps; i++ {
				m := msgs[2*i-1]
				require.Equal(t, helix.RoleAssistant, m.Role)
				require.Len(t, m.ToolCalls, 1)
				require.JSONEq(t, string(m.ToolCalls[0].Arguments), runs[m.ToolCalls[0].ID][0],
					"the tool ran with the arguments the transcript holds")
				require.True(t, strings.HasPrefix(runs[m.ToolCalls[0].ID][0], `{"a":"\u003cb\u003e","m":{"b":[2,1],"y":1},"z":`),
					"as stored (jsonb's key order), in json.Marshal's compact form, which a replay reads back: %s", runs[m.ToolCalls[0].ID][0])
			}
			second.RequireTranscriptOnce(h.SessionID)
			second.RequireStreamGapFree(h.SessionID)
		})
	}
}

// A run aborted while a tool runs leaves its step's model record pending
// in its assistant row. The session's next turn moves it to helix.step_journal
// before it writes its user message there (the row was never a message);
// the old workflow, resumed with DBOS's tools afterwards, replays the record
// from there (no second model call) and its commit is discarded.
func TestPendingRowOfAnAbortedRunIsEvicted(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	slow := helix.MustNewTool("slow", "Waits", func(ctx context.Context, _ struct{}, _ helix.ToolContext) (string, error) {
		once.Do(func() { close(started) })
		select {
		case <-release:
		case <-ctx.Done():
		}
		return "slept", nil
	})
	var mc modelCalls
	agent := &helix.Agent{Name: "evicted", Tools: []*helix.Tool{slow},
		Model: mc.Wrap(script(calls(call("s1", "slow", `{}`)), text("done"), text("again")))}
	e := helixtest.NewEngine(t, helixtest.EngineOptions{DatabaseURL: url, Quiet: true}, agent)
	h := e.Start(agent, "go")
	<-started

	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	defer pool.Close()
	var pendingSeq, count int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT m.seq, s.message_count FROM helix.all_messages m
		JOIN helix.sessions s USING (session_id) WHERE m.session_id = $1 AND m.meta IS NOT NULL`, h.SessionID).Scan(&pendingSeq, &count))
	require.Equal(t, count, pendingSeq, "the model record waits at the message count, pending")
	require.Len(t, e.Messages(h.SessionID), 1, "the pending row is no message")

	require.NoError(t, e.Abort(t.Context(), h.SessionID, "stop"))
	close(release)
	e.AwaitStatus(h.SessionID, helix.SessionFailed)

	h2, err := e.Retry(t.Context(), h.SessionID, &engine.RetryOptions{Mode: engine.RetryFromStart, Message: "next"})
	require.NoError(t, err)
	res := e.Await(h2)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	msgs := e.Messages(h.SessionID)
	require.Len(t, msgs, 5, "user, user, the retry's step (assistant, tool result), answer: the aborted step's row was never a message")
	require.Equal(t, helix.RoleUser, msgs[1].Role)
	var moved int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM helix.step_journal WHERE workflow_id = $1 AND name = $2`,
		h.WorkflowID, steps.NameCallModel).Scan(&moved))
	require.Equal(t, 1, moved, "the evicted row's record is in helix.step_journal, for its workflow's replay")

	// The old workflow, resumed with DBOS's tools: it replays its model
	// record and does not call the model again.
	calls := mc.Of(1) + mc.Of(2) + mc.Of(3)
	_, err = dbos.ResumeWorkflow[steps.Outcome](dbosClient(t, url), h.WorkflowID)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var status string
		_ = pool.QueryRow(t.Context(), `SELECT status FROM dbos.workflow_status WHERE workflow_uuid = $1`, h.WorkflowID).Scan(&status)
		return status == "SUCCESS" || status == "ERROR"
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, calls, mc.Of(1)+mc.Of(2)+mc.Of(3), "the resumed workflow replayed its model call's record")
	require.Len(t, e.Messages(h.SessionID), 5, "its commit was discarded")
	e.RequireTranscriptOnce(h.SessionID)
}

// A step whose approval has a predicate records its model call at once:
// its assistant row waits, pending, while the step waits for the approval.
// When another run finishes the step (the session was interrupted while it
// waited, then resumed), that run's commit keeps the row (the same
// assistant message) and the original run's record in it; a crash after
// that commit replays it and applies nothing twice.
func TestApprovalPredicateStepAdoptsItsRow(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	var runs sync.Map
	gate := helix.RequireApprovalWhen(func(_ context.Context, in transferIn, _ helix.ToolContext) (bool, error) {
		return in.Amount > 100, nil
	})
	tool := helix.MustNewTool("transfer", "Move money", func(_ context.Context, in transferIn, tc helix.ToolContext) (map[string]int, error) {
		n, _ := runs.LoadOrStore(tc.ToolCallID(), new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		return map[string]int{"sent": in.Amount}, nil
	}, gate)
	var mc modelCalls
	agent := &helix.Agent{Name: "gated-rows", Tools: []*helix.Tool{tool},
		Model: mc.Wrap(script(calls(call("big", "transfer", `{"to":"a","amount":500}`)), text("done")))}
	crash := helixtest.AfterCommit(1)
	first := helixtest.NewEngine(t, helixtest.EngineOptions{DatabaseURL: url, CrashAt: &crash, Quiet: true}, agent)
	h := first.Start(agent, "pay")
	first.AwaitPending(h.SessionID, "big")

	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	defer pool.Close()
	var seq, count int
	var meta string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT m.seq, s.message_count, m.meta::text FROM helix.all_messages m
		JOIN helix.sessions s USING (session_id) WHERE m.session_id = $1 AND m.meta IS NOT NULL`, h.SessionID).Scan(&seq, &count, &meta))
	require.Equal(t, count, seq, "the model record waits in its assistant row, pending, while the step waits")
	require.Len(t, first.Messages(h.SessionID), 1)

	require.NoError(t, first.Interrupt(t.Context(), h.SessionID, "later"))
	first.AwaitStatus(h.SessionID, helix.SessionInterrupted)
	h2, err := first.Resume(t.Context(), h.SessionID, nil)
	require.NoError(t, err)
	first.AwaitPending(h.SessionID, "big")
	first.Approve(h.SessionID, "big")
	first.AwaitCrash()

	second := first.Replacement(helixtest.ReplacementOptions{})
	res := second.Await(second.Attach(h2))
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	n, _ := runs.Load("big")
	require.Equal(t, int32(1), n.(*atomic.Int32).Load(), "the approved tool ran once")
	require.Equal(t, 1, mc.Of(1), "the model call of step 1 ran once")
	msgs := second.Messages(h.SessionID)
	require.Len(t, msgs, 4, "user, assistant, tool result, answer")
	var kept string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT meta::text FROM helix.all_messages WHERE session_id = $1 AND seq = $2`,
		h.SessionID, seq).Scan(&kept))
	require.Equal(t, meta, kept, "the resumed run's commit kept the row the first run's model record is")
	second.RequireTranscriptOnce(h.SessionID)
	second.RequireStreamGapFree(h.SessionID)
}

// A model record written as its assistant row whose acknowledgement is
// lost (the server committed, the connection ended before the client read
// the answer) is not written again: the retry finds the row, takes the
// tool calls as stored from it, and the step goes on; the model is called
// once and the tool runs once.
func TestModelRecordWithALostAcknowledgementIsWrittenOnce(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewURL(t)
	var args rawArgs
	var mc modelCalls
	agent := modelRowAgent(args.tool(t), 1)
	agent.Model = mc.Wrap(agent.Model)
	e, h, buf := runLosingAnAck(t, dbURL, newAckLossOn("helix.record_model_message", "SELECT 1\x00"), agent)
	require.Equal(t, []string{"user", "assistant", "tool", "assistant"}, roles(allMessages(t, e, h.SessionID)), "written once")
	require.Equal(t, 1, mc.Of(1), "the model was called once")
	runs := args.runs()
	require.Len(t, runs["c1"], 1, "the tool ran once")
	require.True(t, strings.HasPrefix(runs["c1"][0], `{"a":"\u003cb\u003e","m":{"b":[2,1],"y":1},"z":`),
		"with the arguments as stored, read back from the row: %s", runs["c1"][0])
	requireNoStepFailed(t, buf)
}
