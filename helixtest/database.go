package helixtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/helix-agents/helix-dbos/internal/pgprovision"
	"github.com/helix-agents/helix-dbos/internal/templatedb"
)

// Environment variables that choose the test binary's PostgreSQL server.
const (
	// EnvDatabaseURL, when set, is a superuser URL of the server every test
	// database is created on (no container is started), for example
	// postgres://postgres:postgres@127.0.0.1:5432/postgres?sslmode=disable.
	EnvDatabaseURL = pgprovision.EnvDatabaseURL
	// EnvImage overrides the image of the container started when
	// HELIX_DATABASE_URL is unset. Default: [DefaultImage].
	EnvImage = pgprovision.EnvImage
)

// DefaultImage is the Postgres image of the container started when neither
// [WithServerURL] nor HELIX_DATABASE_URL gives a server.
const DefaultImage = pgprovision.DefaultImage

// provisionTimeout bounds starting the container, an image pull included.
const provisionTimeout = 5 * time.Minute

// DatabaseOption configures [Database] and [Pool].
type DatabaseOption func(*databaseOpts)

type databaseOpts struct {
	serverURL string
}

// WithServerURL creates the test database on the server at url, a superuser
// URL such as postgres://postgres:postgres@127.0.0.1:5432/postgres, instead of
// the test binary's default server (HELIX_DATABASE_URL, else a container).
// The server is checked once per URL per test binary, and its template
// database is migrated once, like the default server's.
func WithServerURL(url string) DatabaseOption {
	return func(o *databaseOpts) { o.serverURL = url }
}

// Database returns the URL of a fresh PostgreSQL database for tb alone, with
// the helix migrations applied (schema helix; DBOS creates its own schema
// when an engine launches on it).
//
// The server is chosen once per test binary: [WithServerURL] when given, else
// HELIX_DATABASE_URL when set, else one Postgres container started with
// testcontainers-go (image HELIX_TEST_PG_IMAGE, default [DefaultImage]),
// shared by every test of the binary, with its data directory in memory (a
// tmpfs: the clones and drops do not wait on the disk, and nothing outlives
// the container). On that server a template database is
// migrated once per set of migrations, and each call clones it, which takes
// tens of milliseconds: fifty parallel tests cost one container and fifty
// clones.
//
// The database is dropped at tb's cleanup when tb passed, and kept when it
// failed: its URL is in the test log (the "testdbconf:" line), for
// inspection. Close every connection to it before the test ends (a cleanup
// registered after Database runs before the drop), or the drop fails the
// test.
//
// When no server can be had, Database fails tb with a message that says what
// to install or set; it never skips. See [Main] for the container's lifetime.
func Database(tb testing.TB, opts ...DatabaseOption) string {
	tb.Helper()
	var o databaseOpts
	for _, opt := range opts {
		opt(&o)
	}
	serverURL, err := serverURL(o)
	if err != nil {
		tb.Fatalf("%s", noServerMessage(err))
	}
	conf, err := templatedb.Config(serverURL)
	if err != nil {
		tb.Fatalf("helixtest: parse server URL: %v (pass a URL such as postgres://postgres:postgres@127.0.0.1:5432/postgres)", err)
	}
	return templatedb.Migrated(tb, conf)
}

