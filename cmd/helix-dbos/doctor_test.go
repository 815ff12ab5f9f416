package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/migrations"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

func doctorJSON(t *testing.T, o binOpts, args ...string) (*doctorReport, binResult) {
	t.Helper()
	r := runBin(t, o, append([]string{"doctor", "--json"}, args...)...)
	var rep doctorReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), "%s", r)
	return &rep, r
}

func statuses(rep *doctorReport) map[string]string {
	out := map[string]string{}
	for _, c := range rep.Checks {
		out[c.Name] = c.Status
	}
	return out
}

// A database an engine runs on, with nothing stuck, passes: the engine
// (launched in this test process) records its heartbeat.
func TestDoctorHealthy(t *testing.T) {
	t.Parallel()
	url, _, _ := completedSession(t)
	o := binOpts{env: []string{"HELIX_DATABASE_URL=" + url}}
	out := mustBin(t, o, "doctor")
	require.Regexp(t, `(?m)^✓ database reachable\s+host=\S+ port=\d+ user=\S+ database=\S+ · PostgreSQL [\d.]+ · connect [\d.]+ ms · round trip [\d.]+ ms$`, out)
	n := migrationCount(t)
	require.Regexp(t, fmt.Sprintf(`(?m)^✓ migrations current\s+%d of %d applied$`, n, n), out)
	require.Regexp(t, `(?m)^✓ DBOS schema present\s+schema dbos$`, out)
	require.Regexp(t, fmt.Sprintf(`(?m)^✓ executors alive\s+1 alive: \S+ \(pid %d on `, os.Getpid()), out)
	require.Regexp(t, `(?m)^✓ queues served\s+nothing queued$`, out)
	require.Regexp(t, `(?m)^✓ no stuck sessions\s+0 active$`, out)

	rep, r := doctorJSON(t, o)
	require.Equal(t, 0, r.code)
	require.True(t, rep.OK)
	require.Equal(t, map[string]string{"database": checkOK, "migrations": checkOK, "dbos": checkOK, "executors": checkOK,
		"queues": checkOK, "sessions": checkOK}, statuses(rep))
	require.Empty(t, rep.Stuck)
}

// An alive executor that records a lower storage format level than this
// release's (a rolling deploy under way from a release that reads fewer
// levels; level 0 here, as no release below the baseline exists) holds
// every engine at its level: doctor warns and says to finish the deploy,
// `executors` shows each executor's level. A warning: the exit status is 0.
func TestDoctorOlderFormatLevel(t *testing.T) {
	t.Parallel()
	url, e, _ := completedSession(t)
	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(t.Context(), `INSERT INTO helix.executors (executor_id, application_version, hostname, pid, lease_ms, format_level)
		VALUES ('previous-release', $1, 'old-host', 7, 3600000, 0)`, engine.DefaultApplicationVersion)
	require.NoError(t, err)
	o := binOpts{env: []string{"HELIX_DATABASE_URL=" + url}}

	rep, r := doctorJSON(t, o)
	require.Equal(t, 0, r.code, "%s", r)
	require.True(t, rep.OK)
	require.Equal(t, checkWarn, statuses(rep)["executors"])
	var check doctorCheck
	for _, c := range rep.Checks {
		if c.Name == "executors" {
			check = c
		}
	}
	require.Len(t, check.Problems, 1, "%+v", check)
	require.Contains(t, check.Problems[0].Problem, "previous-release (level 0, version "+engine.DefaultApplicationVersion+", pid 7 on old-host)")
	require.Contains(t, check.Problems[0].Problem, "up to level 0 only")
	require.Contains(t, check.Problems[0].Hint, "finish the rolling deploy")
	levels := map[string]int{}
	for _, x := range rep.Executors {
		levels[x.ExecutorID] = x.FormatLevel
	}
	require.Equal(t, map[string]int{"previous-release": 0, e.ExecutorID(): int(postgres.FormatLevelNewest)}, levels)
	out := mustBin(t, o, "executors")
	require.Regexp(t, `(?m)^previous-release\s+\S+\s+old-host\s+7\s+\S+ \S+\s+0\s+`, out)

	// Once it stopped, nothing holds the cluster back.
	_, err = pool.Exec(t.Context(), `UPDATE helix.executors SET stopped_at = now() WHERE executor_id = 'previous-release'`)
	require.NoError(t, err)
	rep, _ = doctorJSON(t, o)
	require.Equal(t, checkOK, statuses(rep)["executors"], "%+v", rep.Checks)
}

