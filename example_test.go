package helix_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	helix "github.com/helix-agents/helix-dbos"
)

func ExampleNewTool() {
	type In struct {
		City string `json:"city" jsonschema:"description=City name"`
	}
	type Out struct {
		Forecast string `json:"forecast"`
	}
	weather := helix.MustNewTool("get_weather", "Forecast for a city",
		func(ctx context.Context, in In, tc helix.ToolContext) (Out, error) {
			return Out{Forecast: "sunny in " + in.City}, nil
		})
	fmt.Println(string(weather.InputSchema()))
	out, _ := weather.Execute(context.Background(), json.RawMessage(`{"city":"Oslo"}`), nil)
	fmt.Println(string(out))
	fmt.Println(weather.ValidateArguments(json.RawMessage(`{"town":"Oslo"}`)))
	// Output:
	// {"properties":{"city":{"type":"string","description":"City name"}},"additionalProperties":false,"type":"object","required":["city"]}
	// {"forecast":"sunny in Oslo"}
	// invalid arguments of tool "get_weather":
	// - at /: additional properties 'town' not allowed
	// - at /: missing property 'city'
}

func ExampleUnmarshalChunk() {
	c, err := helix.UnmarshalChunk([]byte(`{"type":"text_delta","agentId":"s-1","agentType":"assistant","timestamp":1,"step":1,"delta":"Hi"}`))
	if err != nil {
		panic(err)
	}
	switch c := c.(type) {
	case *helix.TextDeltaChunk:
		fmt.Println("text:", c.Delta)
	}
	_, err = helix.UnmarshalChunk([]byte(`{"type":"mystery"}`))
	fmt.Println(err)
	// Output:
	// text: Hi
	// helix: decode chunk: unknown chunk type "mystery"
}

func ExampleParseCheckpointID() {
	p, _ := helix.ParseCheckpointID("cpv1-chat-2024-05-s3-t1703123456789-a1b2c3")
	fmt.Println(p.SessionID, p.StepCount, p.Timestamp)
	// Output: chat-2024-05 3 1703123456789
}

func ExampleMessage() {
	msgs := []helix.Message{
		helix.SystemMessage("You are terse."),
		helix.UserMessage("Weather in Oslo?"),
		helix.AssistantMessage("", helix.ToolCall{ID: "call_1", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Oslo"}`)}),
		helix.ToolResultMessage("call_1", "get_weather", `{"forecast":"sunny"}`),
	}
	b, _ := json.Marshal(msgs[2])
	fmt.Println(string(b))
	// Output: {"role":"assistant","toolCalls":[{"id":"call_1","name":"get_weather","arguments":{"city":"Oslo"}}]}
}

// Deleting a session tree with a run in progress is refused with a
// *SessionRunningError, whatever wraps it; its message says what to do.
func ExampleSessionRunningError() {
	err := fmt.Errorf("store: delete session trees [s-1]: %w",
		&helix.SessionRunningError{SessionID: "s-1", RunningSessionID: "s-1-sub-c1", Status: "active"})
	var running *helix.SessionRunningError
	fmt.Println(errors.Is(err, helix.ErrSessionRunning), errors.As(err, &running), running.RunningSessionID)
	fmt.Println(running)
	// Output:
	// true true s-1-sub-c1
	// helix: session s-1 has a run in progress (session s-1-sub-c1 is active): interrupt or abort it first, or delete with force (which aborts it)
}
