package main

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// takeoverLease is the executor lease of the servers of the takeover
// tests: short, as an operator who wants quick failovers sets it.
const takeoverLease = "2s"

// serveExecutor starts `serve` with an executor ID and takeoverLease.
func serveExecutor(t *testing.T, o binOpts, id string) *bgProcess {
	t.Helper()
	return startBin(t, o, "serve", "--executor-id", id, "--executor-lease", takeoverLease, "--allow-unauthenticated",
		"--addr", "127.0.0.1:0", "--agents", exampleAgents)
}

// startPublisher starts a publisher session over POST /start and waits
// until it waits for the approval of its publish call, whose ID it
// returns.
func startPublisher(t *testing.T, base string, st *postgres.Store, sessionID string) string {
	t.Helper()
	require.Equal(t, http.StatusAccepted, statusOf(t, http.MethodPost, base+"/start", "",
		`{"agentType":"publisher","message":"Write a post about durable agents","sessionId":"`+sessionID+`"}`))
	var calls []store.PendingClientToolCall
	require.Eventually(t, func() bool {
		var err error
		calls, err = st.ListPendingCalls(t.Context(), sessionID)
		return err == nil && len(calls) > 0
	}, time.Minute, 20*time.Millisecond, "the publisher waits for the approval of its publish call")
	require.Len(t, calls, 1)
	require.Equal(t, "publish", calls[0].ToolName)
	require.Equal(t, helix.SubmissionApprovalResponse, calls[0].Kind)
	return calls[0].ToolCallID
}

// newBinDatabase returns a fresh migrated database: options that run the
// binary on it, and a store on it (closed at cleanup).
func newBinDatabase(t *testing.T) (binOpts, *postgres.Store) {
	t.Helper()
	url := pgtest.NewURL(t)
	st, done, err := openStoreURL(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(done)
	return binOpts{env: []string{"HELIX_DATABASE_URL=" + url}}, st
}

// killServer sends SIGKILL to a server, which never gets to mark its executor
// stopped, and waits until it is gone.
func killServer(t *testing.T, p *bgProcess) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Kill())
	require.Equal(t, -1, p.wait(t), "killed by a signal")
}

// The operator scenario of cluster takeover, with a 2 s executor lease:
// a server dies while its session waits for an approval; the approval
// given from the command line completes the session in another server
// (web-a's sessions taken over by web-b), or in the same executor ID
// restarted at once (the dead process on this machine frees its ID).
func TestServeTakeoverAfterKill(t *testing.T) {
	t.Parallel()

	t.Run("another server takes over", func(t *testing.T) {
		t.Parallel()
		o, st := newBinDatabase(t)

		a := serveExecutor(t, o, "web-a")
		callID := startPublisher(t, "http://"+serveAddr(t, a), st, "post-a")
		killed := time.Now()
		killServer(t, a)

		b := serveExecutor(t, o, "web-b")
		serveAddr(t, b)
		require.Contains(t, b.stdout.String(), "(executor web-b)")
		var leaseMS int64
		require.NoError(t, st.Pool().QueryRow(t.Context(), `SELECT lease_ms FROM helix.executors WHERE executor_id = 'web-b'`).Scan(&leaseMS))
		require.Equal(t, int64(2000), leaseMS, "--executor-lease reaches the engine")
		out := mustBin(t, o, "approve", "post-a", callID, "--reason", "web-a is gone")
		require.Contains(t, out, "post-a")
		s, err := waitInactive(t.Context(), st.LoadState, "post-a", time.Minute)
		require.NoError(t, err, "web-b did not take over web-a's session\n--- web-b stdout\n%s--- web-b stderr\n%s", b.stdout, b.stderr)
		t.Logf("web-a killed → session post-a completed in web-b: %s", time.Since(killed).Round(time.Millisecond))
		require.Equal(t, helix.SessionCompleted, s.Status, s.Error)

		doctor := mustBin(t, o, "doctor")
		t.Logf("doctor: %s", regexp.MustCompile(`(?m)^. executors alive.*$`).FindString(doctor))
		require.Regexp(t, `(?m)^✓ executors alive\s+1 alive: web-b \(pid \d+ on [^;]*; web-a taken over by web-b at `+
			`\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \(\d+ workflow\(s\) recovered\)$`, doctor)
	})

	t.Run("a restart with the same ID resumes at once", func(t *testing.T) {
		t.Parallel()
		o, st := newBinDatabase(t)

		c := serveExecutor(t, o, "web-c")
		callID := startPublisher(t, "http://"+serveAddr(t, c), st, "post-c")
		killServer(t, c)

		restarted := time.Now()
		again := serveExecutor(t, o, "web-c")
		again.waitFor(t, "listening on ", time.Minute)
		listening := time.Since(restarted)
		serveAddr(t, again)
		require.Contains(t, again.stdout.String(), "(executor web-c)", "the dead process's executor ID is free at once")
		mustBin(t, o, "approve", "post-c", callID)
		s, err := waitInactive(t.Context(), st.LoadState, "post-c", time.Minute)
		require.NoError(t, err, "the restarted web-c did not resume its session\n--- stdout\n%s--- stderr\n%s", again.stdout, again.stderr)
		t.Logf("web-c restarted → listening on: %s; → session post-c completed: %s",
			listening.Round(time.Millisecond), time.Since(restarted).Round(time.Millisecond))
		require.Equal(t, helix.SessionCompleted, s.Status, s.Error)

		doctor := mustBin(t, o, "doctor")
		require.Regexp(t, `(?m)^✓ executors alive\s+1 alive: web-c \(pid `+regexp.QuoteMeta(strconv.Itoa(again.cmd.Process.Pid))+` on [^;]*$`, doctor,
			"web-c recovered its own sessions: nobody took it over")
	})
	t.Run("a clean stop hands its sessions over", func(t *testing.T) {
		t.Parallel()
		o, st := newBinDatabase(t)

		d := serveExecutor(t, o, "web-d")
		callID := startPublisher(t, "http://"+serveAddr(t, d), st, "post-d")
		require.NoError(t, d.cmd.Process.Signal(syscall.SIGTERM))
		require.Equal(t, 0, d.wait(t), "%s\n%s", d.stdout, d.stderr)
		var status string
		var stopped bool
		require.NoError(t, st.Pool().QueryRow(t.Context(), `SELECT w.status, x.stopped_at IS NOT NULL FROM dbos.workflow_status w, helix.executors x
			WHERE w.workflow_uuid = 'post-d-turn-1' AND x.executor_id = 'web-d'`).Scan(&status, &stopped))
		require.Equal(t, "PENDING", status, "the signal that stopped serve did not cancel the waiting session's workflow")
		require.True(t, stopped, "the executor is marked stopped")

		e := serveExecutor(t, o, "web-e")
		serveAddr(t, e)
		mustBin(t, o, "approve", "post-d", callID)
		s, err := waitInactive(t.Context(), st.LoadState, "post-d", time.Minute)
		require.NoError(t, err, "web-e did not take over the stopped web-d's session\n--- stdout\n%s--- stderr\n%s", e.stdout, e.stderr)
		require.Equal(t, helix.SessionCompleted, s.Status, s.Error)
	})
}

