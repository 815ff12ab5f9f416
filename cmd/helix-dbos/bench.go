package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
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
	asJSON, samples, txTool                                             bool
	// The churn mode (--churn): sessions started without end on an
	// engine with a short retention, the tables sampled.
	churn, churnRetention, churnInterval time.Duration
	churnSessions, churnSteps            int
	churnRate                            float64
	// The waiting-sessions mode (--waiting): sessions left waiting for an
	// approval in a worker process, killed, recovered, then answered.
	waiting, waitingWakeSamples, waitingCallers int
	waitingSet, waitingDrain, waitingIsolated   bool
	waitingApproveVia                           string
	hibernateAfter                              time.Duration
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
			"database " + benchDatabase + ". Progress goes to stderr, the report to stdout.\n\n" +
			"With --churn DURATION it runs the churn mode instead: --churn-sessions sessions in flight,\n" +
			"started again as they complete, on an engine whose retention job deletes completed sessions\n" +
			"older than --churn-retention; it samples the rows, size, dead tuples and autovacuum runs of\n" +
			"every helix and dbos table and reports whether the total size reaches a plateau, and the\n" +
			"retention job's time per deleted session. It deletes every completed session older than the\n" +
			"retention in the database, whatever its agent: use a scratch one.\n\n" +
			"With --waiting N it runs the waiting-sessions mode instead: a worker process (this binary again)\n" +
			"starts N sessions that each wait for a person's approval of a tool call, and the bench reads the\n" +
			"worker's resident memory and goroutines and the database's size per waiting session; it kills\n" +
			"the worker (SIGKILL) and starts another with the same executor ID, which recovers them, and\n" +
			"times that; then it approves --waiting-wake-samples sessions one at a time (approval → the tool\n" +
			"ran, → the next model call) and the rest with --waiting-callers concurrent callers (approvals/s,\n" +
			"completions/s). --max-conns sizes the workers' pool. With --hibernate-after D the runs hibernate\n" +
			"once they waited D (engine.Config.HibernateAfter): the bench waits until all of them hibernated\n" +
			"and reads the worker's footprint again, checks that the restarted worker replays none of them,\n" +
			"and measures their wake from hibernation; by default they never hibernate (live waits, the\n" +
			"baseline). --waiting-approve-via engine has worker B's own engine submit the approvals (asked\n" +
			"over its pipes), as a replica's handler would, instead of a client in the bench process.\n" +
			"--waiting-drain=false skips the wake and drain: worker B stops after the restart and the\n" +
			"sessions are left waiting in the database (to measure the restart of many sessions alone).\n" +
			"With the environment variable " + bench.WorkerCPUProfileEnv + "=PREFIX each worker writes a CPU\n" +
			"profile of its life to PREFIX.<migrate|A|B>.pprof (A is killed: its profile may be empty).\n" +
			"Linux only (it reads /proc).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.waitingSet = cmd.Flags().Changed("waiting")
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
	fl.BoolVar(&f.txTool, "tx-tool", false, "make the bench tool transactional (helix.NewTxTool): each call writes a row in its transaction")
	fl.DurationVar(&f.churn, "churn", 0, "run the churn mode for this long instead of the benchmark (e.g. 3m)")
	fl.DurationVar(&f.churnRetention, "churn-retention", bench.DefaultChurnRetention, "churn mode: retention of completed sessions")
	fl.DurationVar(&f.churnInterval, "churn-interval", bench.DefaultChurnInterval, "churn mode: time between two retention passes")
	fl.IntVar(&f.churnSessions, "churn-sessions", bench.DefaultChurnSessions, "churn mode: sessions in flight")
	fl.Float64Var(&f.churnRate, "churn-rate", bench.DefaultChurnRate, "churn mode: sessions started per second at most (negative: as fast as they go)")
	fl.IntVar(&f.churnSteps, "churn-steps", bench.DefaultChurnSteps, "churn mode: steps of each session (one no-op tool call each but the last)")
	fl.IntVar(&f.waiting, "waiting", 0, "run the waiting-sessions mode with this many sessions waiting for an approval instead of the benchmark (e.g. 10000)")
	fl.IntVar(&f.waitingWakeSamples, "waiting-wake-samples", bench.DefaultWaitingWakeSamples, "waiting mode: sessions approved one at a time, one wake-latency sample each (at most --waiting; negative for none)")
	fl.IntVar(&f.waitingCallers, "waiting-callers", bench.DefaultWaitingCallers, "waiting mode: concurrent callers that approve the other sessions")
	fl.BoolVar(&f.waitingDrain, "waiting-drain", true, "waiting mode: approve every session after the restart (the wake and drain phases); false: skip them, worker B stops and the sessions are left waiting in the database")
	fl.BoolVar(&f.waitingIsolated, "waiting-wake-isolated", false, "waiting mode: each wake-latency sample waits until its session completed and its workflows ended before the next approval (default: the next approval follows the last one's next step)")
	fl.StringVar(&f.waitingApproveVia, "waiting-approve-via", bench.ApproveViaClient, "waiting mode: who submits the approvals: client (an engine.Client in the bench process) or engine (worker B's own engine, asked over its pipes)")
	fl.DurationVar(&f.hibernateAfter, "hibernate-after", 0, "waiting mode: the workers' engine.Config.HibernateAfter: the runs hibernate once they waited this long (e.g. 1s); 0 or negative: never, they wait live (the baseline)")
	fl.BoolVar(&f.samples, "samples", false, "keep every overhead sample of the sequential session and every human-in-the-loop sample in the JSON report")
	return cmd
}

