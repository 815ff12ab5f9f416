package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

func newSessionsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sessions",
		Short: "Inspect sessions: list, show, messages, runs, checkpoints; delete them",
		Long: "Read sessions from the helix tables (--database-url or HELIX_DATABASE_URL). These commands\n" +
			"only read, but delete: they need no engine and work while agents run in other processes.",
	}
	cmd.AddCommand(newSessionsListCmd(g), newSessionsShowCmd(g), newSessionsMessagesCmd(g), newSessionsRunsCmd(g),
		newSessionsCheckpointsCmd(g), newSessionsDeleteCmd(g))
	return cmd
}

// withStore runs fn on a store connected to the configured database.
func withStore(ctx context.Context, g *globals, fn func(st *postgres.Store) error) error {
	st, done, err := g.openStore(ctx)
	if err != nil {
		return err
	}
	defer done()
	return explain(fn(st))
}

func newSessionsListCmd(g *globals) *cobra.Command {
	var (
		status, agent string
		limit, offset int
		asJSON        bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List sessions, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts := store.ListSessionsOptions{AgentType: agent, Limit: limit, Offset: offset}
			if status != "" {
				s, err := helix.ParseSessionStatus(status)
				if err != nil {
					return fmt.Errorf("--status: %w", err)
				}
				opts.Status = s
			}
			return withStore(cmd.Context(), g, func(st *postgres.Store) error {
				list, err := st.ListSessions(cmd.Context(), opts)
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if asJSON {
					if list == nil {
						list = []store.SessionSummary{}
					}
					return printJSON(out, list)
				}
				if len(list) == 0 {
					fmt.Fprintln(out, "no sessions")
					return nil
				}
				w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "SESSION\tAGENT\tSTATUS\tSTEPS\tMESSAGES\tUPDATED")
				for _, s := range list {
					fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\n", s.SessionID, s.AgentType, s.Status, s.StepCount, s.MessageCount, fmtTime(s.UpdatedAt))
				}
				return w.Flush()
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&status, "status", "", "only sessions with this status (active, completed, failed, interrupted, paused)")
	f.StringVar(&agent, "agent", "", "only sessions of this agent type")
	f.IntVar(&limit, "limit", 50, fmt.Sprintf("at most this many sessions (max %d)", store.MaxPageSize))
	f.IntVar(&offset, "offset", 0, "skip this many sessions")
	f.BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return cmd
}

// sessionDetail is what `sessions show --json` prints.
type sessionDetail struct {
	Session    *store.SessionState `json:"session"`
	Checkpoint *store.Checkpoint   `json:"checkpoint,omitempty"`
	CurrentRun *store.Run          `json:"currentRun,omitempty"`
	Stream     *store.StreamInfo   `json:"stream,omitempty"`
	// PendingToolCalls are the tool calls the session waits for, answered
	// or not, with those of its sub-agents for a root session.
	PendingToolCalls []store.PendingClientToolCall `json:"pendingToolCalls,omitempty"`
	// Queue, set while the current run waits in a queue for a slot, says
	// where.
	Queue *engine.QueueState `json:"queue,omitempty"`
}

func loadDetail(ctx context.Context, st *postgres.Store, sessionID string) (*sessionDetail, error) {
	s, err := st.LoadState(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	d := &sessionDetail{Session: s}
	if s.CheckpointID != "" {
		if d.Checkpoint, err = st.GetCheckpoint(ctx, s.CheckpointID); err != nil && !errors.Is(err, helix.ErrNotFound) {
			return nil, err
		}
	}
	if d.CurrentRun, err = st.GetCurrentRun(ctx, sessionID); err != nil && !errors.Is(err, helix.ErrNotFound) {
		return nil, err
	}
	if d.Stream, err = st.GetStreamInfo(ctx, s.StreamID); err != nil && !errors.Is(err, helix.ErrNotFound) {
		return nil, err
	}
	if d.PendingToolCalls, err = st.ListPendingCalls(ctx, s.SessionID); err != nil {
		return nil, err
	}
	if s.Status == helix.SessionActive && d.CurrentRun != nil && d.CurrentRun.Status == helix.RunRunning {
		if d.Queue, err = engine.ReadQueueState(ctx, st.Pool(), sessionID); err != nil {
			return nil, err
		}
	}
	return d, nil
}

func newSessionsShowCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show <session>",
		Short: "Show a session: status, counters, checkpoint, current run, pending tool calls, custom state, output, error",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withStore(cmd.Context(), g, func(st *postgres.Store) error {
				d, err := loadDetail(cmd.Context(), st, args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd.OutOrStdout(), d)
				}
				printDetail(cmd.OutOrStdout(), d)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return cmd
}

func printDetail(out io.Writer, d *sessionDetail) {
	s := d.Session
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(w, "%s\t"+format+"\n", append([]any{k}, args...)...) }
	row("session", "%s", s.SessionID)
	row("agent", "%s", s.AgentType)
	row("status", "%s", s.Status)
	if s.ParentSessionID != "" {
		row("parent", "%s (root %s)", s.ParentSessionID, s.RootSessionID)
	}
	row("steps", "%d (this turn)", s.StepCount)
	row("messages", "%d", s.MessageCount)
	if s.ResumeCount > 0 {
		row("resumes", "%d", s.ResumeCount)
	}
	switch {
	case d.Checkpoint != nil:
		row("checkpoint", "%s (step %d, %d messages, %s)", d.Checkpoint.ID, d.Checkpoint.StepCount, d.Checkpoint.MessageCount, fmtTime(d.Checkpoint.CreatedAt))
	case s.CheckpointID != "":
		row("checkpoint", "%s", s.CheckpointID)
	default:
		row("checkpoint", "none yet")
	}
	if r := d.CurrentRun; r != nil {
		row("current run", "turn %d · %s · %s · %d steps · workflow %s", r.Turn, r.RunID, r.Status, r.StepCount, r.WorkflowID)
		if h := hibernation(r); h != "" {
			row("hibernation", "%s", h)
		}
	}
	if q := d.Queue; q != nil {
		row("queued", "on %s, partition %s, since %s, %d ahead of it in its partition", q.Queue, q.PartitionKey, fmtTime(q.Since), q.Ahead)
	}
	if d.Stream != nil {
		row("stream", "%s · %d chunks · latest sequence %d", d.Stream.Status, d.Stream.ChunkCount, d.Stream.LatestSequence)
	}
	if s.InterruptRequested {
		row("interrupt", "requested (%s): the run stops before its next step", s.InterruptReason)
	}
	if ic := s.InterruptContext; ic != nil && s.Status == helix.SessionInterrupted {
		row("interrupted", "after step %d%s", ic.StepCount, paren(ic.Reason))
	}
	if s.Error != "" {
		row("error", "%s", s.Error)
	}
	if s.FailureReason != "" {
		row("failure", "%s", s.FailureReason)
	}
	if s.UserID != "" {
		row("user", "%s", s.UserID)
	}
	if len(s.Tags) > 0 {
		row("tags", "%s", strings.Join(s.Tags, ", "))
	}
	row("created", "%s", fmtTime(s.CreatedAt))
	row("updated", "%s", fmtTime(s.UpdatedAt))
	_ = w.Flush()
	printPending(out, "", s, d.PendingToolCalls)
	block := func(title string, raw json.RawMessage) {
		if len(raw) == 0 {
			return
		}
		fmt.Fprintf(out, "%s:\n", title)
		var b bytes.Buffer
		if json.Indent(&b, raw, "  ", "  ") != nil {
			b.Reset()
			b.Write(raw)
		}
		fmt.Fprintf(out, "  %s\n", b.String())
	}
	block("custom state", s.CustomState)
	block("output", s.Output)
}

func newSessionsMessagesCmd(g *globals) *cobra.Command {
	var (
		offset, limit int
		asJSON        bool
	)
	cmd := &cobra.Command{
		Use:   "messages <session>",
		Short: "Print a session's messages, oldest first",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withStore(cmd.Context(), g, func(st *postgres.Store) error {
				page, err := st.GetMessages(cmd.Context(), args[0], &store.GetMessagesOptions{Offset: offset, Limit: limit})
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if asJSON {
					if page.Messages == nil {
						page.Messages = []helix.Message{}
					}
					return printJSON(out, page)
				}
				printMessages(out, page)
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.IntVar(&offset, "offset", 0, "skip this many messages")
	f.IntVar(&limit, "limit", store.DefaultMessagePageSize, fmt.Sprintf("at most this many messages (max %d)", store.MaxPageSize))
	f.BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return cmd
}

func printMessages(out io.Writer, page *store.MessagePage) {
	const width = 10 // "assistant" and a space
	pad := strings.Repeat(" ", 6+width)
	for i, m := range page.Messages {
		head := fmt.Sprintf("#%-4d %-*s", page.Offset+i, width, m.Role)
		var lines []string
		switch m.Role {
		case helix.RoleTool:
			lines = append(lines, fmt.Sprintf("%s (%s) → %s", m.ToolName, m.ToolCallID, compactJSONOrText(m.Content)))
		default:
			if m.Thinking != nil && m.Thinking.Content != "" {
				lines = append(lines, "(thinking) "+m.Thinking.Content)
			}
			if m.Content != "" {
				lines = append(lines, m.Content)
			}
			for _, c := range m.ToolCalls {
				lines = append(lines, fmt.Sprintf("→ call %s %s (%s)", c.Name, compactJSON(c.Arguments, 0), c.ID))
			}
		}
		if len(lines) == 0 {
			lines = []string{"(empty)"}
		}
		text := strings.ReplaceAll(strings.Join(lines, "\n"), "\n", "\n"+pad)
		fmt.Fprintf(out, "%s%s\n", head, text)
	}
	switch {
	case page.Total == 0:
		fmt.Fprintln(out, "no messages")
	case len(page.Messages) == 0:
		fmt.Fprintf(out, "no messages at offset %d (%d in total)\n", page.Offset, page.Total)
	default:
		fmt.Fprintf(out, "messages %d–%d of %d", page.Offset, page.Offset+len(page.Messages)-1, page.Total)
		if page.HasMore {
			fmt.Fprintf(out, " (more: --offset %d)", page.Offset+len(page.Messages))
		}
		fmt.Fprintln(out)
	}
}

// compactJSONOrText prints a tool result compactly when it is JSON.
func compactJSONOrText(s string) string {
	if json.Valid([]byte(s)) {
		return compactJSON(json.RawMessage(s), 0)
	}
	return s
}

func newSessionsRunsCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "runs <session>",
		Short: "List a session's runs (turns, resumes, retries) with their workflows",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withStore(cmd.Context(), g, func(st *postgres.Store) error {
				if _, err := st.LoadState(cmd.Context(), args[0]); err != nil {
					return err
				}
				runs, err := st.ListRuns(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if asJSON {
					if runs == nil {
						runs = []store.Run{}
					}
					return printJSON(out, runs)
				}
				if len(runs) == 0 {
					fmt.Fprintln(out, "no runs")
					return nil
				}
				w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "TURN\tRUN\tSTATUS\tSTEPS\tWORKFLOW\tSTARTED\tENDED\tERROR")
				for _, r := range runs {
					ended := "-"
					if r.CompletedAt != nil {
						ended = fmtTime(*r.CompletedAt)
					}
					status := string(r.Status)
					switch {
					case r.HibernatedAt != nil:
						status += " (hibernated)"
					case r.WokenAt != nil:
						status += " (woken)"
					}
					wf := cmp.Or(r.WorkflowID, "-")
					if r.Wakes > 0 {
						wf += fmt.Sprintf(" +%d continuation(s)", r.Wakes)
					}
					fmt.Fprintf(w, "%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.Turn, r.RunID, status, r.StepCount,
						wf, fmtTime(r.StartedAt), ended, truncate(r.Error, 60))
				}
				return w.Flush()
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return cmd
}

// checkpointList is what `sessions checkpoints --json` prints.
type checkpointList struct {
	Checkpoints []store.Checkpoint `json:"checkpoints"`
	Total       int                `json:"total"`
	HasMore     bool               `json:"hasMore"`
	// Current is the checkpoint the session is at now.
	Current string `json:"current,omitempty"`
}

func newSessionsCheckpointsCmd(g *globals) *cobra.Command {
	var (
		offset, limit int
		asJSON        bool
	)
	cmd := &cobra.Command{
		Use:   "checkpoints <session>",
		Short: "List a session's checkpoints, oldest first: the points `retry --checkpoint` can go back to",
		Long: "A checkpoint is written at every committed step: the step count, the length of the message\n" +
			"log, the custom state and the stream position at that point. `helix-dbos retry <session>\n" +
			"--checkpoint <id>` runs a failed or interrupted session again from one of them.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withStore(cmd.Context(), g, func(st *postgres.Store) error {
				s, err := st.LoadState(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				page, err := st.ListCheckpoints(cmd.Context(), args[0], &store.ListOptions{Offset: offset, Limit: limit})
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if asJSON {
					list := checkpointList{Checkpoints: page.Items, Total: page.Total, HasMore: page.HasMore, Current: s.CheckpointID}
					if list.Checkpoints == nil {
						list.Checkpoints = []store.Checkpoint{}
					}
					return printJSON(out, list)
				}
				printCheckpoints(out, s, page, offset)
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.IntVar(&offset, "offset", 0, "skip this many checkpoints")
	f.IntVar(&limit, "limit", 50, fmt.Sprintf("at most this many checkpoints (max %d)", store.MaxPageSize))
	f.BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return cmd
}

func printCheckpoints(out io.Writer, s *store.SessionState, page *store.CheckpointPage, offset int) {
	if page.Total == 0 {
		fmt.Fprintln(out, "no checkpoints (the session has not committed a step)")
		return
	}
	if len(page.Items) == 0 {
		fmt.Fprintf(out, "no checkpoints at offset %d (%d in total)\n", offset, page.Total)
		return
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CHECKPOINT\tSTEP\tMESSAGES\tSTATUS\tSEQUENCE\tRUN\tCREATED")
	for _, c := range page.Items {
		seq := "-"
		if c.StreamSequence != nil {
			seq = fmt.Sprint(*c.StreamSequence)
		}
		current := ""
		if c.ID == s.CheckpointID {
			current = "  ← current"
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\t%s\t%s%s\n", c.ID, c.StepCount, c.MessageCount, c.Status, seq,
			cmp.Or(shortID(c.RunID), "-"), fmtTime(c.CreatedAt), current)
	}
	_ = w.Flush()
	fmt.Fprintf(out, "checkpoints %d–%d of %d", offset+1, offset+len(page.Items), page.Total)
	if page.HasMore {
		fmt.Fprintf(out, " (more: --offset %d)", offset+len(page.Items))
	}
	fmt.Fprintln(out)
	switch s.Status {
	case helix.SessionFailed, helix.SessionInterrupted:
		fmt.Fprintf(out, "retry from one: helix-dbos retry %s --checkpoint <id>\n", s.SessionID)
	}
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

// hibernation describes a run's hibernation for `sessions show`: since
// when it is hibernated and its next wake, or that its continuation is due
// but has not begun; "" for a run that is neither.
func hibernation(r *store.Run) string {
	wakes := ""
	if r.Wakes > 0 {
		wakes = fmt.Sprintf(" · woken %d time(s) before", r.Wakes)
	}
	switch {
	case r.HibernatedAt != nil:
		next := "an answer or an interrupt wakes it"
		if r.WakeAt != nil {
			next = "an answer, an interrupt or its deadline at " + fmtTime(*r.WakeAt) + " wakes it"
		}
		return fmt.Sprintf("hibernated since %s%s: no workflow runs it; %s", fmtTime(*r.HibernatedAt), wakes, next)
	case r.WokenAt != nil:
		return fmt.Sprintf("woken at %s: its continuation %s has not begun yet (an engine starts it)", fmtTime(*r.WokenAt),
			r.CurrentWorkflowID())
	case r.Wakes > 0:
		return fmt.Sprintf("woken %d time(s): it runs in continuation %s", r.Wakes, r.CurrentWorkflowID())
	}
	return ""
}
