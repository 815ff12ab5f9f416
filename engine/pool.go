package engine

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/helix-agents/helix-dbos/internal/connloss"
)

// ConfigurePool prepares the configuration of a pool you pass as
// Config.Pool or ClientConfig.Pool for database restarts and failovers, as
// the engine does for the pool it opens from a DatabaseURL:
//
//   - a statement whose connection the server closes fails with a
//     *net.OpError (a connection error DBOS retries once the database
//     answers) instead of a bare "unexpected EOF", which DBOS does not
//     retry: a session's bookkeeping write caught by a restart would fail
//     its run;
//   - before the pool hands a connection out, it checks without blocking
//     that the server has not closed it meanwhile (and pings it if so),
//     so the first statements after a restart do not fail on stale
//     connections.
//
// It keeps cfg's dial function and ShouldPing. Call it before
// pgxpool.NewWithConfig.
func ConfigurePool(cfg *pgxpool.Config) { connloss.Configure(cfg) }

// openPool opens the pool of a database URL, configured by ConfigurePool.
func openPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	ConfigurePool(cfg)
	return pgxpool.NewWithConfig(ctx, cfg)
}
