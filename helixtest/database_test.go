package helixtest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/jackc/pgx/v5"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"

	"github.com/helix-agents/helix-dbos/helixtest"
	"github.com/helix-agents/helix-dbos/internal/pgprovision"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(envChild); role != "" {
		child(role)
	}
	helixtest.Main(m)
}

// child runs first in a copy of the test binary that runChild starts: it
// gets the copy's server, which must be a container, and prints the
// container's ID; a "crash" copy then kills itself, a "main" one goes on
// with its tests, whose parallel ones race to build the template database
// as the first tests of a user's binary do.
func child(role string) {
	source, id, _, err := helixtest.DefaultServer()
	want := string(pgprovision.SourceContainer)
	if role == "env" {
		want = string(pgprovision.SourceEnv)
	}
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, helixtest.NoServerMessage(err))
		os.Exit(2)
	case source != want:
		fmt.Fprintf(os.Stderr, "the copy's server is %s, not %s\n", source, want)
		os.Exit(2)
	}
	fmt.Printf("server-source=%s\n", source)
	if role == "env" {
		return
	}
	fmt.Printf("container-id=%s\n", id)
	if role == "crash" {
		p, err := os.FindProcess(os.Getpid())
		if err == nil {
			err = p.Kill()
		}
		fmt.Fprintf(os.Stderr, "the copy could not kill itself: %v\n", err)
		os.Exit(2)
	}
}

// envChild, in the environment of a copy of this test binary started by
// runChild, says which role the copy plays: "main" ends through Main,
// "crash" kills itself once it has its container.
const envChild = "HELIXTEST_TEST_CHILD"

func TestDatabasesAreIsolated(t *testing.T) {
	t.Parallel()
	a, b := helixtest.Pool(t), helixtest.Pool(t)
	_, err := a.Exec(t.Context(), `CREATE TABLE only_in_a (x int); INSERT INTO only_in_a VALUES (1)`)
	require.NoError(t, err)
	var n int
	require.NoError(t, b.QueryRow(t.Context(),
		`SELECT count(*) FROM information_schema.tables WHERE table_name = 'only_in_a'`).Scan(&n))
	require.Zero(t, n, "a table created in one test database is not in another")
}

func TestDatabaseIsMigrated(t *testing.T) {
	t.Parallel()
	conn, err := pgx.Connect(t.Context(), helixtest.Database(t))
	require.NoError(t, err)
	defer conn.Close(context.WithoutCancel(t.Context()))
	var sessions int
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT count(*) FROM helix.sessions`).Scan(&sessions))
	require.Zero(t, sessions, "a fresh database has the helix schema and no rows")
}

// TestFiftyParallelTestsShareOneServer: fifty parallel tests get fifty
// databases on one server (one container on the container path). The copy
// of the test binary TestContainerPath starts runs all fifty at once
// (-test.parallel=50); this binary, whose tests run beside every other
// package's in the suite, runs ten of them.
func TestFiftyParallelTestsShareOneServer(t *testing.T) {
	t.Parallel()
	n := 10
	if os.Getenv(envChild) != "" {
		n = 50
	}
	var (
		mu        sync.Mutex
		servers   = map[string]int{}
		databases = map[string]bool{}
	)
	start := time.Now()
	t.Run("group", func(t *testing.T) {
		for i := range n {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				conn, err := pgx.Connect(t.Context(), helixtest.Database(t))
				require.NoError(t, err)
				defer conn.Close(context.WithoutCancel(t.Context()))
				// A server is told apart by its address and the start time
				// of its postmaster (functions any role may call).
				var server, database string
				require.NoError(t, conn.QueryRow(t.Context(),
					`SELECT concat_ws(' ', inet_server_addr(), inet_server_port(), pg_postmaster_start_time()), current_database()`).
					Scan(&server, &database))
				mu.Lock()
				servers[server]++
				databases[database] = true
				mu.Unlock()
			})
		}
	})
	t.Logf("%d parallel databases in %s", n, time.Since(start).Round(time.Millisecond))
	require.Len(t, servers, 1, "one server for the whole test binary: %v", servers)
	require.Len(t, databases, n, "one database per test")
}

// TestNoServerMessageSaysWhatToInstallOrSet: the failure of a test without a server
// names both ways out, Docker or HELIX_DATABASE_URL, and keeps the reason.
func TestNoServerMessageSaysWhatToInstallOrSet(t *testing.T) {
	t.Parallel()
	reason := fmt.Errorf("%w; tried:\n  - testcontainers (postgres:16-alpine): no Docker engine reachable: connection refused", pgprovision.ErrNoServer)
	msg := helixtest.NoServerMessage(reason)
	for _, want := range []string{
		"no Docker engine reachable: connection refused",
		"install and start Docker",
		"`docker info` must answer",
		helixtest.EnvImage,
		helixtest.EnvDatabaseURL + "=postgres://postgres:postgres@127.0.0.1:5432/postgres",
	} {
		require.Contains(t, msg, want)
	}

	// A URL that was given but does not answer is a URL to fix: no advice
	// to install Docker.
	wrongURL := errors.New("HELIX_DATABASE_URL is set but the server does not answer: refused (fix the URL or unset it)")
	msg = helixtest.NoServerMessage(wrongURL)
	require.Contains(t, msg, "fix the URL or unset it")
	require.NotContains(t, msg, "Docker")
}

// fatalRecorder is a testing.TB whose Fatalf and skips end the goroutine
// and are recorded, so a test can observe how Database fails.
type fatalRecorder struct {
	testing.TB
	fatal   string
	skipped bool
}

func (r *fatalRecorder) Helper() {}
func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *fatalRecorder) Fatal(args ...any)                { r.Fatalf("%s", fmt.Sprint(args...)) }
func (r *fatalRecorder) Skipf(format string, args ...any) { r.SkipNow() }
func (r *fatalRecorder) Skip(args ...any)                 { r.SkipNow() }
func (r *fatalRecorder) SkipNow()                         { r.skipped = true; runtime.Goexit() }

// TestUnreachableServerFailsTheTest: a server that does not answer fails
// the test (never skips it) with a message naming the URL, password hidden.
func TestUnreachableServerFailsTheTest(t *testing.T) {
	t.Parallel()
	r := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		helixtest.Database(r, helixtest.WithServerURL("postgres://nobody:secret@127.0.0.1:1/postgres?connect_timeout=2"))
	}()
	<-done
	require.False(t, r.skipped, "Database never skips")
	require.Contains(t, r.fatal, "WithServerURL(postgres://nobody@127.0.0.1:1/postgres)")
	require.Contains(t, r.fatal, "check the URL")
	require.NotContains(t, r.fatal, "secret")
}

// TestWithServerURL: a database on an explicitly given server.
func TestWithServerURL(t *testing.T) {
	t.Parallel()
	_, _, url, err := helixtest.DefaultServer()
	require.NoError(t, err)
	conn, err := pgx.Connect(t.Context(), helixtest.Database(t, helixtest.WithServerURL(url)))
	require.NoError(t, err)
	defer conn.Close(context.WithoutCancel(t.Context()))
	var sessions int
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT count(*) FROM helix.sessions`).Scan(&sessions))
}

