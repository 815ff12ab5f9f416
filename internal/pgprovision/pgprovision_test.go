package pgprovision_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/internal/pgprovision"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// requireSuperuser connects to url and checks it is a superuser session on
// the maintenance database, which is what Server.URL promises.
func requireSuperuser(t *testing.T, url string) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	defer conn.Close(context.WithoutCancel(t.Context()))
	var super bool
	var db string
	require.NoError(t, conn.QueryRow(t.Context(),
		`SELECT rolsuper, current_database() FROM pg_roles WHERE rolname = current_user`).Scan(&super, &db))
	require.True(t, super, "Server.URL must connect as a superuser")
	require.Equal(t, "postgres", db)
}

func skipWithoutProvisioningOrder(t *testing.T) {
	t.Helper()
	if os.Getenv(pgprovision.EnvDatabaseURL) != "" {
		t.Skipf("%s is set, so Provision never tries containers or the local cluster", pgprovision.EnvDatabaseURL)
	}
}

// TestContainerThenClose runs the testcontainers step: a superuser URL, and
// Close removes the container (its port stops answering).
func TestContainerThenClose(t *testing.T) {
	t.Parallel()
	skipWithoutProvisioningOrder(t)
	srv, err := pgprovision.Provision(t.Context(), pgprovision.Options{Logf: t.Logf})
	require.NoError(t, err)
	if srv.Source != pgprovision.SourceContainer {
		_ = srv.Close(t.Context())
		t.Skipf("no container (run scripts/test.sh for a Docker engine and image): %v", srv.Skipped)
	}
	requireSuperuser(t, srv.URL)

	require.NoError(t, srv.Close(t.Context()))
	require.NoError(t, srv.Close(t.Context()), "Close twice is harmless")
	_, err = pgx.Connect(t.Context(), srv.URL)
	require.Error(t, err, "the container is gone after Close")
}

// TestFallsBackToLocalCluster asks for an image that cannot exist: the
// container step fails, Provision falls through to the machine's cluster
// (starting it and creating the helix role when needed) and says why.
func TestFallsBackToLocalCluster(t *testing.T) {
	t.Parallel()
	skipWithoutProvisioningOrder(t)
	if !answers("127.0.0.1:5432") {
		if _, err := exec.LookPath("pg_ctlcluster"); err != nil || os.Geteuid() != 0 {
			t.Skip("no local PostgreSQL on 127.0.0.1:5432 and no way to start one (needs root and pg_ctlcluster)")
		}
	}
	const image = "helix-dbos/no-such-image:never"
	srv, err := pgprovision.Provision(t.Context(), pgprovision.Options{Logf: t.Logf, Image: image})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close(context.WithoutCancel(t.Context())) })
	require.Equal(t, pgprovision.SourceLocal, srv.Source)
	require.Len(t, srv.Skipped, 1)
	require.True(t, strings.Contains(srv.Skipped[0], image) || strings.Contains(srv.Skipped[0], "no Docker engine"),
		"the reason names the image or the missing engine: %s", srv.Skipped[0])
	requireSuperuser(t, srv.URL)
	require.NoError(t, srv.Close(t.Context()), "Close never stops a system cluster")
	requireSuperuser(t, srv.URL)
}

// TestNoLocalNeverFallsBack: with NoLocal a failed container step is an
// ErrNoServer error naming what was tried, never the machine's cluster.
func TestNoLocalNeverFallsBack(t *testing.T) {
	t.Parallel()
	skipWithoutProvisioningOrder(t)
	const image = "helix-dbos/no-such-image:never"
	srv, err := pgprovision.Provision(t.Context(), pgprovision.Options{Logf: t.Logf, Image: image, NoLocal: true})
	if srv != nil {
		_ = srv.Close(context.WithoutCancel(t.Context()))
	}
	require.ErrorIs(t, err, pgprovision.ErrNoServer)
	require.Nil(t, srv)
	require.True(t, strings.Contains(err.Error(), image) || strings.Contains(err.Error(), "no Docker engine"),
		"the error names the image or the missing engine: %v", err)
	require.NotContains(t, err.Error(), "local cluster")
}

// TestDatabaseURLWins: HELIX_DATABASE_URL comes first and is checked.
func TestDatabaseURLWins(t *testing.T) {
	url := pgtest.NewURL(t) // any reachable database will do
	t.Setenv(pgprovision.EnvDatabaseURL, url)
	srv, err := pgprovision.Provision(t.Context(), pgprovision.Options{})
	require.NoError(t, err)
	require.Equal(t, pgprovision.SourceEnv, srv.Source)
	require.Equal(t, url, srv.URL)
	require.NotContains(t, srv.Detail, "pgtdbpass", "logged details hide the password")

	// A URL that does not answer is an error naming the variable, not a
	// silent fallback to another server.
	t.Setenv(pgprovision.EnvDatabaseURL, "postgres://nobody:secret@127.0.0.1:1/postgres?connect_timeout=2")
	_, err = pgprovision.Provision(t.Context(), pgprovision.Options{})
	require.ErrorContains(t, err, pgprovision.EnvDatabaseURL)
}

func answers(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}