func runBench(ctx context.Context, out, progress io.Writer, g *globals, f benchFlags) error {
	say := func(format string, args ...any) { fmt.Fprintf(progress, "• "+format+"\n", args...) }
	if f.waitingSet && f.churn > 0 {
		return errors.New("--waiting and --churn are two modes: give one of them")
	}
	if f.waitingSet && f.waiting < 1 {
		return fmt.Errorf("--waiting must be >= 1 (the sessions left waiting for an approval), got %d", f.waiting)
	}
	var worker func() *exec.Cmd
	if f.waitingSet {
		// Checked before a server is provisioned: the mode needs this
		// binary, for its worker processes.
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find this binary to run the waiting-sessions workers: %w", err)
		}
		worker = func() *exec.Cmd { return exec.Command(exe, benchWaitingWorkerName) }
	}
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
	if f.churn > 0 {
		r, err := bench.Churn(ctx, bench.ChurnConfig{
			DatabaseURL: dbURL, Duration: f.churn, Retention: f.churnRetention, Interval: f.churnInterval,
			Sessions: f.churnSessions, Steps: f.churnSteps, Rate: f.churnRate, MaxConns: f.maxConns,
			Progress: func(s string) { say("%s", s) },
		})
		if err != nil {
			return err
		}
		return writeReport(out, f.asJSON, r, r.WriteText)
	}
	if f.waitingSet {
		r, err := bench.Waiting(ctx, bench.WaitingConfig{
			DatabaseURL: dbURL, Sessions: f.waiting, WakeSamples: f.waitingWakeSamples, Callers: f.waitingCallers,
			MaxConns: f.maxConns, HibernateAfter: f.hibernateAfter, NoDrain: !f.waitingDrain, ApproveVia: f.waitingApproveVia,
			WakeIsolated: f.waitingIsolated,
			Worker:       worker, Progress: func(s string) { say("%s", s) },
		})
		if err != nil {
			return err
		}
		return writeReport(out, f.asJSON, r, r.WriteText)
	}
	r, err := bench.Run(ctx, bench.Config{
		DatabaseURL: dbURL, Steps: f.steps, Sessions: f.sessions, StepsPerSession: f.stepsPerSession,
		FloorSteps: f.floorSteps, HITLSamples: f.hitlSamples, StreamSessions: f.streamSessions, StreamDeltas: f.streamDeltas,
		MaxConns: f.maxConns, KeepSamples: f.samples, TxTool: f.txTool,
		Progress: func(s string) { say("%s", s) },
	})
	if err != nil {
		return err
	}
	return writeReport(out, f.asJSON, r, r.WriteText)
}

// benchWaitingWorkerName is the hidden command the waiting-sessions mode
// runs its workers with: this binary again.
const benchWaitingWorkerName = "bench-waiting-worker"

func newBenchWaitingWorkerCmd() *cobra.Command {
	return &cobra.Command{
		Use:    benchWaitingWorkerName,
		Short:  "Run an engine for `bench --waiting`, driven over stdin and stdout (the bench starts it)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return bench.ServeWaitingWorker(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
}

// writeReport prints r as indented JSON or as text.
func writeReport(out io.Writer, asJSON bool, r any, text func(io.Writer) error) error {
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return text(out)
}
