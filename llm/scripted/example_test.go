package scripted_test

import (
	"context"
	"errors"
	"fmt"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/llm/scripted"
)

// A two-step script: a tool call, then a structured output. The position
// in the script comes from the request (its assistant messages), so the
// example replays the conversation the engine would build.
func Example() {
	model := scripted.New(
		scripted.Step{
			Text:      "Let me check the weather.",
			ToolCalls: []scripted.Call{{Name: "get_weather", Args: map[string]string{"city": "Oslo"}}},
		},
		scripted.Step{
			Expect: &scripted.Expect{ToolResultFor: "get_weather"},
			Output: map[string]any{"forecast": "sunny", "celsius": 21},
		},
	)
	ctx := context.Background()
	req := helix.ModelRequest{AgentType: "forecaster", Messages: []helix.Message{helix.UserMessage("Weather in Oslo?")}}
	cb := helix.StreamCallbacks{OnTextDelta: func(d string) { fmt.Printf("delta %q\n", d) }}

	res, _ := model.GenerateStep(ctx, req, cb)
	call := res.ToolCalls[0]
	fmt.Println(res.Type, call.ID, call.Name, string(call.Arguments))

	// The engine appends the assistant message and the tool result.
	req.Messages = append(req.Messages,
		helix.AssistantMessage(res.Content, res.ToolCalls...),
		helix.ToolResultMessage(call.ID, call.Name, `{"forecast":"sunny"}`))
	res, _ = model.GenerateStep(ctx, req, cb)
	fmt.Println(res.Type, res.ToolCalls[0].Name, string(res.ToolCalls[0].Arguments))

	// A third step is not in the script.
	req.Messages = append(req.Messages, helix.AssistantMessage("", res.ToolCalls...))
	_, err := model.GenerateStep(ctx, req, cb)
	fmt.Println(errors.Is(err, scripted.ErrScriptExhausted))
	fmt.Println(err)
	// Output:
	// delta "Let "
	// delta "me "
	// delta "check "
	// delta "the "
	// delta "weather."
	// tool_calls call-0-0 get_weather {"city":"Oslo"}
	// tool_calls __finish__ {"celsius":21,"forecast":"sunny"}
	// true
	// model error model_error: scripted model: agent "forecaster" asked for step 2 but its script has 2 steps (the step index is the number of assistant messages in the request)
}

// Sub-agents follow their own script when the model is keyed on the agent
// type.
func ExampleNewKeyed() {
	model := scripted.NewKeyed(map[string][]scripted.Step{
		"planner":    {{ToolCalls: []scripted.Call{{Name: "subagent__researcher", Args: map[string]string{"task": "find sources"}}}}},
		"researcher": {{Text: "Three sources found."}},
	})
	for _, agent := range []string{"planner", "researcher", "critic"} {
		res, err := model.GenerateStep(context.Background(), helix.ModelRequest{AgentType: agent}, helix.StreamCallbacks{})
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%s: %s %q %v\n", agent, res.Type, res.Content, len(res.ToolCalls))
	}
	// Output:
	// planner: tool_calls "" 1
	// researcher: text "Three sources found." 0
	// model error model_error: scripted model: no script for agent "critic" (scripted agents: planner, researcher)
}

// A benchmark's script: many steps that each call a no-op tool, then an
// answer.
func ExampleRepeat() {
	noop := scripted.Step{ToolCalls: []scripted.Call{{Name: "noop"}}}
	model := scripted.New(scripted.Repeat(1000, noop, scripted.Step{Text: "done"})...)

	var msgs []helix.Message
	for range 1000 {
		msgs = append(msgs, helix.AssistantMessage("", helix.ToolCall{ID: "x", Name: "noop"}))
	}
	res, _ := model.GenerateStep(context.Background(), helix.ModelRequest{Messages: msgs[:999]}, helix.StreamCallbacks{})
	fmt.Println(res.ToolCalls[0].ID, res.ToolCalls[0].Name)
	res, _ = model.GenerateStep(context.Background(), helix.ModelRequest{Messages: msgs}, helix.StreamCallbacks{})
	fmt.Println(res.Type, res.Content)
	// Output:
	// call-999-0 noop
	// text done
}
