package migrations_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/migrations"
)

// A database migrated by the pre-release files (it has their version
// table, helix.goose_db_version, and their tables) is refused by Up,
// Status and CheckSchema with ErrPreReleaseSchema, which says what to do,
// and nothing is created or changed; a database without a helix schema, or
// with this release's, passes CheckSchema.
func TestPreReleaseSchemaIsRefused(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := open(t, pgtest.NewEmptyURL(t))
	require.NoError(t, migrations.CheckSchema(ctx, db), "no helix schema yet")
	_, err := db.ExecContext(ctx, `CREATE SCHEMA helix;
		CREATE TABLE helix.goose_db_version (id serial PRIMARY KEY, version_id bigint NOT NULL, is_applied boolean NOT NULL,
			tstamp timestamp DEFAULT now());
		INSERT INTO helix.goose_db_version (version_id, is_applied) SELECT v, true FROM generate_series(0, 34) v;
		CREATE TABLE helix.messages_k (session_key bigint, seq integer, message jsonb)`)
	require.NoError(t, err)
	relations := func() []string {
		return column(t, db, `SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = 'helix' ORDER BY 1`)
	}
	before := relations()

	_, err = migrations.Up(ctx, db)
	require.ErrorIs(t, err, migrations.ErrPreReleaseSchema)
	require.ErrorContains(t, err, "use a new database, or drop the old data")
	_, err = migrations.Status(ctx, db)
	require.True(t, errors.Is(err, migrations.ErrPreReleaseSchema), "status: %v", err)
	require.ErrorIs(t, migrations.CheckSchema(ctx, db), migrations.ErrPreReleaseSchema)
	require.Equal(t, before, relations(), "nothing created or changed")

	fresh := open(t, pgtest.NewEmptyURL(t))
	_, err = migrations.Up(ctx, fresh)
	require.NoError(t, err)
	require.NoError(t, migrations.CheckSchema(ctx, fresh), "this release's schema")
}
