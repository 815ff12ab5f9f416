package helix

import (
	"cmp"
	"encoding/json"
	"fmt"
)

// DefaultSubAgentInputSchema is the input of a sub-agent tool created
// without one: a task description.
const DefaultSubAgentInputSchema = `{"type":"object","properties":{"task":{"type":"string","description":"What the sub-agent should do, with everything it needs to know"}},"required":["task"],"additionalProperties":false}`

// SubAgentToolOptions refine SubAgentTool. The zero value is valid.
type SubAgentToolOptions struct {
	// Description is what the model reads about the tool; default the
	// agent's Description, else "Delegate a task to the <name> agent".
	Description string
}

// SubAgentTool returns the tool through which a parent agent delegates to
// agent: a call runs agent as a child session (its own messages, state and
// hooks, its chunks in the parent's stream) and the child's structured
// output is the tool result. agent must have an OutputSchema. The tool is
// named subagent__<agent.Name>; inputSchema describes its arguments (a JSON
// object; nil means [DefaultSubAgentInputSchema]), which the child receives
// as its first user message, as JSON.
func SubAgentTool(agent *Agent, inputSchema json.RawMessage, opts *SubAgentToolOptions) (*Tool, error) {
	if agent == nil {
		return nil, &DefinitionError{Kind: "tool", Name: SubAgentToolPrefix + "?", Field: "agent", Reason: "the sub-agent is nil"}
	}
	name := SubAgentToolPrefix + agent.Name
	if err := agent.Validate(); err != nil {
		return nil, toolDefError(name, "agent", err.Error())
	}
	if len(agent.OutputSchema) == 0 {
		return nil, toolDefError(name, "agent", fmt.Sprintf(
			"sub-agent %q has no OutputSchema: a sub-agent returns a structured output, which becomes the tool result; give it one", agent.Name))
	}
	if opts == nil {
		opts = &SubAgentToolOptions{}
	}
	if len(inputSchema) == 0 {
		inputSchema = json.RawMessage(DefaultSubAgentInputSchema)
	}
	desc := cmp.Or(opts.Description, agent.Description, "Delegate a task to the "+agent.Name+" agent")
	t, err := build(name, desc, inputSchema, agent.OutputSchema, nil, false, nil)
	if err != nil {
		return nil, err
	}
	t.subAgent = agent
	return t, nil
}

// MustSubAgentTool is SubAgentTool that panics on a definition error.
func MustSubAgentTool(agent *Agent, inputSchema json.RawMessage, opts *SubAgentToolOptions) *Tool {
	return must(SubAgentTool(agent, inputSchema, opts))
}

// SubAgent returns the agent a sub-agent tool delegates to, nil for other
// tools.
func (t *Tool) SubAgent() *Agent { return t.subAgent }

// SubAgents returns the agents a's sub-agent tools delegate to, in tool
// order.
func (a *Agent) SubAgents() []*Agent {
	var out []*Agent
	for _, t := range a.Tools {
		if t != nil && t.subAgent != nil {
			out = append(out, t.subAgent)
		}
	}
	return out
}
