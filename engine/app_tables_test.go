package engine_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// appPool opens a pool of the application's own on the engine's database
// (closed at cleanup), with the app's tables the transaction tests write
// beside the agent's: tickets (ExecuteTx) and app_audit
// (SubmitToolResultTx).
func appPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(t.Context(), `CREATE TABLE IF NOT EXISTS tickets (id text PRIMARY KEY, session_id text);
		CREATE TABLE IF NOT EXISTS app_audit (id serial PRIMARY KEY, note text NOT NULL)`)
	require.NoError(t, err)
	return pool
}