// What doctor finds wrong makes it exit 1, with a hint for each problem.
func TestDoctorProblems(t *testing.T) {
	t.Parallel()
	t.Run("unreachable", func(t *testing.T) {
		t.Parallel()
		rep, r := doctorJSON(t, binOpts{}, "--database-url", "postgres://nobody:secret@127.0.0.1:1/none?connect_timeout=2")
		require.Equal(t, 1, r.code)
		require.False(t, rep.OK)
		require.Equal(t, map[string]string{"database": checkFail, "migrations": checkSkipped, "dbos": checkSkipped,
			"executors": checkSkipped, "queues": checkSkipped, "sessions": checkSkipped}, statuses(rep))
		require.Contains(t, rep.Checks[0].Problems[0].Hint, "check --database-url")
		require.Equal(t, "helix-dbos: doctor: 1 check(s) failed\n", r.stderr)
		require.NotContains(t, r.stdout, "secret", "the password is redacted")
	})
	t.Run("no schema", func(t *testing.T) {
		t.Parallel()
		r := runBin(t, binOpts{}, "doctor", "--database-url", pgtest.NewEmptyURL(t))
		require.Equal(t, 1, r.code)
		require.Contains(t, r.stdout, "✗ migrations current   the helix schema is missing\n    no helix migration is applied\n"+
			"      → run `helix-dbos migrate up` (an engine also migrates when it launches), or check --database-url\n")
		require.Contains(t, r.stdout, "! DBOS schema present  no engine has run on this database yet\n")
	})
	t.Run("pending migration", func(t *testing.T) {
		t.Parallel()
		url := pgtest.NewURL(t)
		mustCLI(t, "migrate", "down", "--database-url", url)
		r := runBin(t, binOpts{}, "doctor", "--database-url", url)
		require.Equal(t, 1, r.code)
		n := migrationCount(t)
		require.Contains(t, r.stdout, fmt.Sprintf("✗ migrations current   %d of %d applied\n    1 pending: %s\n", n-1, n, lastMigration(t))+
			"      → run `helix-dbos migrate up` (safe while engines run; an engine also migrates when it launches)\n")
	})
}

