package agentfile

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/mcp"
)

// Built-in providers (ModelSpec.Provider).
const (
	ProviderOpenAI    = "openai"
	ProviderAnthropic = "anthropic"
	ProviderScripted  = "scripted"
)

// Default API key variables, used when apiKeyEnv is left out.
const (
	DefaultOpenAIKeyEnv    = "OPENAI_API_KEY"
	DefaultAnthropicKeyEnv = "ANTHROPIC_API_KEY"
)

// Options refine Load, Decode and Build. The zero value is valid.
type Options struct {
	// Path names the file in errors (Load sets it).
	Path string
	// BaseDir resolves relative script paths; default the directory of
	// Path, else the working directory.
	BaseDir string
	// Getenv reads the API key variables; default os.Getenv.
	Getenv func(string) string
	// Providers adds model providers, or replaces built-in ones, by name.
	Providers map[string]Provider
}

// Provider builds the model of an agent from its specification. The
// ProviderEnv gives it the environment and the file's directory.
type Provider func(spec ModelSpec, env ProviderEnv) (helix.Model, error)

// ProviderEnv is what a Provider may need besides the specification.
type ProviderEnv struct {
	// BaseDir is the directory relative paths are resolved against.
	BaseDir string
	// Getenv reads environment variables.
	Getenv func(string) string
}

func (o *Options) path() string { return cmp.Or(o.Path, "agent file") }

