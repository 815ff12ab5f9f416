package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/llm/scripted"
	"github.com/helix-agents/helix-dbos/server"
)

// The web inspector is on by default at / and /inspector/; mounted under a
// prefix it keeps working (its links are relative). Its data routes use
// the server's Authenticate, so a principal sees its own sessions only.
// DisableInspector leaves the API alone.
func ExampleConfig_inspector() {
	ctx := context.Background()
	eng, err := engine.New(ctx, engine.Config{DatabaseURL: os.Getenv("HELIX_DATABASE_URL")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = eng.Shutdown(ctx) }()
	assistant := &helix.Agent{Name: "assistant", Model: scripted.New(scripted.Step{Text: "Hello."})}
	srv, err := server.New(eng, server.Config{
		Agents: []*helix.Agent{assistant},
		Authenticate: func(r *http.Request) (server.Principal, error) {
			return userFromToken(r) // your token check
		},
		DisableInspector: false, // true: no inspector (404 at / and /inspector/)
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := eng.Launch(ctx); err != nil {
		fmt.Println(err)
		return
	}
	mux := http.NewServeMux()
	mux.Handle("/agents/", http.StripPrefix("/agents", srv.Handler())) // inspector at /agents/inspector/
	_ = http.ListenAndServe(":8080", mux)
}

func userFromToken(r *http.Request) (server.Principal, error) { return bearerAuth(r) }

// The body of POST /retry: back to a checkpoint of a failed or
// interrupted session (the inspector lists them on the session's page);
// without checkpointId, its latest.
func ExampleRetryRequest() {
	body, _ := json.Marshal(server.RetryRequest{SessionID: "s-1", CheckpointID: "cpv1-s-1-s2-t1703123456789-a1b2c3"})
	fmt.Println(string(body))
	body, _ = json.Marshal(server.RetryRequest{SessionID: "s-1", FromStart: true, Message: "Try again, shorter."})
	fmt.Println(string(body))
	// Output:
	// {"sessionId":"s-1","checkpointId":"cpv1-s-1-s2-t1703123456789-a1b2c3"}
	// {"sessionId":"s-1","fromStart":true,"message":"Try again, shorter."}
}

// The body of POST /branch: a new session of the caller from a checkpoint
// of one of its sessions, which stays as it was.
func ExampleBranchRequest() {
	body, _ := json.Marshal(server.BranchRequest{SessionID: "s-1", CheckpointID: "cpv1-s-1-s2-t1703123456789-a1b2c3",
		NewSessionID: "s-1-what-if", Message: "What if we shipped on Monday?"})
	fmt.Println(string(body))
	// Output:
	// {"sessionId":"s-1","checkpointId":"cpv1-s-1-s2-t1703123456789-a1b2c3","newSessionId":"s-1-what-if","message":"What if we shipped on Monday?"}
}

// The body of POST /delete: one of the caller's root sessions, deleted
// with its whole tree; force aborts a run in progress first.
func ExampleDeleteRequest() {
	body, _ := json.Marshal(server.DeleteRequest{SessionID: "s-1", Force: true})
	fmt.Println(string(body))
	// Output:
	// {"sessionId":"s-1","force":true}
}
