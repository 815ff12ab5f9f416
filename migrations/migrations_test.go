package migrations_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func open(t *testing.T, url string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// column returns query q's first column, as text, row by row (nil for no
// row).
func column(t *testing.T, db *sql.DB, q string, args ...any) []string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), q, args...)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

func TestConcurrentUpAppliesOnce(t *testing.T) {
	t.Parallel()
	url := pgtest.NewEmptyURL(t)
	const procs = 8
	results := make([][]migrations.Result, procs)
	errs := make([]error, procs)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range procs {
		db := open(t, url) // its own pool, like another process
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = migrations.Up(context.Background(), db)
		}()
	}
	close(start)
	wg.Wait()
	applied := 0
	for i := range procs {
		require.NoError(t, errs[i])
		applied += len(results[i])
	}
	st, err := migrations.Status(t.Context(), open(t, url))
	require.NoError(t, err)
	require.Equal(t, len(st), applied, "every migration applied exactly once across all callers")

	db := open(t, url)
	var table string
	require.NoError(t, db.QueryRowContext(t.Context(),
		`SELECT table_schema || '.' || table_name FROM information_schema.tables WHERE table_name = 'schema_migrations'`).Scan(&table))
	require.Equal(t, migrations.VersionTable, table, "goose's version table lives in schema helix")
}

func TestUpIsIdempotentAndDownReverts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := open(t, pgtest.NewEmptyURL(t))
	first, err := migrations.Up(ctx, db)
	require.NoError(t, err)
	require.NotEmpty(t, first)
	again, err := migrations.Up(ctx, db)
	require.NoError(t, err)
	require.Empty(t, again, "running Up twice is a no-op")
	pending, err := migrations.Pending(ctx, db)
	require.NoError(t, err)
	require.Zero(t, pending)

	st, err := migrations.Status(ctx, db)
	require.NoError(t, err)
	for _, s := range st {
		require.True(t, s.Applied, s.Name)
		require.False(t, s.AppliedAt.IsZero())
	}

	for range first {
		_, err := migrations.Down(ctx, db)
		require.NoError(t, err)
	}
	// Down drops everything Up created: the schema keeps goose's version
	// table alone.
	var tables, functions, views, sequences int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT
			(SELECT count(*) FROM pg_tables WHERE schemaname = 'helix' AND tablename <> 'schema_migrations'),
			(SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'helix'),
			(SELECT count(*) FROM pg_views WHERE schemaname = 'helix'),
			(SELECT count(*) FROM pg_sequences WHERE schemaname = 'helix' AND sequencename NOT LIKE 'schema_migrations%')`).
		Scan(&tables, &functions, &views, &sequences))
	require.Zero(t, tables, "down removes every helix table")
	require.Zero(t, functions, "and every function")
	require.Zero(t, views, "and every view")
	require.Zero(t, sequences, "and every sequence")
	_, err = migrations.Down(ctx, db)
	require.ErrorContains(t, err, "nothing to roll back")
	pending, err = migrations.Pending(ctx, db)
	require.NoError(t, err)
	require.Equal(t, len(first), pending)
	_, err = migrations.Up(ctx, db)
	require.NoError(t, err, "and up again")
}

func TestNilDB(t *testing.T) {
	t.Parallel()
	_, err := migrations.Up(t.Context(), nil)
	require.ErrorContains(t, err, "db is nil")
}
