// Package pgprovision finds or starts a PostgreSQL server for tests and for
// the development commands (helix-dbos demo), in the order of the design's
// testing section:
//
//  1. HELIX_DATABASE_URL, when set;
//  2. a testcontainers Postgres, when a Docker engine is reachable (image
//     HELIX_TEST_PG_IMAGE, default postgres:16-alpine);
//  3. the local Debian cluster: started with pg_ctlcluster when we are root
//     and it is stopped, with a role helix/helix created for TCP logins;
//  4. otherwise an error saying what was tried and how to provide Postgres.
//
// Each step that fails says why, and the next one is tried. Options.NoLocal
// stops after step 2 (for the public test kit, which must not start or use a
// cluster on a user's machine), and the error then wraps ErrNoServer.
package pgprovision

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
)

// Environment variables read by Provision.
const (
	EnvDatabaseURL = "HELIX_DATABASE_URL"
	EnvImage       = "HELIX_TEST_PG_IMAGE"
	// EnvNoContainers=1 skips the container step (use the local cluster).
	EnvNoContainers = "HELIX_PG_NO_CONTAINERS"
)

// DefaultImage is the container image used when HELIX_TEST_PG_IMAGE is unset.
const DefaultImage = "postgres:16-alpine"

// Local cluster defaults.
const (
	localAddr     = "127.0.0.1:5432"
	localRole     = "helix"
	localPassword = "helix"
)

// Options tune Provision. The zero value is fine.
type Options struct {
	// Logf receives progress lines; nil is silent.
	Logf func(format string, args ...any)
	// Image overrides HELIX_TEST_PG_IMAGE.
	Image string
	// NoContainers skips the testcontainers step.
	NoContainers bool
	// NoLocal skips the local cluster step: when neither HELIX_DATABASE_URL
	// nor a container gives a server, Provision returns an error wrapping
	// ErrNoServer instead of using (or starting) the machine's PostgreSQL.
	NoLocal bool
	// InMemory keeps a container's data directory in memory (a tmpfs), for
	// throwaway test servers: on a slow disk, creating and dropping the
	// per-test databases is then several times faster (store/postgres's
	// tests take half the time in CI). The data is lost when the container
	// stops, so servers that must survive a restart, or whose speed is being
	// measured (helix-dbos bench, loadtest), leave it unset. It has no
	// effect on HELIX_DATABASE_URL or the local cluster.
	InMemory bool
}

// ErrNoServer is wrapped by Provision's error when no source gave a server.
// It is not wrapped when HELIX_DATABASE_URL is set but does not answer: that
// is a wrong URL to fix, not a missing server.
var ErrNoServer = errors.New("no PostgreSQL server available")

// Source says where a server came from.
type Source string

// Sources.
const (
	SourceEnv       Source = "env"
	SourceContainer Source = "container"
	SourceLocal     Source = "local"
)

// Server is a reachable PostgreSQL server.
type Server struct {
	// URL connects as a superuser to the server's maintenance database
	// ("postgres"): callers create their own databases from it.
	URL    string
	Source Source
	// Detail describes the server (container image, cluster) for logs.
	Detail string
	// ContainerID is the Docker ID of the container Provision started
	// (SourceContainer only), for callers that must remove it even if
	// Close is never called.
	ContainerID string
	// Skipped says why each earlier source was not used (for example "no
	// Docker engine reachable" or an image that could not be pulled), so a
	// caller can explain a fallback to the local cluster.
	Skipped []string

	terminate func(context.Context) error
}

// Close stops a container Provision started; it never stops a system
// cluster or a server given by URL.
func (s *Server) Close(ctx context.Context) error {
	if s == nil || s.terminate == nil {
		return nil
	}
	t := s.terminate
	s.terminate = nil
	return t(ctx)
}

