package main

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/agentfile"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/store"
)

// exampleAgents is the agent file checked in for `serve`.
var exampleAgents, _ = filepath.Abs("../../examples/agents.yaml")

// sessions checkpoints lists the points a retry can go back to; abort
// fails a running session at once from another process; retry runs it
// again from its latest checkpoint.
func TestCheckpointsAbortRetry(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	o := binOpts{env: []string{"HELIX_DATABASE_URL=" + url}}
	g := newGate(2)
	t.Cleanup(g.open)
	agent := newResearchAgent(researchOpts{beforeStep: g.beforeStep})
	e := newTestEngine(t, url, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: researchQuestion}, &engine.ExecuteOptions{SessionID: "held"})
	require.NoError(t, err)
	<-g.reached // step 1 committed, step 2 about to call the model

	st, err := e.Session(t.Context(), "held")
	require.NoError(t, err)
	out := mustBin(t, o, "sessions", "checkpoints", "held")
	require.Regexp(t, `(?m)^CHECKPOINT\s+STEP\s+MESSAGES\s+STATUS\s+SEQUENCE\s+RUN\s+CREATED$`, out)
	require.Regexp(t, `(?m)^`+regexp.QuoteMeta(st.CheckpointID)+`\s+1\s+4\s+active\s+\d+\s+\S+\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\s+← current$`, out)
	require.Contains(t, out, "checkpoints 1–1 of 1\n")
	var list checkpointList
	require.NoError(t, json.Unmarshal([]byte(mustBin(t, o, "sessions", "checkpoints", "held", "--json")), &list))
	require.Len(t, list.Checkpoints, 1)
	require.Equal(t, st.CheckpointID, list.Current)
	require.Equal(t, 1, list.Checkpoints[0].StepCount)

	r := runBin(t, o, "retry", "held")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "session held is running: abort it first (`helix-dbos abort held`)")

	out = mustBin(t, o, "abort", "held", "--reason", "operator says no")
	require.Contains(t, out, "• aborting session held: run "+h.RunID)
	require.Contains(t, out, "session held aborted (operator says no): it failed with error code aborted; continue it with `helix-dbos retry held`\n")
	g.open()
	res := waitResult(t, h)
	require.Equal(t, helix.AgentFailed, res.Status)
	require.Equal(t, "aborted: operator says no", res.Error)
	r = runBin(t, o, "abort", "held")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "session held is failed: only a running (active) session can be aborted: it is not running; continue it with `helix-dbos retry held`")

	r = runBin(t, o, "retry", "held", "--checkpoint", "nope")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "`helix-dbos sessions checkpoints held` lists the session's checkpoints")
	r = runBin(t, o, "retry", "held", "--checkpoint", st.CheckpointID, "--from-start")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "give --checkpoint ID or --from-start, not both")

	// HELIX_EXECUTOR_ID is serve's: retry keeps its own executor ID.
	out = mustBin(t, binOpts{env: append(o.env, "HELIX_EXECUTOR_ID=web-1")}, "retry", "held", "--delay", "0s")
	require.Contains(t, out, "• retrying session held (failed) from checkpoint "+st.CheckpointID+": step 1, 4 messages\n")
	require.Regexp(t, "• executor "+newExecutorID+", not web-1 from HELIX_EXECUTOR_ID: that executor-id is serve's \\(pass --executor-id to choose this command's\\)\n", out)
	require.Regexp(t, "• starting an engine \\(executor "+newExecutorID+"\\)\n", out)
	require.Contains(t, out, "retrying session held in run ")
	require.Regexp(t, `stream_resync\s+research-assistant\s+retry: chunks from sequence \d+ removed; back to checkpoint step 1 \(4 messages\)`, out)
	require.Contains(t, out, `session held completed; output: {"answer":`)
	var runs []store.Run
	require.NoError(t, json.Unmarshal([]byte(mustBin(t, o, "sessions", "runs", "held", "--json")), &runs))
	require.Len(t, runs, 2)
	require.Equal(t, helix.RunFailed, runs[0].Status)
	require.Equal(t, helix.RunCompleted, runs[1].Status)
	final, err := e.Session(t.Context(), "held")
	require.NoError(t, err)
	require.Equal(t, helix.SessionCompleted, final.Status)
	require.Equal(t, 3, final.StepCount, "steps 2 and 3 ran after the checkpoint of step 1")

	r = runBin(t, o, "retry", "held")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "session held is completed: only a failed or interrupted session can be retried")
}

