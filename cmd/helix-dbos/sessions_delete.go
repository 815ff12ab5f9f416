package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
)

// deleteResult is one session's outcome in `sessions delete --json`.
type deleteResult struct {
	SessionID string `json:"sessionId"`
	// Status is deleted, not_found, refused (running, or not a root
	// session) or failed.
	Status    string           `json:"status"`
	Error     string           `json:"error,omitempty"`
	Sessions  int64            `json:"sessions,omitempty"`
	Workflows int              `json:"workflows,omitempty"`
	Rows      map[string]int64 `json:"rows,omitempty"`
}

// deleteReport is what `sessions delete --json` prints.
type deleteReport struct {
	Results  []deleteResult `json:"results"`
	Deleted  int            `json:"deleted"`
	NotFound int            `json:"notFound"`
	Failed   int            `json:"failed"`
}

func newSessionsDeleteCmd(g *globals) *cobra.Command {
	var force, asJSON bool
	cmd := &cobra.Command{
		Use:   "delete <session>...",
		Short: "Delete root sessions for good, with their sub-agents, companions and DBOS workflows",
		Long: "Deletes each root session with its whole tree: its sub-agent and companion sessions, their\n" +
			"messages, checkpoints, runs, streams, inbox, usage and step-journal rows, and the DBOS rows\n" +
			"(status, inputs, outputs, steps, notifications, events, streams) of every workflow of their\n" +
			"runs. Each session is deleted in its own transaction. A session with a run in progress\n" +
			"(running, queued, or waiting for an approval or a client's result) is refused unless\n" +
			"--force, which aborts the run wherever it runs and waits for its workflows to end. A\n" +
			"sub-agent's or companion's session is refused: delete its root. A session that does not\n" +
			"exist is reported and is not an error. Exits 1 when a session was refused or failed.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			var rep deleteReport
			err := withClient(ctx, g, func(c *engine.Client) error {
				for _, id := range args {
					r := deleteResult{SessionID: id}
					stats, err := c.DeleteSession(ctx, id, &engine.DeleteOptions{Force: force})
					var running *helix.SessionRunningError
					var notRoot *helix.NotRootSessionError
					switch {
					case errors.As(err, &running):
						r.Status, r.Error = "refused", strings.Replace(strings.TrimPrefix(running.Error(), "helix: "), "with force", "with --force", 1)
						rep.Failed++
					case errors.As(err, &notRoot):
						r.Status, r.Error = "refused", strings.TrimPrefix(notRoot.Error(), "helix: ")
						rep.Failed++
					case err != nil:
						r.Status, r.Error = "failed", err.Error()
						rep.Failed++
					case len(stats.Deleted) == 0:
						r.Status = "not_found"
						rep.NotFound++
					default:
						r.Status, r.Sessions, r.Workflows, r.Rows = "deleted", stats.Sessions, stats.Workflows, stats.Rows
						rep.Deleted++
					}
					rep.Results = append(rep.Results, r)
					if !asJSON {
						printDeleteResult(cmd, r)
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if err := printJSON(out, rep); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(out, "%d deleted, %d not found, %d refused or failed\n", rep.Deleted, rep.NotFound, rep.Failed)
			}
			if rep.Failed > 0 {
				return fmt.Errorf("%d of %d sessions were not deleted", rep.Failed, len(args))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&force, "force", false, "abort a run in progress (and wait for its workflows to end) instead of refusing")
	f.BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return cmd
}

func printDeleteResult(cmd *cobra.Command, r deleteResult) {
	out := cmd.OutOrStdout()
	switch r.Status {
	case "deleted":
		var rows int64
		for _, n := range r.Rows {
			rows += n
		}
		fmt.Fprintf(out, "session %s: deleted (%d sessions, %d workflows, %d rows)\n", r.SessionID, r.Sessions, r.Workflows, rows)
	case "not_found":
		fmt.Fprintf(out, "session %s: not found, nothing to delete\n", r.SessionID)
	default:
		fmt.Fprintf(out, "session %s: %s: %s\n", r.SessionID, r.Status, r.Error)
	}
}
