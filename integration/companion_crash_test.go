package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/steps"
)

// Modes and kill points of the companion replay tests; the child is the
// crash child (crash_child_test.go) running companionLead.
const (
	companionModeRun     = "companion-run"
	companionModeRecover = "companion-recover"

	// companionKillSpawn kills the process after the parent dispatched a
	// blocking spawn, while the new companion's first model call runs.
	companionKillSpawn = "spawn"
	// companionKillSend kills it after the parent dispatched a message
	// into the running watcher's inbox (in its next model call).
	companionKillSend = "send"
	// companionKillWait kills it while the parent waits for the watcher
	// (waitForResult) and the watcher is mid-step.
	companionKillWait = "wait"
	// companionKillContinue kills it after the parent dispatched a
	// consultation of the finished scribe (a continuation run), while the
	// scribe's model call runs.
	companionKillContinue = "continue"

	companionTarget = "comp-target"
	companionInput  = "Draft with the scribe, watch with the watcher."
	scribeSession   = companionTarget + "-agent-scribe"
	watchSession    = companionTarget + "-agent-watch"
)

// companionLead's script: spawn the blocking scribe (c1), spawn the
// non-blocking watcher (c2), send the watcher a message (c3), wait for the
// watcher (c4), consult the finished scribe again (c5), answer.
var companionLeadScript = []helix.ToolCall{
	{ID: "c1", Name: helix.CompanionSpawnAgent, Arguments: json.RawMessage(`{"agentType":"scribe","name":"scribe","message":"draft"}`)},
	{ID: "c2", Name: helix.CompanionSpawnAgent, Arguments: json.RawMessage(`{"agentType":"watcher","name":"watch","message":"observe"}`)},
	{ID: "c3", Name: helix.CompanionSendMessage, Arguments: json.RawMessage(`{"name":"watch","message":"also this"}`)},
	{ID: "c4", Name: helix.CompanionWaitForResult, Arguments: json.RawMessage(`{"name":"watch"}`)},
	{ID: "c5", Name: helix.CompanionSendMessage, Arguments: json.RawMessage(`{"name":"scribe","message":"revise"}`)},
}

// companionStalls: per kill point, the session and model step the killed
// process (gen 1) stalls at, after recording the call.
var companionStalls = map[string]struct {
	session string
	step    int
}{
	companionKillSpawn:    {scribeSession, 1},
	companionKillSend:     {companionTarget, 4},
	companionKillWait:     {watchSession, 2},
	companionKillContinue: {scribeSession, 2},
}

// companionModel is a scripted model that records each call (session, step
// = assistant messages + 1, gen) and stalls the killed process at the kill
// point. before runs first (the watcher's ordering).
func (r *crashRig) companionModel(play func(req helix.ModelRequest, step int) helix.StepResult,
	before func(ctx context.Context, step int) error) helix.Model {
	return helix.ModelFunc(func(ctx context.Context, req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
		step := 1
		for _, m := range req.Messages {
			if m.Role == helix.RoleAssistant {
				step++
			}
		}
		if before != nil {
			if err := before(ctx, step); err != nil {
				return helix.StepResult{}, err
			}
		}
		if _, err := r.pool.Exec(ctx, `INSERT INTO crash_model_calls (session_id, step, gen) VALUES ($1, $2, $3)`, req.AgentID, step, r.gen); err != nil {
			return helix.StepResult{}, err
		}
		stall := companionStalls[r.point]
		if err := r.stall(ctx, stall.session == req.AgentID && stall.step == step); err != nil {
			return helix.StepResult{}, err
		}
		res := play(req, step)
		cb.TextDelta(res.Content)
		return res, nil
	})
}

// companionOps counts the parent's checkpointed companion dispatches.
func (r *crashRig) companionOps(ctx context.Context) (int, error) {
	var n int
	err := r.pool.QueryRow(ctx, `SELECT count(*) FROM helix.step_journal_records j JOIN helix.runs r ON r.workflow_id = j.workflow_id
		WHERE r.session_id = $1 AND j.name = $2`, companionTarget, steps.NameCompanion).Scan(&n)
	return n, err
}

