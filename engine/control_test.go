package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
)

// gateTool blocks until released, so a test can act while a step runs.
func gateTool(started chan<- string, release <-chan struct{}) *helix.Tool {
	return helix.MustNewTool("wait", "waits", func(ctx context.Context, in struct{}, tc helix.ToolContext) (string, error) {
		started <- tc.ToolCallID()
		select {
		case <-release:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		return "done", nil
	})
}

// Interrupt is durable and observed before the next step; Resume continues
// in a new run from the last committed step; Retry restores a checkpoint.
func TestInterruptResumeRetry(t *testing.T) {
	t.Parallel()
	started := make(chan string, 10)
	release := make(chan struct{})
	agent := &helix.Agent{Name: "interruptible", Tools: []*helix.Tool{gateTool(started, release)}, Model: script(
		calls(call("w1", "wait", `{}`)),
		text("after resume"),
		text("after retry"),
	)}
	e := newEngine(t, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "start"}, nil)
	require.NoError(t, err)
	require.Equal(t, "w1", <-started)

	can, err := h.CanResume(t.Context())
	require.NoError(t, err)
	require.False(t, can.CanResume)
	require.NoError(t, e.Interrupt(t.Context(), h.SessionID, "user pressed stop"))
	_, err = e.Execute(t.Context(), agent, engine.Input{Message: "again"}, &engine.ExecuteOptions{SessionID: h.SessionID})
	var running *helix.AgentAlreadyRunningError
	require.True(t, errors.As(err, &running), "a running session refuses a new turn: %v", err)
	close(release) // the step commits, then the flag is seen

	res := result(t, h)
	require.Equal(t, helix.AgentInterrupted, res.Status)
	types := chunkTypes(t, h)
	require.Equal(t, "run_interrupted", types[len(types)-1])

	can, err = h.CanResume(t.Context())
	require.NoError(t, err)
	require.True(t, can.CanResume)
	h2, err := h.Resume(t.Context(), nil)
	require.NoError(t, err)
	require.NotEqual(t, h.RunID, h2.RunID)
	require.Equal(t, h.SessionID+"-resume-1", h2.WorkflowID)
	res2 := result(t, h2)
	require.Equal(t, helix.AgentCompleted, res2.Status, res2.Error)
	require.JSONEq(t, `"after resume"`, string(res2.Output))
	types = chunkTypes(t, h2)
	require.Equal(t, "run_resumed", types[0])

	_, err = e.Resume(t.Context(), h.SessionID, nil)
	var notResumable *helix.AgentNotResumableError
	require.True(t, errors.As(err, &notResumable), "a completed session is not resumable: %v", err)

	runs, err := e.Runs(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Len(t, runs, 2)
	require.Equal(t, helix.RunInterrupted, runs[0].Status)
	require.Equal(t, h.RunID, runs[1].PreviousRunID)
	require.Equal(t, 2, runs[1].Turn)
}

// An interrupt that lands while a later step's tool runs is seen by that
// step's commit: after its first step, an execution sends a step's commit
// whole, assuming no interrupt was requested; the database refuses it, and
// the commit is made again under the session's lock, which consumes the
// interrupt. The step is committed once, and the run ends interrupted.
func TestInterruptDuringALaterStepsTool(t *testing.T) {
	t.Parallel()
	started := make(chan string, 10)
	release := make(chan struct{})
	agent := &helix.Agent{Name: "interruptible-later", Tools: []*helix.Tool{gateTool(started, release)}, Model: script(
		calls(call("w1", "wait", `{}`)),
		calls(call("w2", "wait", `{}`)),
		text("not reached"),
	)}
	e := newEngine(t, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "start"}, nil)
	require.NoError(t, err)
	require.Equal(t, "w1", <-started)
	release <- struct{}{}
	require.Equal(t, "w2", <-started)
	require.NoError(t, e.Interrupt(t.Context(), h.SessionID, "user pressed stop"))
	release <- struct{}{}

	res := result(t, h)
	require.Equal(t, helix.AgentInterrupted, res.Status)
	st, err := e.Session(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Equal(t, 2, st.StepCount, "the step that ran when the interrupt came is committed")
	msgs, err := e.Messages(t.Context(), h.SessionID, nil)
	require.NoError(t, err)
	require.Len(t, msgs.Messages, 5, "the user's message and two steps, each once")
	require.Equal(t, "w2", msgs.Messages[4].ToolCallID)
	types := chunkTypes(t, h)
	require.Equal(t, "run_interrupted", types[len(types)-1])
	committed := 0
	for _, typ := range types {
		if typ == "step_committed" {
			committed++
		}
	}
	require.Equal(t, 2, committed)
}

func TestRetryAfterFailureAndBranch(t *testing.T) {
	t.Parallel()
	fail := true
	var x executions
	agent := &helix.Agent{Name: "flaky", Tools: []*helix.Tool{noteTool(&x)}, Model: script(
		calls(call("n1", "note", `{"text":"kept"}`)),
		func(req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
			if fail {
				return helix.StepResult{}, &helix.ModelError{Code: helix.CodeProviderOverloaded, Message: "busy", Recoverable: true}
			}
			return text("recovered")(req, cb)
		},
	)}
	e := newEngine(t, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "go", State: json.RawMessage(`{"notes":[]}`)}, nil)
	require.NoError(t, err)
	res := result(t, h)
	require.Equal(t, helix.AgentFailed, res.Status)
	require.Equal(t, helix.CodeProviderOverloaded, res.ErrorCode)

	fail = false
	h2, err := h.Retry(t.Context(), nil) // from the latest checkpoint: step 1 kept
	require.NoError(t, err)
	res2 := result(t, h2)
	require.Equal(t, helix.AgentCompleted, res2.Status, res2.Error)
	require.Equal(t, 1, x.keys[h.WorkflowID+"/n1"], "the committed tool did not run again")
	require.Len(t, x.keys, 1)
	st, err := h2.State(t.Context())
	require.NoError(t, err)
	require.JSONEq(t, `{"notes":["kept"]}`, string(st.CustomState))
	require.Equal(t, 2, st.StepCount)
	require.Len(t, allMessages(t, e, h.SessionID), 4) // user, assistant+call, tool result, final answer

	// Branch from the first checkpoint: a new session with step 1's state.
	cps, err := e.Checkpoints(t.Context(), h.SessionID, nil)
	require.NoError(t, err)
	require.NotEmpty(t, cps.Items)
	b, err := e.Execute(t.Context(), agent, engine.Input{}, &engine.ExecuteOptions{
		SessionID: h.SessionID + "-branch", Branch: &engine.Branch{FromSessionID: h.SessionID, CheckpointID: cps.Items[0].ID}})
	require.NoError(t, err)
	resB := result(t, b)
	require.Equal(t, helix.AgentCompleted, resB.Status, resB.Error)
	bst, err := b.State(t.Context())
	require.NoError(t, err)
	require.JSONEq(t, `{"notes":["kept"]}`, string(bst.CustomState))
}

