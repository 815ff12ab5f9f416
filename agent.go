package helix

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
)

// DefaultMaxSteps is the per-turn step budget of an agent whose MaxSteps is 0.
const DefaultMaxSteps = 10

// MaxAgentNameLength keeps subagent__<name> within the tool-name limit.
const MaxAgentNameLength = MaxToolNameLength - len(SubAgentToolPrefix)

// Agent defines an agent: its instructions, model, tools and limits. An
// Agent is plain data; the engine validates it (see [Agent.Validate]) when
// it is registered, and does not modify it.
type Agent struct {
	// Name identifies the agent type (1–54 characters from
	// [a-zA-Z0-9_-]); it names its sessions' agent type and its sub-agent
	// tool (subagent__<Name>).
	Name        string
	Description string
	// SystemPrompt is the system message. For a prompt that depends on the
	// session's custom state, set SystemPromptFunc instead (not both).
	SystemPrompt     string
	SystemPromptFunc func(ctx context.Context, state json.RawMessage) (string, error)
	// Model generates the agent's steps. Required.
	Model     Model
	LLMConfig LLMConfig
	// Tools the model may call. Sub-agent tools (SubAgentTool) go here too.
	Tools []*Tool
	// ToolSources supply tools listed when each run starts (MCP servers:
	// package mcp). A run keeps the list it started with; see ToolSource.
	ToolSources []ToolSource
	// Skills the model may load on demand (see [Skill]). When set, the
	// catalog of skills goes into the system prompt (see
	// [Agent.SkillsPromptFragment]) and the load_skill and read_skill_file
	// tools are added. Sub-agents do not inherit them.
	Skills []Skill
	// PreloadSkills names skills whose bodies are always in the system
	// prompt, with no load_skill call needed. A name that matches no skill
	// is skipped, not an error (see [Agent.UnknownPreloadSkills]).
	PreloadSkills []string
	// OutputSchema, when set, makes the agent deliver a structured output
	// through the auto-injected __finish__ tool; it must describe a JSON
	// object.
	OutputSchema json.RawMessage
	// InitialState is the custom state of new sessions (a JSON object);
	// nil means {}.
	InitialState json.RawMessage
	// MaxSteps bounds the steps of one turn; 0 means DefaultMaxSteps.
	// Exhausting it fails the run with a clear error.
	MaxSteps int
	// StopWhen, when set, is asked after every step whose result has no
	// tool calls left to run; true ends the turn.
	StopWhen func(StepResult) bool
	// PersistentAgents are companions the agent can spawn and consult
	// again (see [PersistentAgent]); they bring the companion__ tools.
	PersistentAgents []PersistentAgent
	// Hooks observe the agent's lifecycle (see [Hooks]); nil means none.
	Hooks *Hooks
	// Workspace is not supported by this runtime (as in the Helix DBOS
	// runtime): an agent that sets it is rejected when it is registered or
	// executed, before anything runs.
	Workspace any
}

// EffectiveMaxSteps returns MaxSteps, or DefaultMaxSteps when it is 0.
func (a *Agent) EffectiveMaxSteps() int {
	if a.MaxSteps == 0 {
		return DefaultMaxSteps
	}
	return a.MaxSteps
}

// Validate reports the first problem with the definition as a
// *DefinitionError naming the offending field.
func (a *Agent) Validate() error {
	if a == nil {
		return &DefinitionError{Kind: "agent", Field: "Agent", Reason: "the agent is nil"}
	}
	fail := func(field, format string, args ...any) error {
		return &DefinitionError{Kind: "agent", Name: a.Name, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if err := validateName(a.Name, MaxAgentNameLength); err != nil {
		return fail("Name", "%v", err)
	}
	if a.MaxSteps < 0 {
		return fail("MaxSteps", "must be >= 1 (or 0 for the default of %d), got %d", DefaultMaxSteps, a.MaxSteps)
	}
	if a.Model == nil {
		return fail("Model", "no model: set Agent.Model (llm/scripted gives a deterministic one for tests)")
	}
	if a.Workspace != nil {
		return fail("Workspace", "workspaces are not supported by the DBOS runtime: remove Workspace and give the agent tools that reach its files instead")
	}
	if a.SystemPrompt != "" && a.SystemPromptFunc != nil {
		return fail("SystemPromptFunc", "set SystemPrompt or SystemPromptFunc, not both")
	}
	seen := map[string]int{}
	for i, t := range a.Tools {
		field := fmt.Sprintf("Tools[%d]", i)
		if t == nil {
			return fail(field, "the tool is nil")
		}
		switch {
		case IsFinishTool(t.Name()):
			return fail(field, "%s is added automatically from OutputSchema; do not list it", FinishToolName)
		case t.Name() == LoadSkillToolName || t.Name() == ReadSkillFileToolName:
			return fail(field, "%s is added automatically from Skills; do not list it", t.Name())
		case IsCompanionTool(t.Name()):
			return fail(field, "companion tools are injected from PersistentAgents; do not list %q", t.Name())
		}
		if j, dup := seen[t.Name()]; dup {
			return fail(field, "duplicate tool name %q (also Tools[%d])", t.Name(), j)
		}
		seen[t.Name()] = i
	}
	sources := map[string]int{}
	for i, src := range a.ToolSources {
		field := fmt.Sprintf("ToolSources[%d]", i)
		if src == nil {
			return fail(field, "the tool source is nil")
		}
		if j, dup := sources[src.SourceName()]; dup {
			return fail(field, "duplicate source name %q (also ToolSources[%d])", src.SourceName(), j)
		}
		sources[src.SourceName()] = i
	}
	if field, err := validateSkills(a.Skills); err != nil {
		return fail(field, "%v", err)
	}
	if field, err := a.validatePersistentAgents(); err != nil {
		return fail(field, "%v", err)
	}
	if len(a.OutputSchema) > 0 {
		s, err := CompileSchema(a.OutputSchema)
		if err != nil {
			return fail("OutputSchema", "%v", err)
		}
		if !s.IsObject() {
			return fail("OutputSchema", "must describe a JSON object (it becomes the input of %s)", FinishToolName)
		}
	}
	if len(a.InitialState) > 0 {
		var m map[string]any
		d := json.NewDecoder(bytes.NewReader(a.InitialState))
		if err := d.Decode(&m); err != nil || m == nil {
			return fail("InitialState", "must be a JSON object")
		}
	}
	return nil
}

// EffectiveTools returns the tools the model is offered: the agent's tools,
// then load_skill and read_skill_file when it has Skills, the companion
// tools when it has PersistentAgents, then __finish__ when it has an
// OutputSchema. It validates the agent first.
// The engine calls it once, at registration.
func (a *Agent) EffectiveTools() ([]*Tool, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	tools := append([]*Tool(nil), a.Tools...)
	if len(a.Skills) > 0 {
		skillTools, err := newSkillTools(a.Skills)
		if err != nil {
			return nil, err
		}
		tools = append(tools, skillTools...)
	}
	companions, err := a.companionTools()
	if err != nil {
		return nil, err
	}
	tools = append(tools, companions...)
	if len(a.OutputSchema) > 0 {
		finish, err := NewFinishTool(a.OutputSchema)
		if err != nil {
			return nil, err
		}
		tools = append(tools, finish)
	}
	return tools, nil
}

// Tool returns the effective tool with the given name.
func (a *Agent) Tool(name string) (*Tool, bool) {
	tools, err := a.EffectiveTools()
	if err != nil {
		return nil, false
	}
	for _, t := range tools {
		if t.Name() == name {
			return t, true
		}
	}
	return nil, false
}
