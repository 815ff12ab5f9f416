package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/llm/scripted"
)

type transferArgs struct {
	To     string `json:"to"`
	Amount int    `json:"amount"`
}

type question struct {
	Question string `json:"question"`
}

type answer struct {
	Answer string `json:"answer" jsonschema:"minLength=1"`
}

// hitlAgent's first step calls two approval-gated transfers and a
// client-executed ask_user (or only ask_user with onlyAsk); its second
// step answers. runs counts the transfer executions per call.
func hitlAgent(runs *sync.Map, onlyAsk bool) *helix.Agent {
	transfer := helix.MustNewTool("transfer", "Move money",
		func(_ context.Context, in transferArgs, tc helix.ToolContext) (map[string]int, error) {
			n, _ := runs.LoadOrStore(tc.ToolCallID(), new(atomic.Int32))
			n.(*atomic.Int32).Add(1)
			return map[string]int{"sent": in.Amount}, nil
		}, helix.RequireApproval())
	ask := helix.MustNewClientTool[question, answer]("ask_user", "Ask the user a question")
	calls := []scripted.Call{
		{ID: "g1", Name: "transfer", Args: transferArgs{To: "bob", Amount: 5}},
		{ID: "g2", Name: "transfer", Args: transferArgs{To: "mallory", Amount: 1000}},
		{ID: "c", Name: "ask_user", Args: question{Question: "favourite colour?"}},
	}
	if onlyAsk {
		calls = calls[2:]
	}
	return &helix.Agent{
		Name: "banker", Tools: []*helix.Tool{transfer, ask},
		Model: scripted.New(scripted.Step{ToolCalls: calls}, scripted.Step{Text: "all done"}),
	}
}

func executionsOf(runs *sync.Map, id string) int32 {
	n, ok := runs.Load(id)
	if !ok {
		return 0
	}
	return n.(*atomic.Int32).Load()
}

// waitStatus awaits the end of the run and requires the status want.
func waitStatus(t *testing.T, h *engine.Handle, want helix.AgentStatus) helix.AgentResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	res, err := h.Await(ctx)
	require.NoError(t, err)
	require.Equal(t, want, res.Status, res.Error)
	return res
}

