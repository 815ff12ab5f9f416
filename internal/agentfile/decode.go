package agentfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/llm/anthropic"
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
	// MCP are the MCP servers whose tools the agent takes.
	MCP []MCPServerSpec
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
	// ProviderOptions is a JSON object of request options for the
	// provider (nil: none). It goes to helix.LLMConfig.ProviderOptions
	// under the provider's key (see [ProviderOptionsKey]); the openai and
	// anthropic adapters set its members on the request body as they are.
	ProviderOptions json.RawMessage
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

// modelKeys lists the keys each built-in provider accepts, in the order
// of the model's keys in [decoder.model]; a provider from
// Options.Providers accepts them all.
var modelKeys = map[string][]string{
	ProviderOpenAI:    {"provider", "model", "baseURL", "apiKeyEnv", "headers", "maxRetries", "temperature", "maxOutputTokens", "providerOptions"},
	ProviderAnthropic: {"provider", "model", "baseURL", "apiKeyEnv", "headers", "maxRetries", "maxTokens", "thinking", "temperature", "maxOutputTokens", "providerOptions"},
	ProviderScripted:  {"provider", "script"},
}

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
//
// Each mapping is decoded by a table of its keys ([key]) whose decoders
// store into the spec being built; the values are read by small decoders
// with one signature (see [valueFunc]), combined with [into], [optional]
// and [list].
type decoder struct {
	file      string
	providers []string
	agent     string // the agent being decoded, for errors
}

func (d *decoder) errorf(line int, field, format string, args ...any) error {
	return &Error{File: d.file, Line: line, Agent: d.agent, Field: field, Err: fmt.Errorf(format, args...)}
}

// A valueFunc decodes a YAML value; field is the value's path in errors
// (clientTools[0].timeout).
type valueFunc[V any] func(n *yaml.Node, field string) (V, error)

// A key is one key a mapping accepts and the decoder of its value.
type key struct {
	name   string
	decode func(v *yaml.Node, field string) error
}

// into returns a key's decoder that stores what dec reads in *p.
func into[V any](p *V, dec valueFunc[V]) func(*yaml.Node, string) error {
	return func(n *yaml.Node, field string) error {
		v, err := dec(n, field)
		if err != nil {
			return err
		}
		*p = v
		return nil
	}
}

// optional reads a setting whose absence means a default: nil when the key
// is left out, a pointer to what dec reads when it is set.
func optional[V any](dec valueFunc[V]) valueFunc[*V] {
	return func(n *yaml.Node, field string) (*V, error) {
		v, err := dec(n, field)
		if err != nil {
			return nil, err
		}
		return &v, nil
	}
}

// list reads a list (or nothing) whose entries dec reads; entry i is
// field[i] in errors. Nothing and an empty list both read as nil.
func list[V any](d *decoder, dec valueFunc[V]) valueFunc[[]V] {
	return func(n *yaml.Node, field string) ([]V, error) {
		if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			return nil, nil
		}
		if n.Kind != yaml.SequenceNode {
			return nil, d.errorf(n.Line, field, "want a list, got %s", kindName(n))
		}
		var out []V
		for i, e := range n.Content {
			v, err := dec(e, fmt.Sprintf("%s[%d]", field, i))
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
}

// node reads a value as it is, for a key decoded after the others.
func node(n *yaml.Node, _ string) (*yaml.Node, error) { return n, nil }

// pairs yields the keys and values of a mapping, in order; nothing for
// another node.
func pairs(n *yaml.Node) iter.Seq2[*yaml.Node, *yaml.Node] {
	return func(yield func(k, v *yaml.Node) bool) {
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if !yield(n.Content[i], n.Content[i+1]) {
				return
			}
		}
	}
}

func keyNames(keys []key) []string {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.name
	}
	return names
}

