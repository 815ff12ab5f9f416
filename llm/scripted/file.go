package scripted

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	helix "github.com/helix-agents/helix-dbos"
)

// Format is the syntax of a script file.
type Format string

// Script file formats.
const (
	FormatJSON Format = "json"
	FormatYAML Format = "yaml"
)

// Load reads a script file and returns its model. The format follows the
// extension: .json, or .yaml / .yml. See the package documentation for the
// file format.
func Load(path string) (*Model, error) {
	var format Format
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json":
		format = FormatJSON
	case ".yaml", ".yml":
		format = FormatYAML
	default:
		return nil, fmt.Errorf("scripted: load %s: unknown extension %q (want .json, .yaml or .yml)", path, filepath.Ext(path))
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("scripted: load script: %w", err)
	}
	m, err := Parse(data, format)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// Parse decodes a script in the given format and returns its model. Unknown
// fields and invalid steps are rejected with an error naming the agent type,
// the step index and the field; every such error matches
// [ErrInvalidScript].
func Parse(data []byte, format Format) (*Model, error) {
	var (
		raw *rawScript
		err error
	)
	switch format {
	case FormatJSON:
		raw, err = splitJSON(data)
	case FormatYAML:
		raw, err = splitYAML(data)
	default:
		return nil, fmt.Errorf("scripted: unknown format %q (want %q or %q)", format, FormatJSON, FormatYAML)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidScript, err)
	}
	return raw.model()
}

// rawScript is a script file split into its steps, each still a JSON
// document: both formats share one strict step decoder.
type rawScript struct {
	steps     []rawStep
	agents    map[string][]rawStep
	hasSteps  bool
	hasAgents bool
}

// rawStep is the JSON of one step and where it is in the file ("" when
// the format has no line numbers to give).
type rawStep struct {
	data  []byte
	where string
}

func (r *rawScript) model() (*Model, error) {
	switch {
	case r.hasSteps && r.hasAgents:
		return nil, fmt.Errorf("%w: set steps (one script for every agent type) or agents (a script per agent type), not both", ErrInvalidScript)
	case r.hasSteps:
		steps, err := decodeSteps("", r.steps)
		if err != nil {
			return nil, err
		}
		script, err := compileScript("", steps)
		if err != nil {
			return nil, err
		}
		return &Model{shared: script}, nil
	case r.hasAgents:
		scripts := make(map[string][]Step, len(r.agents))
		for agent, raw := range r.agents {
			steps, err := decodeSteps(agent, raw)
			if err != nil {
				return nil, err
			}
			scripts[agent] = steps
		}
		return newKeyed(scripts)
	}
	return nil, fmt.Errorf("%w: the file has neither steps nor agents", ErrInvalidScript)
}

func decodeSteps(agent string, raw []rawStep) ([]Step, error) {
	steps := make([]Step, len(raw))
	for i, r := range raw {
		s, err := decodeStep(r.data)
		if err != nil {
			where := ""
			if r.where != "" {
				where = " (" + r.where + ")"
			}
			return nil, fmt.Errorf("%w: %sstep %d%s: %w", ErrInvalidScript, agentPrefix(agent), i, where, err)
		}
		steps[i] = s
	}
	return steps, nil
}

// The file form of a step. Field names are the camelCase names of the
// helix wire format; DeltaDelay is a Go duration string ("20ms").
type (
	fileStep struct {
		Text           string          `json:"text"`
		Deltas         []string        `json:"deltas"`
		DeltaDelay     string          `json:"deltaDelay"`
		Thinking       string          `json:"thinking"`
		ToolCalls      []fileCall      `json:"toolCalls"`
		Output         json.RawMessage `json:"output"`
		StreamToolArgs bool            `json:"streamToolArgs"`
		Error          *fileError      `json:"error"`
		Usage          *helix.Usage    `json:"usage"`
		StopReason     string          `json:"stopReason"`
		Expect         *fileExpect     `json:"expect"`
	}
	fileCall struct {
		ID   string          `json:"id"`
		Name string          `json:"name"`
		Args json.RawMessage `json:"args"`
	}
	fileError struct {
		Message     string `json:"message"`
		Code        string `json:"code"`
		Recoverable bool   `json:"recoverable"`
		StatusCode  int    `json:"statusCode"`
	}
	fileExpect struct {
		LastRole            string   `json:"lastRole"`
		LastMessageContains string   `json:"lastMessageContains"`
		ToolResultFor       string   `json:"toolResultFor"`
		HasTools            []string `json:"hasTools"`
	}
)