// doctor finds the sessions nothing runs: a run whose workflow never
// started, a workflow that ended under an active session, a workflow of a
// dead executor, a call waiting past its deadline, a session without a run.
func TestDoctorStuckSessions(t *testing.T) {
	t.Parallel()
	url, _, _ := completedSession(t) // an engine ran: the dbos schema exists
	st := testStore(t, url)
	ctx := t.Context()
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := st.Pool().Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	session := func(id, workflowID string, runStatus helix.RunStatus) {
		t.Helper()
		_, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: id, AgentType: "billing"})
		require.NoError(t, err)
		if workflowID != "" {
			_, err = st.CreateRun(ctx, store.CreateRunParams{RunID: "run-" + id, SessionID: id, Turn: 1, Status: runStatus, WorkflowID: workflowID})
			require.NoError(t, err)
		}
	}
	workflow := func(id, status, executor string) {
		t.Helper()
		exec(`INSERT INTO dbos.workflow_status (workflow_uuid, status, name, executor_id) VALUES ($1, $2, 'helix.turn', $3)`, id, status, executor)
	}
	exec(`INSERT INTO helix.executors (executor_id, application_version, hostname, pid, heartbeat_at) VALUES
		('alive', 'v', 'h1', 11, now()), ('gone', 'v', 'h2', 22, now() - interval '5 minutes 20 seconds'), ('stopped', 'v', 'h3', 33, now() - interval '1 hour')`)
	// Executors taken over by a live one: recovered, and a recovery that
	// keeps failing.
	exec(`INSERT INTO helix.executors (executor_id, application_version, hostname, pid, heartbeat_at, taken_over_by, taken_over_at,
		recovered_at, recovered_workflows, recovery_error) VALUES
		('old', 'v', 'h4', 44, now() - interval '1 minute', 'alive', '2026-01-02 03:04:05+00', now(), 3, NULL),
		('failing', 'v', 'h5', 55, now() - interval '1 minute', 'alive', '2026-01-02 03:04:05+00', NULL, NULL, 'recover: connection refused')`)

	session("orphan", "wf-orphan", helix.RunRunning)
	session("ended", "wf-ended", helix.RunRunning)
	workflow("wf-ended", "ERROR", "alive")
	session("dead", "wf-dead", helix.RunRunning)
	workflow("wf-dead", "PENDING", "gone")
	session("overdue", "wf-overdue", helix.RunSuspendedClientTool)
	workflow("wf-overdue", "PENDING", "alive")
	past := time.Now().Add(-time.Hour).UnixMilli()
	exec(`UPDATE helix.sessions SET pending_client_tool_calls = $1 WHERE session_id = 'overdue'`,
		fmt.Sprintf(`{"call-1": {"toolCallId": "call-1", "toolName": "ask_user", "kind": "client-tool-result", "deadlineAt": %d},
		              "call-2": {"toolCallId": "call-2", "toolName": "ask_user", "kind": "client-tool-result", "deadlineAt": %d, "timedOutAt": %d}}`,
			past, past, past))
	session("waiting", "wf-waiting", helix.RunSuspendedClientTool) // waits, within its deadline: fine
	workflow("wf-waiting", "PENDING", "alive")
	session("norun", "", "")
	// Queued workflows: of the live engine's version, and of a version no
	// live engine runs (a deploy changed ApplicationVersion without
	// AdoptVersions).
	exec(`INSERT INTO dbos.workflow_status (workflow_uuid, status, name, queue_name, application_version, created_at) VALUES
		('q-served', 'ENQUEUED', 'helix.turn', 'helix-sessions', 'v', (extract(epoch FROM now()) * 1000 - 120000)::bigint),
		('q-old-1', 'ENQUEUED', 'helix.turn', 'helix-sessions', 'v0', (extract(epoch FROM now()) * 1000 - 600000)::bigint),
		('q-old-2', 'ENQUEUED', 'helix.turn', 'helix-sessions', 'v0', (extract(epoch FROM now()) * 1000 - 60000)::bigint)`)

	o := binOpts{env: []string{"HELIX_DATABASE_URL=" + url}}
	r := runBin(t, o, "doctor", "--grace", "0s")
	require.Equal(t, 1, r.code, "%s", r)
	out := r.stdout
	require.Regexp(t, `✗ executors alive      2 alive, 2 dead with pending workflows; old taken over by alive at 2026-01-02 \S+ \(3 workflow\(s\) recovered\)\n`, out)
	require.Regexp(t, `    failing: claimed by alive at 2026-01-02 \S+, but recovering its workflows failed: recover: connection refused\n`+
		`      → alive retries at every takeover sweep \(a couple of seconds\); if it persists, check that engine's log\n`, out)
	require.Contains(t, out, "    gone: dead (last heartbeat 5m ago, lease 30s, pid 22 on h2) with 1 pending workflow(s), not taken over\n"+
		"      → a live engine of application version v (or one that adopts it: engine.Config.AdoptVersions) takes its sessions over within seconds: start one (`helix-dbos serve --agents FILE`, or your process with an engine), or restart the process with executor ID gone\n")
	require.Contains(t, out, "✗ queues served        helix-sessions: 1 queued of version v (oldest 2m); helix-sessions: 2 queued of version v0 (oldest 10m)\n"+
		"    helix-sessions: 2 workflow(s) of application version \"v0\" wait in queue helix-sessions (the oldest for 10m), and no live engine runs that version\n"+
		"      → start an engine of application version \"v0\", or give your engines of the new version engine.Config.AdoptVersions listing \"v0\" (docs/operations.md, rolling deploys)\n")
	require.Contains(t, out, "✗ stuck sessions       5 stuck of 6 active\n")
	require.Contains(t, out, "    orphan: its run run-orphan was recorded but its workflow wf-orphan never started (a process died in between)\n"+
		"      → the next engine that launches starts it: start a process that defines agent billing (`helix-dbos serve --agents FILE`)\n")
	require.Contains(t, out, "    ended: its workflow wf-ended ended ERROR, but the session is still active\n"+
		"      → `helix-dbos abort ended` fails it, then `helix-dbos retry ended --agents FILE` runs it again\n")
	require.Contains(t, out, "    dead: its workflow wf-dead belongs to executor gone, which is dead (last heartbeat 5m ago)\n"+
		"      → a live engine of application version v takes it over within seconds: start one (`helix-dbos serve --agents FILE`), or restart the process with executor ID gone; or `helix-dbos abort dead` fails it")
	require.Contains(t, out, "    overdue: its run run-overdue (suspended_client_tool) waits for tool call(s) past their deadline: call-1 (ask_user); the run should have timed them out\n")
	require.Contains(t, out, "    norun: active, but it has no run: nothing will run it\n")
	require.NotContains(t, out, "waiting:")

	rep, r := doctorJSON(t, o, "--grace", "0s")
	require.Equal(t, 1, r.code)
	var ids []string
	for _, s := range rep.Stuck {
		ids = append(ids, s.SessionID)
	}
	require.ElementsMatch(t, []string{"orphan", "ended", "dead", "overdue", "norun"}, ids)
	byID := map[string]executorInfo{}
	for _, e := range rep.Executors {
		byID[e.ExecutorID] = e
	}
	require.True(t, byID["alive"].Alive)
	require.Equal(t, 2, byID["alive"].PendingWorkflows)
	require.Equal(t, 2, byID["alive"].SessionsOwned, "overdue and waiting: doctor reads executors as `executors` does")
	require.False(t, byID["gone"].Alive)
	require.False(t, byID["stopped"].Alive)
	require.Equal(t, "dead", byID["gone"].State)
	require.Equal(t, "taken-over", byID["old"].State)
	require.Equal(t, "alive", byID["old"].TakenOverBy)
	require.Equal(t, 3, byID["old"].RecoveredWorkflows)
	require.Equal(t, "recover: connection refused", byID["failing"].RecoveryError)
	require.Zero(t, byID["stopped"].PendingWorkflows, "a stopped executor without workflows is no problem")

	// Within the grace period a run without a workflow is being started.
	rep, _ = doctorJSON(t, o)
	for _, s := range rep.Stuck {
		require.NotEqual(t, "orphan", s.SessionID)
	}
}

// migrationCount is the number of helix migrations.
func migrationCount(t *testing.T) int {
	t.Helper()
	files, err := fs.Glob(migrations.FS(), "*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	return len(files)
}

// lastMigration is the file name of the newest helix migration.
func lastMigration(t *testing.T) string {
	t.Helper()
	files, err := fs.Glob(migrations.FS(), "*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	return files[len(files)-1]
}
