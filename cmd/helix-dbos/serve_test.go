package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/internal/process"
)

// serveAddr waits for serve to listen and returns its address.
func serveAddr(t *testing.T, p *bgProcess) string {
	t.Helper()
	p.waitFor(t, "stop with Ctrl-C", time.Minute)
	m := regexp.MustCompile(`listening on http://(\S+) \(executor `).FindStringSubmatch(p.stdout.String())
	require.NotNil(t, m, p.stdout.String())
	return m[1]
}

// request sends a JSON request with an optional bearer secret; the caller
// closes the response body.
func request(t *testing.T, method, url, secret, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	return resp
}

// statusOf sends a request and returns the response's status code.
func statusOf(t *testing.T, method, url, secret, body string) int {
	t.Helper()
	resp := request(t, method, url, secret, body)
	defer resp.Body.Close()
	return resp.StatusCode
}

// serve runs the agents of an agent file over HTTP: a scripted agent
// started with POST /start streams to its end over /sse; SIGTERM stops the
// server cleanly and frees its executor ID.
func TestServe(t *testing.T) {
	t.Parallel()
	url := pgtest.NewEmptyURL(t) // serve migrates
	env := []string{"HELIX_DATABASE_URL=" + url}
	const secret = "test-secret-0123456789abcdef"
	p := startBin(t, binOpts{env: env}, "serve", "--agents", exampleAgents, "--addr", "127.0.0.1:0", "--auth-token", "tester:"+secret)
	addr := serveAddr(t, p)
	base := "http://" + addr
	out := p.stdout.String()
	require.Contains(t, out, "• agents from "+exampleAgents+": assistant, researcher, intake, publisher, editor\n")
	require.Contains(t, out, "• applied migration 00001_schema.sql\n")
	require.Regexp(t, `(?m)^assistant\s+scripted scripts/agents.yaml\s+ask_user, subagent__researcher$`, out)
	require.Contains(t, out, "authentication: bearer tokens for tester\n")
	require.Contains(t, out, "• sessions admitted through queue helix-sessions: 32 at once in this process\n", "serve is queued by default")
	require.NotContains(t, out, secret)

	// The inspector: the page at /, its data behind the same tokens.
	require.Contains(t, out, "inspector: http://"+addr+"/\n")
	page := request(t, http.MethodGet, base+"/", "", "")
	require.NoError(t, page.Body.Close())
	require.Equal(t, http.StatusOK, page.StatusCode)
	require.Equal(t, "/inspector/", page.Request.URL.Path, "/ leads to the inspector")
	require.Contains(t, page.Header.Get("Content-Security-Policy"), "script-src 'self'")
	require.Equal(t, http.StatusUnauthorized, statusOf(t, http.MethodGet, base+"/inspector/api/sessions", "", ""))
	require.Equal(t, http.StatusOK, statusOf(t, http.MethodGet, base+"/inspector/api/sessions", secret, ""))

	require.Equal(t, http.StatusUnauthorized, statusOf(t, http.MethodPost, base+"/start", "", `{"agentType":"assistant","message":"Hello"}`), "no token")
	require.Equal(t, http.StatusUnauthorized, statusOf(t, http.MethodPost, base+"/start", "wrong-secret", `{"agentType":"assistant","message":"Hello"}`),
		"an unknown token")

	start := request(t, http.MethodPost, base+"/start", secret, `{"agentType":"assistant","message":"Hello","sessionId":"web-1"}`)
	defer start.Body.Close()
	require.Equal(t, http.StatusAccepted, start.StatusCode)
	var run struct{ SessionID, RunID, StreamURL string }
	require.NoError(t, json.NewDecoder(start.Body).Decode(&run))
	require.Equal(t, "web-1", run.SessionID)

	resp := request(t, http.MethodGet, base+run.StreamURL, secret, "")
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", strings.Split(resp.Header.Get("Content-Type"), ";")[0])
	var types []string
	var end map[string]any
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() { // until the server ends the response
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev map[string]any
		require.NoError(t, json.Unmarshal([]byte(data), &ev))
		if ev["type"] == "end" {
			end = ev
			continue
		}
		if c, ok := ev["chunk"].(map[string]any); ok {
			types = append(types, c["type"].(string))
		}
	}
	require.NoError(t, sc.Err())
	require.NotNil(t, end, "the stream ends with an end event")
	require.Contains(t, end["finalOutput"], "Durable execution checkpoints every model call")
	require.Contains(t, types, "subagent_start")
	require.Contains(t, types, "subagent_end")
	require.Equal(t, "output", types[len(types)-1], "then stream_end, sent as the end event")
	require.Equal(t, "run_queued", types[0], "the session went through the queue")

	// While it serves, doctor sees its executor alive; another process
	// cannot take its executor ID.
	doctor := mustBin(t, binOpts{env: env}, "doctor")
	id := regexp.MustCompile(`\(executor (\S+)\)\n`).FindStringSubmatch(out)
	require.NotNil(t, id, out)
	require.Regexp(t, newExecutorID, id[1], "a new executor ID by default")
	require.Regexp(t, `(?m)^✓ executors alive\s+1 alive: `+regexp.QuoteMeta(id[1])+` \(pid \d+ on `, doctor)
	second := runBin(t, binOpts{env: env}, "serve", "--agents", exampleAgents, "--addr", "127.0.0.1:0", "--allow-unauthenticated", "--executor-id", id[1])
	require.Equal(t, 1, second.code, "%s", second)
	require.Contains(t, second.stderr, `executor ID "`+id[1]+`" is in use by process`)
	require.Contains(t, second.stderr, "WARNING: --allow-unauthenticated: every caller can start, read, answer and abort every session.")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, p.wait(t), "%s\n%s", p.stdout, p.stderr)
	require.True(t, strings.HasSuffix(p.stdout.String(), "• shutting down: ending SSE streams, finishing requests, stopping the engine\nstopped\n"), p.stdout.String())
	doctor = mustBin(t, binOpts{env: env}, "doctor")
	require.Regexp(t, `(?m)^! executors alive\s+none alive`, doctor, "a clean stop marks the executor stopped")
}

