package pgtest_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestDatabasesAreIsolated(t *testing.T) {
	t.Parallel()
	a, b := pgtest.NewPool(t), pgtest.NewPool(t)
	_, err := a.Exec(t.Context(), `CREATE TABLE only_in_a (x int)`)
	require.NoError(t, err)
	var n int
	require.NoError(t, b.QueryRow(t.Context(),
		`SELECT count(*) FROM information_schema.tables WHERE table_name = 'only_in_a'`).Scan(&n))
	require.Zero(t, n)
	// Both have the helix schema.
	require.NoError(t, a.QueryRow(t.Context(), `SELECT count(*) FROM helix.sessions`).Scan(&n))
	require.NoError(t, b.QueryRow(t.Context(), `SELECT count(*) FROM helix.sessions`).Scan(&n))
}

func TestEmptyDatabaseHasNoSchema(t *testing.T) {
	t.Parallel()
	conn, err := pgx.Connect(t.Context(), pgtest.NewEmptyURL(t))
	require.NoError(t, err)
	defer conn.Close(t.Context())
	var exists bool
	require.NoError(t, conn.QueryRow(t.Context(),
		`SELECT EXISTS (SELECT 1 FROM information_schema.schemata WHERE schema_name = 'helix')`).Scan(&exists))
	require.False(t, exists)
}

func TestCloneIsFast(t *testing.T) {
	t.Parallel()
	pgtest.NewPool(t) // warm the template
	start := time.Now()
	for range 5 {
		pgtest.NewPool(t)
	}
	t.Logf("fresh migrated database: %s each", time.Since(start)/5)
}