// mapping decodes a mapping by the table of its keys, in the order the
// file gives them, rejecting unknown and repeated keys. keys are in the
// order the documentation lists them, which errors follow.
func (d *decoder) mapping(n *yaml.Node, field string, keys []key) error {
	known := keyNames(keys)
	if n.Kind != yaml.MappingNode {
		return d.errorf(n.Line, field, "want a mapping with the keys %s, got %s", strings.Join(known, ", "), kindName(n))
	}
	seen := map[string]bool{}
	for k, v := range pairs(n) {
		path := join(field, k.Value)
		i := slices.Index(known, k.Value)
		if i < 0 {
			return d.errorf(k.Line, path, "unknown key %q (known keys here: %s)%s", k.Value, strings.Join(known, ", "), suggest(k.Value, known))
		}
		if seen[k.Value] {
			return d.errorf(k.Line, path, "set twice")
		}
		seen[k.Value] = true
		if err := keys[i].decode(v, path); err != nil {
			return err
		}
	}
	return nil
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
	if err := d.mapping(top, "", []key{{"agents", into(&agents, node)}}); err != nil {
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

func (d *decoder) agentSpec(i int, n *yaml.Node) (AgentSpec, error) {
	a := AgentSpec{Line: n.Line}
	d.agent = fmt.Sprintf("#%d", i)
	// The name first, so that every other error names the agent.
	for k, v := range pairs(n) {
		if k.Value == "name" && v.Kind == yaml.ScalarNode {
			d.agent = v.Value
		}
	}
	// The model is decoded last, once the agent is known to have a name.
	var model *yaml.Node
	err := d.mapping(n, "", []key{
		{"name", into(&a.Name, d.str)},
		{"description", into(&a.Description, d.str)},
		{"systemPrompt", into(&a.SystemPrompt, d.str)},
		{"maxSteps", into(&a.MaxSteps, d.maxSteps)},
		{"model", into(&model, node)},
		{"outputSchema", into(&a.OutputSchema, d.objectSchema)},
		{"initialState", into(&a.InitialState, d.object)},
		{"clientTools", into(&a.ClientTools, list(d, d.clientTool))},
		{"approvalTools", into(&a.ApprovalTools, list(d, d.approvalTool))},
		{"subAgents", into(&a.SubAgents, list(d, d.subAgent))},
		{"persistentAgents", into(&a.PersistentAgents, list(d, d.persistent))},
		{"mcp", into(&a.MCP, list(d, d.mcpServer))},
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
	// Every key of every provider, in the order the documentation lists
	// them; the provider picks its own (modelKeys).
	keys := []key{
		{"provider", into(&m.Provider, d.str)},
		{"model", into(&m.Model, d.str)},
		{"baseURL", into(&m.BaseURL, d.str)},
		{"apiKeyEnv", into(&m.APIKeyEnv, d.envName)},
		{"headers", into(&m.Headers, d.stringMap)},
		{"maxRetries", into(&m.MaxRetries, optional(d.nonNegative))},
		{"maxTokens", into(&m.MaxTokens, d.nonNegative)},
		{"thinking", into(&m.Thinking, d.nonNegative)},
		{"temperature", into(&m.Temperature, optional(d.number))},
		{"maxOutputTokens", into(&m.MaxOutputTokens, d.nonNegative)},
		{"providerOptions", into(&m.ProviderOptions, d.providerOptions)},
		{"script", into(&m.Script, d.str)},
	}
	all := keyNames(keys)
	// The provider decides which keys are allowed: read it first.
	for k, v := range pairs(n) {
		if k.Value == "provider" {
			p, err := d.str(v, "model.provider")
			if err != nil {
				return m, err
			}
			m.Provider = p
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
		known = all
	}
	for k := range pairs(n) {
		if k.Value == "apiKey" {
			return m, d.errorf(k.Line, "model.apiKey", "API keys are never written in the agent file: set apiKeyEnv to the name of the environment variable that holds the key")
		}
		if !slices.Contains(known, k.Value) && slices.Contains(all, k.Value) {
			return m, d.errorf(k.Line, "model."+k.Value, "not a setting of provider %s (its keys: %s)", m.Provider, strings.Join(known, ", "))
		}
	}
	keys = slices.DeleteFunc(keys, func(k key) bool { return !slices.Contains(known, k.name) })
	if err := d.mapping(n, "model", keys); err != nil {
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
		if m.Provider == ProviderAnthropic {
			if err := d.thinking(n, m); err != nil {
				return m, err
			}
		}
	case ProviderScripted:
		if m.Script == "" {
			return m, d.errorf(n.Line, "model.script", "required for provider scripted: the script file (YAML or JSON, see llm/scripted), relative to the agent file")
		}
	}
	return m, nil
}

// thinking checks an anthropic model's extended-thinking budget against
// the limits the adapter enforces: at least anthropic.MinThinkingBudget,
// and below the max tokens of every request (maxOutputTokens, which every
// request of the agent sends) and below the adapter's own max tokens
// (maxTokens, else anthropic.DefaultMaxTokens when maxOutputTokens does
// not replace it; see builtinModel). Caught here, a budget that does not
// fit fails the load instead of every step of every run.
func (d *decoder) thinking(n *yaml.Node, m ModelSpec) error {
	if m.Thinking == 0 {
		return nil
	}
	line := n.Line
	for k := range pairs(n) {
		if k.Value == "thinking" {
			line = k.Line
		}
	}
	if m.Thinking < anthropic.MinThinkingBudget {
		return d.errorf(line, "model.thinking", "the thinking budget %d is below Anthropic's minimum of %d tokens (0 turns thinking off)",
			m.Thinking, anthropic.MinThinkingBudget)
	}
	type limit struct {
		field string
		value int
	}
	var limits []limit
	if m.MaxOutputTokens > 0 {
		limits = append(limits, limit{"maxOutputTokens", m.MaxOutputTokens})
	}
	if m.MaxTokens > 0 {
		limits = append(limits, limit{"maxTokens", m.MaxTokens})
	}
	if len(limits) == 0 {
		return d.checkBudget(line, m.Thinking, anthropic.DefaultMaxTokens,
			fmt.Sprintf("the default max tokens (%d, as neither maxOutputTokens nor maxTokens is set)", anthropic.DefaultMaxTokens),
			"set maxTokens or maxOutputTokens above it")
	}
	for _, l := range limits {
		if err := d.checkBudget(line, m.Thinking, l.value, fmt.Sprintf("%s (%d)", l.field, l.value), "raise "+l.field); err != nil {
			return err
		}
	}
	return nil
}

// checkBudget requires a thinking budget below a max tokens limit.
func (d *decoder) checkBudget(line, budget, maxTokens int, what, fix string) error {
	if budget < maxTokens {
		return nil
	}
	return d.errorf(line, "model.thinking", "the thinking budget %d must be below %s: Anthropic counts thinking in max tokens, "+
		"so every request would be refused; %s or lower thinking", budget, what, fix)
}

// providerOptions reads a model's providerOptions: a JSON object (written
// in YAML) whose members the adapter sets on the request body. The members
// the adapters own are refused here rather than on every request.
func (d *decoder) providerOptions(n *yaml.Node, field string) (json.RawMessage, error) {
	for k := range pairs(n) {
		if k.Value == "stream" || k.Value == "messages" {
			return nil, d.errorf(k.Line, join(field, k.Value), "cannot be set: the adapter sets it on every request")
		}
	}
	return d.object(n, field)
}

// toolKeys are the keys every tool has, sub-agent tools included.
func (d *decoder) toolKeys(name, description *string, inputSchema *json.RawMessage) []key {
	return []key{
		{"name", into(name, d.str)},
		{"description", into(description, d.str)},
		{"inputSchema", into(inputSchema, d.objectSchema)},
	}
}

func (d *decoder) clientTool(n *yaml.Node, field string) (ClientToolSpec, error) {
	t := ClientToolSpec{Line: n.Line}
	keys := append(d.toolKeys(&t.Name, &t.Description, &t.InputSchema),
		key{"outputSchema", into(&t.OutputSchema, d.anySchema)},
		key{"timeout", into(&t.Timeout, d.timeout)})
	return t, d.tool(n, field, &t.Name, keys)
}

func (d *decoder) approvalTool(n *yaml.Node, field string) (ApprovalToolSpec, error) {
	t := ApprovalToolSpec{Line: n.Line}
	keys := append(d.toolKeys(&t.Name, &t.Description, &t.InputSchema),
		key{"result", into(&t.Result, d.json)})
	return t, d.tool(n, field, &t.Name, keys)
}

// tool decodes a tool's mapping by its keys, then checks the name they
// read into *name.
func (d *decoder) tool(n *yaml.Node, field string, name *string, keys []key) error {
	if err := d.mapping(n, field, keys); err != nil {
		return err
	}
	if *name == "" {
		return d.errorf(n.Line, field+".name", "required")
	}
	if err := helix.ValidateToolName(*name); err != nil {
		return d.errorf(n.Line, field+".name", "%v", err)
	}
	return nil
}

// subAgent reads a name, or a mapping with a name, a description and an
// input schema.
func (d *decoder) subAgent(n *yaml.Node, field string) (SubAgentSpec, error) {
	s := SubAgentSpec{Line: n.Line}
	return s, d.delegate(n, field, &s.Name, d.toolKeys(&s.Name, &s.Description, &s.InputSchema))
}

// persistent reads a name, or a mapping with a name and a mode.
func (d *decoder) persistent(n *yaml.Node, field string) (PersistentAgentSpec, error) {
	p := PersistentAgentSpec{Line: n.Line}
	return p, d.delegate(n, field, &p.Name, []key{
		{"name", into(&p.Name, d.str)},
		{"mode", into(&p.Mode, d.companionMode)},
	})
}

// delegate decodes an entry of subAgents or persistentAgents: the name of
// another agent, read into *name, or a mapping of keys with that name.
func (d *decoder) delegate(n *yaml.Node, field string, name *string, keys []key) error {
	if n.Kind == yaml.ScalarNode {
		var err error
		*name, err = d.str(n, field)
		return err
	}
	if err := d.mapping(n, field, keys); err != nil {
		return err
	}
	if *name == "" {
		return d.errorf(n.Line, field+".name", "required: the name of another agent of this file")
	}
	return nil
}

// scalar decodes a scalar as a V (a string, int or float64); want
// describes it in errors.
func scalar[V any](d *decoder, n *yaml.Node, field, want string) (V, error) {
	var v V
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return v, d.errorf(n.Line, field, "want %s, got %s", want, kindName(n))
	}
	if err := n.Decode(&v); err != nil {
		return v, d.errorf(n.Line, field, "want %s, got %q", want, n.Value)
	}
	return v, nil
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
	if n.Kind == yaml.ScalarNode && n.Tag != "!!int" {
		return 0, d.errorf(n.Line, field, "want a whole number, got %q", n.Value)
	}
	return scalar[int](d, n, field, "a whole number")
}

func (d *decoder) nonNegative(n *yaml.Node, field string) (int, error) {
	i, err := d.integer(n, field)
	if err == nil && i < 0 {
		err = d.errorf(n.Line, field, "must not be negative, got %d", i)
	}
	return i, err
}

// maxSteps reads an agent's maxSteps.
func (d *decoder) maxSteps(n *yaml.Node, field string) (int, error) {
	i, err := d.integer(n, field)
	if err == nil && i < 1 {
		err = d.errorf(n.Line, field, "must be >= 1 (leave it out for the default of %d), got %d", helix.DefaultMaxSteps, i)
	}
	return i, err
}

// number reads a whole or decimal number (a temperature).
func (d *decoder) number(n *yaml.Node, field string) (float64, error) {
	if n.Tag != "!!int" && n.Tag != "!!float" {
		return 0, d.errorf(n.Line, field, "want a number, got %s", kindName(n))
	}
	return scalar[float64](d, n, field, "a number")
}

// envName reads the name of an environment variable (apiKeyEnv), which a
// key written in its place is not.
func (d *decoder) envName(n *yaml.Node, field string) (string, error) {
	s, err := d.str(n, field)
	if err == nil && !validEnvName(s) {
		err = d.errorf(n.Line, field, "%q is not an environment variable name: name the variable that holds the key (OPENAI_API_KEY), not the key", s)
	}
	return s, err
}

// timeout reads a client tool's timeout: a positive Go duration.
func (d *decoder) timeout(n *yaml.Node, field string) (time.Duration, error) {
	s, err := d.str(n, field)
	if err != nil {
		return 0, err
	}
	t, err := time.ParseDuration(s)
	if err != nil || t <= 0 {
		return 0, d.errorf(n.Line, field, "want a positive Go duration such as 30s, 15m or 24h, got %q", s)
	}
	return t, nil
}

func (d *decoder) companionMode(n *yaml.Node, field string) (helix.CompanionMode, error) {
	s, err := d.str(n, field)
	if err != nil {
		return "", err
	}
	m := helix.CompanionMode(s)
	if m != helix.CompanionBlocking && m != helix.CompanionNonBlocking {
		return "", d.errorf(n.Line, field, "unknown mode %q (want %s or %s)", s, helix.CompanionBlocking, helix.CompanionNonBlocking)
	}
	return m, nil
}

func (d *decoder) stringMap(n *yaml.Node, field string) (map[string]string, error) {
	if n.Kind != yaml.MappingNode {
		return nil, d.errorf(n.Line, field, "want a mapping of header names to values, got %s", kindName(n))
	}
	out := map[string]string{}
	for k, v := range pairs(n) {
		s, err := d.str(v, field+"."+k.Value)
		if err != nil {
			return nil, err
		}
		out[k.Value] = s
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

// objectSchema reads the schema of a JSON object: a tool's arguments, an
// agent's output.
func (d *decoder) objectSchema(n *yaml.Node, field string) (json.RawMessage, error) {
	return d.schema(n, field, true)
}

// anySchema reads the schema of any JSON value: a client tool's result.
func (d *decoder) anySchema(n *yaml.Node, field string) (json.RawMessage, error) {
	return d.schema(n, field, false)
}

// jsonable turns decoded YAML into values encoding/json accepts.
func jsonable(v any) (any, error) {
	var err error
	switch v := v.(type) {
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("key %v is not text: JSON objects have text keys (quote it)", k)
			}
			m[ks] = e
		}
		return jsonable(m)
	case map[string]any:
		for k, e := range v {
			if v[k], err = jsonable(e); err != nil {
				return nil, err
			}
		}
	case []any:
		for i, e := range v {
			if v[i], err = jsonable(e); err != nil {
				return nil, err
			}
		}
	case time.Time:
		return v.Format(time.RFC3339Nano), nil
	}
	return v, nil
}

// An entry is a named entry of one of an agent's lists, for the checks
// across entries and agents.
type entry struct {
	list  string // clientTools, approvalTools, subAgents or persistentAgents
	index int
	name  string
	line  int
}

func (e entry) field() string { return fmt.Sprintf("%s[%d]", e.list, e.index) }

func (t ClientToolSpec) named() (string, int)      { return t.Name, t.Line }
func (t ApprovalToolSpec) named() (string, int)    { return t.Name, t.Line }
func (s SubAgentSpec) named() (string, int)        { return s.Name, s.Line }
func (p PersistentAgentSpec) named() (string, int) { return p.Name, p.Line }

// entries lists specs as the entries of list.
func entries[S interface{ named() (string, int) }](list string, specs []S) []entry {
	out := make([]entry, len(specs))
	for i, s := range specs {
		name, line := s.named()
		out[i] = entry{list: list, index: i, name: name, line: line}
	}
	return out
}

// tools returns the agent's client tools, then its approval tools.
func (a *AgentSpec) tools() []entry {
	return slices.Concat(entries("clientTools", a.ClientTools), entries("approvalTools", a.ApprovalTools))
}

// delegations returns the agents a delegates to: its sub-agents, then its
// companions.
func (a *AgentSpec) delegations() []entry {
	return slices.Concat(entries("subAgents", a.SubAgents), entries("persistentAgents", a.PersistentAgents))
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
		declared := map[string]int{} // tool name → line
		for _, t := range a.tools() {
			if line, dup := declared[t.name]; dup {
				return d.errorf(t.line, t.list, "duplicate tool name %q (also on line %d)", t.name, line)
			}
			declared[t.name] = t.line
		}
	}
	names := slices.Sorted(maps.Keys(byName))
	for i := range f.Agents {
		a := &f.Agents[i]
		d.agent = a.Name
		listed := map[entry]bool{}
		for _, e := range a.delegations() {
			if err := d.reference(a, e, byName, names, listed); err != nil {
				return err
			}
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

// reference checks a sub-agent or companion e of a: another agent of the
// file, with an output schema, listed once in its list. listed holds the
// entries checked before it, by list and name.
func (d *decoder) reference(a *AgentSpec, e entry, byName map[string]*AgentSpec, names []string, listed map[entry]bool) error {
	noun, why := "sub-agent", "a sub-agent returns a structured output, which becomes the tool result"
	if e.list == "persistentAgents" {
		if e.name == a.Name {
			return d.errorf(e.line, e.field(), "an agent cannot be its own companion")
		}
		noun, why = "companion", "a companion answers each consultation with a structured output"
	}
	target, ok := byName[e.name]
	seen := entry{list: e.list, name: e.name}
	switch {
	case !ok:
		return d.errorf(e.line, e.field(), "no agent named %q in this file (agents: %s)%s", e.name, strings.Join(names, ", "), suggest(e.name, names))
	case len(target.OutputSchema) == 0:
		return d.errorf(e.line, e.field(), "agent %q has no outputSchema: %s; give it one", e.name, why)
	case listed[seen]:
		return d.errorf(e.line, e.field(), "%s %q is listed twice", noun, e.name)
	}
	listed[seen] = true
	return nil
}

// findCycle returns a cycle of delegations (first agent repeated last), or
// nil.
func findCycle(f *File) []string {
	edges := map[string][]string{}
	for _, a := range f.Agents {
		for _, e := range a.delegations() {
			edges[a.Name] = append(edges[a.Name], e.name)
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
		for _, e := range a.delegations() {
			visit(byName[e.name])
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