// --no-inspector serves the API without the inspector.
func TestServeNoInspector(t *testing.T) {
	t.Parallel()
	env := []string{"HELIX_DATABASE_URL=" + pgtest.NewURL(t)}
	p := startBin(t, binOpts{env: env}, "serve", "--agents", exampleAgents, "--addr", "127.0.0.1:0", "--allow-unauthenticated", "--no-inspector")
	base := "http://" + serveAddr(t, p)
	require.NotContains(t, p.stdout.String(), "inspector:")
	for _, path := range []string{"/", "/inspector/", "/inspector/api/sessions"} {
		require.Equal(t, http.StatusNotFound, statusOf(t, http.MethodGet, base+path, "", ""), path)
	}
	require.Equal(t, http.StatusOK, statusOf(t, http.MethodGet, base+"/healthz", "", ""))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, p.wait(t), "%s\n%s", p.stdout, p.stderr)
}

// Without a token serve refuses to start, unless told to serve everyone;
// a client tool started over HTTP is answered from the command line.
func TestServeAuthenticationChoices(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	env := []string{"HELIX_DATABASE_URL=" + url}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--agents", exampleAgents}, "helix-dbos: serve needs authentication: pass --auth-token NAME:SECRET"},
		{[]string{"--agents", exampleAgents, "--auth-token", "a:b", "--allow-unauthenticated"}, "give --auth-token or --allow-unauthenticated, not both"},
		{[]string{"--agents", exampleAgents, "--auth-token", "no-colon-secret"}, `auth-token #1: want NAME:SECRET (the principal's name, a colon, the bearer secret), got "***"`},
		{[]string{"--agents", exampleAgents, "--auth-token", "a:same-secret-0123456789", "--auth-token", "b:same-secret-0123456789"}, `principals "a" and "b" have the same secret`},
		{[]string{"--allow-unauthenticated"}, "serve needs agents: pass --agents FILE"},
		{[]string{"--allow-unauthenticated", "--agents", "nope.yaml"}, "nope.yaml: read the agent file: no such file or directory"},
	} {
		r := runBin(t, binOpts{env: env}, append([]string{"serve", "--addr", "127.0.0.1:0"}, tc.args...)...)
		require.Equal(t, 1, r.code, "%v: %s", tc.args, r)
		require.Contains(t, r.stderr, tc.want, "%v", tc.args)
	}

	// A process of this machine that died without cleaning up left a fresh
	// heartbeat: a restart takes its executor ID over at once.
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	host, _ := os.Hostname()
	st, done, err := openStoreURL(t.Context(), url)
	require.NoError(t, err)
	defer done()
	_, err = st.Pool().Exec(t.Context(), `INSERT INTO helix.executors (executor_id, application_version, hostname, pid, pid_namespace)
		VALUES ('web-a', 'v', $1, $2, $3)`, host, dead.ProcessState.Pid(), process.Namespace())
	require.NoError(t, err)

	// Settings from the environment, --allow-unauthenticated and the
	// queue's included.
	p := startBin(t, binOpts{env: append(env, "HELIX_AGENTS="+exampleAgents, "HELIX_ALLOW_UNAUTHENTICATED=true",
		"HELIX_ADDR=127.0.0.1:0", "HELIX_EXECUTOR_ID=web-a", "HELIX_QUEUE=web-queue", "HELIX_QUEUE_CONCURRENCY=4",
		"HELIX_QUEUE_PARTITION_WORKER_CONCURRENCY=2", "HELIX_QUEUE_RATE_LIMIT=100/1m")}, "serve")
	base := "http://" + serveAddr(t, p)
	require.Contains(t, p.stderr.String(), "WARNING: --allow-unauthenticated")
	require.Contains(t, p.stdout.String(), "• sessions admitted through queue web-queue: 4 at once in this process, 2 per principal in this process, at most 100 starts per 1m0s\n")
	require.Contains(t, p.stdout.String(), "(executor web-a)")
	require.Equal(t, http.StatusAccepted, statusOf(t, http.MethodPost, base+"/start", "", `{"agentType":"intake","message":"Hi","sessionId":"intake-web"}`))
	require.Eventually(t, func() bool { // the run waits for its client tool
		calls, err := st.ListPendingCalls(t.Context(), "intake-web")
		return err == nil && len(calls) == 1
	}, time.Minute, 20*time.Millisecond)
	mustBin(t, binOpts{env: env}, "submit", "intake-web", "call-0-0", "--result", `{"answer":"Lin"}`)
	s, err := waitInactive(t.Context(), st.LoadState, "intake-web", time.Minute)
	require.NoError(t, err)
	require.Equal(t, helix.SessionCompleted, s.Status)

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	require.Equal(t, 0, p.wait(t), "%s\n%s", p.stdout, p.stderr)
}

