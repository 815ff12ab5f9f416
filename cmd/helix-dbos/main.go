// Command helix-dbos is the command-line companion of the helix-dbos
// library: database migrations, a self-provisioning demo, and (as the
// engine grows) operator commands for sessions and streams.
//
//	helix-dbos demo                 # no setup: provisions Postgres, shows the foundation at work
//	helix-dbos migrate up|status|down --database-url postgres://...
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// globals are the flags every command shares.
type globals struct {
	databaseURL string
	verbose     bool
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "helix-dbos:", err)
		var exit exitCode
		if errors.As(err, &exit) {
			os.Exit(int(exit))
		}
		os.Exit(1)
	}
}

// exitCode lets a command choose the process exit status.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func newRootCmd() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "helix-dbos",
		Short:         "Durable LLM agents on Postgres (helix-dbos)",
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.databaseURL, "database-url", os.Getenv("HELIX_DATABASE_URL"),
		"Postgres URL (env HELIX_DATABASE_URL)")
	root.PersistentFlags().BoolVarP(&g.verbose, "verbose", "v", false, "print more detail")
	root.AddCommand(newMigrateCmd(g), newDemoCmd(g))
	return root
}

// requireDatabaseURL returns the configured URL or an error saying how to
// set it.
func (g *globals) requireDatabaseURL() (string, error) {
	if g.databaseURL == "" {
		return "", errors.New("no database: pass --database-url postgres://user:pass@host:5432/db or set HELIX_DATABASE_URL")
	}
	return g.databaseURL, nil
}
