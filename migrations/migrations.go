package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/pressly/goose/v3"
)

//go:embed sql/*.sql
var embedded embed.FS

// Schema is the Postgres schema that holds every helix table.
const Schema = "helix"

// VersionTable is goose's version table, kept inside [Schema].
const VersionTable = Schema + ".schema_migrations"

// PreReleaseVersionTable is the version table of the pre-release
// migrations (00001 to 00034, replaced by one baseline before the first
// release). A database that has it holds a schema this release does not
// read: [Up] and [Status] refuse it with [ErrPreReleaseSchema] instead of
// half-understanding it.
const PreReleaseVersionTable = Schema + ".goose_db_version"

// ErrPreReleaseSchema reports a database migrated by a pre-release
// helix-dbos (it has [PreReleaseVersionTable]).
var ErrPreReleaseSchema = errors.New("the helix schema was created by a pre-release helix-dbos " +
	"(it has " + PreReleaseVersionTable + "), whose storage layout this release does not read: " +
	"use a new database, or drop the old data (DROP SCHEMA helix CASCADE; and DBOS's schema dbos, " +
	"whose workflows belong to it) and run the migrations again")

// lockID is the advisory lock key serializing migration runs ("helixmig").
const lockID int64 = 0x68656c69786d6967

// FS returns the embedded migration files (the sql directory), for tools that
// need to hash or inspect them.
func FS() fs.FS {
	sub, err := fs.Sub(embedded, "sql")
	if err != nil {
		panic(err) // the embed pattern guarantees the directory exists
	}
	return sub
}

// MigrationStatus describes one migration file and whether it is applied.
type MigrationStatus struct {
	Version   int64
	Name      string
	Applied   bool
	AppliedAt time.Time
}

// Result describes one migration applied or rolled back by Up or Down.
type Result struct {
	Version  int64
	Name     string
	Duration time.Duration
}

// Up applies every pending migration. It creates the helix schema if needed,
// holds an advisory lock for its whole run (concurrent callers wait, then find
// nothing to do) and returns the migrations it applied, oldest first.
func Up(ctx context.Context, db *sql.DB) ([]Result, error) {
	var applied []Result
	err := withLock(ctx, db, func(p *goose.Provider) error {
		res, err := p.Up(ctx)
		applied = results(res)
		return err
	})
	if err != nil {
		return applied, fmt.Errorf("migrations: up: %w", err)
	}
	return applied, nil
}

// Down rolls back the most recently applied migration. It refuses to run when
// nothing is applied.
func Down(ctx context.Context, db *sql.DB) (Result, error) {
	var out Result
	err := withLock(ctx, db, func(p *goose.Provider) error {
		res, err := p.Down(ctx)
		if res != nil {
			out = results([]*goose.MigrationResult{res})[0]
		}
		return err
	})
	if err != nil {
		if errors.Is(err, goose.ErrNoNextVersion) {
			return out, fmt.Errorf("migrations: down: no migration is applied, nothing to roll back")
		}
		return out, fmt.Errorf("migrations: down: %w", err)
	}
	return out, nil
}

