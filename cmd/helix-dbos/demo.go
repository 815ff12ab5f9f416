package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/internal/pgprovision"
	"github.com/helix-agents/helix-dbos/migrations"
	"github.com/helix-agents/helix-dbos/store"
	"github.com/helix-agents/helix-dbos/store/postgres"
)

// demoDatabase is the database the demo creates on a provisioned server.
const demoDatabase = "helix_demo"

func newDemoCmd(g *globals) *cobra.Command {
	var delay time.Duration
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the demo: provisions Postgres and shows a durable session and its live stream",
		Long: "Runs with no configuration: finds or starts PostgreSQL (HELIX_DATABASE_URL, a Docker\n" +
			"container, or the local cluster), migrates a demo database, then plays a two-step\n" +
			"session through the store while a live reader prints its stream. Step 2 is\n" +
			"interrupted half-way, as by a crash, and recovered: the orphaned chunks are\n" +
			"cleaned up, a stream_resync is emitted, and the step runs again.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), cmd.OutOrStdout(), g, delay)
		},
	}
	cmd.Flags().DurationVar(&delay, "delay", 25*time.Millisecond, "pause between streamed tokens")
	return cmd
}

func runDemo(ctx context.Context, out io.Writer, g *globals, delay time.Duration) (err error) {
	say := func(format string, args ...any) { fmt.Fprintf(out, "• "+format+"\n", args...) }
	start := time.Now()

	dbURL := g.databaseURL
	if dbURL == "" {
		srv, err := pgprovision.Provision(ctx, pgprovision.Options{Logf: func(f string, a ...any) { say(f, a...) }})
		if err != nil {
			return err
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_ = srv.Close(cctx)
		}()
		if dbURL, err = createDatabase(ctx, srv.URL, demoDatabase); err != nil {
			return err
		}
		say("created database %s", demoDatabase)
	}
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		return err
	}
	applied, err := migrations.Up(ctx, db)
	_ = db.Close()
	if err != nil {
		return err
	}
	say("migrations: %d applied", len(applied))

	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	st, err := postgres.New(pool)
	if err != nil {
		return err
	}
	defer st.Close()

	sessionID := fmt.Sprintf("demo-%s", time.Now().UTC().Format("20060102-150405.000"))
	if _, err := st.CreateSession(ctx, store.CreateSessionParams{SessionID: sessionID, AgentType: "weather-assistant",
		CustomState: json.RawMessage(`{"lookups":[]}`)}); err != nil {
		return err
	}
	if _, err := st.AppendMessages(ctx, sessionID, []helix.Message{helix.UserMessage("What's the weather in Oslo?")}); err != nil {
		return err
	}
	say("session %s created; live stream follows", sessionID)
	fmt.Fprintln(out)

	reader, err := st.NewReader(ctx, sessionID, nil)
	if err != nil {
		return err
	}
	printed := make(chan error, 1)
	go func() { printed <- printStream(ctx, out, reader) }()

	p := &player{st: st, sessionID: sessionID, delay: delay, w: st.NewWriter(sessionID, &store.WriterOptions{RunID: "run-1"})}
	if err := p.step1(ctx); err != nil {
		return err
	}
	if err := p.step2(ctx); err != nil {
		return err
	}
	final := json.RawMessage(`{"forecast":"sunny, 21°C"}`)
	if err := st.UpdateStatus(ctx, sessionID, helix.SessionCompleted, &store.StatusUpdate{Output: final}); err != nil {
		return err
	}
	if err := st.EndStream(ctx, sessionID, final); err != nil {
		return err
	}
	if err := <-printed; err != nil {
		return err
	}
	_ = reader.Close()

	fmt.Fprintln(out)
	state, err := st.LoadState(ctx, sessionID)
	if err != nil {
		return err
	}
	info, err := st.GetStreamInfo(ctx, sessionID)
	if err != nil {
		return err
	}
	page, err := st.ListCheckpoints(ctx, sessionID, nil)
	if err != nil {
		return err
	}
	say("session %s: %d messages, step %d, custom state %s", state.Status, state.MessageCount, state.StepCount, state.CustomState)
	say("stream %s: %d chunks kept (latest sequence %d; the crashed attempt's chunks were removed)", info.Status, info.ChunkCount, info.LatestSequence)
	say("%d checkpoints, latest %s", page.Total, state.CheckpointID)
	say("done in %s", time.Since(start).Round(time.Millisecond))
	return nil
}