// awaitOps blocks until the parent checkpointed n companion dispatches.
func (r *crashRig) awaitOps(ctx context.Context, n int) error {
	for {
		got, err := r.companionOps(ctx)
		if err != nil || got >= n {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// companionLead is the parent of the companion replay tests, with its two
// companions: the scribe (blocking) answers with every user message it
// has read; the watcher (non-blocking) starts only once the parent sent it
// a message (so the message lands in its inbox) and finishes only once the
// parent waits for it (so its outcome is never delivered as a message).
func (r *crashRig) companionLead() *helix.Agent {
	finish := func(req helix.ModelRequest, step int) helix.StepResult {
		var read []string
		for _, m := range req.Messages {
			if m.Role == helix.RoleUser {
				read = append(read, m.Content)
			}
		}
		out, _ := json.Marshal(map[string]string{"answer": strings.Join(read, "|")})
		return helix.StepResult{Type: helix.StepToolCalls, StopReason: helix.StopToolUse, Content: "noted",
			ToolCalls: []helix.ToolCall{{ID: fmt.Sprintf("fin-%d", step), Name: helix.FinishToolName, Arguments: out}}}
	}
	schema := json.RawMessage(`{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"]}`)
	scribe := &helix.Agent{Name: "scribe", OutputSchema: schema, Model: r.companionModel(finish, nil)}
	watcher := &helix.Agent{Name: "watcher", OutputSchema: schema, Model: r.companionModel(finish, func(ctx context.Context, step int) error {
		return r.awaitOps(ctx, 2+step) // step 1 after c3's dispatch, step 2 after c4's
	})}
	lead := r.companionModel(func(_ helix.ModelRequest, step int) helix.StepResult {
		if step > len(companionLeadScript) {
			return helix.StepResult{Type: helix.StepText, Content: "Done.", StopReason: helix.StopEndTurn}
		}
		return helix.StepResult{Type: helix.StepToolCalls, StopReason: helix.StopToolUse, Content: "step",
			ToolCalls: []helix.ToolCall{companionLeadScript[step-1]}}
	}, nil)
	return &helix.Agent{
		Name:             "companion-lead",
		Model:            lead,
		PersistentAgents: []helix.PersistentAgent{{Agent: scribe}, {Agent: watcher, Mode: helix.CompanionNonBlocking}},
	}
}

// TestCompanionReplayIdempotency kills the parent's process right after it
// dispatched a spawn, a message into a running companion's inbox, a wait,
// and a continuation of a finished companion, and lets a new process (same
// executor ID) recover. Each child workflow started once, each consult
// message is in its companion's log once, the inbox message was read once,
// and every session finished with the answers of an uninterrupted run.
func TestCompanionReplayIdempotency(t *testing.T) {
	t.Parallel()
	server := serverURL(t)
	for _, point := range []string{companionKillSpawn, companionKillSend, companionKillWait, companionKillContinue} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			d := newCrashDB(t, server)
			killed := startCrashChild(t, d.url, companionModeRun, point, 1)
			stall := companionStalls[point]
			killed.waitFor(t, "the kill point", func(ctx context.Context) (bool, error) {
				var n int
				err := d.pool.QueryRow(ctx, `SELECT count(*) FROM crash_model_calls WHERE session_id = $1 AND step = $2 AND gen = 1`,
					stall.session, stall.step).Scan(&n)
				if err != nil || n == 0 {
					return false, err
				}
				switch point {
				case companionKillWait:
					// The parent is in its durable wait: the deadline of
					// the DBOS event wait is checkpointed.
					err = d.pool.QueryRow(ctx, `SELECT count(*) FROM dbos.operation_outputs o JOIN helix.runs r ON r.workflow_id = o.workflow_uuid
						WHERE r.session_id = $1 AND o.function_name = 'DBOS.sleep'`, companionTarget).Scan(&n)
				case companionKillSend:
					// The watcher committed its first step, with the
					// message it found in its inbox.
					err = d.pool.QueryRow(ctx, `SELECT count(*) FROM helix.messages m JOIN helix.sessions s ON s.key = m.session_key WHERE s.session_id = $1`, watchSession).Scan(&n)
					n -= 3
				}
				return n > 0, err
			})
			killed.kill(t)
			d.waitGone(t, killed.appName)

			recovering := startCrashChild(t, d.url, companionModeRecover, "", 2)
			recovering.wait(t)

			for _, sid := range []string{companionTarget, scribeSession, watchSession} {
				st, err := d.st.LoadState(t.Context(), sid)
				require.NoError(t, err)
				require.Equal(t, helix.SessionCompleted, st.Status, "%s: %s", sid, st.Error)
			}
			workflows := map[string][]string{}
			rows, err := d.pool.Query(t.Context(), `SELECT r.session_id, w.workflow_uuid, w.status FROM helix.runs r
				JOIN dbos.workflow_status w ON w.workflow_uuid = r.workflow_id ORDER BY r.session_id, w.created_at`)
			require.NoError(t, err)
			for rows.Next() {
				var sid, wf, status string
				require.NoError(t, rows.Scan(&sid, &wf, &status))
				workflows[sid] = append(workflows[sid], strings.TrimPrefix(wf, sid)+":"+status)
			}
			require.NoError(t, rows.Err())
			rows.Close()
			require.Equal(t, []string{"-turn-1:SUCCESS", "-continue-c5:SUCCESS"}, workflows[scribeSession],
				"the scribe's first run and its continuation, each started once")
			require.Equal(t, []string{"-turn-1:SUCCESS"}, workflows[watchSession], "the watcher's one run read its inbox message")
			require.Len(t, workflows[companionTarget], 1)

			shape := func(sid string) []string {
				var out []string
				for _, m := range d.messages(t, sid) {
					s := string(m.Role)
					if m.Role == helix.RoleUser {
						s += ":" + m.Content
					}
					out = append(out, s)
				}
				return out
			}
			require.Equal(t, []string{"user:draft", "assistant", "tool", "user:revise", "assistant", "tool"}, shape(scribeSession),
				"each consultation is in the scribe's log once")
			require.Equal(t, []string{"user:observe", "assistant", "tool", "user:also this", "assistant", "tool"}, shape(watchSession),
				"the message reached the watcher's inbox once")
			require.Equal(t, []string{"user:" + companionInput, "assistant", "tool", "assistant", "tool", "assistant", "tool",
				"assistant", "tool", "assistant", "tool", "assistant"}, shape(companionTarget), "no outcome delivered twice")

			results := map[string]string{}
			for _, m := range d.messages(t, companionTarget) {
				results[m.ToolCallID] = m.Content
			}
			require.JSONEq(t, `{"answer":"draft"}`, results["c1"])
			require.Contains(t, results["c2"], `"status":"spawned"`)
			require.Contains(t, results["c3"], `"status":"delivered"`)
			var wait struct {
				Status string
				Output json.RawMessage
			}
			require.NoError(t, json.Unmarshal([]byte(results["c4"]), &wait))
			require.Equal(t, "completed", wait.Status)
			require.JSONEq(t, `{"answer":"observe|also this"}`, string(wait.Output))
			require.JSONEq(t, `{"answer":"draft|revise"}`, results["c5"], "the continuation kept the scribe's memory")

			var unread, read int
			require.NoError(t, d.pool.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE consumed_at IS NULL),
				count(*) FILTER (WHERE consumed_at IS NOT NULL) FROM helix.inbox`).Scan(&unread, &read))
			require.Equal(t, [2]int{0, 1}, [2]int{unread, read}, "one inbox message, read")

			// Each model step ran once, except the one the kill
			// interrupted, which ran again in the recovering process.
			for _, sid := range []string{companionTarget, scribeSession, watchSession} {
				for step, gens := range d.modelCalls(t, sid) {
					want := 1
					if sid == stall.session && step == stall.step {
						want = 2
						require.Equal(t, []int{1, 2}, gens, "%s step %d", sid, step)
					}
					require.Len(t, gens, want, "%s step %d ran %v", sid, step, gens)
				}
			}
		})
	}
}