// Provision returns a reachable server, trying each source in order.
func Provision(ctx context.Context, opts Options) (*Server, error) {
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if u := os.Getenv(EnvDatabaseURL); u != "" {
		if err := Ping(ctx, u); err != nil {
			return nil, fmt.Errorf("%s is set but the server does not answer: %w (fix the URL or unset it)", EnvDatabaseURL, err)
		}
		logf("postgres: using %s", EnvDatabaseURL)
		return &Server{URL: u, Source: SourceEnv, Detail: redact(u)}, nil
	}
	var tried []string
	if !opts.NoContainers && os.Getenv(EnvNoContainers) != "1" {
		image := cmp.Or(opts.Image, os.Getenv(EnvImage), DefaultImage)
		srv, err := startContainer(ctx, image, opts.InMemory, logf)
		if err == nil {
			return srv, nil
		}
		tried = append(tried, "testcontainers ("+image+"): "+err.Error())
		logf("postgres: container unavailable: %v", err)
	} else {
		tried = append(tried, "testcontainers: skipped ("+EnvNoContainers+"=1 or Options.NoContainers)")
	}
	if opts.NoLocal {
		return nil, fmt.Errorf("%w; tried:\n  - %s", ErrNoServer, strings.Join(tried, "\n  - "))
	}
	srv, err := local(ctx, logf)
	if err == nil {
		srv.Skipped = tried
		return srv, nil
	}
	tried = append(tried, "local cluster: "+err.Error())
	return nil, fmt.Errorf("%w; tried:\n  - %s\nProvide one: set %s=postgres://user:pass@host:5432/postgres, "+
		"start a Docker engine (scripts/docker-engine.sh), or install and start PostgreSQL "+
		"(Debian: apt-get install postgresql && pg_ctlcluster 15 main start)",
		ErrNoServer, strings.Join(tried, "\n  - "), EnvDatabaseURL)
}

// dockerReachable reports whether testcontainers can talk to an engine.
func dockerReachable(ctx context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("docker provider panicked: %v", r)
		}
	}()
	p, err := testcontainers.ProviderDocker.GetProvider()
	if err != nil {
		return err
	}
	defer p.Close()
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return p.Health(hctx)
}

// quietTestcontainers silences testcontainers' global logger once:
// SetDefault writes a package variable, and parallel provisions (tests)
// would race on it.
var quietTestcontainers = sync.OnceFunc(func() { tclog.SetDefault(tclog.NewNoopLogger()) })

// pgdata is where the container's server keeps its data: the official
// images' default, set explicitly so that the tmpfs of Options.InMemory is
// the data directory on any image that honours PGDATA.
const pgdata = "/var/lib/postgresql/data"

func startContainer(ctx context.Context, image string, inMemory bool, logf func(string, ...any)) (*Server, error) {
	quietTestcontainers()
	if err := dockerReachable(ctx); err != nil {
		return nil, fmt.Errorf("no Docker engine reachable: %w", err)
	}
	if overrideHost() {
		logf("postgres: Docker engine runs in this container's network: %s=localhost", envHostOverride)
	}
	opts := []testcontainers.ContainerCustomizer{
		tcpostgres.WithDatabase("postgres"),
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"),
		tcpostgres.BasicWaitStrategies(),
	}
	where := ""
	if inMemory {
		opts = append(opts,
			testcontainers.WithEnv(map[string]string{"PGDATA": pgdata}),
			testcontainers.WithTmpfs(map[string]string{pgdata: "rw"}))
		where = " (data in memory)"
	}
	logf("postgres: starting container %s%s", image, where)
	start := time.Now()
	c, err := tcpostgres.Run(ctx, image, opts...)
	if err != nil {
		if c != nil {
			_ = testcontainers.TerminateContainer(c)
		}
		return nil, err
	}
	u, err := c.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		_ = testcontainers.TerminateContainer(c)
		return nil, err
	}
	logf("postgres: container ready in %s", time.Since(start).Round(time.Millisecond))
	return &Server{
		URL: u, Source: SourceContainer, Detail: image, ContainerID: c.GetContainerID(),
		terminate: func(ctx context.Context) error {
			return c.Terminate(ctx)
		},
	}, nil
}

