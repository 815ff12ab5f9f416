// Package migrations owns the helix database schema: goose SQL files
// embedded in the binary and a Go API to apply them.
//
// Everything lives in the Postgres schema "helix" (never in DBOS's "dbos"
// schema), including goose's own version table, helix.schema_migrations.
//
//	db := stdlib.OpenDBFromPool(pool) // or sql.Open("pgx", url)
//	if err := migrations.Up(ctx, db); err != nil { ... }
//
// [Up] is safe to run from several processes at once: it takes a
// Postgres advisory lock for its whole duration, so concurrent callers run
// one after the other and the later ones find nothing to do. Running it twice
// is a no-op. An applied migration file is never edited; changes come as new
// files.
//
// Import rule: this package imports goose, pgx's database/sql driver and the
// standard library only.
package migrations
