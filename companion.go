package helix

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Companion tool names (injected from Agent.PersistentAgents).
const (
	CompanionSpawnAgent     = CompanionToolPrefix + "spawnAgent"
	CompanionSendMessage    = CompanionToolPrefix + "sendMessage"
	CompanionListChildren   = CompanionToolPrefix + "listChildren"
	CompanionGetChildStatus = CompanionToolPrefix + "getChildStatus"
	CompanionTerminateChild = CompanionToolPrefix + "terminateChild"
	CompanionWaitForResult  = CompanionToolPrefix + "waitForResult"
)

// CompanionMode says whether spawning or consulting a persistent companion
// waits for its answer.
type CompanionMode string

// Companion modes.
const (
	// CompanionBlocking: spawnAgent (and a consult that continues a
	// finished companion) returns the companion's output; waitForResult is
	// offered.
	CompanionBlocking CompanionMode = "blocking"
	// CompanionNonBlocking: spawnAgent returns at once; the companion's
	// outcome reaches the parent as a message at its next step after it
	// ends.
	CompanionNonBlocking CompanionMode = "non-blocking"
)

// PersistentAgent declares a companion a parent may spawn and consult
// again: a long-lived child session ({parentSessionId}-agent-{name}) that
// keeps its memory between consultations.
type PersistentAgent struct {
	// Agent is the companion's definition; it must have an OutputSchema.
	Agent *Agent
	// Mode is CompanionBlocking (the default) or CompanionNonBlocking.
	Mode CompanionMode
}

// EffectiveMode returns Mode, or CompanionBlocking when empty.
func (p PersistentAgent) EffectiveMode() CompanionMode {
	if p.Mode == "" {
		return CompanionBlocking
	}
	return p.Mode
}

// validatePersistentAgents checks an agent's companions and returns the
// offending field.
func (a *Agent) validatePersistentAgents() (string, error) {
	seen := map[string]int{}
	for i, p := range a.PersistentAgents {
		field := fmt.Sprintf("PersistentAgents[%d]", i)
		switch {
		case p.Agent == nil:
			return field, fmt.Errorf("the companion agent is nil")
		case p.Agent == a:
			return field, fmt.Errorf("an agent cannot be its own companion")
		case p.Mode != "" && p.Mode != CompanionBlocking && p.Mode != CompanionNonBlocking:
			return field, fmt.Errorf("unknown mode %q (want %q or %q)", p.Mode, CompanionBlocking, CompanionNonBlocking)
		}
		if err := p.Agent.Validate(); err != nil {
			return field, err
		}
		if len(p.Agent.OutputSchema) == 0 {
			return field, fmt.Errorf("companion %q has no OutputSchema: a companion answers each consultation with a structured output", p.Agent.Name)
		}
		if j, dup := seen[p.Agent.Name]; dup {
			return field, fmt.Errorf("duplicate companion %q (also PersistentAgents[%d])", p.Agent.Name, j)
		}
		seen[p.Agent.Name] = i
	}
	return "", nil
}

// PersistentAgent returns the companion declaration for an agent type.
func (a *Agent) PersistentAgent(agentType string) (PersistentAgent, bool) {
	for _, p := range a.PersistentAgents {
		if p.Agent != nil && p.Agent.Name == agentType {
			return p, true
		}
	}
	return PersistentAgent{}, false
}

// companionTools returns the companion tools of an agent with
// PersistentAgents: five always, waitForResult when a companion is
// blocking.
func (a *Agent) companionTools() ([]*Tool, error) {
	if len(a.PersistentAgents) == 0 {
		return nil, nil
	}
	var names []string
	var desc strings.Builder
	blocking := false
	for _, p := range a.PersistentAgents {
		names = append(names, p.Agent.Name)
		fmt.Fprintf(&desc, "\n- %s (%s)", p.Agent.Name, p.EffectiveMode())
		if p.Agent.Description != "" {
			fmt.Fprintf(&desc, ": %s", p.Agent.Description)
		}
		blocking = blocking || p.EffectiveMode() == CompanionBlocking
	}
	types, _ := json.Marshal(names)
	specs := []struct{ name, description, schema string }{
		{CompanionSpawnAgent, "Start a persistent companion agent and give it a task. A blocking companion's answer is returned; " +
			"a non-blocking one works on its own and its answer arrives later. Re-using the name of a finished companion " +
			"consults it again, with its memory. Companions:" + desc.String(),
			`{"type":"object","properties":{"agentType":{"type":"string","enum":` + string(types) + `},` +
				`"name":{"type":"string","pattern":"^[a-zA-Z0-9_-]{1,64}$","description":"A name to consult it by later (default: <agentType>-<n>)"},` +
				`"message":{"type":"string","minLength":1,"description":"The task"}},"required":["agentType","message"],"additionalProperties":false}`},
		{CompanionSendMessage, "Send a message to a companion by name: a running companion reads it before its next step; " +
			"a finished one is consulted again (a blocking companion's answer is returned).",
			`{"type":"object","properties":{"name":{"type":"string","minLength":1},"message":{"type":"string","minLength":1}},` +
				`"required":["name","message"],"additionalProperties":false}`},
		{CompanionListChildren, "List your companions with their status.",
			`{"type":"object","properties":{},"additionalProperties":false}`},
		{CompanionGetChildStatus, "Get a companion's status and, when it finished, its answer or error.",
			`{"type":"object","properties":{"name":{"type":"string","minLength":1}},"required":["name"],"additionalProperties":false}`},
		{CompanionTerminateChild, "Stop a companion for good.",
			`{"type":"object","properties":{"name":{"type":"string","minLength":1},"reason":{"type":"string"}},"required":["name"],"additionalProperties":false}`},
	}
	if blocking {
		specs = append(specs, struct{ name, description, schema string }{CompanionWaitForResult,
			"Wait until a companion finishes its current work and return its answer (or, after timeoutSeconds, that it still runs).",
			`{"type":"object","properties":{"name":{"type":"string","minLength":1},"timeoutSeconds":{"type":"integer","minimum":1,"maximum":86400}},` +
				`"required":["name"],"additionalProperties":false}`})
	}
	out := make([]*Tool, 0, len(specs))
	for _, s := range specs {
		t, err := build(s.name, s.description, json.RawMessage(s.schema), nil, nil, false, nil)
		if err != nil {
			return nil, err
		}
		t.companion = true
		out = append(out, t)
	}
	return out, nil
}

// IsCompanion reports a companion tool (handled by the runtime, not
// executed).
func (t *Tool) IsCompanion() bool { return t.companion }

// CompanionAgents returns the agents of a's PersistentAgents.
func (a *Agent) CompanionAgents() []*Agent {
	out := make([]*Agent, 0, len(a.PersistentAgents))
	for _, p := range a.PersistentAgents {
		if p.Agent != nil && !slices.Contains(out, p.Agent) {
			out = append(out, p.Agent)
		}
	}
	return out
}