// resume and retry run the agents of an agent file (--agents); a second
// process answers the client tool the continued run waits for. An executor
// ID held by a live process is refused.
// newExecutorID matches an executor ID of engine.DefaultExecutorID.
const newExecutorID = `\S+-\d+-[0-9a-f]{6}`

func TestResumeAndRetryAgentFileAgents(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	o := binOpts{env: []string{"HELIX_DATABASE_URL=" + url}}
	agents, err := agentfile.Load(exampleAgents, nil)
	require.NoError(t, err)
	intake, _ := agents.Get("intake")
	e := newTestEngine(t, url, intake)
	start := func(session string) *engine.Handle {
		h, err := e.Execute(t.Context(), intake, engine.Input{Message: "hi"}, &engine.ExecuteOptions{SessionID: session})
		require.NoError(t, err)
		res := waitResult(t, h)
		require.Equal(t, helix.AgentSuspendedClientTool, res.Status, res.Error)
		require.Equal(t, []string{"call-0-0"}, res.Suspended.ToolCallIDs)
		return h
	}

	t.Run("resume", func(t *testing.T) {
		t.Parallel()
		h := start("intake-1")
		mustBin(t, o, "interrupt", "intake-1", "--wait")
		require.Equal(t, helix.AgentInterrupted, waitResult(t, h).Status)

		r := runBin(t, o, "resume", "intake-1")
		require.Equal(t, 1, r.code)
		require.Contains(t, r.stderr, `session intake-1 belongs to agent "intake", which this CLI does not define (it knows only research-assistant)`)
		require.Contains(t, r.stderr, "give this command an agent file that defines it (--agents FILE, HELIX_AGENTS or agents: in the config file)")

		// Another live process holds the executor ID given.
		_, err := testStore(t, url).Pool().Exec(t.Context(), `INSERT INTO helix.executors (executor_id, application_version, hostname, pid)
			VALUES ('busy', 'v', 'elsewhere', 1)`)
		require.NoError(t, err)
		r = runBin(t, o, "resume", "intake-1", "--agents", exampleAgents, "--executor-id", "busy")
		require.Equal(t, 1, r.code)
		require.Contains(t, r.stderr, `executor ID "busy" is in use by process 1 on elsewhere (heartbeat `)
		require.Contains(t, r.stderr, "or --executor-id for helix-dbos; by default each process gets a new one), or stop that one")

		p := startBin(t, binOpts{env: append(o.env, "HELIX_AGENTS="+exampleAgents)}, "resume", "intake-1", "--executor-id", "resumer")
		p.waitFor(t, "resumed session intake-1 in run ", time.Minute)
		var pid int
		require.NoError(t, testStore(t, url).Pool().QueryRow(t.Context(), `SELECT pid FROM helix.executors WHERE executor_id = 'resumer'`).Scan(&pid))
		require.Equal(t, p.cmd.Process.Pid, pid, "the resuming process records its executor")

		out := mustBin(t, o, "submit", "intake-1", "call-0-0", "--result", `{"answer":"Ada"}`)
		require.Contains(t, out, "submitted the result of ask_user (call call-0-0) in session intake-1")
		require.Equal(t, 0, p.wait(t), "%s\n%s", p.stdout, p.stderr)
		require.Contains(t, p.stdout.String(), "• agents from "+exampleAgents+": assistant, researcher, intake, publisher, editor\n")
		require.Contains(t, p.stdout.String(), "Nice to meet you!")
		require.Contains(t, p.stdout.String(), "session intake-1 completed")
		var stopped bool
		require.NoError(t, testStore(t, url).Pool().QueryRow(t.Context(), `SELECT stopped_at IS NOT NULL FROM helix.executors WHERE executor_id = 'resumer'`).Scan(&stopped))
		require.True(t, stopped, "a clean exit marks the executor stopped")
	})

	t.Run("retry", func(t *testing.T) {
		t.Parallel()
		h := start("intake-2")
		mustBin(t, o, "abort", "intake-2")
		require.Equal(t, helix.AgentFailed, waitResult(t, h).Status)

		p := startBin(t, o, "retry", "intake-2", "--from-start", "--agents", exampleAgents, "--executor-id", "retrier")
		p.waitFor(t, "↳ answer from another terminal: helix-dbos submit intake-2 call-0-0 --result JSON", time.Minute)
		require.Contains(t, p.stdout.String(), "• retrying session intake-2 (failed) from the start: back to its first messages and initial state\n")
		mustBin(t, o, "submit", "intake-2", "call-0-0", "--result", `{"answer":"Grace"}`)
		require.Equal(t, 0, p.wait(t), "%s\n%s", p.stdout, p.stderr)
		require.Contains(t, p.stdout.String(), "session intake-2 completed")
		page, err := e.Messages(t.Context(), "intake-2", nil)
		require.NoError(t, err)
		require.JSONEq(t, `{"answer":"Grace"}`, page.Messages[2].Content, "the retried run used the new answer")
	})
}

