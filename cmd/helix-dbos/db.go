package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/helix-agents/helix-dbos/store/postgres"
)

// openStore connects the operator commands to the configured database. The
// commands that only read or write rows (sessions, stream, interrupt) use
// the store directly: they need no engine, no DBOS and no agent
// definitions. Call the returned function to disconnect.
func (g *globals) openStore(ctx context.Context) (*postgres.Store, func(), error) {
	url, err := g.requireDatabaseURL()
	if err != nil {
		return nil, nil, err
	}
	return openStoreURL(ctx, url)
}

// openStoreURL connects a store with a small pool of its own.
func openStoreURL(ctx context.Context, url string) (*postgres.Store, func(), error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, nil, fmt.Errorf("parse database URL: %w", err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("connect: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("connect: %w", err)
	}
	st, err := postgres.New(pool)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return st, func() { _ = st.Close(); pool.Close() }, nil
}

// explain adds the fix to errors an operator can act on.
func explain(err error) error {
	var pg *pgconn.PgError
	if errors.As(err, &pg) && (pg.Code == "42P01" || pg.Code == "3F000") { // undefined_table, invalid_schema_name
		return fmt.Errorf("%w (the helix schema is missing: run `helix-dbos migrate up` against this database)", err)
	}
	return err
}

// printJSON writes v indented, for --json.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