// Status reports every known migration and whether it is applied.
func Status(ctx context.Context, db *sql.DB) ([]MigrationStatus, error) {
	var out []MigrationStatus
	err := withLock(ctx, db, func(p *goose.Provider) error {
		st, err := p.Status(ctx)
		if err != nil {
			return err
		}
		for _, s := range st {
			out = append(out, MigrationStatus{
				Version:   s.Source.Version,
				Name:      s.Source.Path,
				Applied:   s.State == goose.StateApplied,
				AppliedAt: s.AppliedAt,
			})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("migrations: status: %w", err)
	}
	return out, nil
}

// Pending reports how many migrations are not applied yet.
func Pending(ctx context.Context, db *sql.DB) (int, error) {
	st, err := Status(ctx, db)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range st {
		if !s.Applied {
			n++
		}
	}
	return n, nil
}

// withLock runs fn with a goose provider while holding the migrations advisory
// lock, after making sure the helix schema exists (goose's version table
// lives in it). The lock also covers CREATE SCHEMA, which is not safe to run
// concurrently even with IF NOT EXISTS.
func withLock(ctx context.Context, db *sql.DB, fn func(*goose.Provider) error) error {
	if db == nil {
		return errors.New("db is nil: pass a *sql.DB, e.g. stdlib.OpenDBFromPool(pool)")
	}
	return Serialize(ctx, db, lockID, func(conn *sql.Conn) error {
		if _, err := conn.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+Schema); err != nil {
			return fmt.Errorf("create schema %s: %w", Schema, err)
		}
		if err := refusePreRelease(ctx, conn); err != nil {
			return err
		}
		p, err := goose.NewProvider(goose.DialectPostgres, db, FS(),
			goose.WithTableName(VersionTable),
			goose.WithDisableGlobalRegistry(true),
		)
		if err != nil {
			return fmt.Errorf("goose provider: %w", err)
		}
		return fn(p)
	})
}

// CheckSchema returns [ErrPreReleaseSchema] when db holds a helix schema
// created by a pre-release helix-dbos, nil otherwise (no helix schema, or
// one of this release's migrations). The engine calls it at Launch when it
// does not run the migrations itself.
func CheckSchema(ctx context.Context, db *sql.DB) error {
	if db == nil {
		return errors.New("migrations: check schema: db is nil")
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrations: check schema: connect: %w", err)
	}
	defer conn.Close()
	if err := refusePreRelease(ctx, conn); err != nil {
		return fmt.Errorf("migrations: check schema: %w", err)
	}
	return nil
}

func refusePreRelease(ctx context.Context, conn *sql.Conn) error {
	var preRelease bool
	if err := conn.QueryRowContext(ctx, "SELECT to_regclass($1) IS NOT NULL", PreReleaseVersionTable).Scan(&preRelease); err != nil {
		return fmt.Errorf("look for %s: %w", PreReleaseVersionTable, err)
	}
	if preRelease {
		return ErrPreReleaseSchema
	}
	return nil
}

// DBOSLockID is the advisory lock key under which the engine initializes
// DBOS ("helixdbs"): DBOS Transact runs its own system-schema migrations
// when its context is created, with no lock, and replicas starting together
// on an empty database would collide on CREATE SCHEMA.
const DBOSLockID int64 = 0x68656c6978646273

// lockPoll is how often Serialize retries a lock another process holds.
const lockPoll = 50 * time.Millisecond

// Serialize runs fn while holding the session-level advisory lock key on a
// dedicated connection of db (passed to fn), so that processes sharing the
// database run fn one at a time. It polls pg_try_advisory_lock rather than
// blocking in pg_advisory_lock: a session blocked in that call holds a
// snapshot, and CREATE INDEX CONCURRENTLY in the lock holder's migrations
// waits for every snapshot of the database, a wait Postgres does not see as
// a deadlock. Between polls the waiting session is idle and holds none.
func Serialize(ctx context.Context, db *sql.DB, key int64, fn func(conn *sql.Conn) error) (err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()
	for {
		var got bool
		if err := conn.QueryRowContext(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&got); err != nil {
			return fmt.Errorf("take advisory lock %#x: %w", key, err)
		}
		if got {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for advisory lock %#x (another process holds it): %w", key, ctx.Err())
		case <-time.After(lockPoll):
		}
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, uerr := conn.ExecContext(cctx, "SELECT pg_advisory_unlock($1)", key); uerr != nil && err == nil {
			err = fmt.Errorf("release advisory lock %#x: %w", key, uerr)
		}
	}()
	return fn(conn)
}

func results(in []*goose.MigrationResult) []Result {
	out := make([]Result, 0, len(in))
	for _, r := range in {
		if r == nil || r.Source == nil {
			continue
		}
		out = append(out, Result{Version: r.Source.Version, Name: r.Source.Path, Duration: r.Duration})
	}
	return out
}
