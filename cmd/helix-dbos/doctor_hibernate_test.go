package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

// doctor counts hibernated runs as waiting, not stuck, although their
// workflow ended SUCCESS: a hibernated run, a continuation running after a
// wake, a wake whose continuation is being started. It reports a woken run
// whose continuation has not begun for longer than --grace, and a
// hibernated run whose deadline passed without a wake. `sessions show` and
// `sessions runs` say which runs are hibernated or woken.
func TestDoctorHibernatedSessions(t *testing.T) {
	t.Parallel()
	url, e, _ := completedSession(t)
	st := testStore(t, url)
	ctx := t.Context()
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := st.Pool().Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	// run records a session whose run waits for a call; its run's
	// workflow ended when it hibernated.
	run := func(id, hibernation string) {
		t.Helper()
		_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: id, AgentType: "billing"})
		require.NoError(t, err)
		_, err = st.CreateRun(ctx, store.CreateRunParams{RunID: "run-" + id, SessionID: id, Turn: 1,
			Status: helix.RunSuspendedClientTool, WorkflowID: "wf-" + id})
		require.NoError(t, err)
		exec(`INSERT INTO dbos.workflow_status (workflow_uuid, status, name, executor_id) VALUES ($1, 'SUCCESS', 'helix.turn', $2)`,
			"wf-"+id, e.ExecutorID())
		exec(`UPDATE helix.runs SET `+hibernation+` WHERE run_id = $1`, "run-"+id)
	}
	hour := time.Now().Add(-time.Hour).UnixMilli()
	run("hib", `hibernated_at = now() - interval '1 hour'`)
	run("hib-late", fmt.Sprintf(`hibernated_at = now() - interval '2 hours', wake_at = %d`, hour))
	exec(`UPDATE helix.sessions SET pending_client_tool_calls = $1 WHERE session_id = 'hib-late'`,
		fmt.Sprintf(`{"q1": {"toolCallId": "q1", "toolName": "ask_user", "kind": "client-tool-result", "deadlineAt": %d}}`, hour))
	run("woken-new", `woken_at = now(), wakes = 1`)
	run("woken-old", `woken_at = now() - interval '1 hour', wakes = 1`)
	run("woken-running", `wakes = 1`)
	exec(`INSERT INTO dbos.workflow_status (workflow_uuid, status, name, executor_id) VALUES ('wf-woken-running-wake-1', 'PENDING', 'helix.turn', $1)`,
		e.ExecutorID())

	o := binOpts{env: []string{"HELIX_DATABASE_URL=" + url}}
	r := runBin(t, o, "doctor", "--grace", "10m")
	require.Equal(t, 1, r.code, "%s", r)
	out := r.stdout
	require.Contains(t, out, "✗ stuck sessions       2 stuck of 5 active (2 hibernated: waiting for people with no workflow running)\n")
	require.Regexp(t, `    hib-late: its run run-hib-late, hibernated since \S+ \S+, waits for tool call\(s\) past their deadline: q1 \(ask_user\); no engine woke it\n`+
		"      → an engine wakes it at its deadline: every launched engine that defines agent billing does it within its recorded-run sweep interval", out)
	require.Regexp(t, `    woken-old: its run run-woken-old was woken from hibernation at \S+ \S+, but its continuation wf-woken-old-wake-1 has not started\n`+
		"      → an engine starts it: every launched engine", out)
	rep, r := doctorJSON(t, o, "--grace", "10m")
	require.Equal(t, 1, r.code)
	var ids []string
	for _, s := range rep.Stuck {
		ids = append(ids, s.SessionID)
	}
	require.ElementsMatch(t, []string{"hib-late", "woken-old"}, ids)

	show := mustBin(t, o, "sessions", "show", "hib-late")
	require.Regexp(t, `(?m)^hibernation\s+hibernated since \S+ \S+: no workflow runs it; an answer, an interrupt or its deadline at \S+ \S+ wakes it$`, show)
	show = mustBin(t, o, "sessions", "show", "woken-old")
	require.Regexp(t, `(?m)^hibernation\s+woken at \S+ \S+: its continuation wf-woken-old-wake-1 has not begun yet \(an engine starts it\)$`, show)
	show = mustBin(t, o, "sessions", "show", "woken-running")
	require.Regexp(t, `(?m)^hibernation\s+woken 1 time\(s\): it runs in continuation wf-woken-running-wake-1$`, show)
	runs := mustBin(t, o, "sessions", "runs", "hib")
	require.Regexp(t, `(?m)^1\s+run-hib\s+suspended_client_tool \(hibernated\)\s+0\s+wf-hib\s`, runs)
	runs = mustBin(t, o, "sessions", "runs", "woken-old")
	require.Regexp(t, `(?m)^1\s+run-woken-old\s+suspended_client_tool \(woken\)\s+0\s+wf-woken-old \+1 continuation\(s\)\s`, runs)
}
