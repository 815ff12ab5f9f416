package agentfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	helix "github.com/helix-agents/helix-dbos"
)

// File is a decoded agent file: every agent's specification, checked for
// shape, references and cycles, but not built (no model is constructed and
// no environment variable is read). [File.Build] builds it.
type File struct {
	// Path names the file in errors; scripts are resolved against its
	// directory (see [Options.BaseDir]).
	Path   string
	Agents []AgentSpec
}

// AgentSpec is one entry of agents.
type AgentSpec struct {
	Name         string
	Description  string
	SystemPrompt string
	MaxSteps     int
	Model        ModelSpec
	// OutputSchema and InitialState are JSON, converted from YAML.
	OutputSchema     json.RawMessage
	InitialState     json.RawMessage
	ClientTools      []ClientToolSpec
	ApprovalTools    []ApprovalToolSpec
	SubAgents        []SubAgentSpec
	PersistentAgents []PersistentAgentSpec
	// Line is the line of the agent's entry in the file.
	Line int
}

// ModelSpec is an agent's model: which provider builds it and how.
type ModelSpec struct {
	// Provider is openai, anthropic, scripted, or one given in
	// Options.Providers.
	Provider string
	// Model is the provider's model name (gpt-4o-mini, claude-sonnet-4-5).
	Model string
	// BaseURL overrides the provider's endpoint (an OpenAI-compatible
	// server: Ollama, vLLM, OpenRouter, ...).
	BaseURL string
	// APIKeyEnv names the environment variable holding the API key. The
	// key itself is never written in the file.
	APIKeyEnv string
	// Headers are sent with every request.
	Headers map[string]string
	// MaxRetries bounds the provider's retries (nil: its default).
	MaxRetries *int
	// MaxTokens is Anthropic's max_tokens (0: its default).
	MaxTokens int
	// Thinking is Anthropic's extended-thinking budget in tokens (0: off).
	Thinking int
	// Temperature and MaxOutputTokens go to helix.LLMConfig.
	Temperature     *float64
	MaxOutputTokens int
	// Script is the scripted provider's script file, relative to the agent
	// file's directory.
	Script string
	// Line is the line of the model mapping.
	Line int
}

// ClientToolSpec declares a client-executed tool: the run waits until a
// client submits its result.
type ClientToolSpec struct {
	Name         string
	Description  string
	InputSchema  json.RawMessage
	OutputSchema json.RawMessage
	// Timeout is how long a call may wait for its result (0: forever).
	Timeout time.Duration
	Line    int
}

// ApprovalToolSpec declares a stand-in tool gated on approval: each call
// waits for an approve or deny decision; when approved it returns Result.
type ApprovalToolSpec struct {
	Name        string
	Description string
	InputSchema json.RawMessage
	// Result is what an approved call returns (nil: {"ok":true,"input":
	// <the call's arguments>}).
	Result json.RawMessage
	Line   int
}

// SubAgentSpec delegates to another agent of the file through a sub-agent
// tool (subagent__<name>).
type SubAgentSpec struct {
	Name        string
	Description string
	// InputSchema is the tool's arguments (nil: a task string).
	InputSchema json.RawMessage
	Line        int
}

// PersistentAgentSpec declares a companion: another agent of the file the
// agent can spawn and consult again.
type PersistentAgentSpec struct {
	Name string
	Mode helix.CompanionMode
	Line int
}

// The keys of each mapping, in the order the documentation lists them.
var (
	topKeys        = []string{"agents"}
	agentKeys      = []string{"name", "description", "systemPrompt", "maxSteps", "model", "outputSchema", "initialState", "clientTools", "approvalTools", "subAgents", "persistentAgents"}
	clientToolKeys = []string{"name", "description", "inputSchema", "outputSchema", "timeout"}
	approvalKeys   = []string{"name", "description", "inputSchema", "result"}
	subAgentKeys   = []string{"name", "description", "inputSchema"}
	persistentKeys = []string{"name", "mode"}
	// modelKeys lists the keys each built-in provider accepts; a provider
	// from Options.Providers accepts them all.
	modelKeys = map[string][]string{
		ProviderOpenAI:    {"provider", "model", "baseURL", "apiKeyEnv", "headers", "maxRetries", "temperature", "maxOutputTokens"},
		ProviderAnthropic: {"provider", "model", "baseURL", "apiKeyEnv", "headers", "maxRetries", "maxTokens", "thinking", "temperature", "maxOutputTokens"},
		ProviderScripted:  {"provider", "script"},
	}
	allModelKeys = []string{"provider", "model", "baseURL", "apiKeyEnv", "headers", "maxRetries", "maxTokens", "thinking", "temperature", "maxOutputTokens", "script"}
)

