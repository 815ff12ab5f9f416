package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/store"
)

func newStreamCmd(g *globals) *cobra.Command {
	var (
		from             int64
		follow, noFollow bool
		asJSON           bool
		maxValue         int
	)
	cmd := &cobra.Command{
		Use:   "stream <session>",
		Short: "Print a session's stream, and follow it live while the session runs",
		Long: "Prints the session's stream chunks after sequence --from (0: from the beginning), one\n" +
			"line each: sequence, type, agent and a summary; streamed text is joined onto one line.\n" +
			"With --follow (the default) it waits for new chunks while the session is active and ends\n" +
			"at stream_end or when the run ends (interrupted or failed); --no-follow prints what is\n" +
			"stored and exits. A crash recovery that removes chunks shows as a stream_resync line.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if from < 0 {
				return fmt.Errorf("--from must be >= 0, got %d", from)
			}
			return withClient(cmd.Context(), g, func(c *engine.Client) error {
				p := &chunkPrinter{w: cmd.OutOrStdout(), showAgent: true, maxValue: maxValue, session: args[0]}
				emit := p.chunk
				if asJSON {
					enc := json.NewEncoder(cmd.OutOrStdout())
					emit = func(c store.StoredChunk) {
						_ = enc.Encode(jsonChunk{Sequence: c.Sequence, RunID: c.RunID, Step: c.Step, Chunk: c.Raw})
					}
				}
				err := tailStream(cmd.Context(), c, args[0], from, follow && !noFollow, emit, p.line)
				p.endLine()
				if err == nil && p.printed == 0 && !asJSON {
					fmt.Fprintf(cmd.OutOrStdout(), "no chunks after sequence %d\n", from)
				}
				return err
			})
		},
	}
	f := cmd.Flags()
	f.Int64Var(&from, "from", 0, "print the chunks after this sequence (the last one you have seen)")
	f.BoolVar(&follow, "follow", true, "wait for new chunks while the session is active")
	f.BoolVar(&noFollow, "no-follow", false, "print the stored chunks and exit")
	f.BoolVar(&asJSON, "json", false, "print one JSON object per chunk (JSON Lines)")
	f.IntVar(&maxValue, "max-width", 120, "truncate JSON values to this many characters (0: never)")
	return cmd
}

// jsonChunk is one line of `stream --json`.
type jsonChunk struct {
	Sequence int64           `json:"sequence"`
	RunID    string          `json:"runId,omitempty"`
	Step     int             `json:"step"`
	Chunk    json.RawMessage `json:"chunk"`
}

// readPage is how many chunks a non-following read fetches at a time.
const readPage = 500

// tailStream calls emit for each chunk of the session's stream after
// sequence from. Without follow (or when the session is not active) it
// stops at the last stored chunk. With follow it waits for new chunks and
// returns after stream_end (unless a later turn continues the stream),
// after the chunk that ends the current run, or when ctx ends. note
// receives remarks about the stream itself (a truncation).
func tailStream(ctx context.Context, c *engine.Client, sessionID string, from int64, follow bool,
	emit func(store.StoredChunk), note func(string, ...any)) error {
	s, err := c.Session(ctx, sessionID)
	if err != nil {
		return err
	}
	seq := from
	if !follow || s.Status != helix.SessionActive {
		for {
			page, err := c.StreamChunks(ctx, sessionID, seq, readPage)
			if err != nil {
				return err
			}
			for _, c := range page {
				emit(c)
				seq = c.Sequence
			}
			if len(page) < readPage {
				return nil
			}
		}
	}
	for {
		done, err := follow1(ctx, c, sessionID, &seq, emit, note)
		if done || err != nil {
			return err
		}
	}
}

// follow1 reads with one reader until the stream or the run ends (done),
// or until the reader must be re-attached after *seq (a stream that a
// later turn continued). A truncation is noted, and the reader goes on
// from the surviving chunks.
func follow1(ctx context.Context, c *engine.Client, sessionID string, seq *int64,
	emit func(store.StoredChunk), note func(string, ...any)) (done bool, err error) {
	r, err := c.Stream(ctx, sessionID, *seq)
	if err != nil {
		return true, err
	}
	defer func() { _ = r.Close() }()
	for {
		ch, err := r.Next(ctx)
		var truncated *helix.StreamTruncatedError
		var failed *helix.StreamFailedError
		switch {
		case errors.Is(err, io.EOF):
			// stream_end: done, unless a later turn already continued the
			// stream.
			more, err := r.Chunks(ctx, *seq, 1)
			return len(more) == 0, err
		case errors.As(err, &truncated):
			note("  ⟲ chunks this reader had not read yet were removed (step %d cleaned up); re-attaching after sequence %d",
				truncated.TruncatedAtStep, *seq)
			continue
		case errors.As(err, &failed):
			return true, nil // the error chunk was the last one emitted
		case err != nil:
			return true, err
		}
		emit(ch)
		*seq = ch.Sequence
		if _, ok := ch.Chunk.(*helix.RunInterruptedChunk); ok {
			run, err := c.CurrentRun(ctx, sessionID)
			if err != nil {
				return true, err
			}
			if run.RunID == ch.RunID {
				return true, nil // no later run continues the session
			}
		}
	}
}