// Abort stops a running session at once and fails it.
func TestAbort(t *testing.T) {
	t.Parallel()
	started := make(chan string, 1)
	release := make(chan struct{})
	defer close(release)
	agent := &helix.Agent{Name: "abortable", Tools: []*helix.Tool{gateTool(started, release)}, Model: script(
		calls(call("w1", "wait", `{}`)), text("never"))}
	e := newEngine(t, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "start"}, nil)
	require.NoError(t, err)
	<-started
	require.NoError(t, h.Abort(t.Context(), "operator"))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	res, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, helix.AgentFailed, res.Status)
	require.Contains(t, res.Error, "aborted: operator")
	st, err := h.State(t.Context())
	require.NoError(t, err)
	require.Equal(t, helix.SessionFailed, st.Status)
}

// An interrupt that races with the final step does not stop the next turn.
func TestInterruptRacingCompletion(t *testing.T) {
	t.Parallel()
	var e *engine.Engine
	agent := &helix.Agent{Name: "racer", Model: helix.ModelFunc(
		func(ctx context.Context, req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
			if len(req.Messages) == 1 { // first turn: the interrupt lands during the last step
				if err := e.Interrupt(ctx, req.AgentID, "late"); err != nil {
					return helix.StepResult{}, err
				}
			}
			return helix.StepResult{Type: helix.StepText, Content: "ok"}, nil
		})}
	e = newEngine(t, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "one"}, nil)
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, result(t, h).Status)
	h2, err := e.Execute(t.Context(), agent, engine.Input{Message: "two"}, &engine.ExecuteOptions{SessionID: h.SessionID})
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, result(t, h2).Status)
}

