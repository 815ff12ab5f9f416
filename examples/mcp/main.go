// Command mcp runs an agent whose tools come from an MCP server: here a
// small notes server that this same binary runs over stdio
// (`mcp serve-notes`), as an agent would run any MCP server's command.
//
//	HELIX_DATABASE_URL=postgres://... go run ./examples/mcp
//
// The agent (a scripted model, so no API key is needed) adds a note through
// the server's add_note tool, which needs an approval, then lists the
// notes. The run keeps the tool list it began with; every call carries
// its idempotency key, which the server uses to add a note once however
// often a call is sent.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"sync"
	"syscall"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/llm/scripted"
	"github.com/helix-agents/helix-dbos/mcp"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "serve-notes" {
		if err := notesServer().Run(context.Background(), &sdk.StdioTransport{}); err != nil {
			log.Fatal(err)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	url := os.Getenv("HELIX_DATABASE_URL")
	if url == "" {
		log.Fatal("set HELIX_DATABASE_URL to a Postgres URL")
	}
	exe, err := os.Executable()
	if err != nil {
		log.Fatal(err)
	}
	if err := run(ctx, url, mcp.Server{Name: "notes", Command: exe, Args: []string{"serve-notes"}}, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// notesServer is an MCP server with two tools; add_note adds a note once
// per idempotency key.
func notesServer() *sdk.Server {
	var mu sync.Mutex
	var notes []string
	seen := map[string]bool{}
	s := sdk.NewServer(&sdk.Implementation{Name: "notes", Version: "1"}, nil)
	type addIn struct {
		Text string `json:"text" jsonschema:"the note"`
	}
	type listOut struct {
		Notes []string `json:"notes"`
	}
	sdk.AddTool(s, &sdk.Tool{Name: "add_note", Description: "Adds a note."},
		func(_ context.Context, req *sdk.CallToolRequest, in addIn) (*sdk.CallToolResult, listOut, error) {
			mu.Lock()
			defer mu.Unlock()
			if key, _ := req.Params.Meta[mcp.IdempotencyKeyMeta].(string); key == "" || !seen[key] {
				seen[key] = true
				notes = append(notes, in.Text)
			}
			return nil, listOut{Notes: notes}, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "list_notes", Description: "Lists the notes."},
		func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, listOut, error) {
			mu.Lock()
			defer mu.Unlock()
			return nil, listOut{Notes: notes}, nil
		})
	return s
}

// run starts a session of the notes agent on server, approves its note,
// and prints what happened to out.
func run(ctx context.Context, url string, server mcp.Server, out io.Writer) (err error) {
	server.ApprovalFor = []string{"add_*"} // adding waits for a person; listing does not
	notes, err := mcp.NewClient(server)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, notes.Close()) }()
	agent := &helix.Agent{
		Name:         "note-taker",
		SystemPrompt: "Keep the user's notes with the notes tools.",
		ToolSources:  []helix.ToolSource{notes},
		Model: scripted.New(
			scripted.Step{ToolCalls: []scripted.Call{{ID: "add-1", Name: "notes__add_note", Args: map[string]string{"text": "buy milk"}}}},
			scripted.Step{ToolCalls: []scripted.Call{{ID: "list-1", Name: "notes__list_notes", Args: map[string]string{}}}},
			scripted.Step{Text: "Noted: buy milk."},
		),
	}
	eng, err := engine.New(ctx, engine.Config{DatabaseURL: url})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, eng.Shutdown(context.WithoutCancel(ctx))) }()
	if err := eng.Register(agent); err != nil {
		return err
	}
	if err := eng.Launch(ctx); err != nil {
		return err
	}

	h, err := eng.Execute(ctx, agent, engine.Input{Message: "Note: buy milk"}, nil)
	if err != nil {
		return err
	}
	// Result returns once the run stops: here, at the approval.
	if _, err := h.Result(ctx); err != nil {
		return err
	}
	calls, err := eng.PendingToolCalls(ctx, h.SessionID)
	if err != nil {
		return err
	}
	if len(calls) != 1 {
		return fmt.Errorf("want one call waiting for its approval, got %d", len(calls))
	}
	fmt.Fprintf(out, "waiting for approval: %s %s\n", calls[0].ToolName, calls[0].Arguments)
	if _, err := eng.SubmitToolResult(ctx, h.SessionID, helix.Approve(calls[0].ToolCallID, "fine")); err != nil {
		return err
	}
	res, err := h.Await(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "agent: %s %s\n", res.Status, res.Output)
	page, err := eng.Messages(ctx, h.SessionID, nil)
	if err != nil {
		return err
	}
	for _, m := range page.Messages {
		if m.Role == helix.RoleTool {
			fmt.Fprintf(out, "tool %s: %s\n", m.ToolName, m.Content)
		}
	}
	return nil
}
