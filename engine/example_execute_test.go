package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/llm/scripted"
)

// The common path: define an agent, register it, launch, execute, and wait
// for the result. The model here is scripted (package llm/scripted): it
// answers as the script says, which makes the run deterministic; give a
// real adapter (llm/openai, llm/anthropic) in production. The database is
// a fresh one of the test binary's; yours is Config.DatabaseURL.
func ExampleEngine_Execute() {
	ctx := context.Background()
	eng, err := engine.New(ctx, engine.Config{DatabaseURL: pgtest.ExampleURL()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = eng.Shutdown(ctx) }()
	greeter := &helix.Agent{
		Name:         "greeter",
		SystemPrompt: "Greet the user by name.",
		Model:        scripted.New(scripted.Step{Text: "Hello, Ada!"}),
	}
	if err := eng.Register(greeter); err != nil {
		fmt.Println(err)
		return
	}
	if err := eng.Launch(ctx); err != nil { // migrates the database, recovers this executor's runs
		fmt.Println(err)
		return
	}
	h, err := eng.Execute(ctx, greeter, engine.Input{Message: "Hi, I am Ada."}, &engine.ExecuteOptions{SessionID: "greeting-1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := h.Result(ctx) // waits for the run, which any engine of the cluster may finish
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.SessionID, res.Status, string(res.Output))
	// Output: greeting-1 completed "Hello, Ada!"
}

// Stream reads a session's stream from a sequence, live: a web handler
// resumes a client from its Last-Event-ID the same way. Here the run has
// ended, so the reader returns every chunk and then io.EOF.
func ExampleEngine_Stream() {
	ctx := context.Background()
	eng, err := engine.New(ctx, engine.Config{DatabaseURL: pgtest.ExampleURL()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = eng.Shutdown(ctx) }()
	greeter := &helix.Agent{Name: "greeter", Model: scripted.New(scripted.Step{Text: "Hello, Ada!"})}
	if err := eng.Register(greeter); err != nil {
		fmt.Println(err)
		return
	}
	if err := eng.Launch(ctx); err != nil {
		fmt.Println(err)
		return
	}
	h, err := eng.Execute(ctx, greeter, engine.Input{Message: "Hi, I am Ada."}, &engine.ExecuteOptions{SessionID: "greeting-2"})
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := h.Result(ctx); err != nil {
		fmt.Println(err)
		return
	}

	r, err := eng.Stream(ctx, "greeting-2", 0) // 0: from the first chunk
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = r.Close() }()
	var text strings.Builder
	for {
		c, err := r.Next(ctx)
		if errors.Is(err, io.EOF) { // after stream_end
			break
		}
		if err != nil { // *helix.StreamFailedError, a truncation, ctx
			fmt.Println(err)
			return
		}
		if d, ok := c.Chunk.(*helix.TextDeltaChunk); ok {
			text.WriteString(d.Delta)
		}
	}
	info, err := r.Info(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("streamed %q; stream %s, read to its last chunk: %t\n", text.String(), info.Status, r.Sequence() == info.LatestSequence)
	// Output: streamed "Hello, Ada!"; stream ended, read to its last chunk: true
}

// A web handler with no engine follows a session's stream through a
// Client, resuming after the last sequence its client received (an SSE
// Last-Event-ID). A truncation (crash recovery, a retry) is reported once;
// the reader then goes on from the surviving chunks.
func ExampleClient_Stream() {
	ctx := context.Background()
	c, err := engine.NewClient(ctx, engine.ClientConfig{DatabaseURL: os.Getenv("HELIX_DATABASE_URL")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = c.Close() }()
	lastEventID := int64(0)
	r, err := c.Stream(ctx, "s-1", lastEventID)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = r.Close() }()
	for {
		ch, err := r.Next(ctx)
		var failed *helix.StreamFailedError
		switch {
		case errors.Is(err, io.EOF):
			fmt.Println("end")
			return
		case errors.As(err, &failed):
			fmt.Println("failed:", failed.Message)
			return
		case errors.Is(err, helix.ErrStreamTruncated):
			fmt.Println("rewound: the stream_resync chunk follows")
			continue
		case err != nil:
			fmt.Println(err)
			return
		}
		fmt.Println(ch.Sequence, ch.Chunk.ChunkType())
	}
}

// Interrupt refuses a session that is not running, and one whose run ended
// while the interrupt was being recorded (it then takes the flag back, so
// the session's next turn is not stopped): the caller gets the same
// *RefusedError either way.
func ExampleEngine_Interrupt() {
	ctx := context.Background()
	eng, err := engine.New(ctx, engine.Config{DatabaseURL: os.Getenv("HELIX_DATABASE_URL")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = eng.Shutdown(ctx) }()
	if err := eng.Launch(ctx); err != nil {
		fmt.Println(err)
		return
	}
	err = eng.Interrupt(ctx, "s-1", "the user pressed stop")
	var refused *engine.RefusedError
	switch {
	case errors.As(err, &refused) && refused.Code == engine.RefusedNotRunning:
		fmt.Println("nothing to interrupt:", refused.Message)
	case err != nil:
		fmt.Println(err)
	default:
		fmt.Println("s-1 stops before its next step")
	}
}
