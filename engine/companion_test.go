package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/store"
)

const answerSchema = `{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"]}`

// consultant is a companion model with memory: it answers with every user
// message it has read so far, joined by "|", after waiting for gate (when
// not nil). A consultation that says "fail" fails.
func consultant(name string, gate <-chan struct{}, maxSteps int) *helix.Agent {
	return &helix.Agent{
		Name:         name,
		Description:  "Answers questions, remembering earlier ones",
		OutputSchema: json.RawMessage(answerSchema),
		MaxSteps:     maxSteps,
		Model: helix.ModelFunc(func(ctx context.Context, req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
			if gate != nil {
				select {
				case <-gate:
				case <-ctx.Done():
					return helix.StepResult{}, ctx.Err()
				}
			}
			var asked []string
			assistants := 0
			for _, m := range req.Messages {
				switch m.Role {
				case helix.RoleUser:
					asked = append(asked, m.Content)
				case helix.RoleAssistant:
					assistants++
				}
			}
			if asked[len(asked)-1] == "fail" {
				return helix.StepResult{}, &helix.ModelError{Code: helix.CodeProviderOverloaded, Message: "the consultant's provider is down"}
			}
			cb.TextDelta("thinking")
			out, _ := json.Marshal(map[string]string{"answer": strings.Join(asked, "|")})
			return helix.StepResult{Type: helix.StepToolCalls, StopReason: helix.StopToolUse,
				ToolCalls: []helix.ToolCall{{ID: fmt.Sprintf("fin-%d", assistants), Name: helix.FinishToolName, Arguments: out}}}, nil
		}),
	}
}

// toolResults returns the contents of the session's tool messages by call ID.
func toolResults(t *testing.T, e *engine.Engine, sessionID string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, m := range allMessages(t, e, sessionID) {
		if m.Role == helix.RoleTool {
			out[m.ToolCallID] = m.Content
		}
	}
	return out
}

// companionRef returns the parent's reference to a companion.
func companionRef(t *testing.T, e *engine.Engine, parentID, name string) store.SubSessionRef {
	t.Helper()
	refs, err := e.SubSessions(t.Context(), parentID)
	require.NoError(t, err)
	for _, r := range refs {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no companion %q among %+v", name, refs)
	return store.SubSessionRef{}
}

// workflowIDs returns the workflow IDs of a session's runs, oldest first.
func workflowIDs(t *testing.T, e *engine.Engine, sessionID string) []string {
	t.Helper()
	runs, err := engine.StoreOf(e).ListRuns(t.Context(), sessionID)
	require.NoError(t, err)
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.WorkflowID
	}
	return out
}

// sessionStatus polls a session until it reaches want.
func sessionStatus(t *testing.T, e *engine.Engine, sessionID string, want helix.SessionStatus) *store.SessionState {
	t.Helper()
	var st *store.SessionState
	require.Eventually(t, func() bool {
		var err error
		st, err = e.Session(t.Context(), sessionID)
		if errors.Is(err, helix.ErrNotFound) {
			return false
		}
		require.NoError(t, err)
		return st.Status == want
	}, 30*time.Second, 20*time.Millisecond, "session %s never became %s", sessionID, want)
	return st
}

