package helix

import (
	"encoding/json"
	"fmt"
)

// FinishAck is the tool-result content appended for an accepted __finish__
// call (the __finish__ heal: a transcript never ends on a tool call without
// its result, so the session's next turn sends a valid request).
const FinishAck = `{"status":"output accepted"}`

// UnpairedFinishCalls returns the __finish__ calls of the last message when
// it is an assistant message whose __finish__ calls have no results yet (a
// session completed before the eager heal): their results must be appended
// before the conversation continues.
func UnpairedFinishCalls(last Message) []ToolCall {
	if last.Role != RoleAssistant {
		return nil
	}
	var out []ToolCall
	for _, c := range last.ToolCalls {
		if IsFinishTool(c.Name) {
			out = append(out, c)
		}
	}
	return out
}

// finishDescription tells the model how to use __finish__.
const finishDescription = "Call this tool exactly once, when the task is complete, with your final answer as its input. " +
	"Its input must match the required output structure; do not call any other tool in the same step."

// NewFinishTool builds the __finish__ tool from an agent's output schema
// (which must describe a JSON object). The runtime handles its calls: a
// valid input becomes the agent's output, an invalid one goes back to the
// model as a tool error listing every violation.
func NewFinishTool(outputSchema json.RawMessage) (*Tool, error) {
	if len(outputSchema) == 0 {
		return nil, toolDefError(FinishToolName, "output schema", "the output schema is empty")
	}
	t, err := build(FinishToolName, finishDescription, outputSchema, outputSchema, nil, false, nil)
	if err != nil {
		return nil, fmt.Errorf("helix: build %s from the output schema: %w", FinishToolName, err)
	}
	return t, nil
}
