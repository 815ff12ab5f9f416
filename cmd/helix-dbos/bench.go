package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/helix-agents/helix-dbos/bench"
	"github.com/helix-agents/helix-dbos/internal/pgprovision"
)

// benchDatabase is the database bench creates on a provisioned server.
const benchDatabase = "helix_bench"

type benchFlags struct {
	steps, sessions, stepsPerSession, floorSteps, hitlSamples, maxConns int
	streamSessions, streamDeltas                                        int
	asJSON, samples                                                     bool
}

func newBenchCmd(g *globals) *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the engine's overhead and storage per agent step, its throughput, human-in-the-loop and token-streaming latency, and the DBOS and commit floors",
		Long: "Runs an agent with an instant scripted model and one no-op tool per step and measures what\n" +
			"the engine adds per step: the overhead distribution of one long session, its growth with\n" +
			"history, and the aggregate steps/s of concurrent sessions; beside it, the floors on the same\n" +
			"pool (a round trip, a single-row commit, a no-op DBOS step, the DBOS operations of one agent\n" +
			"step), the statements each agent step runs, and the table growth, WAL and write transactions\n" +
			"of one. Then it runs sessions that suspend on a client-executed tool, one at a time, and\n" +
			"measures the time from SubmitToolResult to the model's next call; last, many token streams at\n" +
			"once (a delta every 20 ms each) and the time from a delta's write to its reader. See the bench\n" +
			"package and docs/performance.md.\n\n" +
			"With --database-url (or HELIX_DATABASE_URL) it writes bench sessions and workflows into that\n" +
			"database (use a scratch one); without, it provisions Postgres like `demo` and creates a\n" +
			"database " + benchDatabase + ". Progress goes to stderr, the report to stdout.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBench(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), g, f)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.steps, "steps", bench.DefaultSteps, "steps of the sequential session")
	fl.IntVar(&f.sessions, "sessions", bench.DefaultSessions, "concurrent sessions")
	fl.IntVar(&f.stepsPerSession, "steps-per-session", bench.DefaultStepsPerSession, "steps of each concurrent session")
	fl.IntVar(&f.floorSteps, "floor-steps", bench.DefaultFloorSteps, "samples of each floor measurement")
	fl.IntVar(&f.hitlSamples, "hitl-samples", bench.DefaultHITLSamples, "human-in-the-loop sessions (one submission-to-next-step sample each; negative for none)")
	fl.IntVar(&f.streamSessions, "stream-sessions", bench.DefaultStreamSessions, "concurrent token streams of the streaming phase")
	fl.IntVar(&f.streamDeltas, "stream-deltas", bench.DefaultStreamDeltas, "text deltas each stream writes, one every 20 ms (negative for no streaming phase)")
	fl.IntVar(&f.maxConns, "max-conns", 0, "pool size (0: pgx's default, as an engine built from a URL gets)")
	fl.BoolVar(&f.asJSON, "json", false, "print the report as JSON")
	fl.BoolVar(&f.samples, "samples", false, "keep every overhead sample of the sequential session and every human-in-the-loop sample in the JSON report")
	return cmd
}

func runBench(ctx context.Context, out, progress io.Writer, g *globals, f benchFlags) error {
	say := func(format string, args ...any) { fmt.Fprintf(progress, "• "+format+"\n", args...) }
	dbURL := g.cfg.DatabaseURL
	if dbURL == "" {
		srv, err := pgprovision.Provision(ctx, pgprovision.Options{Logf: say})
		if err != nil {
			return err
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_ = srv.Close(cctx)
		}()
		if dbURL, err = createDatabase(ctx, srv.URL, benchDatabase); err != nil {
			return err
		}
		say("created database %s", benchDatabase)
	}
	r, err := bench.Run(ctx, bench.Config{
		DatabaseURL: dbURL, Steps: f.steps, Sessions: f.sessions, StepsPerSession: f.stepsPerSession,
		FloorSteps: f.floorSteps, HITLSamples: f.hitlSamples, StreamSessions: f.streamSessions, StreamDeltas: f.streamDeltas,
		MaxConns: f.maxConns, KeepSamples: f.samples,
		Progress: func(s string) { say("%s", s) },
	})
	if err != nil {
		return err
	}
	if f.asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return r.WriteText(out)
}
