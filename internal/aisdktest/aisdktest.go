// Package aisdktest is what the tests of the AI SDK chat routes share: the
// scripted agents they chat with and [NewServer], an engine serving those
// agents through the chat handler of server/aisdk. The handler's own tests
// (server/aisdk) speak raw HTTP and SSE to it; the end-to-end test
// (integration/aisdk) drives it with the npm "ai" client, whose script
// (integration/aisdk/node/chat.mjs) relies on the agents' names, tool call
// IDs and answers documented here: change them together.
//
// Every agent is scripted by its position in the conversation (the index
// of the model call in its session), so one agent serves any number of
// chats at once and a follow-up turn continues the script.
//
//	eng, srv := aisdktest.NewServer(t, aisdktest.WeatherAgent(), aisdktest.AskerAgent())
//	// POST srv.URL+"/chat" with aisdktest.HeaderUser set
package aisdktest

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/llm/scripted"
	"github.com/helix-agents/helix-dbos/server/aisdk"
)

// HeaderUser is the header that names the caller: the handler of
// [NewServer] takes its value as the principal and answers 401 to a
// request without it.
const HeaderUser = "X-User"

// Question is the input of the client-executed tool ask_user.
type Question struct {
	Question string `json:"question"`
}

// Answer is the result ask_user accepts: a non-empty answer, so that a
// test can submit one the tool's schema rejects.
type Answer struct {
	Answer string `json:"answer" jsonschema:"minLength=1"`
}

// CityIn is the input of the server tool get_weather.
type CityIn struct {
	City string `json:"city"`
}

// TransferIn is the input of the approval-gated tool transfer.
type TransferIn struct {
	To     string `json:"to"`
	Amount int    `json:"amount"`
}

// lastContent is the content of a request's last message: the tool result
// a continuation step reads.
func lastContent(req helix.ModelRequest) string { return req.Messages[len(req.Messages)-1].Content }

// askUser is the client-executed tool: the model's call reaches the client
// (useChat's onToolCall), whose answer is the tool's result.
func askUser() *helix.Tool {
	return helix.MustNewClientTool[Question, Answer]("ask_user", "Ask the user")
}

// WeatherAgent is "weather", an agent with a server tool. Its first answer
// says "Let me check." and calls get_weather (call ID "w1") for Paris,
// whose result is {"forecast":"sunny in Paris"}; its second says "It is "
// followed by that result; every later one is "You are welcome.".
func WeatherAgent() *helix.Agent {
	getWeather := helix.MustNewTool("get_weather", "Forecast for a city",
		func(_ context.Context, in CityIn, _ helix.ToolContext) (map[string]string, error) {
			return map[string]string{"forecast": "sunny in " + in.City}, nil
		})
	return &helix.Agent{Name: "weather", Tools: []*helix.Tool{getWeather}, Model: scripted.Generate(func(i int, req helix.ModelRequest) (scripted.Step, error) {
		switch i {
		case 0:
			return scripted.Step{Text: "Let me check.", ToolCalls: []scripted.Call{{ID: "w1", Name: "get_weather", Args: CityIn{City: "Paris"}}}}, nil
		case 1:
			return scripted.Step{Text: "It is " + lastContent(req)}, nil
		}
		return scripted.Step{Text: "You are welcome."}, nil
	})}
}

// AskerAgent is "asker", an agent with a client-executed tool. Each turn
// calls ask_user ("favourite colour?", call ID "ask" and the model call's
// index: "ask0" first) without text, then answers "You said " followed by
// the client's result.
func AskerAgent() *helix.Agent {
	return &helix.Agent{Name: "asker", Tools: []*helix.Tool{askUser()}, Model: scripted.Generate(func(i int, req helix.ModelRequest) (scripted.Step, error) {
		if i%2 == 0 {
			return scripted.Step{ToolCalls: []scripted.Call{{ID: "ask" + strconv.Itoa(i), Name: "ask_user", Args: Question{Question: "favourite colour?"}}}}, nil
		}
		return scripted.Step{Text: "You said " + lastContent(req)}, nil
	})}
}

// BankerAgent is "banker", an agent with an approval-gated tool. It says
// "I will transfer." and calls transfer (call ID "t1") to send 5 to bob,
// whose result is {"sent":5,"to":"bob"}; once the call is approved and
// run, or denied, it answers "Result: " followed by the tool's result.
// transfers, when not nil, counts the tool's executions.
func BankerAgent(transfers *atomic.Int32) *helix.Agent {
	transfer := helix.MustNewTool("transfer", "Move money",
		func(_ context.Context, in TransferIn, _ helix.ToolContext) (map[string]any, error) {
			if transfers != nil {
				transfers.Add(1)
			}
			return map[string]any{"sent": in.Amount, "to": in.To}, nil
		}, helix.RequireApproval())
	return &helix.Agent{Name: "banker", Tools: []*helix.Tool{transfer}, Model: scripted.Generate(func(i int, req helix.ModelRequest) (scripted.Step, error) {
		if i == 0 {
			return scripted.Step{Text: "I will transfer.", ToolCalls: []scripted.Call{{ID: "t1", Name: "transfer", Args: TransferIn{To: "bob", Amount: 5}}}}, nil
		}
		return scripted.Step{Text: "Result: " + lastContent(req)}, nil
	})}
}