// local uses (and if needed starts) the machine's PostgreSQL cluster.
func local(ctx context.Context, logf func(string, ...any)) (*Server, error) {
	root := os.Geteuid() == 0
	if !listening(ctx, localAddr) {
		if !root {
			return nil, fmt.Errorf("nothing listens on %s and starting a cluster needs root", localAddr)
		}
		if _, err := exec.LookPath("pg_ctlcluster"); err != nil {
			return nil, fmt.Errorf("nothing listens on %s and pg_ctlcluster is not installed", localAddr)
		}
		version, name, err := firstCluster(ctx)
		if err != nil {
			return nil, err
		}
		logf("postgres: starting local cluster %s/%s", version, name)
		if out, err := exec.CommandContext(ctx, "pg_ctlcluster", version, name, "start").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("pg_ctlcluster %s %s start: %w: %s", version, name, err, strings.TrimSpace(string(out)))
		}
		if err := waitListening(ctx, localAddr, 30*time.Second); err != nil {
			return nil, err
		}
	}
	u := (&url.URL{Scheme: "postgres", User: url.UserPassword(localRole, localPassword), Host: localAddr,
		Path: "/postgres", RawQuery: "sslmode=disable"}).String()
	if err := Ping(ctx, u); err != nil {
		if !root {
			return nil, fmt.Errorf("cannot log in as %s on %s (%w); create the role or set %s", localRole, localAddr, err, EnvDatabaseURL)
		}
		logf("postgres: creating role %s on the local cluster", localRole)
		if err := ensureRole(ctx); err != nil {
			return nil, err
		}
		if err := Ping(ctx, u); err != nil {
			return nil, fmt.Errorf("log in as %s after creating it: %w", localRole, err)
		}
	}
	logf("postgres: using the local cluster on %s", localAddr)
	return &Server{URL: u, Source: SourceLocal, Detail: localAddr}, nil
}

// firstCluster returns the first cluster pg_lsclusters lists.
func firstCluster(ctx context.Context) (version, name string, err error) {
	out, err := exec.CommandContext(ctx, "pg_lsclusters", "--no-header").Output()
	if err != nil {
		return "", "", fmt.Errorf("pg_lsclusters: %w", err)
	}
	for line := range strings.SplitSeq(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 2 {
			return f[0], f[1], nil
		}
	}
	return "", "", errors.New("pg_lsclusters lists no cluster (create one with pg_createcluster)")
}

// ensureRole creates the helix superuser through the postgres OS account
// (peer authentication on the local socket).
func ensureRole(ctx context.Context) error {
	sql := fmt.Sprintf(`DO $$ BEGIN
IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '%[1]s') THEN
  CREATE ROLE %[1]s LOGIN SUPERUSER PASSWORD '%[2]s';
ELSE
  ALTER ROLE %[1]s LOGIN SUPERUSER PASSWORD '%[2]s';
END IF; END $$;`, localRole, localPassword)
	cmd := exec.CommandContext(ctx, "runuser", "-u", "postgres", "--", "psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", sql)
	cmd.Dir = "/" // psql complains when it cannot enter root's working directory
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("create role %s: %w: %s", localRole, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// envHostOverride tells testcontainers which host publishes container ports.
const envHostOverride = "TESTCONTAINERS_HOST_OVERRIDE"

// overrideHost sets TESTCONTAINERS_HOST_OVERRIDE=localhost when it is unset,
// we run inside a container (/.dockerenv) and the engine's docker0 bridge is
// in our own network namespace, and reports whether it did. Inside a container
// testcontainers dials the default gateway for published ports: right when the
// engine is the outer host's (a mounted socket), wrong when it runs beside us
// (these machines, scripts/docker-engine.sh), where every start waited 60 s on
// an unreachable address before failing. The bridge tells the two apart.
func overrideHost() bool {
	if _, set := os.LookupEnv(envHostOverride); set {
		return false
	}
	if _, err := os.Stat("/.dockerenv"); err != nil {
		return false
	}
	if _, err := net.InterfaceByName("docker0"); err != nil {
		return false
	}
	return os.Setenv(envHostOverride, "localhost") == nil
}

func listening(ctx context.Context, addr string) bool {
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

func waitListening(ctx context.Context, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !listening(ctx, addr) {
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster started but nothing listens on %s after %s", addr, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// Ping checks that the server at u answers (within 10 s).
func Ping(ctx context.Context, u string) error {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(pctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.Ping(pctx)
}

// redact hides the password of a URL for logs.
func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	return p.Redacted()
}