// Without authentication serve listens on this machine only, unless an
// address is given, which is then used with a warning when it is not a
// loopback one.
func TestServeUnauthenticatedAddress(t *testing.T) {
	t.Parallel()
	// The database does not answer: serve fails right after listening,
	// which is all this test needs.
	env := []string{"HELIX_DATABASE_URL=postgres://nobody@127.0.0.1:1/none?connect_timeout=2&sslmode=disable", "HELIX_AGENTS=" + exampleAgents}
	const local = "• without authentication and without --addr: listening on 127.0.0.1:8080, this machine only (--addr :8080 listens on every interface)\n"

	// Hold 127.0.0.1:8080 (unless another process does already): serve's
	// error then names the address it tried, without serving anything.
	if ln, err := net.Listen("tcp", defaultUnauthenticatedAddr); err == nil {
		defer ln.Close()
	} else {
		require.ErrorIs(t, err, syscall.EADDRINUSE, "hold %s", defaultUnauthenticatedAddr)
	}
	r := runBin(t, binOpts{env: env}, "serve", "--allow-unauthenticated")
	require.Equal(t, 1, r.code, "%s", r)
	require.Contains(t, r.stdout, local)
	require.Contains(t, r.stderr, "helix-dbos: listen on 127.0.0.1:8080: ")
	require.NotContains(t, r.stderr, "anyone who can reach this address")

	for _, tc := range []struct {
		o    binOpts
		args []string
		warn bool
	}{
		{binOpts{env: env}, []string{"--addr", ":0"}, true},
		{binOpts{env: append(env, "HELIX_ADDR=0.0.0.0:0")}, nil, true},
		{binOpts{env: env}, []string{"--addr", "127.0.0.1:0"}, false},
		{binOpts{env: env}, []string{"--addr", "localhost:0", "--queue", "off"}, false},
	} {
		r := runBin(t, tc.o, append([]string{"serve", "--allow-unauthenticated"}, tc.args...)...)
		require.Equal(t, 1, r.code, "%v: %s", tc.args, r)
		require.Contains(t, r.stderr, "helix-dbos: connect to host=127.0.0.1 port=1 user=nobody database=none: ", "%v: it listened", tc.args)
		require.NotContains(t, r.stdout, local, "%v", tc.args)
		if tc.warn {
			require.Regexp(t, `WARNING: --allow-unauthenticated with --addr \S*:0: anyone who can reach this address controls every session\.\n`, r.stderr, "%v", tc.args)
		} else {
			require.NotContains(t, r.stderr, "anyone who can reach this address", "%v", tc.args)
		}
		if slices.Contains(tc.args, "off") {
			require.Contains(t, r.stdout, "• no queue (--queue off): every session runs at once, in the process that receives it\n")
		}
	}
}

