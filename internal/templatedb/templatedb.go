// Package templatedb makes databases for tests with pgtestdb: a template
// database migrated once per set of helix migrations on a server, cloned
// per test in tens of milliseconds. It serves the users' test kit
// (helixtest.Database) and the project's own tests (internal/pgtest).
package templatedb

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io/fs"
	"testing"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver pgtestdb uses
	"github.com/peterldowns/pgtestdb"

	"github.com/helix-agents/helix-dbos/migrations"
)

// Config turns a server's superuser URL into a pgtestdb configuration.
//
// The test role is named after the server (its host and port): pgtestdb
// creates a role, and builds a template, once per program for each role
// name, so one test binary that uses two servers (the kit's container and
// HELIX_DATABASE_URL's server, say) needs a role name per server, or the
// second server is taken to have the first one's role and template.
func Config(serverURL string) (pgtestdb.Config, error) {
	cc, err := pgx.ParseConfig(serverURL)
	if err != nil {
		return pgtestdb.Config{}, err
	}
	server := sha256.Sum256(fmt.Appendf(nil, "%s:%d", cc.Host, cc.Port))
	role := pgtestdb.DefaultRole()
	role.Username += "_" + hex.EncodeToString(server[:4])
	return pgtestdb.Config{
		TestRole:   &role,
		DriverName: "pgx",
		Host:       cc.Host,
		Port:       fmt.Sprint(cc.Port),
		User:       cc.User,
		Password:   cc.Password,
		Database:   cc.Database,
		Options:    "sslmode=disable",
	}, nil
}

// Migrated returns the URL of a fresh database with the helix migrations
// applied, on the server conf describes, dropped at tb's cleanup when tb
// passed.
func Migrated(tb testing.TB, conf pgtestdb.Config) string {
	tb.Helper()
	return pgtestdb.Custom(tb, conf, Migrator{}).URL()
}

// Empty returns the URL of a fresh database without the helix schema, for
// tests of the migrations themselves.
func Empty(tb testing.TB, conf pgtestdb.Config) string {
	tb.Helper()
	return pgtestdb.Custom(tb, conf, pgtestdb.NoopMigrator{}).URL()
}

// Migrator builds template databases with the helix migrations, exactly as
// applications run them (migrations.Up).
type Migrator struct{}

// Hash identifies the migration set: a new template is built when any
// migration file changes, so a stale template is never cloned.
func (Migrator) Hash() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(migrations.FS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.FS(), path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:32], err
}

// Migrate applies the helix migrations to a new template database.
func (Migrator) Migrate(ctx context.Context, db *sql.DB, _ pgtestdb.Config) error {
	_, err := migrations.Up(ctx, db)
	return err
}