// Decode parses and checks an agent file without building it: every key
// is known, every value has its type, names are unique and valid, schemas
// compile, sub-agents and companions name agents of the file that have an
// output schema, and they form no cycle. opts may be nil; only its Path
// and Providers are used.
func Decode(data []byte, opts *Options) (*File, error) {
	if opts == nil {
		opts = &Options{}
	}
	d := &decoder{file: opts.path(), providers: opts.providerNames()}
	f, err := d.decode(data)
	if err != nil {
		return nil, err
	}
	if err := d.check(f); err != nil {
		return nil, err
	}
	return f, nil
}

// decoder walks the YAML tree by hand so that every error names the line,
// the agent and the field.
type decoder struct {
	file      string
	providers []string
	agent     string // the agent being decoded, for errors
}

func (d *decoder) errorf(line int, field, format string, args ...any) error {
	return &Error{File: d.file, Line: line, Agent: d.agent, Field: field, Err: fmt.Errorf(format, args...)}
}

func (d *decoder) decode(data []byte) (*File, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, d.errorf(0, "", "the file is empty: it needs a list of agents (see docs/cli.md)")
		}
		return nil, d.errorf(0, "", "not valid YAML: %v", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, d.errorf(extra.Line, "", "the file holds more than one YAML document")
	}
	top := &doc
	if top.Kind == yaml.DocumentNode && len(top.Content) == 1 {
		top = top.Content[0]
	}
	f := &File{Path: d.file}
	var agents *yaml.Node
	if err := d.fields(top, "", topKeys, func(key string, v *yaml.Node) error {
		agents = v
		return nil
	}); err != nil {
		return nil, err
	}
	if agents == nil || agents.Kind != yaml.SequenceNode || len(agents.Content) == 0 {
		line := top.Line
		if agents != nil {
			line = agents.Line
		}
		return nil, d.errorf(line, "agents", "want a non-empty list of agents")
	}
	for i, n := range agents.Content {
		a, err := d.agentSpec(i, n)
		if err != nil {
			return nil, err
		}
		f.Agents = append(f.Agents, a)
	}
	d.agent = ""
	return f, nil
}

// fields calls fn for each key of a mapping, in order, rejecting unknown
// and repeated keys.
func (d *decoder) fields(n *yaml.Node, field string, known []string, fn func(key string, v *yaml.Node) error) error {
	if n.Kind != yaml.MappingNode {
		return d.errorf(n.Line, field, "want a mapping with the keys %s, got %s", strings.Join(known, ", "), kindName(n))
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		path := join(field, k.Value)
		if !slices.Contains(known, k.Value) {
			return d.errorf(k.Line, path, "unknown key %q (known keys here: %s)%s", k.Value, strings.Join(known, ", "), suggest(k.Value, known))
		}
		if seen[k.Value] {
			return d.errorf(k.Line, path, "set twice")
		}
		seen[k.Value] = true
		if err := fn(k.Value, v); err != nil {
			return err
		}
	}
	return nil
}