// A blocking companion answers each consultation with its memory intact:
// spawned, consulted again with sendMessage and with spawnAgent re-using
// its name (each a continuation of the same session with a fresh step
// budget: MaxSteps is 1), reported failed when it fails, and re-spawned
// fresh after that.
func TestBlockingCompanionConsultedAgain(t *testing.T) {
	t.Parallel()
	adv := consultant("advisor", nil, 1)
	parent := &helix.Agent{
		Name:             "lead",
		PersistentAgents: []helix.PersistentAgent{{Agent: adv}},
		Model: script(
			calls(call("c1", helix.CompanionSpawnAgent, `{"agentType":"advisor","name":"adv","message":"q1"}`)),
			calls(call("c2", helix.CompanionSendMessage, `{"name":"adv","message":"q2"}`)),
			calls(call("c3", helix.CompanionSpawnAgent, `{"agentType":"advisor","name":"adv","message":"q3"}`)),
			calls(call("c4", helix.CompanionSendMessage, `{"name":"adv","message":"fail"}`)),
			calls(call("c5", helix.CompanionSpawnAgent, `{"agentType":"advisor","name":"adv","message":"fresh"}`)),
			text("all consulted"),
		),
	}
	e := newEngine(t, parent)
	h, err := e.Execute(t.Context(), parent, engine.Input{Message: "ask the advisor"}, nil)
	require.NoError(t, err)
	res := result(t, h)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)

	got := toolResults(t, e, h.SessionID)
	require.JSONEq(t, `{"answer":"q1"}`, got["c1"], "a blocking spawn returns the companion's output")
	require.JSONEq(t, `{"answer":"q1|q2"}`, got["c2"], "sendMessage to a finished companion continues it with its memory")
	require.JSONEq(t, `{"answer":"q1|q2|q3"}`, got["c3"], "spawnAgent re-using the name continues it too; each consult is appended once")
	require.Contains(t, got["c4"], `companion \"adv\" failed`, "a failed companion is reported failed")
	require.Contains(t, got["c4"], "provider is down")
	require.JSONEq(t, `{"answer":"fresh"}`, got["c5"], "a failed companion re-spawns fresh, without its memory")

	childID := h.SessionID + "-agent-adv"
	require.Equal(t, []string{childID + "-turn-1", childID + "-continue-c2", childID + "-continue-c3", childID + "-continue-c4",
		childID + "-respawn-c5"}, workflowIDs(t, e, childID), "one run per consultation, with deterministic workflow IDs")
	st, err := e.Session(t.Context(), childID)
	require.NoError(t, err)
	require.Equal(t, helix.SessionCompleted, st.Status)
	require.Equal(t, helix.SessionModePersistent, st.Mode)
	require.Equal(t, h.SessionID, st.ParentSessionID)
	require.Equal(t, childID, st.StreamID, "a companion has its own stream")
	require.Equal(t, 1, st.StepCount, "the step count restarts at each consultation")
	require.Equal(t, childID+"-respawn-c5", st.Metadata[store.MetaWorkflowID])
	require.Equal(t, "c5", st.Metadata[store.MetaDispatchCall])
	require.Equal(t, []string{"user", "assistant", "tool"}, roles(allMessages(t, e, childID)))

	ref := companionRef(t, e, h.SessionID, "adv")
	require.Equal(t, helix.SubSessionPersistent, ref.Mode)
	require.Equal(t, helix.SubSessionCompleted, ref.Status)
	require.True(t, ref.CompletionDelivered, "a blocking companion's outcome reached the parent inline")
	require.Equal(t, "c5", ref.ParentToolCallID)
	for _, m := range allMessages(t, e, h.SessionID) {
		require.NotContains(t, m.Content, "[companion", "blocking outcomes are not delivered again as messages")
	}
}

// A non-blocking companion works on its own: a message sent while it runs
// reaches its inbox and is read before it finishes; its outcome reaches the
// parent as a message at the parent's next step, exactly once.
func TestNonBlockingCompanionInboxAndDelivery(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	res := consultant("researcher", gate, 0)
	var mu sync.Mutex
	var seen []string
	parent := &helix.Agent{
		Name:             "lead",
		PersistentAgents: []helix.PersistentAgent{{Agent: res, Mode: helix.CompanionNonBlocking}},
		Model: script(
			calls(call("c1", helix.CompanionSpawnAgent, `{"agentType":"researcher","message":"r1"}`)),
			calls(call("c2", helix.CompanionSendMessage, `{"name":"researcher-1","message":"also r2"}`)),
			text("researching"),
			func(req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
				mu.Lock()
				for _, m := range req.Messages {
					seen = append(seen, m.Content)
				}
				mu.Unlock()
				return calls(call("c3", helix.CompanionGetChildStatus, `{"name":"researcher-1"}`))(req, cb)
			},
			text("thanks"),
			text("nothing new"),
		),
	}
	e := newEngine(t, parent)
	h, err := e.Execute(t.Context(), parent, engine.Input{Message: "research"}, nil)
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, result(t, h).Status)
	got := toolResults(t, e, h.SessionID)
	require.Contains(t, got["c1"], `"status":"spawned"`)
	require.Contains(t, got["c1"], `"name":"researcher-1"`, "an unnamed companion is named {agentType}-{n}")
	require.Contains(t, got["c2"], `"status":"delivered"`)

	childID := h.SessionID + "-agent-researcher-1"
	require.Equal(t, helix.SessionActive, sessionStatus(t, e, childID, helix.SessionActive).Status, "the companion outlives the parent's turn")
	close(gate)
	child := sessionStatus(t, e, childID, helix.SessionCompleted)
	require.JSONEq(t, `{"answer":"r1|also r2"}`, string(child.Output), "the inbox message was read before the companion finished")
	require.Equal(t, []string{childID + "-turn-1"}, workflowIDs(t, e, childID), "the inbox message continued the same run")

	for i, msg := range []string{"any news?", "more?"} {
		h, err = e.Execute(t.Context(), parent, engine.Input{Message: msg}, &engine.ExecuteOptions{SessionID: h.SessionID})
		require.NoError(t, err)
		require.Equal(t, helix.AgentCompleted, result(t, h).Status, "turn %d", i+2)
	}
	delivered := 0
	for _, m := range allMessages(t, e, h.SessionID) {
		if strings.HasPrefix(m.Content, "[companion researcher-1 finished]") {
			delivered++
			require.Equal(t, helix.RoleUser, m.Role)
			require.Contains(t, m.Content, `r1|also r2`)
		}
	}
	require.Equal(t, 1, delivered, "the outcome is delivered exactly once")
	mu.Lock()
	require.Contains(t, strings.Join(seen, "\n"), "[companion researcher-1 finished]", "the parent's next model call reads it")
	mu.Unlock()
	require.Contains(t, toolResults(t, e, h.SessionID)["c3"], `"status":"completed"`)
	require.True(t, companionRef(t, e, h.SessionID, "researcher-1").CompletionDelivered)
}

