package helix_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
)

var stubModel = helix.ModelFunc(func(ctx context.Context, req helix.ModelRequest, cb helix.StreamCallbacks) (helix.StepResult, error) {
	return helix.StepResult{Type: helix.StepText, Content: "hi"}, nil
})

func validAgent(t *testing.T) *helix.Agent {
	return &helix.Agent{Name: "assistant", SystemPrompt: "Be brief.", Model: stubModel, Tools: []*helix.Tool{weatherTool(t)}}
}

func TestAgentValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, validAgent(t).Validate())
	var nilAgent *helix.Agent
	require.ErrorIs(t, nilAgent.Validate(), helix.ErrInvalidDefinition)

	cases := map[string]struct {
		mutate func(a *helix.Agent)
		field  string
		reason string
	}{
		"empty name":     {func(a *helix.Agent) { a.Name = "" }, "Name", "empty"},
		"bad name":       {func(a *helix.Agent) { a.Name = "my agent" }, "Name", "letters, digits"},
		"long name":      {func(a *helix.Agent) { a.Name = strings.Repeat("a", 55) }, "Name", "longer than 54"},
		"negative steps": {func(a *helix.Agent) { a.MaxSteps = -1 }, "MaxSteps", "got -1"},
		"no model":       {func(a *helix.Agent) { a.Model = nil }, "Model", "llm/scripted"},
		"two prompts": {func(a *helix.Agent) {
			a.SystemPromptFunc = func(context.Context, json.RawMessage) (string, error) { return "", nil }
		}, "SystemPromptFunc", "not both"},
		"nil tool":        {func(a *helix.Agent) { a.Tools = append(a.Tools, nil) }, "Tools[1]", "nil"},
		"duplicate tools": {func(a *helix.Agent) { a.Tools = append(a.Tools, a.Tools[0]) }, "Tools[1]", `duplicate tool name "weather" (also Tools[0])`},
		"listed finish": {func(a *helix.Agent) {
			f, _ := helix.NewFinishTool(json.RawMessage(`{"type":"object"}`))
			a.Tools = append(a.Tools, f)
		}, "Tools[1]", "added automatically"},
		"output not object": {func(a *helix.Agent) { a.OutputSchema = json.RawMessage(`{"type":"array"}`) }, "OutputSchema", "JSON object"},
		"output invalid":    {func(a *helix.Agent) { a.OutputSchema = json.RawMessage(`{"type":`) }, "OutputSchema", "not valid JSON"},
		"state not object":  {func(a *helix.Agent) { a.InitialState = json.RawMessage(`[1]`) }, "InitialState", "JSON object"},
		"workspace":         {func(a *helix.Agent) { a.Workspace = struct{ Root string }{"/srv"} }, "Workspace", "not supported"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a := validAgent(t)
			c.mutate(a)
			err := a.Validate()
			var de *helix.DefinitionError
			require.ErrorAs(t, err, &de)
			require.Equal(t, "agent", de.Kind)
			require.Equal(t, c.field, de.Field)
			require.Contains(t, err.Error(), c.reason)
		})
	}
}

func TestAgentEffectiveTools(t *testing.T) {
	t.Parallel()
	a := validAgent(t)
	tools, err := a.EffectiveTools()
	require.NoError(t, err)
	require.Len(t, tools, 1)
	_, ok := a.Tool(helix.FinishToolName)
	require.False(t, ok)
	require.Equal(t, helix.DefaultMaxSteps, a.EffectiveMaxSteps())

	a.OutputSchema = json.RawMessage(`{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"]}`)
	a.MaxSteps = 3
	tools, err = a.EffectiveTools()
	require.NoError(t, err)
	require.Len(t, tools, 2)
	require.Equal(t, "weather", tools[0].Name())
	require.Equal(t, helix.FinishToolName, tools[1].Name())
	finish, ok := a.Tool(helix.FinishToolName)
	require.True(t, ok)
	require.Error(t, finish.ValidateArguments(json.RawMessage(`{"answer":1}`)))
	require.Equal(t, 3, a.EffectiveMaxSteps())
	a.MaxSteps = -2
	_, err = a.EffectiveTools()
	require.ErrorIs(t, err, helix.ErrInvalidDefinition)
}