func (d *decoder) agentSpec(i int, n *yaml.Node) (AgentSpec, error) {
	a := AgentSpec{Line: n.Line}
	d.agent = fmt.Sprintf("#%d", i)
	// The name first, so that every other error names the agent.
	if n.Kind == yaml.MappingNode {
		for j := 0; j+1 < len(n.Content); j += 2 {
			if n.Content[j].Value == "name" && n.Content[j+1].Kind == yaml.ScalarNode {
				d.agent = n.Content[j+1].Value
			}
		}
	}
	var model *yaml.Node
	err := d.fields(n, "", agentKeys, func(key string, v *yaml.Node) error {
		var err error
		switch key {
		case "name":
			a.Name, err = d.str(v, key)
		case "description":
			a.Description, err = d.str(v, key)
		case "systemPrompt":
			a.SystemPrompt, err = d.str(v, key)
		case "maxSteps":
			a.MaxSteps, err = d.integer(v, key)
			if err == nil && a.MaxSteps < 1 {
				err = d.errorf(v.Line, key, "must be >= 1 (leave it out for the default of %d), got %d", helix.DefaultMaxSteps, a.MaxSteps)
			}
		case "model":
			model = v
		case "outputSchema":
			a.OutputSchema, err = d.schema(v, key, true)
		case "initialState":
			a.InitialState, err = d.object(v, key)
		case "clientTools":
			err = d.list(v, key, func(j int, e *yaml.Node) error {
				t, err := d.clientTool(e, fmt.Sprintf("%s[%d]", key, j))
				a.ClientTools = append(a.ClientTools, t)
				return err
			})
		case "approvalTools":
			err = d.list(v, key, func(j int, e *yaml.Node) error {
				t, err := d.approvalTool(e, fmt.Sprintf("%s[%d]", key, j))
				a.ApprovalTools = append(a.ApprovalTools, t)
				return err
			})
		case "subAgents":
			err = d.list(v, key, func(j int, e *yaml.Node) error {
				s, err := d.subAgent(e, fmt.Sprintf("%s[%d]", key, j))
				a.SubAgents = append(a.SubAgents, s)
				return err
			})
		case "persistentAgents":
			err = d.list(v, key, func(j int, e *yaml.Node) error {
				p, err := d.persistent(e, fmt.Sprintf("%s[%d]", key, j))
				a.PersistentAgents = append(a.PersistentAgents, p)
				return err
			})
		}
		return err
	})
	if err != nil {
		return a, err
	}
	if a.Name == "" {
		return a, d.errorf(n.Line, "name", "required: the agent type sessions are stored under (letters, digits, '_' and '-')")
	}
	if model == nil {
		return a, d.errorf(n.Line, "model", "required: e.g. {provider: openai, model: gpt-4o-mini} or {provider: scripted, script: script.yaml}")
	}
	a.Model, err = d.model(model)
	return a, err
}

