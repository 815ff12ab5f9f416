// Command helix-dbos is the command-line companion of the helix-dbos
// library: database migrations, a self-provisioning demo, and operator
// commands for sessions and their streams.
//
//	helix-dbos demo                          # no setup: provisions Postgres, runs an agent, crashes it, recovers
//	helix-dbos migrate up|status|down        # the helix schema
//	helix-dbos sessions list|show|messages|runs
//	helix-dbos stream <session> [--from N] [--no-follow]
//	helix-dbos interrupt <session> [--reason R] [--wait]
//	helix-dbos resume <session> [--message M]
//	helix-dbos approve|deny <session> <toolCallId> [--reason R]
//	helix-dbos submit <session> <toolCallId> (--result JSON | --result-file F | --error MSG)
//
// Every command but demo connects with --database-url or HELIX_DATABASE_URL.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// globals are the flags every command shares.
type globals struct {
	databaseURL string
	verbose     bool
}

func main() { os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr)) }

// execute runs the CLI with args and returns the process exit status. The
// tests call it too, and when they re-execute their binary as the demo's
// worker.
func execute(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "helix-dbos:", err)
		var exit exitCode
		if errors.As(err, &exit) {
			return int(exit)
		}
		return 1
	}
	return 0
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
	root.PersistentFlags().BoolVarP(&g.verbose, "verbose", "v", false, "print more detail (engine logs on stderr)")
	// One command per line: add yours below.
	root.AddCommand(newMigrateCmd(g))
	root.AddCommand(newDemoCmd(g))
	root.AddCommand(newDemoWorkerCmd(g))
	root.AddCommand(newSessionsCmd(g))
	root.AddCommand(newStreamCmd(g))
	root.AddCommand(newInterruptCmd(g))
	root.AddCommand(newResumeCmd(g))
	root.AddCommand(newApproveCmd(g))
	root.AddCommand(newDenyCmd(g))
	root.AddCommand(newSubmitCmd(g))
	root.AddCommand(newBenchCmd(g))
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

// logger returns the engine logger: human-readable lines on stderr with
// --verbose, nil (silent) otherwise.
func (g *globals) logger() *zerolog.Logger {
	if !g.verbose {
		return nil
	}
	fi, err := os.Stderr.Stat()
	tty := err == nil && fi.Mode()&os.ModeCharDevice != 0
	l := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05", NoColor: !tty}).With().Timestamp().Logger()
	return &l
}
