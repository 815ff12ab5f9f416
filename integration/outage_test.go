package integration_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"

	"github.com/helix-agents/helix-dbos/migrations"
)

// TestMigrationsWhenServerFreezes pauses the Postgres container (frozen
// processes, TCP still accepted: the outage that hangs clients without
// deadlines) with a *sql.DB holding pooled connections and a migration
// pending. Up with a short deadline returns an error at that deadline instead
// of hanging; once the container resumes, Up on the same *sql.DB applies the
// pending migration, even though a backend of the abandoned attempt may still
// hold the migrations lock for a moment.
func TestMigrationsWhenServerFreezes(t *testing.T) {
	t.Parallel()
	serverURL(t) // fail clearly without Docker
	c, url, err := startPostgres(t.Context())
	require.NoError(t, err)
	testcontainers.CleanupContainer(t, c)

	db := openDB(t, url)
	_, err = migrations.Up(t.Context(), db)
	require.NoError(t, err)
	_, err = migrations.Down(t.Context(), db)
	require.NoError(t, err)
	pending, err := migrations.Pending(t.Context(), db)
	require.NoError(t, err)
	require.Equal(t, 1, pending)

	docker, err := testcontainers.NewDockerClientWithOpts(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = docker.Close() })
	_, err = docker.ContainerPause(t.Context(), c.GetContainerID(), client.ContainerPauseOptions{})
	require.NoError(t, err)
	unpause := func() error {
		_, err := docker.ContainerUnpause(context.WithoutCancel(t.Context()), c.GetContainerID(), client.ContainerUnpauseOptions{})
		return err
	}
	paused := true
	t.Cleanup(func() { // before CleanupContainer: a paused container would not stop
		if paused {
			_ = unpause()
		}
	})

	const deadline = 2 * time.Second
	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	began := time.Now()
	_, err = migrations.Up(ctx, db)
	took := time.Since(began)
	require.Error(t, err, "a frozen server must not look like success")
	require.True(t, errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil,
		"the error comes from the caller's deadline: %v", err)
	// Up's own cleanup (releasing the lock) is bounded too; a hang would
	// never get here, and the bound is loose to stay robust on a busy machine.
	require.Less(t, took, deadline+10*time.Second, "Up returned %s after its deadline", took-deadline)
	t.Logf("Up on a frozen server returned after %s: %v", took.Round(time.Millisecond), err)

	require.NoError(t, unpause())
	paused = false
	applied, err := migrations.Up(t.Context(), db)
	require.NoError(t, err)
	require.Len(t, applied, 1, "the pending migration is applied once the server is back")
	pending, err = migrations.Pending(t.Context(), db)
	require.NoError(t, err)
	require.Zero(t, pending)
}
