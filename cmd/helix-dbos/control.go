package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// defaultCLIExecutorID is the DBOS executor ID of the engine `resume`
// starts. A resumed run belongs to it: if the command dies before the run
// ends, the next engine launched with this ID (another `resume`, or your
// process configured with it) recovers the run.
const defaultCLIExecutorID = "helix-cli"

// cliAgents are the agent types this CLI can run, by name. Resuming a
// session needs its agent's model and tools, which live in the process that
// defined the agent; the CLI only defines the demo agent.
var cliAgents = map[string]func(researchOpts) *helix.Agent{
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
				st := c.Store()
				s, err := st.LoadState(cmd.Context(), sessionID)
				if err != nil {
					return err
				}
				if s.Status != helix.SessionActive {
					return fmt.Errorf("session %s is %s: only a running (active) session can be interrupted", sessionID, s.Status)
				}
				waiting := waitingCalls(s)
				// The client writes the flag and wakes a run that waits for
				// human input (it would see the flag only when answered).
				if err := c.Interrupt(cmd.Context(), sessionID, reason); err != nil {
					return err
				}
				// The status check and the flag are not one statement: a run
				// that ended in between would leave a flag that stops the
				// session's next turn before its first step. Take it back.
				if s, err = st.LoadState(cmd.Context(), sessionID); err != nil {
					return err
				}
				// (Interrupted means the run already stopped, on this flag.)
				if s.Status != helix.SessionActive && s.Status != helix.SessionInterrupted {
					if err := st.ClearInterruptFlag(cmd.Context(), sessionID); err != nil {
						return err
					}
					return fmt.Errorf("session %s ended %s before the interrupt was recorded: nothing to interrupt", sessionID, s.Status)
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
				s, err = waitInactive(cmd.Context(), st, sessionID, timeout)
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

// waitInactive polls the session until it is no longer active.
func waitInactive(ctx context.Context, st *postgres.Store, sessionID string, timeout time.Duration) (*store.SessionState, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		s, err := st.LoadState(ctx, sessionID)
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
		Short: "Continue an interrupted session from its last committed step (agents this CLI defines)",
		Long: "Starts an engine, resumes the session in a new run, prints the run's stream live and waits\n" +
			"for it to end. Resuming runs the agent's model and tools, so it needs the agent's definition:\n" +
			"this CLI defines only the demo agent (" + strings.Join(slices.Sorted(maps.Keys(cliAgents)), ", ") + "). Sessions of your own\n" +
			"agents are resumed by the process that defines them (engine.Resume).",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runResume(cmd.Context(), cmd.OutOrStdout(), g, args[0], message, executorID, delay)
		},
	}
	f := cmd.Flags()
	f.StringVar(&message, "message", "", "a user message to add before the run continues")
	f.StringVar(&executorID, "executor-id", defaultCLIExecutorID, "DBOS executor ID of this command's engine")
	f.DurationVar(&delay, "delay", 25*time.Millisecond, "demo agent: pause between streamed words")
	return cmd
}

func runResume(ctx context.Context, out io.Writer, g *globals, sessionID, message, executorID string, delay time.Duration) error {
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
	build, ok := cliAgents[agentType]
	if !ok {
		return fmt.Errorf("session %s belongs to agent %q, which this CLI does not define (it knows only %s): "+
			"the process that owns the agent must resume it (engine.Resume), because resuming runs the agent's model and tools",
			sessionID, agentType, strings.Join(slices.Sorted(maps.Keys(cliAgents)), ", "))
	}
	rec, err := newRecorder(ctx, url, true)
	if err != nil {
		return err
	}
	defer rec.close()
	agent := build(researchOpts{delay: delay, rec: rec})

	e, err := engine.New(ctx, engine.Config{DatabaseURL: url, ExecutorID: executorID, Logger: g.logger()})
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		_ = e.Shutdown(sctx)
	}()
	if err := e.Register(agent); err != nil {
		return err
	}
	if err := e.Launch(ctx); err != nil {
		return err
	}
	h, err := e.Resume(ctx, sessionID, &engine.ResumeOptions{Message: message})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "resumed session %s in run %s (workflow %s, executor %s)\n", sessionID, h.RunID, h.WorkflowID, executorID)
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
	return fmt.Errorf("session %s: run %s ended %s: %s", sessionID, res.RunID, res.Status, res.Error)
}
