package helixtest_test

import (
	"fmt"
	"testing"
	"time"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/helixtest"
	"github.com/helix-agents/helix-dbos/llm/scripted"
)

// A client tool's 24-hour deadline is tested in well under a second: the
// test moves the engine's clock a day forward instead of waiting, and the
// call times out as it would in production (the model sees the timeout
// error).
func ExampleClock() {
	_ = func(t *testing.T) {
		t.Parallel()
		type question struct{ Question string }
		type answer struct{ Answer string }
		ask := helix.MustNewClientTool[question, answer]("ask_user", "Ask the user",
			helix.ClientTimeout(24*time.Hour))
		agent := &helix.Agent{Name: "support", Tools: []*helix.Tool{ask}, Model: scripted.New(
			scripted.Step{ToolCalls: []scripted.Call{{Name: "ask_user", Args: question{"Which order?"}}}},
			scripted.Step{Text: "I could not reach you; closing the ticket."},
		)}
		clock := &helixtest.Clock{}
		e := helixtest.NewEngine(t, helixtest.EngineOptions{Clock: clock}, agent)

		h := e.Start(agent, "my order is late")
		e.AwaitPending(h.SessionID, "") // the run waits for the user
		clock.Advance(24*time.Hour + time.Second)
		if res := e.Await(h); res.Status != helix.AgentCompleted {
			t.Fatalf("the session ended %s: %s", res.Status, res.Error)
		}
		// e.Messages(h.SessionID)[2] is the tool result the model saw:
		// {"error":"the client did not return a result for tool \"ask_user\" within 24h0m0s: ..."}
	}
}

// Advance moves the clock forward; between advances it follows the real
// time.
func ExampleClock_Advance() {
	var clock helixtest.Clock // the zero value reads the real time
	before := clock.Now()
	after := clock.Advance(7 * 24 * time.Hour)
	fmt.Println(after.Sub(before).Round(time.Hour))
	// Output: 168h0m0s
}