// A session waiting in the queue when its server is killed is run by
// another server. web-f starts one segment an hour (--queue-rate-limit
// 1/1h): the first session (one step, no sub-agent: one segment) runs, the
// second stays queued (GET /status says so) until web-f dies; web-g, with
// the default limits, runs it (its segment is in the queue, any server's)
// and takes web-f's executor over.
func TestServeQueuedSessionSurvivesAKill(t *testing.T) {
	t.Parallel()
	o, st := newBinDatabase(t)
	f := startBin(t, o, "serve", "--executor-id", "web-f", "--executor-lease", takeoverLease, "--allow-unauthenticated",
		"--addr", "127.0.0.1:0", "--agents", exampleAgents, "--queue-rate-limit", "1/1h")
	base := "http://" + serveAddr(t, f)
	start := func(id string) {
		t.Helper()
		require.Equal(t, http.StatusAccepted, statusOf(t, http.MethodPost, base+"/start", "",
			`{"agentType":"researcher","message":"Durable agents","sessionId":"`+id+`"}`))
	}
	start("first")
	s, err := waitInactive(t.Context(), st.LoadState, "first", time.Minute)
	require.NoError(t, err)
	require.Equal(t, helix.SessionCompleted, s.Status, s.Error)
	start("second")
	require.Eventually(t, func() bool {
		resp := request(t, http.MethodGet, base+"/status?sessionId=second", "", "")
		defer resp.Body.Close()
		var body struct{ Status string }
		return json.NewDecoder(resp.Body).Decode(&body) == nil && body.Status == "queued"
	}, time.Minute, 20*time.Millisecond, "the second session waits in the queue")
	killServer(t, f)

	g := serveExecutor(t, o, "web-g")
	serveAddr(t, g)
	s, err = waitInactive(t.Context(), st.LoadState, "second", time.Minute)
	require.NoError(t, err, "web-g did not run the queued session\n--- web-g stdout\n%s--- web-g stderr\n%s", g.stdout, g.stderr)
	require.Equal(t, helix.SessionCompleted, s.Status, s.Error)
	// The segment belongs to no process: web-g's queue may run it before
	// web-f's lease expires. The driver, PENDING on web-f, is web-g's once
	// it took web-f over, within a sweep of the expiry.
	require.Eventually(t, func() bool {
		var by string
		require.NoError(t, st.Pool().QueryRow(t.Context(), `SELECT coalesce(taken_over_by, '') FROM helix.executors WHERE executor_id = 'web-f'`).Scan(&by))
		return by == "web-g"
	}, time.Minute, 50*time.Millisecond, "the queued run's driver was web-f's: web-g takes it over")
}