// createDatabase (re)creates a database on a server and returns its URL.
func createDatabase(ctx context.Context, serverURL, name string) (string, error) {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
		return "", fmt.Errorf("drop demo database: %w", err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		return "", fmt.Errorf("create demo database: %w", err)
	}
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

// player writes the demo session's steps the way the engine will.
type player struct {
	st        *postgres.Store
	sessionID string
	delay     time.Duration
	w         store.Writer
}

func (p *player) base(step int) helix.Base {
	return helix.Base{AgentID: p.sessionID, AgentType: "weather-assistant", Step: step}
}

func (p *player) stream(ctx context.Context, step int, text string) error {
	for _, tok := range strings.SplitAfter(text, " ") {
		if err := p.w.Write(ctx, &helix.TextDeltaChunk{Base: p.base(step), Delta: tok}); err != nil {
			return err
		}
		time.Sleep(p.delay)
	}
	return nil
}

// commit appends the step's messages, promotes its staged state and writes a
// checkpoint atomically, then announces it on the stream.
func (p *player) commit(ctx context.Context, step int, msgs []helix.Message) error {
	if err := p.w.Flush(ctx); err != nil {
		return err
	}
	state, err := p.st.LoadState(ctx, p.sessionID)
	if err != nil {
		return err
	}
	state.StepCount = step
	stepID := fmt.Sprintf("%s-s%d", p.sessionID, step)
	res, err := p.st.SaveStateAndPromoteStaging(ctx, store.CommitParams{
		State: state, ExpectedVersion: state.Version, AppendMessages: msgs, PromoteStepID: stepID,
		Checkpoint: &store.CheckpointParams{RunID: "run-1", StepCount: step, MessageCount: -1},
	})
	if err != nil {
		return err
	}
	return p.w.Write(ctx, &helix.StepCommittedChunk{Base: p.base(step), RunID: "run-1", StepID: stepID, CheckpointID: res.CheckpointID})
}

func (p *player) step1(ctx context.Context) error {
	if err := p.w.Write(ctx, &helix.StepStartChunk{Base: p.base(1)}); err != nil {
		return err
	}
	if err := p.stream(ctx, 1, "Let me look that up for you."); err != nil {
		return err
	}
	args := json.RawMessage(`{"city":"Oslo"}`)
	if err := p.w.Write(ctx, &helix.ToolStartChunk{Base: p.base(1), ToolCallID: "call_1", ToolName: "get_weather", Arguments: args}); err != nil {
		return err
	}
	if err := p.st.StageChanges(ctx, p.sessionID, p.sessionID+"-s1", "call_1",
		[]helix.PatchOp{{Op: "add", Path: "/lookups/-", Value: json.RawMessage(`"Oslo"`)}}); err != nil {
		return err
	}
	yes := true
	if err := p.w.Write(ctx, &helix.ToolEndChunk{Base: p.base(1), ToolCallID: "call_1", ToolName: "get_weather",
		Result: json.RawMessage(`{"forecast":"sunny, 21°C"}`), ProviderExecuted: &yes}); err != nil {
		return err
	}
	return p.commit(ctx, 1, []helix.Message{
		helix.AssistantMessage("Let me look that up for you.", helix.ToolCall{ID: "call_1", Name: "get_weather", Arguments: args}),
		helix.ToolResultMessage("call_1", "get_weather", `{"forecast":"sunny, 21°C"}`),
	})
}

func (p *player) step2(ctx context.Context) error {
	run, err := p.st.GetStreamInfo(ctx, p.sessionID)
	if err != nil {
		return err
	}
	attemptFloor := run.LatestSequence
	// First attempt: the process "dies" half-way through the answer.
	if err := p.w.Write(ctx, &helix.StepStartChunk{Base: p.base(2)}); err != nil {
		return err
	}
	if err := p.stream(ctx, 2, "It is sunny in"); err != nil {
		return err
	}
	if err := p.w.Flush(ctx); err != nil {
		return err
	}
	// Recovery: remove the uncommitted attempt's chunks and tell readers.
	cp, err := p.st.GetLatestCheckpoint(ctx, p.sessionID)
	if err != nil {
		return err
	}
	res, err := p.st.CleanupToStep(ctx, p.sessionID, cp.StepCount, attemptFloor)
	if err != nil {
		return err
	}
	if err := p.w.Write(ctx, &helix.StreamResyncChunk{Base: p.base(2), CheckpointID: cp.ID, StepCount: cp.StepCount,
		MessageCount: cp.MessageCount, FromSequence: res.AtSequence, Reason: helix.ResyncCrashRecovery}); err != nil {
		return err
	}
	// Second attempt completes.
	if err := p.w.Write(ctx, &helix.StepStartChunk{Base: p.base(2)}); err != nil {
		return err
	}
	answer := "It is sunny in Oslo today, around 21°C."
	if err := p.stream(ctx, 2, answer); err != nil {
		return err
	}
	if err := p.w.Write(ctx, &helix.StepEndChunk{Base: p.base(2), FinishReason: "stop"}); err != nil {
		return err
	}
	if err := p.w.Write(ctx, &helix.OutputChunk{Base: p.base(2), Output: json.RawMessage(`{"forecast":"sunny, 21°C"}`)}); err != nil {
		return err
	}
	return p.commit(ctx, 2, []helix.Message{helix.AssistantMessage(answer)})
}

// printStream prints a stream readably until it ends. A truncation (the
// crashed attempt's chunks removed under the reader) is reported and the
// reader re-attached after the chunks it already printed, as a client would.
func printStream(ctx context.Context, out io.Writer, r store.Reader) error {
	for {
		c, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		var tr *helix.StreamTruncatedError
		if errors.As(err, &tr) {
			fmt.Fprintf(out, "\n  ⟲ stream truncated after step %d: the reader reloads\n", tr.TruncatedAtStep)
			continue
		}
		if err != nil {
			return err
		}
		switch v := c.Chunk.(type) {
		case *helix.StepStartChunk:
			fmt.Fprintf(out, "  [%3d] step %d ▸ ", c.Sequence, v.Step)
		case *helix.TextDeltaChunk:
			fmt.Fprint(out, v.Delta)
		case *helix.ToolStartChunk:
			fmt.Fprintf(out, "\n  [%3d] tool %s(%s)", c.Sequence, v.ToolName, v.Arguments)
		case *helix.ToolEndChunk:
			fmt.Fprintf(out, " → %s\n", v.Result)
		case *helix.StepCommittedChunk:
			fmt.Fprintf(out, "  [%3d] step %d committed (%s)\n", c.Sequence, v.Step, v.CheckpointID)
		case *helix.StreamResyncChunk:
			fmt.Fprintf(out, "\n  [%3d] ⚠ crash recovery: chunks after checkpoint step %d removed, resync from sequence %d\n",
				c.Sequence, v.StepCount, v.FromSequence)
		case *helix.StepEndChunk:
			fmt.Fprintf(out, "\n  [%3d] step %d end (%s)\n", c.Sequence, v.Step, v.FinishReason)
		case *helix.OutputChunk:
			fmt.Fprintf(out, "  [%3d] output %s\n", c.Sequence, v.Output)
		case *helix.StreamEnd:
			fmt.Fprintf(out, "  [%3d] stream end\n", c.Sequence)
		}
	}
}