// TestContainerPath runs this package's database tests in a copy of the test
// binary without HELIX_DATABASE_URL, so they run on a container whatever the
// environment; the copy ends through Main, which removes the container.
func TestContainerPath(t *testing.T) {
	t.Parallel()
	id, out, err := runChild(t, "main",
		"^(TestDatabasesAreIsolated|TestDatabaseIsMigrated|TestFiftyParallelTestsShareOneServer|TestWithServerURL)$")
	require.NoError(t, err, "the database tests on a container:\n%s", out)
	require.False(t, containerExists(t, id), "Main removed the container %s", id)
}

// TestDatabaseURLPath runs this package's database tests in a copy of the
// test binary with HELIX_DATABASE_URL set (to this binary's server, a
// container or not), so the environment path runs whatever the
// environment: no container is started.
func TestDatabaseURLPath(t *testing.T) {
	t.Parallel()
	_, _, url, err := helixtest.DefaultServer()
	require.NoError(t, err)
	out, err := runCopy(t, "env", url, "^(TestDatabasesAreIsolated|TestDatabaseIsMigrated|TestWithServerURL)$")
	require.NoError(t, err, "the database tests on HELIX_DATABASE_URL:\n%s", out)
	require.Contains(t, out, "server-source=env")
	require.NotContains(t, out, "container-id=")
}

// TestContainerRemovedWithoutMain: a test binary killed while its container
// runs (no Main, no cleanup of any kind) leaves no container behind.
func TestContainerRemovedWithoutMain(t *testing.T) {
	t.Parallel()
	id, out, err := runChild(t, "crash", "^$")
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the copy kills itself:\n%s", out)
	require.Eventually(t, func() bool { return !containerExists(t, id) }, 30*time.Second, 100*time.Millisecond,
		"the container %s outlived its test binary", id)
}

var containerIDLine = regexp.MustCompile(`(?m)^container-id=([0-9a-f]+)$`)

// runChild runs the tests matching run in a copy of this test binary with
// HELIX_DATABASE_URL unset, and returns the ID of the container it used.
func runChild(t *testing.T, role, run string) (containerID, output string, err error) {
	t.Helper()
	if os.Getenv("HELIX_INTEGRATION_SKIP") == "1" {
		t.Skip("HELIX_INTEGRATION_SKIP=1: no Docker engine on purpose")
	}
	out, err := runCopy(t, role, "", run)
	m := containerIDLine.FindSubmatch([]byte(out))
	require.NotNil(t, m, "the copy printed no container ID:\n%s", out)
	return string(m[1]), out, err
}

// runCopy runs the tests matching run in a copy of this test binary in
// role, with HELIX_DATABASE_URL set to databaseURL ("": unset).
func runCopy(t *testing.T, role, databaseURL, run string) (output string, err error) {
	t.Helper()
	// -test.parallel=50: the fifty parallel tests really run at once (the
	// default is GOMAXPROCS at a time).
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run="+run, "-test.count=1", "-test.parallel=50")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, helixtest.EnvDatabaseURL+"=") && !strings.HasPrefix(kv, pgprovision.EnvNoContainers+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, envChild+"="+role)
	if databaseURL != "" {
		cmd.Env = append(cmd.Env, helixtest.EnvDatabaseURL+"="+databaseURL)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// containerExists asks the Docker engine whether the container still exists.
func containerExists(t *testing.T, id string) bool {
	t.Helper()
	cli, err := testcontainers.NewDockerClientWithOpts(t.Context())
	require.NoError(t, err)
	defer cli.Close()
	_, err = cli.ContainerInspect(t.Context(), id, client.ContainerInspectOptions{})
	if errdefs.IsNotFound(err) {
		return false
	}
	require.NoError(t, err)
	return true
}