// waitForResult waits for a running companion's answer (and marks it
// delivered); listChildren and getChildStatus report the companions;
// terminateChild stops one for good and cancels its workflow; a
// terminated companion re-spawns fresh.
func TestCompanionWaitListTerminate(t *testing.T) {
	t.Parallel()
	first, never := make(chan struct{}), make(chan struct{})
	var once sync.Once
	parent := &helix.Agent{
		Name: "lead",
		PersistentAgents: []helix.PersistentAgent{
			{Agent: consultant("advisor", nil, 0)},
			{Agent: consultant("researcher", first, 0), Mode: helix.CompanionNonBlocking},
			{Agent: consultant("slowpoke", never, 0), Mode: helix.CompanionNonBlocking},
		},
		Model: script(
			calls(call("c1", helix.CompanionSpawnAgent, `{"agentType":"researcher","message":"r1"}`)),
			func(req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
				// The researcher finishes only once the parent is past
				// this step's delivery: waitForResult gets its answer.
				once.Do(func() { close(first) })
				return calls(call("c2", helix.CompanionWaitForResult, `{"name":"researcher-1"}`))(req, cb)
			},
			calls(call("c3", helix.CompanionSpawnAgent, `{"agentType":"slowpoke","name":"slow","message":"s1"}`),
				call("c4", helix.CompanionListChildren, `{}`)),
			calls(call("c5", helix.CompanionTerminateChild, `{"name":"slow","reason":"no longer needed"}`),
				call("c6", helix.CompanionGetChildStatus, `{"name":"slow"}`),
				call("c7", helix.CompanionSendMessage, `{"name":"nobody","message":"hi"}`),
				call("c8", helix.CompanionSpawnAgent, `{"agentType":"researcher","name":"slow","message":"x"}`),
				call("c9", helix.CompanionSpawnAgent, `{"agentType":"slowpoke","name":"slow","message":"s2"}`)),
			calls(call("c10", helix.CompanionTerminateChild, `{"name":"slow"}`)),
			text("done"),
		),
	}
	e := newEngine(t, parent)
	h, err := e.Execute(t.Context(), parent, engine.Input{Message: "go"}, nil)
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, result(t, h).Status)

	got := toolResults(t, e, h.SessionID)
	var wait struct {
		Name, Status string
		Output       json.RawMessage
	}
	require.NoError(t, json.Unmarshal([]byte(got["c2"]), &wait), got["c2"])
	require.Equal(t, "researcher-1", wait.Name)
	require.Equal(t, "completed", wait.Status)
	require.JSONEq(t, `{"answer":"r1"}`, string(wait.Output), "waitForResult returns the companion's output")
	var list struct {
		Children []map[string]string `json:"children"`
	}
	require.NoError(t, json.Unmarshal([]byte(got["c4"]), &list))
	require.Len(t, list.Children, 2)
	require.Equal(t, "researcher-1", list.Children[0]["name"])
	require.Equal(t, "completed", list.Children[0]["status"])
	require.Equal(t, "slow", list.Children[1]["name"])
	require.Equal(t, "running", list.Children[1]["status"])
	require.Contains(t, got["c5"], `"status":"terminated"`)
	require.Contains(t, got["c6"], `"status":"terminated"`)
	require.Contains(t, got["c6"], "no longer needed")
	require.Contains(t, got["c7"], `no companion named \"nobody\"`, "a refused call says why")
	require.Contains(t, got["c8"], "is a slowpoke, not a researcher", "a name belongs to one agent type")

	slowID := h.SessionID + "-agent-slow"
	st, err := e.Session(t.Context(), slowID)
	require.NoError(t, err)
	require.Equal(t, helix.SessionFailed, st.Status)
	require.Equal(t, store.FailureReasonTerminated, st.FailureReason)
	require.Equal(t, helix.SubSessionTerminated, companionRef(t, e, h.SessionID, "slow").Status)
	runs, err := engine.StoreOf(e).ListRuns(t.Context(), slowID)
	require.NoError(t, err)
	require.Len(t, runs, 2)
	for _, r := range runs {
		require.Equal(t, helix.RunFailed, r.Status)
		require.Eventually(t, func() bool {
			h, err := dbos.RetrieveWorkflow[any](e.DBOS(), r.WorkflowID)
			require.NoError(t, err)
			status, err := h.GetStatus()
			require.NoError(t, err)
			return status.Status == dbos.WorkflowStatusCancelled
		}, 10*time.Second, 20*time.Millisecond, "the terminated companion's workflow is cancelled")
	}
	require.True(t, companionRef(t, e, h.SessionID, "researcher-1").CompletionDelivered)
	for _, m := range allMessages(t, e, h.SessionID) {
		require.NotContains(t, m.Content, "[companion researcher-1", "an outcome returned by waitForResult is not delivered again")
	}
	require.Contains(t, got["c9"], `"status":"respawned"`, "a terminated companion re-spawns fresh")
	require.Equal(t, []string{slowID + "-turn-1", slowID + "-respawn-c9"}, workflowIDs(t, e, slowID))
	require.Equal(t, []string{"s2"}, contents(allMessages(t, e, slowID)), "without its memory")
}

