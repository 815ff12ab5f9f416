package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

// The demo end to end, its worker a real child process (this test binary,
// re-executed): exit status 0, the story in its output, and the promises
// checked again here from the tables.
func TestDemo(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	var stdout, stderr bytes.Buffer
	code := execute([]string{"demo", "--delay", "1ms", "--database-url", url}, &stdout, &stderr)
	out := stdout.String()
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, stderr.String())
	require.Empty(t, stderr.String())
	for _, want := range []string{
		"==> provisioning Postgres\n",
		"==> phase 1: a research agent runs to completion",
		"step_committed       step 1 · checkpoint ",
		"tool_start           search_web {\"query\":\"durable execution for LLM agents\"}",
		"output               {\"answer\":",
		"✓ completed in ",
		"==> phase 2: a worker process runs the agent and is killed mid-run",
		"💥 killed worker pid ",
		"==> recovery: an engine with executor ID helix-demo-worker-",
		"stream_resync        crash_recovery: chunks from sequence ",
		"✓ the recovered run completed",
		"model calls   step 1 ×1 (worker) · step 2 ×2 (worker, recovery) · step 3 ×1 (recovery)",
		"✓ each tool ran exactly once",
		"==> phase 3: a run waits for an approval given by another process",
		"⏸  run ",
		"call_publish  publish_report  approval  1     none      waiting",
		"$ HELIX_DATABASE_URL=",
		"│ no other call waits: the run continues now",
		"✓ publish_report ran exactly once, in this process (pid ",
		"the run completed in place: run ",
		"==> phase 4: a lead delegates to a sub-agent and consults a persistent companion twice",
		"subagent_start       editorial-lead       fact-checker demo-",
		"subagent_end         editorial-lead       fact-checker demo-",
		`companion__spawnAgent → {"suggestion":"Agents That Never Lose Work"}`,
		`companion__sendMessage → {"suggestion":"“Agents That Never Lose Work”: every step`,
		"the editor's own stream",
		"✓ editor: one session (demo-",
		"two runs (workflows …-turn-1 and …-continue-call_consult_editor), each consultation in its log once",
		"==> done in ",
	} {
		require.Contains(t, out, want)
	}
	// Phase 3 in order: the request in the live stream, the second
	// process's approval, then the same stream going on to the answer.
	phase3 := strings.Index(out, "==> phase 3")
	var at []int
	for _, want := range []string{
		`tool_approval_request approval requested for publish_report {"title":"How durable execution makes LLM agents reliable"}  (call call_publish)`,
		"│ approved publish_report (call call_publish) in session demo-",
		"tool_approval_response approved publish_report  (call call_publish): reviewed in the demo",
		`tool_end             publish_report → {"url":"https://example.org/reports/how-durable-execution-`,
		"Published “How durable execution makes LLM agents reliable” at",
		"stream_end           final output",
		"✓ publish_report ran exactly once",
	} {
		i := strings.Index(out[phase3:], want)
		require.GreaterOrEqual(t, i, 0, "phase 3 lacks %q:\n%s", want, out[phase3:])
		at = append(at, i)
	}
	require.IsIncreasing(t, at, "phase 3's lines in order")
	// The worker was killed while step 2's answer streamed: the partial
	// answer is printed before the kill, the whole one after recovery.
	phase2, kill := strings.Index(out, "==> phase 2"), strings.Index(out, "💥")
	require.Less(t, phase2, kill)
	require.Contains(t, out[phase2:kill], "Both sources agree")
	require.NotContains(t, out[phase2:kill], "Let me note that.")
	require.Contains(t, out[kill:], "Let me note that.")

	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var sessions []string
	rows, err := conn.Query(t.Context(), `SELECT session_id FROM helix.sessions WHERE status = $1 ORDER BY session_id`, string(helix.SessionCompleted))
	require.NoError(t, err)
	sessions, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, sessions, 6, "four sessions and the team's two children")
	crashed := sessions[1]
	require.True(t, strings.HasSuffix(crashed, "-b"), crashed)

	// Exactly-once, from the table the tools write outside the engine:
	// every tool call ran once, in the process that ran its step.
	rows, err = conn.Query(t.Context(), `SELECT name || ':' || count(*) || ':' || count(DISTINCT pid)
		FROM helix_demo.executions WHERE session_id = $1 AND kind = 'tool' GROUP BY name ORDER BY name`, crashed)
	require.NoError(t, err)
	tools, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"save_note:1:1", "search_docs:1:1", "search_web:1:1"}, tools)
	var step1PID, step3PID int
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT
		(SELECT pid FROM helix_demo.executions WHERE session_id = $1 AND name = 'search_web'),
		(SELECT pid FROM helix_demo.executions WHERE session_id = $1 AND name = 'save_note')`, crashed).Scan(&step1PID, &step3PID))
	require.NotEqual(t, step1PID, step3PID, "step 1's tools ran in the worker, step 2's after recovery")
	var runs int
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT count(*) FROM helix.runs WHERE session_id = $1`, crashed).Scan(&runs))
	require.Equal(t, 1, runs, "the recovered run is the worker's run, not a new one")

	// The approval: the gated tool ran once, in the run that suspended.
	approved := sessions[2]
	require.True(t, strings.HasSuffix(approved, "-c"), approved)
	var published int
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT count(*) FROM helix_demo.executions
		WHERE session_id = $1 AND kind = 'tool' AND name = 'publish_report'`, approved).Scan(&published))
	require.Equal(t, 1, published)
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT count(*) FROM helix.runs WHERE session_id = $1 AND status = 'completed'`, approved).Scan(&runs))
	require.Equal(t, 1, runs, "the run that suspended completed in place")

	// The team: the editor's second consultation continued its session.
	team := sessions[3]
	require.True(t, strings.HasSuffix(team, "-d"), team)
	require.Equal(t, []string{team + "-agent-editor", team + "-sub-call_check"}, sessions[4:])
	rows, err = conn.Query(t.Context(), `SELECT workflow_id FROM helix.runs WHERE session_id = $1 ORDER BY started_at`, team+"-agent-editor")
	require.NoError(t, err)
	workflows, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{team + "-agent-editor-turn-1", team + "-agent-editor-continue-call_consult_editor"}, workflows)
}

// A demo that cannot reach its database fails with a non-zero status and
// says why.
func TestDemoFailsClearly(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	code := execute([]string{"demo", "--database-url", "postgres://nobody:secret@127.0.0.1:1/none?connect_timeout=2"}, &stdout, &stderr)
	require.Equal(t, 1, code)
	require.Contains(t, stderr.String(), "helix-dbos: ")
	require.Contains(t, stderr.String(), "127.0.0.1")
	require.NotContains(t, stdout.String()+stderr.String(), "secret", "the password is not printed")
}
