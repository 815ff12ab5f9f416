package main

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/migrations"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

func TestMain(m *testing.M) {
	// The demo re-executes its own binary as its worker and to approve a
	// call: under `go test` that binary is this test binary.
	if len(os.Args) > 1 && (os.Args[1] == demoWorkerName || os.Args[1] == "approve") {
		os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
	}
	if err := buildBinary(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pgtest.Main(m)
}

// runCLI executes the CLI in-process and returns its output.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(t.Context())
	return out.String(), err
}

// mustCLI executes the CLI and fails the test on an error.
func mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, err := runCLI(t, args...)
	require.NoError(t, err, out)
	return out
}

// newTestEngine returns a launched engine on url running agent.
func newTestEngine(t *testing.T, url string, agent *helix.Agent) *engine.Engine {
	t.Helper()
	e, err := engine.New(t.Context(), engine.Config{DatabaseURL: url, ExecutorID: "cli-test"})
	require.NoError(t, err)
	require.NoError(t, e.Register(agent))
	require.NoError(t, e.Launch(t.Context()))
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	return e
}

// waitResult waits for a run's outcome.
func waitResult(t *testing.T, h *engine.Handle) helix.AgentResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	res, err := h.Result(ctx)
	require.NoError(t, err)
	return res
}

func TestMigrateCommands(t *testing.T) {
	t.Parallel()
	url := pgtest.NewEmptyURL(t)
	out := mustCLI(t, "migrate", "status", "--database-url", url)
	require.Contains(t, out, "pending")
	out = mustCLI(t, "migrate", "up", "--database-url", url)
	require.Contains(t, out, "applied 00001_schema.sql")
	out = mustCLI(t, "migrate", "up", "--database-url", url)
	require.Contains(t, out, "up to date")
	out = mustCLI(t, "migrate", "status", "--json", "--database-url", url)
	require.Contains(t, out, `"Applied": true`)
	files, err := fs.Glob(migrations.FS(), "*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range slices.Backward(files) {
		out = mustCLI(t, "migrate", "down", "--database-url", url)
		require.Contains(t, out, "rolled back "+f, "down rolls back one migration, the newest first")
	}
	out = mustCLI(t, "migrate", "status", "--database-url", url)
	require.Contains(t, out, "pending")
}

// Every operator command says how to give it a database.
func TestCommandsNeedADatabase(t *testing.T) {
	t.Setenv("HELIX_DATABASE_URL", "")
	for _, args := range [][]string{
		{"migrate", "up"}, {"sessions", "list"}, {"sessions", "show", "s"}, {"sessions", "messages", "s"},
		{"sessions", "runs", "s"}, {"stream", "s"}, {"interrupt", "s"}, {"resume", "s"},
		{"approve", "s", "c"}, {"deny", "s", "c"}, {"submit", "s", "c", "--error", "failed"}, {"submit", "s", "c", "--result", "{}"},
		{"sessions", "checkpoints", "s"}, {"abort", "s"}, {"retry", "s"}, {"doctor"}, {"executors"}, {"serve", "--allow-unauthenticated"},
	} {
		_, err := runCLI(t, args...)
		require.ErrorContains(t, err, "--database-url", "%v", args)
	}
}

// On a database without the helix schema the error says to migrate.
func TestMissingSchemaHint(t *testing.T) {
	t.Parallel()
	url := pgtest.NewEmptyURL(t)
	_, err := runCLI(t, "sessions", "list", "--database-url", url)
	require.ErrorContains(t, err, "helix-dbos migrate up")
	_, err = runCLI(t, "approve", "s", "c", "--database-url", url)
	require.ErrorContains(t, err, "has no helix schema: run `helix-dbos migrate up` against it")
}

// The exit status reflects failure, with the error on stderr.
func TestExitStatus(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	code := execute([]string{"sessions", "show", "no-such-session", "--database-url", pgtest.NewURL(t)}, &stdout, &stderr)
	require.Equal(t, 1, code)
	require.Contains(t, stderr.String(), `helix-dbos: store: load state no-such-session: helix: session "no-such-session" not found`)
}

// testStore opens a store on url, for tests that check or arrange what is
// in the tables; it closes with the test.
func testStore(t *testing.T, url string) *postgres.Store {
	t.Helper()
	st, done, err := openStoreURL(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(done)
	return st
}