// The executor-id of the config file and of the environment is serve's:
// resume and retry never launch with it. With serve stopped, an engine
// launched with serve's ID would recover serve's pending runs, then stop
// them when the command exits.
func TestContinueLeavesServeExecutorAlone(t *testing.T) {
	t.Parallel()
	url, peer, _ := completedSession(t) // research-1, which resume refuses after starting its engine
	ctx := t.Context()
	// Stopped first: a live peer would take serve's stopped executor over
	// at its next sweep (the cluster working as designed, not the resume
	// command), and the check below is about the command alone.
	require.NoError(t, peer.Shutdown(ctx))
	agents, err := agentfile.Load(exampleAgents, nil)
	require.NoError(t, err)
	intake, _ := agents.Get("intake")

	// serve ran as web-1 and stopped while its run waited for a client
	// tool: the run's workflow is pending, owned by web-1.
	e, err := engine.New(ctx, engine.Config{DatabaseURL: url, ExecutorID: "web-1"})
	require.NoError(t, err)
	require.NoError(t, e.Register(intake))
	require.NoError(t, e.Launch(ctx))
	h, err := e.Execute(ctx, intake, engine.Input{Message: "hi"}, &engine.ExecuteOptions{SessionID: "web-session"})
	require.NoError(t, err)
	require.Equal(t, helix.AgentSuspendedClientTool, waitResult(t, h).Status)
	require.NoError(t, e.Shutdown(ctx))
	st, done, err := openStoreURL(ctx, url)
	require.NoError(t, err)
	defer done()
	type owner struct {
		status, executor string
		recoveries       int
	}
	ownerOf := func() owner {
		t.Helper()
		var o owner
		require.NoError(t, st.Pool().QueryRow(ctx, `SELECT status, executor_id, recovery_attempts FROM dbos.workflow_status
			WHERE workflow_uuid = $1`, h.WorkflowID).Scan(&o.status, &o.executor, &o.recoveries))
		return o
	}
	before := ownerOf()
	require.Equal(t, "PENDING", before.status)
	require.Equal(t, "web-1", before.executor)

	dir := t.TempDir()
	writeFile(t, dir, defaultConfigFile, "database-url: "+url+"\nexecutor-id: web-1\nagents: "+exampleAgents+"\n")
	r := runBin(t, binOpts{dir: dir}, "resume", "research-1")
	require.Equal(t, 1, r.code, "the session is completed: %s", r)
	require.Regexp(t, "• executor "+newExecutorID+", not web-1 from helix-dbos.yaml: that executor-id is serve's \\(pass --executor-id to choose this command's\\)\n", r.stdout)
	require.Regexp(t, "• starting an engine \\(executor "+newExecutorID+"\\)\n", r.stdout)
	require.Equal(t, before, ownerOf(), "serve's run was neither recovered nor stopped")

	// The command line chooses the command's own.
	r = runBin(t, binOpts{dir: dir}, "resume", "research-1", "--executor-id", "ops-1")
	require.Equal(t, 1, r.code, "%s", r)
	require.Contains(t, r.stdout, "• starting an engine (executor ops-1)\n")
	require.NotContains(t, r.stdout, "that executor-id is serve's")
	require.Equal(t, before, ownerOf())
}
