package integration_test

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"go.uber.org/goleak"

	"github.com/helix-agents/helix-dbos/internal/pgprovision"
)

// The package's shared container and its superuser URL.
var (
	shared    *tcpostgres.PostgresContainer
	sharedURL string
	startErr  error
	skipAll   = os.Getenv("HELIX_INTEGRATION_SKIP") == "1"
)

func image() string { return cmp.Or(os.Getenv(pgprovision.EnvImage), pgprovision.DefaultImage) }

// startPostgres starts a Postgres container like users' tests do.
func startPostgres(ctx context.Context) (*tcpostgres.PostgresContainer, string, error) {
	c, err := tcpostgres.Run(ctx, image(),
		tcpostgres.WithDatabase("postgres"),
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"),
		tcpostgres.BasicWaitStrategies(),
	)
	if err != nil {
		if c != nil {
			_ = testcontainers.TerminateContainer(c)
		}
		return nil, "", fmt.Errorf("start %s: %w", image(), err)
	}
	url, err := c.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		_ = testcontainers.TerminateContainer(c)
		return nil, "", err
	}
	return c, url, nil
}

func TestMain(m *testing.M) {
	if skipAll {
		fmt.Fprintln(os.Stderr, "!!! integration tests SKIPPED: HELIX_INTEGRATION_SKIP=1 !!!")
		os.Exit(0)
	}
	tclog.SetDefault(tclog.NewNoopLogger())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	start := time.Now()
	shared, sharedURL, startErr = startPostgres(ctx)
	cancel()
	if startErr == nil {
		fmt.Fprintf(os.Stderr, "integration: %s ready in %s\n", image(), time.Since(start).Round(time.Millisecond))
	}
	code := m.Run()
	if shared != nil {
		if err := testcontainers.TerminateContainer(shared); err != nil {
			fmt.Fprintf(os.Stderr, "integration: terminate container: %v\n", err)
		}
	}
	if code == 0 {
		if err := goleak.Find(
			// The Docker client keeps idle HTTP connections for the process.
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		); err != nil {
			fmt.Fprintf(os.Stderr, "integration: goroutine leak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// serverURL returns the shared container's URL or fails the test with what
// to do: these tests never skip silently.
func serverURL(t *testing.T) string {
	t.Helper()
	if startErr != nil {
		t.Fatalf("integration tests need a Docker engine and the image %s: %v\n"+
			"Run them with scripts/test.sh (it provisions both), or set HELIX_INTEGRATION_SKIP=1 to skip them on purpose.",
			image(), startErr)
	}
	return sharedURL
}
