package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/helix-agents/helix-dbos/engine"
)

// demoWorkerName is the hidden command the demo re-executes its own binary
// with: the process it kills.
const demoWorkerName = "demo-worker"

func newDemoWorkerCmd(g *globals) *cobra.Command {
	var (
		sessionID, executorID string
		delay                 time.Duration
	)
	cmd := &cobra.Command{
		Use:    demoWorkerName,
		Short:  "Run the demo agent until killed (the demo's crash phase starts it)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The parent holds our stdin open; when it goes away, so do we,
			// rather than hang in the stalled model call.
			go func() {
				_, _ = io.Copy(io.Discard, os.Stdin)
				os.Exit(3)
			}()
			return runDemoWorker(cmd.Context(), g, sessionID, executorID, delay)
		},
	}
	f := cmd.Flags()
	f.StringVar(&sessionID, "session", "", "session ID to run")
	f.StringVar(&executorID, "executor-id", "", "DBOS executor ID")
	f.DurationVar(&delay, "delay", 25*time.Millisecond, "pause between streamed words")
	return cmd
}

// runDemoWorker starts the demo agent on a new session and waits. Its model
// hangs half-way through step 2, so the run is mid-flight when the parent
// kills the process.
func runDemoWorker(ctx context.Context, g *globals, sessionID, executorID string, delay time.Duration) error {
	url, err := g.requireDatabaseURL()
	if err != nil {
		return err
	}
	if sessionID == "" || executorID == "" {
		return errors.New("--session and --executor-id are required")
	}
	rec, err := newRecorder(ctx, url, false)
	if err != nil {
		return err
	}
	defer rec.close()
	agent := newResearchAgent(researchOpts{delay: delay, rec: rec, stallStep: 2})
	e, err := engine.New(ctx, engine.Config{DatabaseURL: url, ExecutorID: executorID, SkipMigrations: true, Logger: g.logger()})
	if err != nil {
		return err
	}
	defer func() { _ = e.Shutdown(context.WithoutCancel(ctx)) }()
	if err := e.Register(agent); err != nil {
		return err
	}
	if err := e.Launch(ctx); err != nil {
		return err
	}
	h, err := e.Execute(ctx, agent, engine.Input{Message: researchQuestion}, &engine.ExecuteOptions{SessionID: sessionID})
	if err != nil {
		return err
	}
	res, err := h.Result(ctx)
	if err != nil {
		return err
	}
	return fmt.Errorf("the worker's run ended %s without being killed", res.Status)
}
