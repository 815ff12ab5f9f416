package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"

	"github.com/helix-agents/helix-dbos/engine"
)

// gcStatuses are the statuses `gc --status` accepts.
var gcStatuses = []string{"completed", "failed", "aborted"}

// parseAge parses a duration that may count days: "30d", "1d12h", "12h".
func parseAge(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	var days time.Duration
	if i := strings.IndexByte(s, 'd'); i > 0 {
		n, err := strconv.Atoi(s[:i])
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%q is not a duration: use 30d, 12h, 1d12h or 90m", s)
		}
		days, s = time.Duration(n)*24*time.Hour, s[i+1:]
		if s == "" {
			return days, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not a duration: use 30d, 12h, 1d12h or 90m", s)
	}
	return days + d, nil
}

// gcPolicy builds the policy of `gc` (and of serve's retention flags):
// age for each of statuses, expired sessions unless keepExpired. An age of
// 0 means "now": every ended session of those statuses (the policy's 0
// means forever, so it becomes a nanosecond).
func gcPolicy(age time.Duration, statuses []string, expired bool, batch int) (engine.RetentionPolicy, error) {
	p := engine.RetentionPolicy{KeepExpired: !expired, BatchSize: batch}
	age = max(age, time.Nanosecond)
	for _, s := range statuses {
		switch strings.TrimSpace(s) {
		case "completed":
			p.Completed = age
		case "failed":
			p.Failed = age
		case "aborted":
			p.Aborted = age
		case "":
		default:
			return p, fmt.Errorf("--status %q: use one or more of %s", s, strings.Join(gcStatuses, ","))
		}
	}
	return p, nil
}

func newGCCmd(g *globals) *cobra.Command {
	var (
		olderThan, status string
		expired, dryRun   bool
		asJSON            bool
		batch             int
	)
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Delete ended sessions older than --older-than (one retention pass, now)",
		Long: "Deletes, now, the session trees (a root with its sub-agents and companions, their messages,\n" +
			"checkpoints, runs, streams and DBOS workflows) of the given --status whose last activity is\n" +
			"older than --older-than, and (with --expired, the default) every tree whose root's expiresAt\n" +
			"has passed. A tree with a run in progress (running, queued, waiting for a person) is never\n" +
			"deleted; aborted is a failed session whose last run was aborted; interrupted and paused\n" +
			"sessions are deleted only once expired. Trees are deleted in batches of --batch, one\n" +
			"transaction each. One pass runs at a time in a database: gc fails when an engine's\n" +
			"retention job (serve --retention-*) or another gc is running. --dry-run deletes nothing and\n" +
			"reports what would be deleted. Progress goes to stderr, the summary (sessions, rows per\n" +
			"table, bytes freed, estimated from the rows' sizes) to stdout.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			age, err := parseAge(olderThan)
			if err != nil {
				return fmt.Errorf("--older-than: %w", err)
			}
			if batch < 1 || batch > engine.MaxGCBatchSize {
				return fmt.Errorf("--batch must be between 1 and %d, got %d", engine.MaxGCBatchSize, batch)
			}
			policy, err := gcPolicy(age, strings.Split(status, ","), expired, batch)
			if err != nil {
				return err
			}
			if policy.Completed == 0 && policy.Failed == 0 && policy.Aborted == 0 && policy.KeepExpired {
				return errors.New("nothing to collect: give --status, or --expired")
			}
			ctx := cmd.Context()
			progress := newGCProgress(cmd.ErrOrStderr(), dryRun)
			var res *engine.GCResult
			err = withClient(ctx, g, func(c *engine.Client) error {
				res, err = c.CollectGarbage(ctx, policy, &engine.GCOptions{DryRun: dryRun, Progress: progress.update})
				return err
			})
			progress.done()
			if errors.Is(err, engine.ErrGCBusy) {
				return errors.New("another garbage-collection pass is running (an engine's retention job or another helix-dbos gc): try again when it ends")
			}
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), res)
			}
			printGCSummary(cmd.OutOrStdout(), res)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&olderThan, "older-than", "30d", "delete sessions whose last activity is older than this (30d, 12h, 1d12h)")
	f.StringVar(&status, "status", strings.Join(gcStatuses, ","), "statuses to delete: completed, failed, aborted (comma-separated; \"\" for expired sessions only)")
	f.BoolVar(&expired, "expired", true, "also delete sessions past their expiresAt, whatever their status and age (not while a run is in progress)")
	f.BoolVar(&dryRun, "dry-run", false, "delete nothing: count what would be deleted")
	f.BoolVar(&asJSON, "json", false, "print the summary as JSON for scripts")
	f.IntVar(&batch, "batch", engine.DefaultGCBatchSize, "session trees per transaction")
	return cmd
}

// gcProgress prints a pass's progress on stderr: a bar redrawn in place on
// a terminal, a line per second otherwise.
type gcProgress struct {
	w        io.Writer
	tty      bool
	verb     string
	start    time.Time
	last     time.Time
	printed  bool
	spinning int
}

func newGCProgress(w io.Writer, dryRun bool) *gcProgress {
	f, ok := w.(*os.File)
	p := &gcProgress{w: w, tty: ok && isatty.IsTerminal(f.Fd()), verb: "deleted", start: time.Now()}
	if dryRun {
		p.verb = "found"
	}
	return p
}

func (p *gcProgress) update(r engine.GCResult) {
	line := fmt.Sprintf("%s %d trees (%d sessions, %d rows, %s) in %d batches, %.1fs",
		p.verb, r.Trees, r.Sessions, r.TotalRows(), formatBytes(r.TotalBytes()), r.Batches, time.Since(p.start).Seconds())
	if p.tty {
		// The total is unknown until the end: the bar shows activity.
		const width = 20
		p.spinning = (p.spinning + 1) % width
		bar := strings.Repeat("=", p.spinning) + ">" + strings.Repeat(" ", width-1-p.spinning)
		fmt.Fprintf(p.w, "\r\033[K[%s] %s", bar, line)
		p.printed = true
		return
	}
	if time.Since(p.last) >= time.Second {
		p.last = time.Now()
		fmt.Fprintf(p.w, "• %s\n", line)
	}
}

func (p *gcProgress) done() {
	if p.tty && p.printed {
		fmt.Fprint(p.w, "\n")
	}
}

// printGCSummary prints what a pass deleted, table by table.
func printGCSummary(w io.Writer, r *engine.GCResult) {
	verb := "deleted"
	if r.DryRun {
		verb = "would delete"
	}
	fmt.Fprintf(w, "%s %d session trees: %d sessions, %d workflows, %d rows, about %s\n",
		verb, r.Trees, r.Sessions, r.Workflows, r.TotalRows(), formatBytes(r.TotalBytes()))
	tables := make([]string, 0, len(r.Rows))
	for t := range r.Rows {
		tables = append(tables, t)
	}
	slices.Sort(tables)
	for _, t := range tables {
		fmt.Fprintf(w, "  %-30s %10d rows %12s\n", t, r.Rows[t], formatBytes(r.Bytes[t]))
	}
	if len(r.Skipped) > 0 {
		fmt.Fprintf(w, "skipped %d trees on which a run started meanwhile: %s\n", len(r.Skipped), strings.Join(r.Skipped, ", "))
	}
	if r.DryRun {
		fmt.Fprintln(w, "dry run: nothing was deleted")
	}
}

// formatBytes prints n in B, kB, MB or GB (powers of 1000).
func formatBytes(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.1f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
}