// execCLI runs the CLI as main does: exit status, stdout, stderr.
func execCLI(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := execute(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// approve, deny and submit answer a suspended session from the command
// line: rejections exit 2 naming the code and what to do, nothing is
// recorded for them, the answers are delivered and the run completes; a
// duplicate says it was already answered.
func TestApproveDenySubmit(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	db := []string{"--database-url", url}
	cli := func(args ...string) string { t.Helper(); return mustCLI(t, append(args, db...)...) }
	rejected := func(wantCode string, wantStderr []string, args ...string) {
		t.Helper()
		code, stdout, stderr := execCLI(append(args, db...)...)
		require.Equal(t, exitRejected, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
		require.Contains(t, stderr, "rejected ("+wantCode+"): ")
		for _, s := range wantStderr {
			require.Contains(t, stderr, s)
		}
	}
	var runs sync.Map
	agent := hitlAgent(&runs, false)
	e := newTestEngine(t, url, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "pay and ask"}, &engine.ExecuteOptions{SessionID: "bank"})
	require.NoError(t, err)
	res := waitResult(t, h)
	require.Equal(t, helix.AgentSuspendedClientTool, res.Status, res.Error)

	out := cli("sessions", "show", "bank")
	require.Contains(t, out, "pending tool calls (3 waiting, 0 answered):\n")
	require.Regexp(t, `(?m)^\s+CALL\s+TOOL\s+KIND\s+STEP\s+DEADLINE\s+STATE$`, out)
	require.Regexp(t, `(?m)^\s+g1\s+transfer\s+approval\s+1\s+none\s+waiting$`, out)
	require.Regexp(t, `(?m)^\s+c\s+ask_user\s+client tool\s+1\s+none\s+waiting$`, out)
	require.Contains(t, out, "answer with: helix-dbos approve|deny bank <call> [--reason R] · helix-dbos submit bank <call> --result JSON\n")
	var detail sessionDetail
	require.NoError(t, json.Unmarshal([]byte(cli("sessions", "show", "bank", "--json")), &detail))
	require.Len(t, detail.PendingToolCalls, 3)
	require.Equal(t, "g1", detail.PendingToolCalls[0].ToolCallID)

	t.Run("rejections", func(t *testing.T) {
		rejected(helix.SubmissionUnknownToolCall, []string{"tool call nope in session bank", "helix-dbos sessions show bank"},
			"approve", "bank", "nope")
		rejected(helix.SubmissionUnknownToolCall, []string{"session nobody does not exist"}, "deny", "nobody", "g1")
		rejected(helix.SubmissionKindMismatch, []string{"`helix-dbos submit bank c --result JSON`"}, "approve", "bank", "c")
		rejected(helix.SubmissionKindMismatch, []string{"`helix-dbos approve bank g1`"}, "submit", "bank", "g1", "--result", "{}")
		rejected(helix.SubmissionInvalidResult, []string{"/answer", `"minLength":1`}, "submit", "bank", "c", "--result", `{"answer":""}`)

		// Invalid JSON is refused here, before anything is sent.
		code, _, stderr := execCLI(append([]string{"submit", "bank", "c", "--result", `{"answer":`}, db...)...)
		require.Equal(t, 1, code)
		require.Contains(t, stderr, "--result is not valid JSON: unexpected end of JSON input")
		code, _, stderr = execCLI(append([]string{"submit", "bank", "c", "--result", `green`}, db...)...)
		require.Equal(t, 1, code)
		require.Contains(t, stderr, "(at byte 1); a string must be quoted")
		_, err := runCLI(t, append([]string{"submit", "bank", "c", "--result", `{}`, "--error", "x"}, db...)...)
		require.ErrorContains(t, err, "give exactly one of --result JSON, --result-file F and --error MSG (got --result and --error)")
		_, err = runCLI(t, append([]string{"submit", "bank", "c"}, db...)...)
		require.ErrorContains(t, err, "(got none)")
		_, err = runCLI(t, append([]string{"approve", "bank"}, db...)...)
		require.ErrorContains(t, err, "want 2 arguments, got 1: usage: helix-dbos approve <session> <toolCallId> [--reason R]")

		// --json reports a rejection on stdout too.
		code, stdout, _ := execCLI(append([]string{"approve", "bank", "nope", "--json"}, db...)...)
		require.Equal(t, exitRejected, code)
		var rep submissionReport
		require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
		require.Equal(t, outcomeRejected, rep.Outcome)
		require.Equal(t, helix.SubmissionUnknownToolCall, rep.Rejection.Code)

		st, err := e.Session(t.Context(), "bank")
		require.NoError(t, err)
		for id, c := range st.PendingClientToolCalls {
			require.Nil(t, c.Submission, "rejections record nothing (%s)", id)
		}
	})

	out = cli("approve", "bank", "g1", "--reason", "small amount")
	require.Equal(t, "approved transfer (call g1) in session bank: delivered to run "+h.RunID+"\n"+
		"the run continues once these 2 call(s) are answered too: g2 (transfer, approval), c (ask_user, client tool)\n", out)
	require.Regexp(t, `(?m)^\s+g1\s+transfer\s+approval\s+1\s+none\s+answered: approved \(small amount\)$`, cli("sessions", "show", "bank"))

	var rep submissionReport
	require.NoError(t, json.Unmarshal([]byte(cli("deny", "bank", "g2", "--reason", "too much", "--json")), &rep))
	require.Equal(t, submissionReport{SessionID: "bank", ToolCallID: "g2", ToolName: "transfer", Kind: helix.SubmissionApprovalResponse,
		Outcome: outcomeDelivered, OwnerSessionID: "bank", RunID: h.RunID, Remaining: []string{"c"}}, rep)

	file := filepath.Join(t.TempDir(), "answer.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"answer": "green"}`), 0o600))
	out = cli("submit", "bank", "c", "--result-file", file)
	require.Equal(t, "submitted the result of ask_user (call c) in session bank: delivered to run "+h.RunID+"\n"+
		"no other call waits: the run continues now\n", out)

	res = waitStatus(t, h, helix.AgentCompleted)
	require.JSONEq(t, `"all done"`, string(res.Output))
	require.Equal(t, int32(1), executionsOf(&runs, "g1"), "approved: ran once")
	require.Zero(t, executionsOf(&runs, "g2"), "denied: never ran")
	msgs := cli("sessions", "messages", "bank")
	require.Contains(t, msgs, "transfer (g1) → {\"sent\":5}")
	require.Contains(t, msgs, `transfer (g2) → {"error":"`+helix.NotApprovedMessage+`"}`)
	require.Contains(t, msgs, "ask_user (c) → {\"answer\":\"green\"}")
	require.NotContains(t, cli("sessions", "show", "bank"), "pending tool calls", "the commit cleared them")

	// A duplicate changes nothing and says so.
	require.Equal(t, "tool call g1 in session bank was already answered earlier: nothing changed (the first answer stands)\n",
		cli("deny", "bank", "g1"))
	require.NoError(t, json.Unmarshal([]byte(cli("submit", "bank", "c", "--error", "too late", "--json")), &rep))
	require.Equal(t, outcomeAlready, rep.Outcome)
	require.Equal(t, int32(1), executionsOf(&runs, "g1"))
	require.Equal(t, 1, len(mustRuns(t, e, "bank")), "the run that suspended completed in place")
}

func mustRuns(t *testing.T, e *engine.Engine, sessionID string) []string {
	t.Helper()
	runs, err := e.Runs(t.Context(), sessionID)
	require.NoError(t, err)
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.RunID
	}
	return ids
}

// submit --error reports a client tool's failure: the model reads it as the
// tool's error. --result-file - reads standard input.
func TestSubmitErrorAndStdin(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	agent := hitlAgent(&sync.Map{}, true)
	e := newTestEngine(t, url, agent)
	h1, err := e.Execute(t.Context(), agent, engine.Input{Message: "ask"}, &engine.ExecuteOptions{SessionID: "ask-1"})
	require.NoError(t, err)
	h2, err := e.Execute(t.Context(), agent, engine.Input{Message: "ask"}, &engine.ExecuteOptions{SessionID: "ask-2"})
	require.NoError(t, err)
	require.Equal(t, helix.AgentSuspendedClientTool, waitResult(t, h1).Status)
	require.Equal(t, helix.AgentSuspendedClientTool, waitResult(t, h2).Status)

	_, err = runCLI(t, "submit", "ask-1", "c", "--error", " ", "--database-url", url)
	require.ErrorContains(t, err, "--error needs a message")
	out := mustCLI(t, "submit", "ask-1", "c", "--error", "the user closed the dialog", "--database-url", url)
	require.Contains(t, out, "reported the failure of ask_user (call c) in session ask-1: delivered to run ")
	waitStatus(t, h1, helix.AgentCompleted)
	require.Contains(t, mustCLI(t, "sessions", "messages", "ask-1", "--database-url", url), `ask_user (c) → {"error":"the user closed the dialog"}`)

	cmd := newRootCmd()
	var buf bytes.Buffer
	cmd.SetOut(&buf)
	cmd.SetErr(&buf)
	cmd.SetIn(bytes.NewBufferString(`{"answer":"blue"}`))
	cmd.SetArgs([]string{"submit", "ask-2", "c", "--result-file", "-", "--database-url", url})
	require.NoError(t, cmd.ExecuteContext(t.Context()), buf.String())
	waitStatus(t, h2, helix.AgentCompleted)
	require.Contains(t, mustCLI(t, "sessions", "messages", "ask-2", "--database-url", url), `ask_user (c) → {"answer":"blue"}`)
}

// interrupt wakes a run suspended on a tool call: it ends interrupted at
// once with the call kept, and an answer then says to resume first.
func TestInterruptWakesASuspendedRun(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	db := []string{"--database-url", url}
	agent := hitlAgent(&sync.Map{}, true)
	e := newTestEngine(t, url, agent)
	h, err := e.Execute(t.Context(), agent, engine.Input{Message: "ask"}, &engine.ExecuteOptions{SessionID: "waiting"})
	require.NoError(t, err)
	require.Equal(t, helix.AgentSuspendedClientTool, waitResult(t, h).Status)

	out := mustCLI(t, append([]string{"interrupt", "waiting", "--reason", "lunch", "--wait", "--timeout", "30s"}, db...)...)
	require.Equal(t, "interrupt requested for session waiting (lunch): its run was waiting for ask_user (call c, client tool) "+
		"and was woken to stop; the unanswered calls are kept for after the resume\n"+
		"session waiting is interrupted after step 0; continue it with `helix-dbos resume waiting`\n", out)
	res := waitStatus(t, h, helix.AgentInterrupted)
	require.Equal(t, "lunch", res.Error)

	out = mustCLI(t, append([]string{"sessions", "show", "waiting"}, db...)...)
	require.Regexp(t, `(?m)^status\s+interrupted$`, out)
	require.Regexp(t, `(?m)^\s+c\s+ask_user\s+client tool\s+1\s+none\s+waiting$`, out)
	require.Contains(t, out, "the session is interrupted: resume it, then answer the calls still waiting")

	code, _, stderr := execCLI(append([]string{"submit", "waiting", "c", "--result", `{"answer":"x"}`}, db...)...)
	require.Equal(t, exitRejected, code)
	require.Contains(t, stderr, "rejected (session_interrupted): session waiting was interrupted while it waited")
	require.Contains(t, stderr, "resume the session first")
}
