package integration_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/migrations"
)

func openDB(t *testing.T, url string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// waitAccepting waits until a restarted server accepts connections: the
// container's log-based wait strategy already matched before the restart, so
// Start returns while Postgres may still answer 57P03 (starting up).
func waitAccepting(t *testing.T, db *sql.DB) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := db.PingContext(t.Context())
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("restarted server not accepting connections after 30s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestMigrationsOnContainer(t *testing.T) {
	t.Parallel()
	url := pgtest.NewEmptyURLOn(t, serverURL(t))
	const procs = 8
	var wg sync.WaitGroup
	results := make([][]migrations.Result, procs)
	errs := make([]error, procs)
	start := make(chan struct{})
	for i := range procs {
		db := openDB(t, url)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = migrations.Up(context.Background(), db)
		}()
	}
	close(start)
	wg.Wait()
	total := 0
	for i := range procs {
		require.NoError(t, errs[i])
		total += len(results[i])
	}
	db := openDB(t, url)
	st, err := migrations.Status(t.Context(), db)
	require.NoError(t, err)
	require.Equal(t, len(st), total, "applied exactly once")
	var table string
	require.NoError(t, db.QueryRowContext(t.Context(),
		`SELECT table_schema || '.' || table_name FROM information_schema.tables WHERE table_name = 'schema_migrations'`).Scan(&table))
	require.Equal(t, migrations.VersionTable, table)

	again, err := migrations.Up(t.Context(), db)
	require.NoError(t, err)
	require.Empty(t, again)
	_, err = migrations.Down(t.Context(), db)
	require.NoError(t, err)
	redo, err := migrations.Up(t.Context(), db)
	require.NoError(t, err)
	require.Len(t, redo, 1)
}

// TestMigrationsDuringOutage stops Postgres under a client: Up fails fast
// with an error instead of hanging, and succeeds once the server is back.
func TestMigrationsDuringOutage(t *testing.T) {
	t.Parallel()
	serverURL(t) // fail clearly without Docker
	c, url, err := startPostgres(t.Context())
	require.NoError(t, err)
	testcontainers.CleanupContainer(t, c)
	db := openDB(t, url)
	require.NoError(t, db.PingContext(t.Context()))

	stop := 5 * time.Second
	require.NoError(t, c.Stop(t.Context(), &stop))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	began := time.Now()
	_, err = migrations.Up(ctx, db)
	require.Error(t, err, "no server: an error, not a hang")
	require.Less(t, time.Since(began), 10*time.Second)

	require.NoError(t, c.Start(t.Context()))
	// The mapped port changes on restart: reconnect through the new URL.
	url, err = c.ConnectionString(t.Context(), "sslmode=disable")
	require.NoError(t, err)
	db = openDB(t, url)
	waitAccepting(t, db)
	res, err := migrations.Up(t.Context(), db)
	require.NoError(t, err)
	require.NotEmpty(t, res)
}