func contents(msgs []helix.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.Content
	}
	return out
}

// Interrupting a parent that waits for a blocking companion interrupts the
// companion too; the parent ends interrupted, the companion's reference
// says interrupted, and resuming the parent continues the companion where
// it stopped (not from scratch), after which both finish.
func TestCompanionInterruptedWithParentResumes(t *testing.T) {
	t.Parallel()
	gate, running := make(chan struct{}), make(chan struct{})
	var started sync.Once
	var x executions
	worker := &helix.Agent{
		Name: "worker", OutputSchema: json.RawMessage(answerSchema), Tools: []*helix.Tool{noteTool(&x)},
		Model: script(
			func(req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
				started.Do(func() { close(running) })
				select {
				case <-gate:
				case <-time.After(30 * time.Second):
				}
				return calls(call("n1", "note", `{"text":"half way"}`))(req, cb)
			},
			func(helix.ModelRequest, helix.StreamCallbacks) (helix.StepResult, error) {
				return helix.StepResult{Type: helix.StepToolCalls, StopReason: helix.StopToolUse,
					ToolCalls: []helix.ToolCall{{ID: "fin", Name: helix.FinishToolName, Arguments: json.RawMessage(`{"answer":"finished"}`)}}}, nil
			},
		),
	}
	parent := &helix.Agent{
		Name:             "boss3",
		PersistentAgents: []helix.PersistentAgent{{Agent: worker}},
		Model: script(calls(call("c1", helix.CompanionSpawnAgent, `{"agentType":"worker","name":"w","message":"work"}`)),
			text("all done")),
	}
	e := newEngine(t, parent)
	h, err := e.Execute(t.Context(), parent, engine.Input{Message: "go"}, nil)
	require.NoError(t, err)
	child := h.SessionID + "-agent-w"
	select {
	case <-running: // the companion is in its first model call
	case <-time.After(30 * time.Second):
		t.Fatal("the companion never called its model")
	}
	require.NoError(t, e.Interrupt(t.Context(), h.SessionID, "pause the team"))
	close(gate)
	res := waitFor(t, h, helix.AgentInterrupted)
	require.Equal(t, "pause the team", res.Error)
	cs := sessionStatus(t, e, child, helix.SessionInterrupted)
	require.Equal(t, 1, cs.StepCount, "the companion stopped after its first step")
	require.Equal(t, helix.SubSessionInterrupted, companionRef(t, e, h.SessionID, "w").Status)

	h2, err := e.Resume(t.Context(), h.SessionID, nil)
	require.NoError(t, err)
	waitFor(t, h2, helix.AgentCompleted)
	require.JSONEq(t, `{"answer":"finished"}`, toolResults(t, e, h.SessionID)["c1"])
	require.Equal(t, []string{child + "-turn-1", child + "-resume-" + h2.RunID}, workflowIDs(t, e, child),
		"the companion was continued, not re-spawned")
	require.Equal(t, []string{"user", "assistant", "tool", "assistant", "tool"}, roles(allMessages(t, e, child)))
	require.Len(t, x.keys, 1, "the companion's tool ran once")
	require.Equal(t, helix.SubSessionCompleted, companionRef(t, e, h.SessionID, "w").Status)
}