// Pool returns a pgx pool on a fresh database from [Database], closed at tb's
// cleanup (before the database is dropped).
func Pool(tb testing.TB, opts ...DatabaseOption) *pgxpool.Pool {
	tb.Helper()
	url := Database(tb, opts...)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		tb.Fatalf("helixtest: open a pool on the test database: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// The test binary's default server, provisioned on first use.
var (
	defaultOnce   sync.Once
	defaultServer *pgprovision.Server
	defaultErr    error
)

// Servers given with WithServerURL, each checked once.
var (
	explicitMu      sync.Mutex
	explicitServers = map[string]*explicitServer{}
)

type explicitServer struct {
	once sync.Once
	err  error
}

// serverURL returns the superuser URL of the server a test database is
// created on, provisioning the default server on first use.
func serverURL(o databaseOpts) (string, error) {
	if o.serverURL != "" {
		explicitMu.Lock()
		s := explicitServers[o.serverURL]
		if s == nil {
			s = &explicitServer{}
			explicitServers[o.serverURL] = s
		}
		explicitMu.Unlock()
		s.once.Do(func() { s.err = pgprovision.Ping(context.Background(), o.serverURL) })
		if s.err != nil {
			return "", fmt.Errorf("WithServerURL(%s): the server does not answer: %w (check the URL and that the server runs)",
				redact(o.serverURL), s.err)
		}
		return o.serverURL, nil
	}
	srv, err := provisionDefault()
	if err != nil {
		return "", err
	}
	return srv.URL, nil
}

// provisionDefault finds or starts the test binary's default server once.
func provisionDefault() (*pgprovision.Server, error) {
	defaultOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), provisionTimeout)
		defer cancel()
		defaultServer, defaultErr = pgprovision.Provision(ctx, pgprovision.Options{
			NoLocal:  true, // never start or use a cluster on a user's machine
			InMemory: true, // its databases are throwaway clones
			Logf:     func(format string, args ...any) { fmt.Fprintf(os.Stderr, "helixtest: "+format+"\n", args...) },
		})
		if defaultErr == nil && defaultServer.ContainerID != "" {
			if err := startReaper(defaultServer.ContainerID); err != nil {
				fmt.Fprintf(os.Stderr, "helixtest: %v; the container is removed by Main only\n", err)
			}
		}
	})
	return defaultServer, defaultErr
}

// noServerMessage is the failure of a test that cannot get a server: what
// went wrong, then what to do about it.
func noServerMessage(err error) string {
	if !errors.Is(err, pgprovision.ErrNoServer) {
		// A URL was given but is wrong: the error says which and to fix it.
		return "helixtest: " + err.Error()
	}
	image := cmp.Or(os.Getenv(EnvImage), DefaultImage)
	return fmt.Sprintf(`helixtest: %v
Do one of:
  - install and start Docker (Docker Desktop, or a Docker engine reachable through DOCKER_HOST; `+"`docker info`"+` must answer):
    helixtest then starts one %s container for the whole test binary; if that image cannot be pulled,
    set %s to a Postgres image you have (see `+"`docker images`"+`);
  - or set %s to the URL of a PostgreSQL superuser, for example
    %s=postgres://postgres:postgres@127.0.0.1:5432/postgres?sslmode=disable`,
		err, image, EnvImage, EnvDatabaseURL, EnvDatabaseURL)
}

// Main runs a package's tests and then removes the Postgres container the
// test binary started, if any. Use it as the package's TestMain:
//
//	func TestMain(m *testing.M) { helixtest.Main(m) }
//
// Main is optional. Without it the container is still removed when the test
// binary exits, however it exits (a pass, a failure, a panic, a timeout, a
// kill): by testcontainers' reaper (Ryuk) when it is enabled, the default,
// and otherwise (TESTCONTAINERS_RYUK_DISABLED=true, common where Ryuk's
// image cannot be pulled) by a small watcher process helixtest starts with
// the container, which removes it as soon as the test binary is gone. Main
// only removes it sooner and reports a failure to remove it.
func Main(m *testing.M) {
	code := m.Run()
	if err := stopDefault(); err != nil {
		fmt.Fprintf(os.Stderr, "helixtest: remove the postgres container: %v\n", err)
	}
	os.Exit(code)
}

// stopDefault removes the default server's container, if one was started.
func stopDefault() error {
	if defaultServer == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := defaultServer.Close(ctx)
	stopReaper()
	return err
}

// redact hides the password of a URL for messages.
func redact(u string) string {
	cc, err := pgx.ParseConfig(u)
	if err != nil {
		return "(unparsable URL)"
	}
	return fmt.Sprintf("postgres://%s@%s:%d/%s", cc.User, cc.Host, cc.Port, cc.Database)
}