func (d *decoder) model(n *yaml.Node) (ModelSpec, error) {
	m := ModelSpec{Line: n.Line}
	// The provider decides which keys are allowed: read it first.
	if n.Kind == yaml.MappingNode {
		for j := 0; j+1 < len(n.Content); j += 2 {
			if n.Content[j].Value == "provider" {
				p, err := d.str(n.Content[j+1], "model.provider")
				if err != nil {
					return m, err
				}
				m.Provider = p
			}
		}
	}
	known, builtin := modelKeys[m.Provider]
	switch {
	case n.Kind != yaml.MappingNode:
	case m.Provider == "":
		return m, d.errorf(n.Line, "model.provider", "required: one of %s", strings.Join(d.providers, ", "))
	case !builtin && !slices.Contains(d.providers, m.Provider):
		return m, d.errorf(n.Line, "model.provider", "unknown provider %q (want %s)%s", m.Provider, strings.Join(d.providers, ", "), suggest(m.Provider, d.providers))
	case !builtin:
		known = allModelKeys
	}
	if n.Kind == yaml.MappingNode {
		for j := 0; j+1 < len(n.Content); j += 2 {
			k := n.Content[j]
			if k.Value == "apiKey" {
				return m, d.errorf(k.Line, "model.apiKey", "API keys are never written in the agent file: set apiKeyEnv to the name of the environment variable that holds the key")
			}
			if !slices.Contains(known, k.Value) && slices.Contains(allModelKeys, k.Value) {
				return m, d.errorf(k.Line, "model."+k.Value, "not a setting of provider %s (its keys: %s)", m.Provider, strings.Join(known, ", "))
			}
		}
	}
	err := d.fields(n, "model", known, func(key string, v *yaml.Node) error {
		field := "model." + key
		var err error
		switch key {
		case "provider":
		case "model":
			m.Model, err = d.str(v, field)
		case "baseURL":
			m.BaseURL, err = d.str(v, field)
		case "apiKeyEnv":
			m.APIKeyEnv, err = d.str(v, field)
			if err == nil && !validEnvName(m.APIKeyEnv) {
				err = d.errorf(v.Line, field, "%q is not an environment variable name: name the variable that holds the key (OPENAI_API_KEY), not the key", m.APIKeyEnv)
			}
		case "headers":
			m.Headers, err = d.stringMap(v, field)
		case "maxRetries":
			var r int
			if r, err = d.nonNegative(v, field); err == nil {
				m.MaxRetries = &r
			}
		case "maxTokens":
			m.MaxTokens, err = d.nonNegative(v, field)
		case "thinking":
			m.Thinking, err = d.nonNegative(v, field)
		case "temperature":
			var t float64
			if v.Tag != "!!int" && v.Tag != "!!float" {
				err = d.errorf(v.Line, field, "want a number, got %s", kindName(v))
			} else if err = d.scalar(v, field, "a number", &t); err == nil {
				m.Temperature = &t
			}
		case "maxOutputTokens":
			m.MaxOutputTokens, err = d.nonNegative(v, field)
		case "script":
			m.Script, err = d.str(v, field)
		}
		return err
	})
	if err != nil {
		return m, err
	}
	switch m.Provider {
	case ProviderOpenAI, ProviderAnthropic:
		if m.Model == "" {
			example := "gpt-4o-mini"
			if m.Provider == ProviderAnthropic {
				example = "claude-sonnet-4-5"
			}
			return m, d.errorf(n.Line, "model.model", "required for provider %s, e.g. %s", m.Provider, example)
		}
	case ProviderScripted:
		if m.Script == "" {
			return m, d.errorf(n.Line, "model.script", "required for provider scripted: the script file (YAML or JSON, see llm/scripted), relative to the agent file")
		}
	}
	return m, nil
}

func (d *decoder) clientTool(n *yaml.Node, field string) (ClientToolSpec, error) {
	t := ClientToolSpec{Line: n.Line}
	err := d.fields(n, field, clientToolKeys, func(key string, v *yaml.Node) error {
		var err error
		f := field + "." + key
		switch key {
		case "name":
			t.Name, err = d.str(v, f)
		case "description":
			t.Description, err = d.str(v, f)
		case "inputSchema":
			t.InputSchema, err = d.schema(v, f, true)
		case "outputSchema":
			t.OutputSchema, err = d.schema(v, f, false)
		case "timeout":
			var s string
			if s, err = d.str(v, f); err == nil {
				t.Timeout, err = time.ParseDuration(s)
				if err != nil || t.Timeout <= 0 {
					err = d.errorf(v.Line, f, "want a positive Go duration such as 30s, 15m or 24h, got %q", s)
				}
			}
		}
		return err
	})
	if err == nil {
		err = d.toolName(n, field, t.Name)
	}
	return t, err
}

func (d *decoder) approvalTool(n *yaml.Node, field string) (ApprovalToolSpec, error) {
	t := ApprovalToolSpec{Line: n.Line}
	err := d.fields(n, field, approvalKeys, func(key string, v *yaml.Node) error {
		var err error
		f := field + "." + key
		switch key {
		case "name":
			t.Name, err = d.str(v, f)
		case "description":
			t.Description, err = d.str(v, f)
		case "inputSchema":
			t.InputSchema, err = d.schema(v, f, true)
		case "result":
			t.Result, err = d.json(v, f)
		}
		return err
	})
	if err == nil {
		err = d.toolName(n, field, t.Name)
	}
	return t, err
}

func (d *decoder) toolName(n *yaml.Node, field, name string) error {
	if name == "" {
		return d.errorf(n.Line, field+".name", "required")
	}
	if err := helix.ValidateToolName(name); err != nil {
		return d.errorf(n.Line, field+".name", "%v", err)
	}
	return nil
}