// decodeStep decodes the JSON of one step strictly: an unknown field, at
// any depth outside args and output, is an error naming it.
func decodeStep(data []byte) (Step, error) {
	var f fileStep
	if err := decodeStrict(data, &f); err != nil {
		return Step{}, err
	}
	s := Step{
		Text:           f.Text,
		Deltas:         f.Deltas,
		Thinking:       f.Thinking,
		StreamToolArgs: f.StreamToolArgs,
		Usage:          f.Usage,
		StopReason:     helix.StopReason(f.StopReason),
	}
	if f.DeltaDelay != "" {
		d, err := time.ParseDuration(f.DeltaDelay)
		if err != nil {
			return Step{}, fmt.Errorf("deltaDelay: %w (want a Go duration such as \"20ms\")", err)
		}
		s.DeltaDelay = d
	}
	// Arguments are compacted so that a file's layout never shows in a
	// result (nor in the synthetic usage): JSON and YAML play the same.
	for i, c := range f.ToolCalls {
		call := Call{ID: c.ID, Name: c.Name}
		if len(c.Args) > 0 {
			args, err := compactJSON(c.Args)
			if err != nil {
				return Step{}, fmt.Errorf("toolCalls[%d].args: %w", i, err)
			}
			call.Args = args
		}
		s.ToolCalls = append(s.ToolCalls, call)
	}
	if len(f.Output) > 0 {
		out, err := compactJSON(f.Output)
		if err != nil {
			return Step{}, fmt.Errorf("output: %w", err)
		}
		s.Output = out
	}
	if e := f.Error; e != nil {
		s.Error = &StepError{Message: e.Message, Code: e.Code, Recoverable: e.Recoverable, StatusCode: e.StatusCode}
	}
	if e := f.Expect; e != nil {
		s.Expect = &Expect{LastRole: helix.Role(e.LastRole), LastMessageContains: e.LastMessageContains,
			ToolResultFor: e.ToolResultFor, HasTools: e.HasTools}
	}
	return s, nil
}

func compactJSON(data []byte) (json.RawMessage, error) {
	var b bytes.Buffer
	if err := json.Compact(&b, data); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("unexpected data after the JSON value")
	}
	return nil
}

func splitJSON(data []byte) (*rawScript, error) {
	var top struct {
		Steps  []json.RawMessage            `json:"steps"`
		Agents map[string][]json.RawMessage `json:"agents"`
	}
	if err := decodeStrict(data, &top); err != nil {
		return nil, fmt.Errorf("parse JSON: %w", err)
	}
	r := &rawScript{hasSteps: top.Steps != nil, hasAgents: top.Agents != nil, agents: map[string][]rawStep{}}
	for _, s := range top.Steps {
		r.steps = append(r.steps, rawStep{data: s})
	}
	for agent, steps := range top.Agents {
		raw := make([]rawStep, len(steps))
		for i, s := range steps {
			raw[i] = rawStep{data: s}
		}
		r.agents[agent] = raw
	}
	return r, nil
}

// splitYAML walks the document's top two levels by hand, so that every
// step keeps its line number, and converts each step to JSON for the
// shared strict decoder.
func splitYAML(data []byte) (*rawScript, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("parse YAML: the document is empty")
		}
		return nil, fmt.Errorf("parse YAML: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("parse YAML: the file holds more than one document")
	}
	top := &doc
	if top.Kind == yaml.DocumentNode && len(top.Content) == 1 {
		top = top.Content[0]
	}
	if top.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: the document must be a mapping with steps or agents", top.Line)
	}
	r := &rawScript{agents: map[string][]rawStep{}}
	seen := map[string]bool{}
	for i := 0; i+1 < len(top.Content); i += 2 {
		key, value := top.Content[i], top.Content[i+1]
		if seen[key.Value] {
			return nil, fmt.Errorf("line %d: %s is set twice", key.Line, key.Value)
		}
		seen[key.Value] = true
		switch key.Value {
		case "steps":
			steps, err := yamlSteps("steps", value)
			if err != nil {
				return nil, err
			}
			r.steps, r.hasSteps = steps, true
		case "agents":
			if value.Kind != yaml.MappingNode {
				return nil, fmt.Errorf("line %d: agents must be a mapping of agent type to steps", value.Line)
			}
			r.hasAgents = true
			for j := 0; j+1 < len(value.Content); j += 2 {
				agent := value.Content[j].Value
				if _, dup := r.agents[agent]; dup {
					return nil, fmt.Errorf("line %d: agent %q is set twice", value.Content[j].Line, agent)
				}
				steps, err := yamlSteps(fmt.Sprintf("agent %q", agent), value.Content[j+1])
				if err != nil {
					return nil, err
				}
				r.agents[agent] = steps
			}
		default:
			return nil, fmt.Errorf("line %d: unknown field %q (want steps or agents)", key.Line, key.Value)
		}
	}
	return r, nil
}

func yamlSteps(what string, seq *yaml.Node) ([]rawStep, error) {
	if seq.Kind == yaml.ScalarNode && seq.Tag == "!!null" {
		return []rawStep{}, nil
	}
	if seq.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("line %d: %s must be a list of steps", seq.Line, what)
	}
	steps := make([]rawStep, len(seq.Content))
	for i, n := range seq.Content {
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, fmt.Errorf("line %d: %s step %d: %w", n.Line, what, i, err)
		}
		data, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("line %d: %s step %d: %w (keys must be strings)", n.Line, what, i, err)
		}
		steps[i] = rawStep{data: data, where: fmt.Sprintf("line %d", n.Line)}
	}
	return steps, nil
}
