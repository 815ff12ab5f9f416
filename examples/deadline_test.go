package examples_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/helixtest"
	"github.com/helix-agents/helix-dbos/llm/scripted"
)

// The user has a day to answer; nobody does. The test moves the engine's
// clock a day forward instead of waiting: the call times out as it would
// in production, and the model goes on with the timeout error.
func TestUnansweredQuestionTimesOutAfterADay(t *testing.T) {
	t.Parallel()
	type question struct{ Question string }
	type reply struct{ Answer string }
	ask := helix.MustNewClientTool[question, reply]("ask_user", "Ask the user", helix.ClientTimeout(24*time.Hour))
	agent := &helix.Agent{Name: "intake", Tools: []*helix.Tool{ask}, Model: scripted.New(
		scripted.Step{ToolCalls: []scripted.Call{{Name: "ask_user", Args: question{Question: "Which order?"}}}},
		scripted.Step{Text: "I could not reach you; I will try again tomorrow."},
	)}
	clock := &helixtest.Clock{}
	e := helixtest.NewEngine(t, helixtest.EngineOptions{Clock: clock}, agent)
	h := e.Start(agent, "my order is late")
	e.AwaitPending(h.SessionID, "")

	clock.Advance(24*time.Hour + time.Second)
	require.Equal(t, helix.AgentCompleted, e.Await(h).Status)
	result := e.Messages(h.SessionID)[2]
	require.Contains(t, result.Content, "did not return a result")
	require.Empty(t, e.Pending(h.SessionID))
}
