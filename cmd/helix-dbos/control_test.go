package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/store"
)

// interrupt stops a running session after its current step; resume
// continues it from there in a new run, in the CLI's own engine.
func TestInterruptAndResume(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	db := []string{"--database-url", url}
	cli := func(args ...string) string { t.Helper(); return mustCLI(t, append(args, db...)...) }
	g := newGate(2)
	t.Cleanup(g.open)
	agent := newResearchAgent(researchOpts{beforeStep: g.beforeStep})
	e := newTestEngine(t, url, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: researchQuestion}, &engine.ExecuteOptions{SessionID: "held"})
	require.NoError(t, err)
	<-g.reached // step 1 committed, step 2 about to call the model

	out := cli("interrupt", "held", "--reason", "operator says stop")
	require.Equal(t, "interrupt requested for session held (operator says stop): its run stops when the current step commits\n", out)
	require.Regexp(t, `(?m)^interrupt\s+requested \(operator says stop\)`, cli("sessions", "show", "held"))
	g.open()
	res := waitResult(t, h)
	require.Equal(t, helix.AgentInterrupted, res.Status, res.Error)
	out = cli("sessions", "show", "held")
	require.Regexp(t, `(?m)^status\s+interrupted$`, out)
	require.Regexp(t, `(?m)^interrupted\s+after step 2 \(operator says stop\)$`, out)
	_, err = runCLI(t, append([]string{"interrupt", "held"}, db...)...)
	require.ErrorContains(t, err, "session held is interrupted: only a running (active) session can be interrupted")

	out = cli("resume", "held", "--message", "Please finish.", "--delay", "0s")
	require.Contains(t, out, "resumed session held in run ")
	require.Regexp(t, `run_resumed\s+research-assistant\s+run \S+ resumes after step 2 \(with_message\)`, out)
	require.Contains(t, out, "step_committed       research-assistant   step 3 ·")
	require.Contains(t, out, `session held completed; output: {"answer":`)

	st, err := e.Session(t.Context(), "held")
	require.NoError(t, err)
	require.Equal(t, helix.SessionCompleted, st.Status)
	require.Equal(t, 3, st.StepCount, "the resumed run continued after step 2")
	var runs []store.Run
	require.NoError(t, json.Unmarshal([]byte(cli("sessions", "runs", "held", "--json")), &runs))
	require.Len(t, runs, 2)
	require.Equal(t, helix.RunInterrupted, runs[0].Status)
	require.Equal(t, "operator says stop", runs[0].Error)
	require.Equal(t, helix.RunCompleted, runs[1].Status)
	require.Equal(t, runs[0].RunID, runs[1].PreviousRunID)
	msgs := cli("sessions", "messages", "held")
	require.Contains(t, msgs, "user      Please finish.\n", "the resume message was added")

	_, err = runCLI(t, append([]string{"resume", "held"}, db...)...)
	var notResumable *helix.AgentNotResumableError
	require.ErrorAs(t, err, &notResumable, "a completed session cannot be resumed")
}

// interrupt --wait returns once the run has stopped.
func TestInterruptWait(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	g := newGate(2)
	t.Cleanup(g.open)
	agent := newResearchAgent(researchOpts{beforeStep: g.beforeStep})
	e := newTestEngine(t, url, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: researchQuestion}, &engine.ExecuteOptions{SessionID: "held"})
	require.NoError(t, err)
	<-g.reached
	// Release the step once the flag is written: the command then waits
	// for the run to stop.
	out := &watchWriter{want: "interrupt requested", seen: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		cmd := newRootCmd()
		cmd.SetOut(out)
		cmd.SetArgs([]string{"interrupt", "held", "--wait", "--database-url", url})
		done <- cmd.ExecuteContext(t.Context())
	}()
	select {
	case <-out.seen:
	case err := <-done:
		t.Fatalf("interrupt returned early: %v\n%s", err, out.String())
	}
	st, err := e.Session(t.Context(), "held")
	require.NoError(t, err)
	require.Equal(t, helix.SessionActive, st.Status, "still running while the command waits")
	g.open()
	require.NoError(t, <-done)
	require.Contains(t, out.String(), "session held is interrupted after step 2; continue it with `helix-dbos resume held`")
	require.Equal(t, helix.AgentInterrupted, waitResult(t, h).Status)
}

// The CLI runs only the agents it defines: another agent's session must be
// resumed by the process that owns the agent.
func TestResumeOfAnUnknownAgent(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	st, done, err := openStoreURL(t.Context(), url)
	require.NoError(t, err)
	defer done()
	_, err = st.CreateSession(t.Context(), store.CreateSessionParams{SessionID: "theirs", AgentType: "billing-agent"})
	require.NoError(t, err)
	require.NoError(t, st.UpdateStatus(t.Context(), "theirs", helix.SessionInterrupted, nil))
	_, err = runCLI(t, "resume", "theirs", "--database-url", url)
	require.ErrorContains(t, err, `session theirs belongs to agent "billing-agent", which this CLI does not define (it knows only research-assistant): the process that owns the agent must resume it (engine.Resume)`)
	state, err := st.LoadState(t.Context(), "theirs")
	require.NoError(t, err)
	require.Equal(t, helix.SessionInterrupted, state.Status, "nothing was changed")
}
