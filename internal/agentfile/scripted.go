package agentfile

import (
	"fmt"
	"os"
	"path/filepath"

	"go.yaml.in/yaml/v3"

	"github.com/helix-agents/helix-dbos/llm/scripted"
)

// scriptFile is a loaded script file, shared by every agent that names it.
type scriptFile struct {
	model *scripted.Model
	// agents are the agent types a keyed script scripts; nil for a
	// script of shared steps (played for every agent type).
	agents map[string]bool
}

// scripted returns the scripted model of spec, loading its script file once
// per file and checking that a keyed script scripts this agent.
func (b *builder) scripted(spec *AgentSpec) (*scripted.Model, error) {
	m := spec.Model
	path := m.Script
	if !filepath.IsAbs(path) {
		path = filepath.Join(b.o.baseDir(), path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, b.fail(spec, m.Line, "model.script", err)
	}
	sf, ok := b.scripts[abs]
	if !ok {
		if sf, err = loadScript(path); err != nil {
			return nil, b.fail(spec, m.Line, "model.script", err)
		}
		b.scripts[abs] = sf
	}
	if sf.agents != nil && !sf.agents[spec.Name] {
		return nil, b.fail(spec, m.Line, "model.script", fmt.Errorf(
			"%s has no script for agent %q (it scripts: %s): add an entry %q under its agents", path, spec.Name, scriptNames(sf), spec.Name))
	}
	return sf.model, nil
}

func loadScript(path string) (*scriptFile, error) {
	model, err := scripted.Load(path)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	// The script parsed, so its top level is steps or agents (YAML is a
	// superset of JSON: one parser reads both).
	var top struct {
		Agents map[string]any `yaml:"agents"`
	}
	if err := yaml.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	sf := &scriptFile{model: model}
	if top.Agents != nil {
		sf.agents = map[string]bool{}
		for name := range top.Agents {
			sf.agents[name] = true
		}
	}
	return sf, nil
}