// serve's HTTP server bounds how long a request may take to arrive, but
// not how long a response may stream: a body sent too slowly is cut at the
// read timeout, an SSE stream outlives it.
func TestServeHTTPTimeouts(t *testing.T) {
	t.Parallel()
	srv := newHTTPServer(http.NotFoundHandler())
	require.Equal(t, serveReadHeaderTimeout, srv.ReadHeaderTimeout)
	require.Equal(t, serveReadTimeout, srv.ReadTimeout)
	require.Equal(t, serveIdleTimeout, srv.IdleTimeout)
	require.Zero(t, srv.WriteTimeout, "a write timeout would cut every SSE stream at that age")

	// The same server with a read timeout short enough for a test.
	const readTimeout = 300 * time.Millisecond
	bodyErr := make(chan error, 1)
	srv = newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			_, err := io.ReadAll(r.Body)
			bodyErr <- err
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 10 { // 10 × 100ms: over three read timeouts
			select {
			case <-r.Context().Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
		}
	}))
	srv.ReadTimeout = readTimeout
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		require.NoError(t, srv.Shutdown(context.WithoutCancel(t.Context())))
		require.ErrorIs(t, <-served, http.ErrServerClosed)
	}()
	base := "http://" + ln.Addr().String()

	resp := request(t, http.MethodGet, base+"/sse", "", "")
	events := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			events++
		}
	}
	require.NoError(t, resp.Body.Close())
	require.Equal(t, 10, events, "the stream outlived the read timeout")

	// A client that sends a part of its body, then stalls.
	conn, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "POST /chat HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"messages\":")
	require.NoError(t, err)
	select {
	case err := <-bodyErr:
		require.Error(t, err, "the body read is cut at the read timeout")
	case <-time.After(10 * readTimeout):
		t.Fatal("a stalled body was not cut at the read timeout")
	}
}

// A cluster's first deploy, as an operator does it: four serve replicas
// started at the same instant on an empty database all come up (DBOS's
// system-schema migrations and helix's are serialized), and each serves.
func TestServeReplicasStartTogether(t *testing.T) {
	t.Parallel()
	url := pgtest.NewEmptyURL(t)
	env := []string{"HELIX_DATABASE_URL=" + url}
	const replicas = 4
	procs := make([]*bgProcess, replicas)
	for i := range replicas {
		procs[i] = startBin(t, binOpts{env: env}, "serve", "--agents", exampleAgents, "--addr", "127.0.0.1:0",
			"--allow-unauthenticated", "--executor-id", fmt.Sprintf("replica-%d", i))
	}
	for i, p := range procs {
		addr := serveAddr(t, p)
		require.Equal(t, http.StatusOK, statusOf(t, http.MethodGet, "http://"+addr+"/healthz", "", ""), "replica %d", i)
	}
	doctor := mustBin(t, binOpts{env: env}, "doctor")
	require.Regexp(t, `(?m)^✓ executors alive\s+4 alive: `, doctor)
}