// LeadAgent is "lead", an agent whose sub-agent has a client-executed
// tool. It delegates to "checker" (call ID "delegate", tool
// subagent__checker); checker says "checking", calls ask_user ("is it
// true?", call ID "sub-ask") and outputs {"verdict": "user says " followed
// by the client's result}; lead then answers "Verdict: " followed by that
// output.
func LeadAgent() *helix.Agent {
	checker := &helix.Agent{Name: "checker", Tools: []*helix.Tool{askUser()},
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"verdict":{"type":"string"}},"required":["verdict"]}`),
		Model: scripted.Generate(func(i int, req helix.ModelRequest) (scripted.Step, error) {
			if i == 0 {
				return scripted.Step{Text: "checking", ToolCalls: []scripted.Call{{ID: "sub-ask", Name: "ask_user", Args: Question{Question: "is it true?"}}}}, nil
			}
			return scripted.Step{Output: map[string]string{"verdict": "user says " + lastContent(req)}}, nil
		})}
	return &helix.Agent{Name: "lead", Tools: []*helix.Tool{helix.MustSubAgentTool(checker, nil, nil)}, Model: scripted.Generate(func(i int, req helix.ModelRequest) (scripted.Step, error) {
		if i == 0 {
			return scripted.Step{ToolCalls: []scripted.Call{{ID: "delegate", Name: "subagent__checker", Args: map[string]string{"task": "check"}}}}, nil
		}
		return scripted.Step{Text: "Verdict: " + lastContent(req)}, nil
	})}
}

// SlowAgent is "slow", an agent that streams deltas as its answer, one
// every delay: a test picks them long and slow enough to cut the response
// mid-answer and reconnect.
func SlowAgent(deltas []string, delay time.Duration) *helix.Agent {
	return &helix.Agent{Name: "slow", Model: scripted.New(scripted.Step{Deltas: deltas, DeltaDelay: delay})}
}

// GatedAgent is "gated": each turn streams "working " and waits until the
// gate is open (or its context ends), then answers "done".
func GatedAgent(gate <-chan struct{}) *helix.Agent {
	return &helix.Agent{Name: "gated", Model: helix.ModelFunc(func(ctx context.Context, _ helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
		cb.TextDelta("working ")
		select {
		case <-gate:
		case <-ctx.Done():
			return helix.StepResult{}, ctx.Err()
		}
		cb.TextDelta("done")
		return helix.StepResult{Type: helix.StepText, Content: "working done", StopReason: helix.StopEndTurn}, nil
	})}
}

// NewGate returns a gate for [GatedAgent] and its opener; the test's
// cleanup opens it (an engine's shutdown waits for the steps behind it).
func NewGate(t *testing.T) (gate chan struct{}, open func()) {
	gate = make(chan struct{})
	var once sync.Once
	open = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(open)
	return gate, open
}

// Authenticate is the handler's Authenticate hook in [NewServer] and
// [NewHandler]: the principal is the [HeaderUser] header; a request
// without one is refused.
func Authenticate(r *http.Request) (string, error) {
	if u := r.Header.Get(HeaderUser); u != "" {
		return u, nil
	}
	return "", errors.New("no " + HeaderUser + " header")
}

// NewServer serves agents through the chat handler, mounted at /chat and
// /chat/ as package server mounts it, on an httptest server, and returns
// its engine (launched, on a fresh database from pgtest: the test binary's
// TestMain must be pgtest.Main) and the server. The first agent is the
// default of a new chat. The handler takes the principal from
// [HeaderUser] and checks an idle run's status 20 ms after its last chunk
// (then less and less often), so that a response ends soon after its run
// suspends. The test's cleanup closes the server, then shuts the engine
// down.
func NewServer(t *testing.T, agents ...*helix.Agent) (*engine.Engine, *httptest.Server) {
	t.Helper()
	eng, h := NewHandler(t, nil, agents...)
	return eng, Serve(t, h)
}

// NewHandler is the engine and the handler of [NewServer], unserved, with
// configure (when not nil) applied to the handler's options first: for a
// test that serves the handler its own way or shuts it down.
func NewHandler(t *testing.T, configure func(*aisdk.Options), agents ...*helix.Agent) (*engine.Engine, *aisdk.Handler) {
	t.Helper()
	eng, err := engine.New(t.Context(), engine.Config{DatabaseURL: pgtest.NewURL(t)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, eng.Shutdown(context.Background())) })
	opts := aisdk.Options{Agents: agents, Authenticate: Authenticate, PollInterval: 20 * time.Millisecond}
	if configure != nil {
		configure(&opts)
	}
	h, err := aisdk.NewHandler(eng, opts)
	require.NoError(t, err)
	require.NoError(t, eng.Launch(t.Context()))
	return eng, h
}

// Serve mounts h at /chat and /chat/ on an httptest server, which the
// test's cleanup closes.
func Serve(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/chat", h)
	mux.Handle("/chat/", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}