func (o *Options) providerNames() []string {
	names := []string{ProviderOpenAI, ProviderAnthropic, ProviderScripted}
	for name := range o.Providers {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

func (o *Options) getenv(name string) string {
	if o.Getenv != nil {
		return o.Getenv(name)
	}
	return os.Getenv(name)
}

func (o *Options) baseDir() string {
	switch {
	case o.BaseDir != "":
		return o.BaseDir
	case o.Path != "":
		return filepath.Dir(o.Path)
	}
	return "."
}

// Error is a problem with an agent file: where it is (the file, the line
// when known, the agent and the field) and what is wrong.
type Error struct {
	File  string
	Line  int // 0 when unknown
	Agent string
	Field string
	Err   error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Agent != "" {
		fmt.Fprintf(&b, ": agent %q", e.Agent)
	}
	if e.Field != "" {
		b.WriteString(": " + e.Field)
	}
	b.WriteString(": " + e.Err.Error())
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Agents are the agents of a file, built.
type Agents struct {
	// All are the agents in file order. Register them all: the engine
	// registers each agent's sub-agents and companions with it, and the
	// same pointer twice is a no-op.
	All []*helix.Agent
	// File is the decoded file they were built from.
	File *File

	clients []*mcp.Client
}

// Close closes the connections to the agents' MCP servers (and stops the
// stdio ones): call it once the engine that runs the agents shut down.
func (a *Agents) Close() error { return closeClients(a.clients) }

func closeClients(cs []*mcp.Client) error {
	var errs []error
	for _, c := range cs {
		if err := c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close MCP server %q: %w", c.Server().Name, err))
		}
	}
	return errors.Join(errs...)
}

// Get returns the agent with the given name.
func (a *Agents) Get(name string) (*helix.Agent, bool) {
	for _, ag := range a.All {
		if ag.Name == name {
			return ag, true
		}
	}
	return nil, false
}

// Names returns the agents' names in file order.
func (a *Agents) Names() []string {
	out := make([]string, len(a.All))
	for i, ag := range a.All {
		out[i] = ag.Name
	}
	return out
}

// Load reads, checks and builds an agent file. opts may be nil; Load sets
// its Path.
func Load(path string, opts *Options) (*Agents, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	o.Path = path
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &Error{File: path, Err: fmt.Errorf("read the agent file: %w", unwrapPathError(err))}
	}
	f, err := Decode(data, &o)
	if err != nil {
		return nil, err
	}
	return f.Build(&o)
}

func unwrapPathError(err error) error {
	if pe, ok := errors.AsType[*os.PathError](err); ok {
		return pe.Err
	}
	return err
}

// Build constructs the agents of a decoded file: their models (reading the
// API key variables and the script files), tools, sub-agent tools and
// companions. Sub-agents and companions are the same *helix.Agent as the
// file's entry of that name. opts may be nil.
func (f *File) Build(opts *Options) (*Agents, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if o.Path == "" {
		o.Path = f.Path
	}
	b := &builder{o: &o, file: o.path(), scripts: map[string]*scriptFile{}, built: map[string]*helix.Agent{}}
	for _, spec := range f.order() {
		a, err := b.agent(spec)
		if err != nil {
			closeClients(b.clients)
			return nil, err
		}
		b.built[spec.Name] = a
	}
	out := &Agents{File: f, clients: b.clients}
	for _, spec := range f.Agents {
		out.All = append(out.All, b.built[spec.Name])
	}
	return out, nil
}

type builder struct {
	o       *Options
	file    string
	scripts map[string]*scriptFile // by absolute path: one model per script file
	built   map[string]*helix.Agent
	clients []*mcp.Client // the agents' MCP servers, closed by Agents.Close
}

func (b *builder) fail(spec *AgentSpec, line int, field string, err error) error {
	return &Error{File: b.file, Line: line, Agent: spec.Name, Field: field, Err: err}
}

func (b *builder) agent(spec *AgentSpec) (*helix.Agent, error) {
	model, err := b.model(spec)
	if err != nil {
		return nil, err
	}
	a := &helix.Agent{
		Name:         spec.Name,
		Description:  spec.Description,
		SystemPrompt: spec.SystemPrompt,
		Model:        model,
		MaxSteps:     spec.MaxSteps,
		OutputSchema: spec.OutputSchema,
		InitialState: spec.InitialState,
		LLMConfig: helix.LLMConfig{
			Model:           spec.Model.Model,
			Temperature:     spec.Model.Temperature,
			MaxOutputTokens: spec.Model.MaxOutputTokens,
			ProviderOptions: providerOptions(spec.Model),
		},
	}
	for i, t := range spec.ClientTools {
		var opts []helix.ToolOption
		if t.Timeout > 0 {
			opts = append(opts, helix.ClientTimeout(t.Timeout))
		}
		tool, err := helix.NewRawClientTool(t.Name, t.Description, orAnyObject(t.InputSchema), t.OutputSchema, opts...)
		if err != nil {
			return nil, b.fail(spec, t.Line, fmt.Sprintf("clientTools[%d]", i), err)
		}
		a.Tools = append(a.Tools, tool)
	}
	for i, t := range spec.ApprovalTools {
		tool, err := helix.NewRawTool(t.Name, t.Description, orAnyObject(t.InputSchema), nil, approvedResult(t.Result), helix.RequireApproval())
		if err != nil {
			return nil, b.fail(spec, t.Line, fmt.Sprintf("approvalTools[%d]", i), err)
		}
		a.Tools = append(a.Tools, tool)
	}
	for i, s := range spec.SubAgents {
		tool, err := helix.SubAgentTool(b.built[s.Name], s.InputSchema, &helix.SubAgentToolOptions{Description: s.Description})
		if err != nil {
			return nil, b.fail(spec, s.Line, fmt.Sprintf("subAgents[%d]", i), err)
		}
		a.Tools = append(a.Tools, tool)
	}
	for _, p := range spec.PersistentAgents {
		a.PersistentAgents = append(a.PersistentAgents, helix.PersistentAgent{Agent: b.built[p.Name], Mode: p.Mode})
	}
	clients, err := b.mcpClients(spec)
	if err != nil {
		return nil, err
	}
	for _, c := range clients {
		a.ToolSources = append(a.ToolSources, c)
		b.clients = append(b.clients, c)
	}
	if err := a.Validate(); err != nil {
		if de, ok := errors.AsType[*helix.DefinitionError](err); ok {
			return nil, b.fail(spec, spec.Line, de.Field, errors.New(de.Reason))
		}
		return nil, b.fail(spec, spec.Line, "", err)
	}
	return a, nil
}

// orAnyObject returns schema, or {"type":"object"} for a tool declared
// without an input schema.
func orAnyObject(schema json.RawMessage) json.RawMessage {
	if len(schema) == 0 {
		return json.RawMessage(`{"type":"object"}`)
	}
	return schema
}

// approvedResult returns the function of an approval tool: the declared
// result, or {"ok":true,"input":<arguments>}.
func approvedResult(result json.RawMessage) func(context.Context, json.RawMessage, helix.ToolContext) (json.RawMessage, error) {
	return func(_ context.Context, args json.RawMessage, _ helix.ToolContext) (json.RawMessage, error) {
		if len(result) > 0 {
			return result, nil
		}
		return json.Marshal(map[string]any{"ok": true, "input": args})
	}
}

func (b *builder) model(spec *AgentSpec) (helix.Model, error) {
	m := spec.Model
	env := ProviderEnv{BaseDir: b.o.baseDir(), Getenv: b.o.getenv}
	if p, ok := b.o.Providers[m.Provider]; ok {
		model, err := p(m, env)
		if err != nil {
			return nil, b.fail(spec, m.Line, "model", err)
		}
		return model, nil
	}
	switch m.Provider {
	case ProviderScripted:
		return b.scripted(spec)
	case ProviderOpenAI, ProviderAnthropic:
		key, err := b.apiKey(spec)
		if err != nil {
			return nil, err
		}
		model, err := builtinModel(m, key)
		if err != nil {
			return nil, b.fail(spec, m.Line, "model", err)
		}
		return model, nil
	}
	names := b.o.providerNames()
	return nil, b.fail(spec, m.Line, "model.provider", fmt.Errorf("unknown provider %q (want %s)", m.Provider, strings.Join(names, ", ")))
}

// apiKey reads the key of an openai or anthropic model from the variable
// apiKeyEnv names. Without apiKeyEnv it is the provider's own variable
// (OPENAI_API_KEY, ANTHROPIC_API_KEY) for the provider's own endpoint, and
// no key with a baseURL: a provider's key is never sent to a server the
// file names unless the file says so (apiKeyEnv), since that server may be
// anyone's.
func (b *builder) apiKey(spec *AgentSpec) (string, error) {
	m := spec.Model
	name := m.APIKeyEnv
	if name == "" {
		switch {
		case m.BaseURL != "":
			return "", nil // a server of your own: apiKeyEnv names its key, if it needs one
		case m.Provider == ProviderAnthropic:
			name = DefaultAnthropicKeyEnv
		default:
			name = DefaultOpenAIKeyEnv
		}
	}
	key := b.o.getenv(name)
	if key == "" {
		how := "set apiKeyEnv to the variable that holds it"
		if m.APIKeyEnv != "" {
			how = "or name another variable in apiKeyEnv"
		}
		return "", b.fail(spec, m.Line, "model.apiKeyEnv", fmt.Errorf(
			"environment variable %s is not set: it must hold the %s API key (export %s=..., %s; or use provider: scripted to try without a key)",
			name, m.Provider, name, how))
	}
	return key, nil
}

// scriptNames lists the agents a script file scripts, for errors.
func scriptNames(sf *scriptFile) string {
	return strings.Join(slices.Sorted(maps.Keys(sf.agents)), ", ")
}
