// Command helix-dbos is the command-line companion of the helix-dbos
// library: an HTTP agent server for agents declared in YAML, operator
// commands for sessions and their streams, database migrations and a
// self-provisioning demo.
//
//	helix-dbos serve --agents agents.yaml (--auth-token NAME:SECRET | --allow-unauthenticated)
//	helix-dbos sessions list|show|messages|runs|checkpoints
//	helix-dbos stream <session> [--from N] [--no-follow]
//	helix-dbos interrupt <session> [--reason R] [--wait]
//	helix-dbos resume <session> [--message M] [--agents FILE]
//	helix-dbos retry <session> [--checkpoint ID | --from-start] [--agents FILE]
//	helix-dbos abort <session> [--reason R]
//	helix-dbos approve|deny <session> <toolCallId> [--reason R]
//	helix-dbos submit <session> <toolCallId> (--result JSON | --result-file F | --error MSG)
//	helix-dbos doctor [--json]
//	helix-dbos executors [--json]
//	helix-dbos config [--json]
//	helix-dbos migrate up|status|down
//	helix-dbos demo                          # no setup: provisions Postgres, runs an agent, crashes it, recovers
//	helix-dbos bench [--json]                # the engine's overhead per step, beside the DBOS and commit floors
//	helix-dbos loadtest [--json]             # serve replicas under load, on 127.0.0.1
//
// Settings come from flags, HELIX_* environment variables and a YAML config
// file (--config, HELIX_CONFIG, ./helix-dbos.yaml), in that precedence, with
// one name each: --database-url, HELIX_DATABASE_URL, database-url. See
// docs/cli.md.
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

// globals are the configuration every command shares: the merged
// configuration (see config.go) and where it came from.
type globals struct {
	cfg     config
	cfgFile string
	sources map[string]configSource
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
		// Every command reads its settings from flags, HELIX_* variables
		// and the config file (config.go).
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return g.loadConfig(cmd) },
	}
	pf := root.PersistentFlags()
	pf.String(configFlag, "", "config file (YAML; env HELIX_CONFIG; default ./"+defaultConfigFile+" when it exists)")
	pf.String("database-url", "", "Postgres URL (env HELIX_DATABASE_URL, config key database-url)")
	pf.BoolP("verbose", "v", false, "print more detail: engine logs on stderr (env HELIX_VERBOSE)")
	// One command per line: add yours below.
	root.AddCommand(newMigrateCmd(g))
	root.AddCommand(newDemoCmd(g))
	root.AddCommand(newDemoWorkerCmd(g))
	root.AddCommand(newSessionsCmd(g))
	root.AddCommand(newGCCmd(g))
	root.AddCommand(newStreamCmd(g))
	root.AddCommand(newInterruptCmd(g))
	root.AddCommand(newResumeCmd(g))
	root.AddCommand(newApproveCmd(g))
	root.AddCommand(newDenyCmd(g))
	root.AddCommand(newSubmitCmd(g))
	root.AddCommand(newBenchCmd(g))
	root.AddCommand(newBenchWaitingWorkerCmd())
	root.AddCommand(newLoadtestCmd(g))
	root.AddCommand(newAbortCmd(g))
	root.AddCommand(newRetryCmd(g))
	root.AddCommand(newDoctorCmd(g))
	root.AddCommand(newExecutorsCmd(g))
	root.AddCommand(newServeCmd(g))
	root.AddCommand(newConfigCmd(g))
	return root
}

// requireDatabaseURL returns the configured URL or an error saying how to
// set it.
func (g *globals) requireDatabaseURL() (string, error) {
	if g.cfg.DatabaseURL == "" {
		return "", errors.New("no database: pass --database-url postgres://user:pass@host:5432/db, set HELIX_DATABASE_URL, " +
			"or put database-url: in the config file (" + defaultConfigFile + ")")
	}
	return g.cfg.DatabaseURL, nil
}

// logger returns the engine logger: human-readable lines on stderr with
// --verbose, nil (silent) otherwise.
func (g *globals) logger() *zerolog.Logger {
	if !g.cfg.Verbose {
		return nil
	}
	fi, err := os.Stderr.Stat()
	tty := err == nil && fi.Mode()&os.ModeCharDevice != 0
	l := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05", NoColor: !tty}).With().Timestamp().Logger()
	return &l
}
