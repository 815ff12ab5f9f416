// Package pgtest gives tests real PostgreSQL databases: one server per test
// binary (found or started by package pgprovision), and a fresh database per
// test cloned from a template that was migrated once with the helix
// migrations (pgtestdb, tens of milliseconds per clone).
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		pool := pgtest.NewPool(t) // migrated, isolated, closed at cleanup
//	}
//
// A test database is dropped when its test passes and kept (its URL logged)
// when it fails, for inspection.
package pgtest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/peterldowns/pgtestdb"
	"go.uber.org/goleak"

	"github.com/helix-agents/helix-dbos/internal/pgprovision"
	"github.com/helix-agents/helix-dbos/internal/templatedb"
)

var (
	once      sync.Once
	server    *pgprovision.Server
	serverErr error
)

// Server returns the test binary's PostgreSQL server, provisioning it on
// first use. It fails the test when none can be provided.
func Server(tb testing.TB) *pgprovision.Server {
	tb.Helper()
	s, err := provision()
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	return s
}

// provision returns the test binary's server, provisioning it on first
// use.
func provision() (*pgprovision.Server, error) {
	once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		server, serverErr = pgprovision.Provision(ctx, pgprovision.Options{
			InMemory: true, // a throwaway server: see pgprovision.Options.InMemory
			Logf:     func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) },
		})
	})
	return server, serverErr
}

// Main runs a package's tests (use it as TestMain), then stops a container
// the package started and checks that no goroutine leaked.
func Main(m *testing.M) {
	code := m.Run()
	if err := dropExampleDatabases(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		code = max(code, 1)
	}
	if server != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := server.Close(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: stop postgres container: %v\n", err)
		}
		cancel()
	}
	if code == 0 {
		if err := goleak.Find(leakOptions()...); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: goroutine leak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// leakOptions lists goroutines outside our control that may outlive the
// tests: the Docker client's idle HTTP connections (testcontainers keeps a
// shared client for the process).
func leakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("github.com/testcontainers/testcontainers-go.(*Reaper).connect.func1"),
	}
}

// config turns the server URL into a pgtestdb configuration.
func config(tb testing.TB) pgtestdb.Config {
	tb.Helper()
	return configFor(tb, Server(tb).URL)
}

func configFor(tb testing.TB, serverURL string) pgtestdb.Config {
	tb.Helper()
	conf, err := templatedb.Config(serverURL)
	if err != nil {
		tb.Fatalf("pgtest: parse server URL: %v", err)
	}
	return conf
}

// NewURL returns the URL of a fresh database with the helix schema applied.
func NewURL(tb testing.TB) string {
	tb.Helper()
	return templatedb.Migrated(tb, config(tb))
}

// NewEmptyURL returns the URL of a fresh, empty database (no helix schema),
// for tests of the migrations themselves.
func NewEmptyURL(tb testing.TB) string {
	tb.Helper()
	return templatedb.Empty(tb, config(tb))
}

// NewPool returns a pool on a fresh migrated database, closed at cleanup.
func NewPool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	pool, err := pgxpool.New(context.Background(), NewURL(tb))
	if err != nil {
		tb.Fatalf("pgtest: open pool: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// NewURLOn is NewURL on a given server (a superuser URL), for harnesses that
// manage their own server, such as the integration tests' container.
func NewURLOn(tb testing.TB, serverURL string) string {
	tb.Helper()
	return templatedb.Migrated(tb, configFor(tb, serverURL))
}

// NewEmptyURLOn is NewEmptyURL on a given server.
func NewEmptyURLOn(tb testing.TB, serverURL string) string {
	tb.Helper()
	return templatedb.Empty(tb, configFor(tb, serverURL))
}