// A flag written after the turn ended (Interrupt racing the end) does not
// stop the next turn.
func TestStaleInterruptFlagDoesNotStopNextTurn(t *testing.T) {
	t.Parallel()
	agent := &helix.Agent{Name: "stale", Model: helix.ModelFunc(
		func(context.Context, helix.ModelRequest, helix.StreamCallbacks) (helix.StepResult, error) {
			return helix.StepResult{Type: helix.StepText, Content: "ok"}, nil
		})}
	e := newEngine(t, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "one"}, nil)
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, result(t, h).Status)
	require.NoError(t, engine.StoreOf(e).SetInterruptFlag(t.Context(), h.SessionID, "late"))
	h2, err := e.Execute(t.Context(), agent, engine.Input{Message: "two"}, &engine.ExecuteOptions{SessionID: h.SessionID})
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, result(t, h2).Status)
}

// Requests the session's state does not allow are refused with a typed
// error whose code a server can map, and write nothing.
func TestRefusalsAreTyped(t *testing.T) {
	t.Parallel()
	agent := &helix.Agent{Name: "refuser", Model: script(text("one"), text("two"))}
	other := &helix.Agent{Name: "other", Model: script(text("x"))}
	e := newEngine(t, agent, other)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "hi"}, &engine.ExecuteOptions{UserID: "alice"})
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, result(t, h).Status)

	code := func(err error) string {
		t.Helper()
		var r *engine.RefusedError
		require.True(t, errors.As(err, &r), "want a RefusedError, got %v", err)
		require.NotContains(t, r.Message, "engine:", "the message reads without the package prefix")
		return r.Code
	}
	require.Equal(t, engine.RefusedNotRunning, code(e.Interrupt(t.Context(), h.SessionID, "")))
	require.Equal(t, engine.RefusedNotRunning, code(e.Abort(t.Context(), h.SessionID, "")))
	_, err = e.Execute(t.Context(), other, engine.Input{Message: "x"}, &engine.ExecuteOptions{SessionID: h.SessionID})
	require.Equal(t, engine.RefusedAgentMismatch, code(err))
	_, err = e.Execute(t.Context(), agent, engine.Input{Message: "x"}, &engine.ExecuteOptions{SessionID: h.SessionID, UserID: "mallory"})
	require.Equal(t, engine.RefusedOwnerMismatch, code(err))
	_, err = e.Execute(t.Context(), agent, engine.Input{}, &engine.ExecuteOptions{SessionID: h.SessionID})
	require.Equal(t, engine.RefusedMessageRequired, code(err))
	_, err = e.Execute(t.Context(), agent, engine.Input{Message: "x", State: json.RawMessage(`{}`)}, &engine.ExecuteOptions{SessionID: h.SessionID})
	require.Equal(t, engine.RefusedStateNotAllowed, code(err))
	_, err = e.Execute(t.Context(), agent, engine.Input{Message: "x"}, &engine.ExecuteOptions{SessionID: h.SessionID + "-agent-helper-1"})
	require.Equal(t, engine.RefusedReservedSessionID, code(err), "a caller cannot take the ID of another session's companion")
	_, err = e.Execute(t.Context(), agent, engine.Input{Message: "x"}, &engine.ExecuteOptions{SessionID: h.SessionID + "-sub-call_1"})
	require.Equal(t, engine.RefusedReservedSessionID, code(err))
	free, err := e.Execute(t.Context(), agent, engine.Input{Message: "x"}, &engine.ExecuteOptions{SessionID: "support-agent-7"})
	require.NoError(t, err, "the form is free when its prefix names no session")
	require.Equal(t, helix.AgentCompleted, result(t, free).Status)
	runs, err := e.Runs(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Len(t, runs, 1, "nothing was written")

	h2, err := e.Execute(t.Context(), agent, engine.Input{Message: "again"}, &engine.ExecuteOptions{SessionID: h.SessionID, UserID: "alice"})
	require.NoError(t, err, "the owner continues")
	require.Equal(t, helix.AgentCompleted, result(t, h2).Status)
}
