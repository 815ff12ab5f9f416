package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// The engine `resume` and `retry` start takes a new executor ID of its own
// (engine.DefaultExecutorID) unless --executor-id on their command line
// names one: the executor-id of the environment and the config file is
// serve's, and a command holding serve's ID would be refused while serve
// runs. A run the command started belongs to its engine while it runs; if
// the command exits or dies first, a live engine (serve, or your process)
// takes the run over (docs/operations.md).

// cliDemoAgents are the agent types this CLI defines itself, by name.
// Resuming a session needs its agent's model and tools, which live in the
// process that defined the agent: besides these, the CLI runs the agents of
// an agent file (--agents).
var cliDemoAgents = map[string]func(researchOpts) *helix.Agent{
	researchAgentName: newResearchAgent,
}

func newInterruptCmd(g *globals) *cobra.Command {
	var (
		reason  string
		wait    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "interrupt <session>",
		Short: "Ask a running session to stop before its next step (a run waiting for human input stops now)",
		Long: "Writes the session's durable interrupt flag. Whichever process runs the session observes it\n" +
			"when its current step commits, and the run ends interrupted; `resume` continues it. A run\n" +
			"suspended on tool calls (waiting for an approval or a client's result) is woken and stops\n" +
			"at once; its unanswered calls are kept and can be answered after the resume. Needs no\n" +
			"engine and no agent definition: any process with database access can interrupt.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sessionID := args[0]
			return withClient(cmd.Context(), g, func(c *engine.Client) error {
				s, err := c.Session(cmd.Context(), sessionID)
				if err != nil {
					return err
				}
				if s.Status != helix.SessionActive {
					return fmt.Errorf("session %s is %s: only a running (active) session can be interrupted", sessionID, s.Status)
				}
				waiting := waitingCalls(s)
				// The client writes the flag and wakes a run that waits for
				// human input (it would see the flag only when answered).
				// A session that is not running, or whose run ended while
				// the flag was written, is refused (the engine takes the
				// flag back then).
				if err := c.Interrupt(cmd.Context(), sessionID, reason); err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if len(waiting) > 0 {
					fmt.Fprintf(out, "interrupt requested for session %s (%s): its run was waiting for %s and was woken to stop; "+
						"the unanswered calls are kept for after the resume\n", sessionID, reason, strings.Join(waiting, ", "))
				} else {
					fmt.Fprintf(out, "interrupt requested for session %s (%s): its run stops when the current step commits\n", sessionID, reason)
				}
				if !wait {
					return nil
				}
				s, err = waitInactive(cmd.Context(), c.Session, sessionID, timeout)
				if err != nil {
					return err
				}
				if s.Status == helix.SessionInterrupted {
					fmt.Fprintf(out, "session %s is interrupted after step %d; continue it with `helix-dbos resume %s`\n", sessionID, s.StepCount, sessionID)
					return nil
				}
				fmt.Fprintf(out, "session %s ended %s before the interrupt took effect\n", sessionID, s.Status)
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&reason, "reason", "interrupted by operator", "why, recorded on the session and the run")
	f.BoolVar(&wait, "wait", false, "wait until the run has stopped")
	f.DurationVar(&timeout, "timeout", time.Minute, "with --wait: how long to wait")
	return cmd
}

// waitingCalls describes the unanswered calls the session's own run waits
// for (none when it does not wait for human input).
func waitingCalls(s *store.SessionState) []string {
	calls := slices.Collect(maps.Values(s.PendingClientToolCalls))
	store.SortPendingCalls(calls)
	var out []string
	for _, c := range calls {
		if !c.Resolved() {
			out = append(out, fmt.Sprintf("%s (call %s, %s)", c.ToolName, c.ToolCallID, kindLabel(c.Kind)))
		}
	}
	return out
}

// waitInactive polls the session, read by load (a Client's Session, a
// store's LoadState), until it is no longer active.
func waitInactive(ctx context.Context, load func(context.Context, string) (*store.SessionState, error), sessionID string, timeout time.Duration) (*store.SessionState, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		s, err := load(ctx, sessionID)
		if err != nil {
			return nil, err
		}
		if s.Status != helix.SessionActive {
			return s, nil
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return nil, fmt.Errorf("session %s is still active after %s: is a process running it? (%w)", sessionID, timeout, err)
		}
	}
}

func newResumeCmd(g *globals) *cobra.Command {
	var (
		message, executorID string
		delay               time.Duration
	)
	cmd := &cobra.Command{
		Use:   "resume <session>",
		Short: "Continue an interrupted session from its last committed step (the demo agent, or agents of an agent file)",
		Long: "Starts an engine, resumes the session in a new run, prints the run's stream live and waits\n" +
			"for it to end. Resuming runs the agent's model and tools, so it needs the agent's definition:\n" +
			"this CLI defines the demo agent (" + strings.Join(slices.Sorted(maps.Keys(cliDemoAgents)), ", ") + ") and the agents of an agent file\n" +
			"(--agents FILE, as `serve` runs them). Sessions of agents defined in Go are resumed by the\n" +
			"process that defines them (engine.Resume).\n\n" +
			"The run belongs to this command's engine (executor ID: a new one, or --executor-id) while it runs:\n" +
			"if the command exits or dies before the run ends, a live engine (serve) takes the run over.\n" +
			"Only the command line sets the ID: HELIX_EXECUTOR_ID and executor-id: in the config file are serve's.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runContinue(cmd.Context(), cmd.OutOrStdout(), g, args[0], executorID, delay, "resumed", func(ctx context.Context, e *engine.Engine) (*engine.Handle, error) {
				return e.Resume(ctx, args[0], &engine.ResumeOptions{Message: message})
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&message, "message", "", "a user message to add before the run continues")
	addContinueFlags(f, &executorID)
	f.DurationVar(&delay, "delay", 25*time.Millisecond, "demo agent: pause between streamed words")
	return cmd
}

// addEngineFlags adds the settings of serve's engine: its executor ID, its
// lease and its agent file.
func addEngineFlags(f *pflag.FlagSet) {
	f.String("executor-id", "", "DBOS executor ID of this command's engine (env HELIX_EXECUTOR_ID; default: a new one per start, "+
		"<hostname>-<pid>-<random>; give a stable one, such as a StatefulSet pod name, to resume at once after a restart)")
	f.Duration("executor-lease", engine.DefaultExecutorLease, "how long the engine's sessions stay its own without a heartbeat: "+
		"once its last heartbeat is older, a live engine takes them over (env HELIX_EXECUTOR_LEASE; at least "+
		engine.MinExecutorLease.String()+"; it heartbeats every third of it)")
	addAgentsFlag(f)
}

// addContinueFlags adds the flags of resume and retry: the agent file (a
// setting) and the executor ID, which only this flag sets (see
// the comment above runContinue).
func addContinueFlags(f *pflag.FlagSet, executorID *string) {
	f.StringVar(executorID, "executor-id", "", "DBOS executor ID of this command's engine (default: a new one, "+
		"<hostname>-<pid>-<random>; this flag only: HELIX_EXECUTOR_ID and executor-id: in the config file are serve's)")
	addAgentsFlag(f)
}

func addAgentsFlag(f *pflag.FlagSet) {
	f.String("agents", "", "agent file (YAML) defining the agents this command may run (env HELIX_AGENTS)")
}

// runContinue continues a session in an engine of its own (resume,
// retry): it finds the session's agent, starts the engine, calls start,
// prints the run's stream live and its outcome.
func runContinue(ctx context.Context, out io.Writer, g *globals, sessionID, executorID string, delay time.Duration, verb string,
	start func(context.Context, *engine.Engine) (*engine.Handle, error)) error {
	url, err := g.requireDatabaseURL()
	if err != nil {
		return err
	}
	var agentType string
	if err := withStore(ctx, g, func(st *postgres.Store) error {
		s, err := st.LoadState(ctx, sessionID)
		if err != nil {
			return err
		}
		agentType = s.AgentType
		return nil
	}); err != nil {
		return err
	}
	agents, err := g.agentsFor(ctx, url, sessionID, agentType, delay)
	if err != nil {
		return err
	}
	defer agents.close()
	say := func(format string, args ...any) { fmt.Fprintf(out, "• "+format+"\n", args...) }
	if agents.file != nil {
		say("agents from %s: %s", g.cfg.Agents, strings.Join(agents.file.Names(), ", "))
	}
	if executorID == "" {
		executorID = engine.DefaultExecutorID()
	}
	if src := g.sources["executor-id"]; (src.Kind == sourceEnv || src.Kind == sourceFile) && g.cfg.ExecutorID != executorID {
		say("executor %s, not %s from %s: that executor-id is serve's (pass --executor-id to choose this command's)",
			executorID, g.cfg.ExecutorID, src.Where)
	}
	c, err := g.startEngine(ctx, url, engineOpts{executorID: executorID, agents: agents, progress: say, oneShot: true})
	if err != nil {
		return err
	}
	defer c.shutdown(ctx)
	h, err := start(ctx, c.e)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s session %s in run %s (workflow %s, executor %s)\n", verb, sessionID, h.RunID, h.WorkflowID, executorID)
	p := &chunkPrinter{w: out, showAgent: true, maxValue: 120, session: sessionID}
	for c, err := range h.Stream(ctx) {
		if err != nil {
			p.endLine()
			if ctx.Err() != nil {
				return fmt.Errorf("stopped waiting: the run continues when an engine with executor ID %q launches: %w", executorID, err)
			}
			return err
		}
		p.chunk(c)
		// The run waits for a person: say how to answer, from another
		// terminal (this command keeps following the run).
		switch v := c.Chunk.(type) {
		case *helix.ToolStartChunk:
			if v.ProviderExecuted != nil && !*v.ProviderExecuted {
				p.line("      ↳ answer from another terminal: helix-dbos submit %s %s --result JSON", sessionID, v.ToolCallID)
			}
		case *helix.ToolApprovalRequestChunk:
			p.line("      ↳ answer from another terminal: helix-dbos approve|deny %s %s", sessionID, v.ToolCallID)
		}
	}
	p.endLine()
	res, err := h.Result(ctx)
	if err != nil {
		return err
	}
	switch res.Status {
	case helix.AgentCompleted:
		fmt.Fprintf(out, "session %s completed; output: %s\n", sessionID, compactJSON(res.Output, 0))
		return nil
	case helix.AgentInterrupted:
		fmt.Fprintf(out, "session %s was interrupted again (%s)\n", sessionID, res.Error)
		return nil
	}
	if res.Status.Suspended() {
		fmt.Fprintf(out, "session %s waits for tool results (%s): answer with `helix-dbos approve|deny|submit %s <call>`; "+
			"the run continues when an engine with executor ID %q runs (this one stops now: `helix-dbos serve --executor-id %s`, or resume again)\n",
			sessionID, res.Status, sessionID, executorID, executorID)
		return nil
	}
	return fmt.Errorf("session %s: run %s ended %s: %s", sessionID, res.RunID, res.Status, res.Error)
}

func newRetryCmd(g *globals) *cobra.Command {
	var (
		checkpoint, message, executorID string
		fromStart                       bool
		delay                           time.Duration
	)
	cmd := &cobra.Command{
		Use:   "retry <session> [--checkpoint ID | --from-start]",
		Short: "Run a failed or interrupted session again, from a checkpoint (the latest by default) or from the start",
		Long: "Starts an engine and runs the session again in a new run, printing its stream live.\n\n" +
			"From a checkpoint (the latest unless --checkpoint names one; `helix-dbos sessions\n" +
			"checkpoints <session>` lists them) the message log, custom state and step count go back to\n" +
			"the checkpoint's. With --from-start the session keeps only its messages before the first\n" +
			"model answer and its initial state. Stream chunks after the restored point are removed\n" +
			"(readers see a stream_resync) and tool calls the session waited for are dropped.\n\n" +
			"Retrying runs the agent's model and tools, so it needs the agent's definition: the demo\n" +
			"agent, or an agent of an agent file (--agents FILE), as for `resume`.",
		Example: "  helix-dbos retry support-42                       # from the latest checkpoint\n" +
			"  helix-dbos retry support-42 --checkpoint cp_support-42_3 --agents agents.yaml\n" +
			"  helix-dbos retry support-42 --from-start --message \"Try again, briefly.\"",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if fromStart && checkpoint != "" {
				return fmt.Errorf("give --checkpoint ID or --from-start, not both")
			}
			sessionID := args[0]
			opts := &engine.RetryOptions{Mode: engine.RetryFromCheckpoint, CheckpointID: checkpoint, Message: message}
			if fromStart {
				opts.Mode = engine.RetryFromStart
			}
			out := cmd.OutOrStdout()
			if err := withStore(cmd.Context(), g, func(st *postgres.Store) error {
				return describeRetry(cmd.Context(), out, st, sessionID, opts)
			}); err != nil {
				return err
			}
			return runContinue(cmd.Context(), out, g, sessionID, executorID, delay, "retrying", func(ctx context.Context, e *engine.Engine) (*engine.Handle, error) {
				return e.Retry(ctx, sessionID, opts)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&checkpoint, "checkpoint", "", "the checkpoint to go back to (default: the latest)")
	f.BoolVar(&fromStart, "from-start", false, "start over from the session's first messages and initial state")
	f.StringVar(&message, "message", "", "a user message to add before the run")
	addContinueFlags(f, &executorID)
	f.DurationVar(&delay, "delay", 25*time.Millisecond, "demo agent: pause between streamed words")
	return cmd
}

// describeRetry checks that the session can be retried from where asked,
// before any engine starts, and says where it goes back to.
func describeRetry(ctx context.Context, out io.Writer, st *postgres.Store, sessionID string, opts *engine.RetryOptions) error {
	s, err := st.LoadState(ctx, sessionID)
	if err != nil {
		return err
	}
	switch s.Status {
	case helix.SessionFailed, helix.SessionInterrupted:
	case helix.SessionActive:
		return fmt.Errorf("session %s is running: abort it first (`helix-dbos abort %s`), or interrupt it and wait (`helix-dbos interrupt %s --wait`)", sessionID, sessionID, sessionID)
	default:
		return fmt.Errorf("session %s is %s: only a failed or interrupted session can be retried", sessionID, s.Status)
	}
	if opts.Mode == engine.RetryFromStart {
		fmt.Fprintf(out, "• retrying session %s (%s) from the start: back to its first messages and initial state\n", sessionID, s.Status)
		return nil
	}
	var cp *store.Checkpoint
	if opts.CheckpointID != "" {
		if cp, err = st.GetCheckpoint(ctx, opts.CheckpointID); err != nil {
			return fmt.Errorf("%w: `helix-dbos sessions checkpoints %s` lists the session's checkpoints", err, sessionID)
		}
		if cp.SessionID != sessionID {
			return fmt.Errorf("checkpoint %s belongs to session %s, not %s: `helix-dbos sessions checkpoints %s` lists this session's",
				cp.ID, cp.SessionID, sessionID, sessionID)
		}
	} else if cp, err = st.GetLatestCheckpoint(ctx, sessionID); errors.Is(err, helix.ErrNotFound) {
		fmt.Fprintf(out, "• retrying session %s (%s): it has no checkpoint yet, so from the start\n", sessionID, s.Status)
		return nil
	} else if err != nil {
		return err
	}
	fmt.Fprintf(out, "• retrying session %s (%s) from checkpoint %s: step %d, %d messages\n", sessionID, s.Status, cp.ID, cp.StepCount, cp.MessageCount)
	return nil
}

func newAbortCmd(g *globals) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "abort <session>",
		Short: "Stop a running session now: its workflow is cancelled and the session fails (it can be retried)",
		Long: "Cancels the session's workflow (it stops at its next step boundary, in whichever process\n" +
			"runs it) and fails the session and its run with \"aborted: <reason>\" (error code aborted).\n" +
			"Running sub-agents are aborted with it; calls the run waited for are ended. Unlike\n" +
			"`interrupt`, which lets the current step commit and can be resumed, abort is immediate and\n" +
			"final for the run: continue the session with `helix-dbos retry`.\n\n" +
			"Needs no agent definition and starts no engine: it works through an engine.Client.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runAbort(cmd.Context(), cmd.OutOrStdout(), g, args[0], reason)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "aborted by operator", "why, recorded on the session and the run")
	return cmd
}

func runAbort(ctx context.Context, out io.Writer, g *globals, sessionID, reason string) error {
	var run *store.Run
	var children int
	if err := withStore(ctx, g, func(st *postgres.Store) error {
		s, err := st.LoadState(ctx, sessionID)
		if err != nil {
			return err
		}
		if s.Status != helix.SessionActive {
			hint := ""
			switch s.Status {
			case helix.SessionInterrupted, helix.SessionFailed:
				hint = fmt.Sprintf(": it is not running; continue it with `helix-dbos retry %s`", sessionID)
			}
			return fmt.Errorf("session %s is %s: only a running (active) session can be aborted%s", sessionID, s.Status, hint)
		}
		if run, err = st.GetCurrentRun(ctx, sessionID); err != nil {
			return fmt.Errorf("%w (an active session without a run: `helix-dbos doctor` explains)", err)
		}
		tree, err := st.ListSubtree(ctx, sessionID)
		if err != nil {
			return err
		}
		for _, c := range tree[min(1, len(tree)):] {
			if c.Status == helix.SessionActive {
				children++
			}
		}
		return nil
	}); err != nil {
		return err
	}
	fmt.Fprintf(out, "• aborting session %s: run %s (workflow %s)", sessionID, run.RunID, cmp.Or(run.WorkflowID, "none"))
	if children > 0 {
		fmt.Fprintf(out, " and %d running sub-agent session(s)", children)
	}
	fmt.Fprintln(out)
	// A client cancels the workflow wherever it runs: no engine (and no
	// agent definition) is needed here.
	if err := withClient(ctx, g, func(c *engine.Client) error { return c.Abort(ctx, sessionID, reason) }); err != nil {
		return err
	}
	fmt.Fprintf(out, "session %s aborted (%s): it failed with error code %s; continue it with `helix-dbos retry %s`\n",
		sessionID, reason, helix.CodeAborted, sessionID)
	return nil
}
