package main

import (
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// executorsJSON runs `executors --json` and returns the executors by ID,
// and the raw JSON.
func executorsJSON(t *testing.T, o binOpts) (map[string]executorInfo, string) {
	t.Helper()
	out := mustBin(t, o, "executors", "--json")
	var list []executorInfo
	require.NoError(t, json.Unmarshal([]byte(out), &list), out)
	byID := map[string]executorInfo{}
	for _, e := range list {
		byID[e.ExecutorID] = e
	}
	require.Len(t, byID, len(list), "one entry per executor")
	return byID, out
}

// tableIDs returns the first column of a table's rows, header excluded.
func tableIDs(out string) []string {
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		ids = append(ids, strings.Fields(line)[0])
	}
	return ids
}

// executors lists every executor with what it holds: a live serve process
// (under its own executor ID, with a session that waits for an approval),
// and what other executors left: a stopped one, a dead one with pending
// workflows and queue slots, two taken over (recovered, and a recovery
// that failed), and an executor ID that owns workflows without a row.
func TestExecutors(t *testing.T) {
	t.Parallel()
	o, st := newBinDatabase(t)
	ctx := t.Context()
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := st.Pool().Exec(ctx, sql, args...)
		require.NoError(t, err)
	}

	p := startBin(t, o, "serve", "--allow-unauthenticated", "--addr", "127.0.0.1:0", "--agents", exampleAgents)
	base := "http://" + serveAddr(t, p)
	m := regexp.MustCompile(`\(executor (\S+)\)\n`).FindStringSubmatch(p.stdout.String())
	require.NotNil(t, m, p.stdout.String())
	live := m[1]
	require.Regexp(t, newExecutorID, live, "serve's own, new executor ID")
	startPublisher(t, base, st, "post-live")

	// The other executors ran application version v0: the live server (of
	// engine.DefaultApplicationVersion) takes none of them over.
	exec(`INSERT INTO helix.executors (executor_id, application_version, hostname, pid, heartbeat_at, stopped_at) VALUES
		('stopped-1', 'v0', 'h1', 11, now() - interval '1 hour', now() - interval '1 hour')`)
	exec(`INSERT INTO helix.executors (executor_id, application_version, hostname, pid, heartbeat_at) VALUES
		('dead-1', 'v0', 'h2', 22, now() - interval '5 minutes 20 seconds')`)
	takenOverAt := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	exec(`INSERT INTO helix.executors (executor_id, application_version, hostname, pid, heartbeat_at, stopped_at, taken_over_by, taken_over_at,
		recovered_at, recovered_workflows, recovery_error) VALUES
		('old-1', 'v0', 'h4', 44, now() - interval '10 minutes', now() - interval '10 minutes', $1, $2, now(), 3, NULL),
		('failing-1', 'v0', 'h5', 55, now() - interval '90 seconds', NULL, $1, $2, NULL, NULL, 'recover: connection refused')`, live, takenOverAt)
	workflow := func(id, status, executor, queue string) {
		t.Helper()
		exec(`INSERT INTO dbos.workflow_status (workflow_uuid, status, name, executor_id, queue_name, application_version)
			VALUES ($1, $2, 'helix.turn', $3, nullif($4, ''), 'v0')`, id, status, executor, queue)
	}
	run := func(session string, turn int, workflowID string) {
		t.Helper()
		_, err := st.CreateRun(ctx, store.CreateRunParams{RunID: session + "-" + strconv.Itoa(turn), SessionID: session, Turn: turn,
			Status: helix.RunRunning, WorkflowID: workflowID})
		require.NoError(t, err)
	}
	for _, id := range []string{"turned", "recovered"} {
		_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: id, AgentType: "billing"})
		require.NoError(t, err)
	}
	// turned's current run is its second; its first run's workflow is
	// still pending, under an executor ID without a row.
	run("turned", 1, "wf-turned-1")
	workflow("wf-turned-1", "PENDING", "ghost", "")
	run("turned", 2, "wf-turned-2")
	workflow("wf-turned-2", "PENDING", "dead-1", "")
	// recovered's workflow was recovered through DBOS's internal queue.
	run("recovered", 1, "wf-recovered")
	workflow("wf-recovered", "PENDING", "dead-1", "_dbos_internal_queue")
	// Workflows of a DBOS queue, no session's: two dequeued (slots in
	// use), one still waiting in the queue (pending, not a slot).
	workflow("wf-jobs-1", "PENDING", "dead-1", "jobs")
	workflow("wf-jobs-2", "PENDING", "dead-1", "jobs")
	workflow("wf-jobs-3", "ENQUEUED", "dead-1", "jobs")
	workflow("wf-jobs-4", "PENDING", "ghost", "jobs")
	workflow("wf-done", "SUCCESS", "dead-1", "jobs") // ended: counts nowhere

	host, err := os.Hostname()
	require.NoError(t, err)
	pid := strconv.Itoa(p.cmd.Process.Pid)
	const when = `\d{4}-\d\d-\d\d \d\d:\d\d:\d\d`
	at := regexp.QuoteMeta(fmtTime(takenOverAt))
	out := mustBin(t, o, "executors")
	t.Logf("executors:\n%s", out)
	require.Regexp(t, `^EXECUTOR\s+VERSION\s+HOST\s+PID\s+STARTED\s+FORMAT\s+HEARTBEAT\s+LEASE\s+WORKFLOWS\s+SESSIONS\s+QUEUE SLOTS\s+STATE\n`, out)
	require.Equal(t, []string{live, "dead-1", "failing-1", "ghost", "old-1", "stopped-1"}, tableIDs(out), "alive first, then by ID")
	require.Regexp(t, `(?m)^`+regexp.QuoteMeta(live)+`\s+`+engine.DefaultApplicationVersion+`\s+`+regexp.QuoteMeta(host)+`\s+`+pid+
		`\s+`+when+`\s+`+strconv.Itoa(int(postgres.FormatLevelNewest))+`\s+\d+s ago\s+30s\s+1\s+1\s+-\s+alive$`, out,
		"the session waiting for its approval is the server's; it reads the newest level")
	require.Regexp(t, `(?m)^dead-1\s+v0\s+h2\s+22\s+`+when+`\s+1\s+5m ago\s+30s\s+5\s+2\s+_dbos_internal_queue=1,jobs=2\s+dead$`, out)
	require.Regexp(t, `(?m)^failing-1\s+v0\s+h5\s+55\s+`+when+`\s+1\s+1m ago\s+30s\s+0\s+0\s+-\s+`+
		`taken over by `+regexp.QuoteMeta(live)+` at `+at+`, recovery failed: recover: connection refused$`, out)
	require.Regexp(t, `(?m)^ghost\s+-\s+-\s+-\s+-\s+-\s+-\s+-\s+2\s+0\s+jobs=1\s+unrecorded$`, out,
		"turned's pending workflow under ghost is not its current run's")
	require.Regexp(t, `(?m)^old-1\s+v0\s+h4\s+44\s+`+when+`\s+1\s+10m ago\s+30s\s+0\s+0\s+-\s+`+
		`taken over by `+regexp.QuoteMeta(live)+` at `+at+` \(3 workflow\(s\) recovered\)$`, out)
	require.Regexp(t, `(?m)^stopped-1\s+v0\s+h1\s+11\s+`+when+`\s+1\s+1h0m ago\s+30s\s+0\s+0\s+-\s+stopped$`, out)

	byID, raw := executorsJSON(t, o)
	t.Logf("executors --json:\n%s", raw)
	e := byID[live]
	require.True(t, e.Alive)
	require.True(t, e.Heartbeat)
	require.Equal(t, stateAlive, e.State)
	require.Equal(t, host, e.Hostname)
	require.Equal(t, p.cmd.Process.Pid, e.PID)
	require.Equal(t, engine.DefaultApplicationVersion, e.ApplicationVersion)
	require.Equal(t, 30.0, e.LeaseSeconds)
	require.NotNil(t, e.StartedAt)
	require.Equal(t, 1, e.SessionsOwned)
	require.Empty(t, e.QueueSlots)
	require.Equal(t, int(postgres.FormatLevelNewest), e.FormatLevel, "the storage format level this release reads")

	e = byID["dead-1"]
	require.Equal(t, stateDead, e.State)
	require.Equal(t, int(postgres.FormatLevelBaseline), e.FormatLevel, "a row whose level is not written yet reads as the baseline")
	require.False(t, e.Alive)
	require.Equal(t, 5, e.PendingWorkflows)
	require.Equal(t, 2, e.SessionsOwned)
	require.Equal(t, map[string]int{"_dbos_internal_queue": 1, "jobs": 2}, e.QueueSlots)

	e = byID["ghost"]
	require.Equal(t, stateUnrecorded, e.State)
	require.False(t, e.Heartbeat)
	require.Nil(t, e.StartedAt)
	require.Equal(t, 2, e.PendingWorkflows)
	require.Zero(t, e.SessionsOwned)
	require.Equal(t, map[string]int{"jobs": 1}, e.QueueSlots)

	e = byID["old-1"]
	require.Equal(t, stateTakenOver, e.State)
	require.Equal(t, live, e.TakenOverBy)
	require.True(t, takenOverAt.Equal(*e.TakenOverAt))
	require.NotNil(t, e.RecoveredAt)
	require.Equal(t, 3, e.RecoveredWorkflows)

	e = byID["failing-1"]
	require.Equal(t, stateTakenOver, e.State)
	require.Nil(t, e.RecoveredAt)
	require.Equal(t, "recover: connection refused", e.RecoveryError)

	e = byID["stopped-1"]
	require.Equal(t, stateStopped, e.State)
	require.NotNil(t, e.StoppedAt)
	require.Zero(t, e.PendingWorkflows)

	// The names scripts read.
	var fields []map[string]any
	require.NoError(t, json.Unmarshal([]byte(raw), &fields))
	require.Equal(t, live, fields[0]["executorId"], "alive first")
	for _, k := range []string{"executorId", "state", "alive", "heartbeat", "hostname", "pid", "applicationVersion", "startedAt",
		"heartbeatAt", "leaseSeconds", "formatLevel", "pendingWorkflows", "sessionsOwned", "queueSlots"} {
		require.Contains(t, fields[0], k)
	}
	require.Equal(t, map[string]any{}, fields[0]["queueSlots"], "an empty object, not null")
}

// Without the helix schema executors says to migrate; with it, before any
// engine ran, there are none.
func TestExecutorsEmptyDatabase(t *testing.T) {
	t.Parallel()
	r := runBin(t, binOpts{}, "executors", "--database-url", pgtest.NewEmptyURL(t))
	require.Equal(t, 1, r.code, "%s", r)
	require.Equal(t, "helix-dbos: "+errNoExecutorsTable.Error()+"\n", r.stderr)

	url := pgtest.NewURL(t)
	require.Equal(t, "no executors\n", mustBin(t, binOpts{}, "executors", "--database-url", url))
	require.Equal(t, "[]\n", mustBin(t, binOpts{}, "executors", "--json", "--database-url", url))
}