// subAgent reads a name, or a mapping with a name, a description and an
// input schema.
func (d *decoder) subAgent(n *yaml.Node, field string) (SubAgentSpec, error) {
	s := SubAgentSpec{Line: n.Line}
	if n.Kind == yaml.ScalarNode {
		var err error
		s.Name, err = d.str(n, field)
		return s, err
	}
	err := d.fields(n, field, subAgentKeys, func(key string, v *yaml.Node) error {
		var err error
		f := field + "." + key
		switch key {
		case "name":
			s.Name, err = d.str(v, f)
		case "description":
			s.Description, err = d.str(v, f)
		case "inputSchema":
			s.InputSchema, err = d.schema(v, f, true)
		}
		return err
	})
	if err == nil && s.Name == "" {
		err = d.errorf(n.Line, field+".name", "required: the name of another agent of this file")
	}
	return s, err
}

// persistent reads a name, or a mapping with a name and a mode.
func (d *decoder) persistent(n *yaml.Node, field string) (PersistentAgentSpec, error) {
	p := PersistentAgentSpec{Line: n.Line}
	if n.Kind == yaml.ScalarNode {
		var err error
		p.Name, err = d.str(n, field)
		return p, err
	}
	err := d.fields(n, field, persistentKeys, func(key string, v *yaml.Node) error {
		var err error
		f := field + "." + key
		switch key {
		case "name":
			p.Name, err = d.str(v, f)
		case "mode":
			var m string
			if m, err = d.str(v, f); err == nil {
				p.Mode = helix.CompanionMode(m)
				if p.Mode != helix.CompanionBlocking && p.Mode != helix.CompanionNonBlocking {
					err = d.errorf(v.Line, f, "unknown mode %q (want %s or %s)", m, helix.CompanionBlocking, helix.CompanionNonBlocking)
				}
			}
		}
		return err
	})
	if err == nil && p.Name == "" {
		err = d.errorf(n.Line, field+".name", "required: the name of another agent of this file")
	}
	return p, err
}

func (d *decoder) list(n *yaml.Node, field string, fn func(i int, e *yaml.Node) error) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return d.errorf(n.Line, field, "want a list, got %s", kindName(n))
	}
	for i, e := range n.Content {
		if err := fn(i, e); err != nil {
			return err
		}
	}
	return nil
}

// scalar decodes a scalar into v (a string, int or float64 pointer).
func (d *decoder) scalar(n *yaml.Node, field, want string, v any) error {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return d.errorf(n.Line, field, "want %s, got %s", want, kindName(n))
	}
	if err := n.Decode(v); err != nil {
		return d.errorf(n.Line, field, "want %s, got %q", want, n.Value)
	}
	return nil
}

func (d *decoder) str(n *yaml.Node, field string) (string, error) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		hint := ""
		if n.Kind == yaml.ScalarNode && n.Tag != "!!null" {
			hint = " (quote it to mean the text)"
		}
		return "", d.errorf(n.Line, field, "want text, got %s%s", kindName(n), hint)
	}
	return n.Value, nil
}

func (d *decoder) integer(n *yaml.Node, field string) (int, error) {
	var i int
	if n.Kind == yaml.ScalarNode && n.Tag != "!!int" {
		return 0, d.errorf(n.Line, field, "want a whole number, got %q", n.Value)
	}
	err := d.scalar(n, field, "a whole number", &i)
	return i, err
}

func (d *decoder) nonNegative(n *yaml.Node, field string) (int, error) {
	i, err := d.integer(n, field)
	if err == nil && i < 0 {
		err = d.errorf(n.Line, field, "must not be negative, got %d", i)
	}
	return i, err
}

func (d *decoder) stringMap(n *yaml.Node, field string) (map[string]string, error) {
	if n.Kind != yaml.MappingNode {
		return nil, d.errorf(n.Line, field, "want a mapping of header names to values, got %s", kindName(n))
	}
	out := map[string]string{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		v, err := d.str(n.Content[i+1], field+"."+n.Content[i].Value)
		if err != nil {
			return nil, err
		}
		out[n.Content[i].Value] = v
	}
	return out, nil
}

