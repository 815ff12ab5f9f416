// Command embed shows the usual way to run helix-dbos inside your own
// program: your agents and tools in Go, one engine, and the HTTP agent
// server (package server) with your authentication.
//
//	HELIX_DATABASE_URL=postgres://... go run ./examples/embed
//	curl -H "Authorization: Bearer dev-token" -H 'Content-Type: application/json' \
//	     -d '{"agentType":"travel-assistant","message":"Weather in Paris?"}' localhost:8080/start
//	curl -N -H "Authorization: Bearer dev-token" "localhost:8080/sse?sessionId=<sessionId>"
//
// With OPENAI_API_KEY set the agent uses OpenAI (gpt-4o-mini); without, a
// scripted model plays a fixed answer, so the example runs without a key.
package main

import (
	"cmp"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/llm/openai"
	"github.com/helix-agents/helix-dbos/llm/scripted"
	"github.com/helix-agents/helix-dbos/server"
)

// Your tools: plain Go functions with typed input and output. The JSON
// Schema the model sees is derived from the input type.

type weatherIn struct {
	City string `json:"city" jsonschema:"description=The city, e.g. Paris"`
}

type weatherOut struct {
	City        string  `json:"city"`
	Celsius     float64 `json:"celsius"`
	Description string  `json:"description"`
}

// getWeather is a server-executed tool: it runs in this process, once per
// call (its result is checkpointed: a crash never runs it twice).
var getWeather = helix.MustNewTool("get_weather", "Current weather in a city",
	func(ctx context.Context, in weatherIn, tc helix.ToolContext) (weatherOut, error) {
		// Call your weather service here.
		return weatherOut{City: in.City, Celsius: 18, Description: "sunny"}, nil
	})

type bookingIn struct {
	City   string `json:"city"`
	Nights int    `json:"nights" jsonschema:"minimum=1"`
}

// bookHotel has a real effect, so every call waits for an approval
// (POST /submit-tool-result with kind approval-response, or
// `helix-dbos approve <session> <toolCallId>`) before it runs.
var bookHotel = helix.MustNewTool("book_hotel", "Book a hotel",
	func(ctx context.Context, in bookingIn, tc helix.ToolContext) (map[string]string, error) {
		return map[string]string{"confirmation": fmt.Sprintf("%s-%d", strings.ToUpper(in.City[:min(3, len(in.City))]), in.Nights)}, nil
	}, helix.RequireApproval())

type question struct {
	Question string `json:"question"`
}

type answer struct {
	Answer string `json:"answer"`
}

// askUser is executed by the client (the browser): the run waits, durably,
// until the client posts the answer to /submit-tool-result.
var askUser = helix.MustNewClientTool[question, answer]("ask_user", "Ask the user a question",
	helix.ClientTimeout(24*time.Hour))

// model returns OpenAI when a key is set, else a scripted stand-in.
func model() (helix.Model, error) {
	if os.Getenv(openai.APIKeyEnv) != "" {
		return openai.New(openai.Config{Model: "gpt-4o-mini"})
	}
	log.Printf("%s is not set: using a scripted model", openai.APIKeyEnv)
	return scripted.New(
		scripted.Step{Text: "Let me check.", ToolCalls: []scripted.Call{{Name: "get_weather", Args: weatherIn{City: "Paris"}}}},
		scripted.Step{Text: "It is 18°C and sunny in Paris."},
	), nil
}

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	url := os.Getenv("HELIX_DATABASE_URL")
	if url == "" {
		return errors.New("set HELIX_DATABASE_URL to a Postgres URL")
	}
	m, err := model()
	if err != nil {
		return err
	}
	assistant := &helix.Agent{
		Name:         "travel-assistant",
		SystemPrompt: "You help travellers. Use the tools; ask the user when something is unclear.",
		Model:        m,
		MaxSteps:     8,
		Tools:        []*helix.Tool{getWeather, bookHotel, askUser},
	}

	// One engine per process. Without HELIX_EXECUTOR_ID each process gets a
	// new executor ID: run as many replicas as you like on one database;
	// when one stops or dies, a live one takes its sessions over.
	eng, err := engine.New(ctx, engine.Config{DatabaseURL: url, ExecutorID: os.Getenv("HELIX_EXECUTOR_ID")})
	if err != nil {
		return err
	}
	// Your authentication: here one bearer token per user. Each session
	// belongs to the principal that started it.
	tokens := map[string]server.Principal{cmp.Or(os.Getenv("EMBED_TOKEN"), "dev-token"): "demo-user"}
	srv, err := server.New(eng, server.Config{
		Agents: []*helix.Agent{assistant}, // registered with the engine
		Authenticate: func(r *http.Request) (server.Principal, error) {
			got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
			for token, user := range tokens {
				if subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1 {
					return user, nil
				}
			}
			return "", errors.New("unknown token")
		},
	})
	if err != nil {
		return err
	}
	// Launch after server.New registered the agents: it recovers their runs.
	if err := eng.Launch(ctx); err != nil {
		return err
	}
	// Bound how long a request may take to arrive (headers, then the whole
	// body: a minute is ample for a large chat history). No WriteTimeout:
	// it would cut the SSE streams, which last as long as a run.
	httpSrv := &http.Server{
		Addr:              cmp.Or(os.Getenv("ADDR"), ":8080"),
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
		IdleTimeout:       2 * time.Minute,
	}
	served := make(chan error, 1)
	go func() { served <- httpSrv.ListenAndServe() }()
	log.Printf("serving %s on %s", assistant.Name, httpSrv.Addr)

	select {
	case <-ctx.Done():
	case err := <-served:
		log.Printf("http server: %v", err)
	}
	// Graceful shutdown: the server ends its SSE streams (clients reconnect
	// and lose nothing), net/http finishes in-flight requests, the engine
	// stops runs at a step boundary (the next Launch recovers them).
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return errors.Join(srv.Shutdown(sctx), httpSrv.Shutdown(sctx), eng.Shutdown(sctx))
}
