package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// run executes the CLI in-process and returns its output.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(t.Context())
	return out.String(), err
}

func TestMigrateCommands(t *testing.T) {
	t.Parallel()
	url := pgtest.NewEmptyURL(t)
	out, err := run(t, "migrate", "status", "--database-url", url)
	require.NoError(t, err)
	require.Contains(t, out, "pending")
	out, err = run(t, "migrate", "up", "--database-url", url)
	require.NoError(t, err)
	require.Contains(t, out, "applied 00001_initial.sql")
	out, err = run(t, "migrate", "up", "--database-url", url)
	require.NoError(t, err)
	require.Contains(t, out, "up to date")
	out, err = run(t, "migrate", "status", "--json", "--database-url", url)
	require.NoError(t, err)
	require.Contains(t, out, `"Applied": true`)
	out, err = run(t, "migrate", "down", "--database-url", url)
	require.NoError(t, err)
	require.Contains(t, out, "rolled back 00001_initial.sql")
}

func TestMigrateNeedsADatabase(t *testing.T) {
	t.Setenv("HELIX_DATABASE_URL", "")
	_, err := run(t, "migrate", "up")
	require.ErrorContains(t, err, "--database-url")
}

func TestDemo(t *testing.T) {
	t.Parallel()
	out, err := run(t, "demo", "--delay", "0s", "--database-url", pgtest.NewURL(t))
	require.NoError(t, err)
	for _, want := range []string{"step 1 committed", "crash recovery", "It is sunny in Oslo today", "stream end", "session completed: 4 messages"} {
		require.Contains(t, out, want)
	}
	require.Equal(t, 1, strings.Count(out, "output {"), "the recovered step's output appears once")
}