// json converts a YAML value to JSON.
func (d *decoder) json(n *yaml.Node, field string) (json.RawMessage, error) {
	var v any
	if err := n.Decode(&v); err != nil {
		return nil, d.errorf(n.Line, field, "%v", err)
	}
	v, err := jsonable(v)
	if err != nil {
		return nil, d.errorf(n.Line, field, "%v", err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, d.errorf(n.Line, field, "%v", err)
	}
	return b, nil
}

// object converts a YAML mapping to a JSON object.
func (d *decoder) object(n *yaml.Node, field string) (json.RawMessage, error) {
	if n.Kind != yaml.MappingNode {
		return nil, d.errorf(n.Line, field, "want a mapping (a JSON object written in YAML), got %s", kindName(n))
	}
	return d.json(n, field)
}

// schema converts a JSON Schema written in YAML and compiles it; object
// requires it to describe a JSON object.
func (d *decoder) schema(n *yaml.Node, field string, object bool) (json.RawMessage, error) {
	raw, err := d.object(n, field)
	if err != nil {
		return nil, err
	}
	s, err := helix.CompileSchema(raw)
	if err != nil {
		return nil, d.errorf(n.Line, field, "%v", err)
	}
	if object && !s.IsObject() {
		return nil, d.errorf(n.Line, field, `must describe a JSON object ("type": "object"), got %s`, s.Raw())
	}
	return s.Raw(), nil
}

// jsonable turns decoded YAML into values encoding/json accepts.
func jsonable(v any) (any, error) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			c, err := jsonable(e)
			if err != nil {
				return nil, err
			}
			v[k] = c
		}
		return v, nil
	case map[any]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("key %v is not text: JSON objects have text keys (quote it)", k)
			}
			c, err := jsonable(e)
			if err != nil {
				return nil, err
			}
			out[ks] = c
		}
		return out, nil
	case []any:
		for i, e := range v {
			c, err := jsonable(e)
			if err != nil {
				return nil, err
			}
			v[i] = c
		}
		return v, nil
	case time.Time:
		return v.Format(time.RFC3339Nano), nil
	}
	return v, nil
}

// check validates what spans agents: unique names, references and cycles.
func (d *decoder) check(f *File) error {
	byName := map[string]*AgentSpec{}
	for i := range f.Agents {
		a := &f.Agents[i]
		d.agent = a.Name
		if err := (&helix.Agent{Name: a.Name}).Validate(); err != nil {
			var de *helix.DefinitionError
			if errors.As(err, &de) && de.Field == "Name" {
				return d.errorf(a.Line, "name", "%s", de.Reason)
			}
		}
		if prev, dup := byName[a.Name]; dup {
			return d.errorf(a.Line, "name", "duplicate agent name (also on line %d)", prev.Line)
		}
		byName[a.Name] = a
		tools := map[string]int{}
		for _, t := range a.ClientTools {
			if line, dup := tools[t.Name]; dup {
				return d.errorf(t.Line, "clientTools", "duplicate tool name %q (also on line %d)", t.Name, line)
			}
			tools[t.Name] = t.Line
		}
		for _, t := range a.ApprovalTools {
			if line, dup := tools[t.Name]; dup {
				return d.errorf(t.Line, "approvalTools", "duplicate tool name %q (also on line %d)", t.Name, line)
			}
			tools[t.Name] = t.Line
		}
	}
	names := slices.Sorted(maps.Keys(byName))
	for _, a := range f.Agents {
		d.agent = a.Name
		seen := map[string]bool{}
		for i, s := range a.SubAgents {
			field := fmt.Sprintf("subAgents[%d]", i)
			if err := d.reference(byName, names, s.Name, field, s.Line, "a sub-agent returns a structured output, which becomes the tool result"); err != nil {
				return err
			}
			if seen[s.Name] {
				return d.errorf(s.Line, field, "sub-agent %q is listed twice", s.Name)
			}
			seen[s.Name] = true
		}
		seen = map[string]bool{}
		for i, p := range a.PersistentAgents {
			field := fmt.Sprintf("persistentAgents[%d]", i)
			if p.Name == a.Name {
				return d.errorf(p.Line, field, "an agent cannot be its own companion")
			}
			if err := d.reference(byName, names, p.Name, field, p.Line, "a companion answers each consultation with a structured output"); err != nil {
				return err
			}
			if seen[p.Name] {
				return d.errorf(p.Line, field, "companion %q is listed twice", p.Name)
			}
			seen[p.Name] = true
		}
	}
	d.agent = ""
	if cycle := findCycle(f); cycle != nil {
		a := byName[cycle[0]]
		d.agent = a.Name
		return d.errorf(a.Line, "subAgents", "agents delegate in a cycle: %s (an agent may not reach itself through subAgents or persistentAgents)", strings.Join(cycle, " → "))
	}
	return nil
}

func (d *decoder) reference(byName map[string]*AgentSpec, names []string, name, field string, line int, why string) error {
	target, ok := byName[name]
	switch {
	case !ok:
		return d.errorf(line, field, "no agent named %q in this file (agents: %s)%s", name, strings.Join(names, ", "), suggest(name, names))
	case len(target.OutputSchema) == 0:
		return d.errorf(line, field, "agent %q has no outputSchema: %s; give it one", name, why)
	}
	return nil
}

// findCycle returns a cycle of delegations (first agent repeated last), or
// nil.
func findCycle(f *File) []string {
	edges := map[string][]string{}
	for _, a := range f.Agents {
		for _, s := range a.SubAgents {
			edges[a.Name] = append(edges[a.Name], s.Name)
		}
		for _, p := range a.PersistentAgents {
			edges[a.Name] = append(edges[a.Name], p.Name)
		}
	}
	const (
		unvisited = iota
		onPath
		done
	)
	state := map[string]int{}
	var path []string
	var visit func(n string) []string
	visit = func(n string) []string {
		state[n] = onPath
		path = append(path, n)
		for _, m := range edges[n] {
			switch state[m] {
			case onPath:
				i := slices.Index(path, m)
				return append(slices.Clone(path[i:]), m)
			case unvisited:
				if c := visit(m); c != nil {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		state[n] = done
		return nil
	}
	for _, a := range f.Agents {
		if state[a.Name] == unvisited {
			if c := visit(a.Name); c != nil {
				return c
			}
		}
	}
	return nil
}

// order returns the agents dependencies first (a sub-agent or companion
// before the agents that delegate to it). The file has no cycle.
func (f *File) order() []*AgentSpec {
	byName := map[string]*AgentSpec{}
	for i := range f.Agents {
		byName[f.Agents[i].Name] = &f.Agents[i]
	}
	var out []*AgentSpec
	done := map[string]bool{}
	var visit func(a *AgentSpec)
	visit = func(a *AgentSpec) {
		if done[a.Name] {
			return
		}
		done[a.Name] = true
		for _, s := range a.SubAgents {
			visit(byName[s.Name])
		}
		for _, p := range a.PersistentAgents {
			visit(byName[p.Name])
		}
		out = append(out, a)
	}
	for i := range f.Agents {
		visit(&f.Agents[i])
	}
	return out
}

func join(field, key string) string {
	if field == "" {
		return key
	}
	return field + "." + key
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return "nothing"
		case "!!bool":
			return "a boolean (" + n.Value + ")"
		case "!!int", "!!float":
			return "a number (" + n.Value + ")"
		}
		return strconv.Quote(n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "an unexpected value"
}

// validEnvName reports whether s looks like an environment variable name.
func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// suggest proposes the closest known name to a misspelt one.
func suggest(got string, known []string) string {
	best, bestDist := "", max(1, len(got)/3)+1
	for _, k := range known {
		if dist := levenshtein(strings.ToLower(got), strings.ToLower(k)); dist < bestDist {
			best, bestDist = k, dist
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf("; did you mean %q?", best)
}

func levenshtein(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
