package scripted_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/llm/scripted"
)

// TestLoadExample plays the example script in both formats: they must
// play the same, to the byte.
func TestLoadExample(t *testing.T) {
	t.Parallel()
	first := helix.ModelRequest{AgentType: "researcher", Messages: []helix.Message{helix.UserMessage("How do agents survive crashes?")},
		Tools: []helix.ToolSpec{{Name: "search_web"}, {Name: "search_docs"}, {Name: helix.FinishToolName}}}
	want := []helix.StepResult{
		{Type: helix.StepToolCalls, Content: "Let me search the web and the docs.", Thinking: &helix.Thinking{Content: "Two sources will do."},
			ToolCalls: []helix.ToolCall{
				{ID: "call-0-0", Name: "search_web", Arguments: json.RawMessage(`{"query":"durable execution"}`)},
				{ID: "call-0-1", Name: "search_docs", Arguments: json.RawMessage(`{"query":"workflow recovery"}`)},
			},
			StopReason: helix.StopToolUse, Usage: helix.Usage{InputTokens: 8, OutputTokens: 29}, Model: scripted.ModelName},
		{Type: helix.StepToolCalls, Content: "Both agree; writing it up.",
			ToolCalls: []helix.ToolCall{{ID: "call-1-0", Name: helix.FinishToolName,
				Arguments: json.RawMessage(`{"answer":"Checkpoint every step.","confidence":0.9}`)}},
			StopReason: helix.StopToolUse, Usage: helix.Usage{InputTokens: 38, OutputTokens: 20}, Model: scripted.ModelName},
	}
	for _, file := range []string{"research.yaml", "research.json"} {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			m, err := scripted.Load(filepath.Join("testdata", file))
			require.NoError(t, err)

			synctest.Test(t, func(t *testing.T) {
				var rec recorder
				start := time.Now()
				res, err := m.GenerateStep(t.Context(), first, rec.callbacks())
				require.NoError(t, err)
				require.Equal(t, want[0], res)
				require.Equal(t, 7*20*time.Millisecond, time.Since(start), "8 words paced at 20ms")
				require.Equal(t, []string{`thinking "Two sources will do." true`, `text "Let "`, `text "me "`, `text "search "`,
					`text "the "`, `text "web "`, `text "and "`, `text "the "`, `text "docs."`}, rec.events,
					"the file does not stream tool arguments")
			})

			second := first
			second.Messages = append(second.Messages, helix.AssistantMessage(want[0].Content, want[0].ToolCalls...),
				helix.ToolResultMessage("call-0-0", "search_web", `{"results":[]}`))
			_, err = m.GenerateStep(t.Context(), second, helix.StreamCallbacks{})
			require.ErrorIs(t, err, scripted.ErrUnexpectedRequest, "step 1 expects the docs search result")
			require.ErrorContains(t, err, `agent "researcher" step 1: the request does not match the script: no result of a "search_docs" call`)

			second.Messages = append(second.Messages, helix.ToolResultMessage("call-0-1", "search_docs", `{"results":[]}`))
			require.Equal(t, want[1], generate(t, m, second))

			_, err = m.GenerateStep(t.Context(), helix.ModelRequest{AgentType: "writer"}, helix.StreamCallbacks{})
			require.ErrorIs(t, err, scripted.ErrUnknownAgent)
		})
	}
}

func TestParseSharedScript(t *testing.T) {
	t.Parallel()
	yamlScript := `
steps:
  - deltas: ["Hel", "lo"]
    usage: {inputTokens: 10, outputTokens: 2}
    stopReason: stop_sequence
  - error: {message: overloaded, code: provider_overloaded, recoverable: true, statusCode: 529}
`
	jsonScript := `{"steps": [
  {"deltas": ["Hel", "lo"], "usage": {"inputTokens": 10, "outputTokens": 2}, "stopReason": "stop_sequence"},
  {"error": {"message": "overloaded", "code": "provider_overloaded", "recoverable": true, "statusCode": 529}}
]}`
	for format, data := range map[scripted.Format]string{scripted.FormatYAML: yamlScript, scripted.FormatJSON: jsonScript} {
		m, err := scripted.Parse([]byte(data), format)
		require.NoError(t, err, format)
		for _, agent := range []string{"any", "other"} {
			var rec recorder
			res, err := m.GenerateStep(t.Context(), request(agent, 0), rec.callbacks())
			require.NoError(t, err)
			require.Equal(t, []string{`text "Hel"`, `text "lo"`}, rec.events)
			require.Equal(t, helix.StepResult{Type: helix.StepText, Content: "Hello", StopReason: helix.StopStopSequence,
				Usage: helix.Usage{InputTokens: 10, OutputTokens: 2}, Model: scripted.ModelName}, res)
		}
		_, err = m.GenerateStep(t.Context(), request("any", 1), helix.StreamCallbacks{})
		require.Equal(t, &helix.ModelError{Code: helix.CodeProviderOverloaded, Message: "overloaded", Recoverable: true, StatusCode: 529}, err)
	}
}

func TestParseRejectsMalformedScripts(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		format scripted.Format
		data   string
		msg    string
	}{
		"yaml unknown step field": {scripted.FormatYAML, "steps:\n  - text: hi\n  - txt: typo\n",
			`scripted: invalid script: step 1 (line 3): json: unknown field "txt"`},
		"yaml unknown nested field": {scripted.FormatYAML, "agents:\n  a:\n    - toolCalls: [{name: x, arguments: {}}]\n",
			`agent "a": step 0 (line 3): json: unknown field "arguments"`},
		"yaml unknown top field": {scripted.FormatYAML, "steps: [{text: hi}]\nscript: []\n",
			`line 2: unknown field "script" (want steps or agents)`},
		"yaml bad duration": {scripted.FormatYAML, "steps:\n  - text: hi\n    deltaDelay: fast\n",
			`step 0 (line 2): deltaDelay: time: invalid duration "fast" (want a Go duration such as "20ms")`},
		"yaml wrong type":       {scripted.FormatYAML, "steps:\n  - text: [a, b]\n", `step 0 (line 2): json: cannot unmarshal array into Go struct field`},
		"yaml steps not a list": {scripted.FormatYAML, "steps: {text: hi}\n", "line 1: steps must be a list of steps"},
		"yaml not a mapping":    {scripted.FormatYAML, "- text: hi\n", "line 1: the document must be a mapping with steps or agents"},
		"yaml syntax":           {scripted.FormatYAML, "steps: [\n", "parse YAML: yaml: line"},
		"yaml empty":            {scripted.FormatYAML, "", "parse YAML: the document is empty"},
		"yaml two documents":    {scripted.FormatYAML, "steps: [{text: a}]\n---\nsteps: [{text: b}]\n", "more than one document"},
		"yaml duplicate agent":  {scripted.FormatYAML, "agents:\n  a: [{text: x}]\n  a: [{text: y}]\n", `line 3: agent "a" is set twice`},
		"yaml invalid step": {scripted.FormatYAML, "steps:\n  - text: ok\n  - {text: hi, error: {message: no}}\n",
			"step 1: an error step carries nothing else, but it also sets text"},
		"yaml args not object": {scripted.FormatYAML, "steps:\n  - toolCalls: [{name: x, args: [1]}]\n",
			"step 0: toolCalls[0] (x): args must be a JSON object, got [1]"},
		"json unknown step field": {scripted.FormatJSON, `{"agents": {"a": [{"text": "hi"}, {"text": "x", "delay": "1s"}]}}`,
			`scripted: invalid script: agent "a": step 1: json: unknown field "delay"`},
		"json unknown nested field": {scripted.FormatJSON, `{"steps": [{"error": {"message": "x", "retry": true}}]}`,
			`step 0: json: unknown field "retry"`},
		"json unknown top field": {scripted.FormatJSON, `{"steps": [{"text": "hi"}], "version": 2}`,
			`parse JSON: json: unknown field "version"`},
		"json trailing data": {scripted.FormatJSON, `{"steps": [{"text": "hi"}]} {}`, "unexpected data after the JSON value"},
		"json output null":   {scripted.FormatJSON, `{"steps": [{"output": null}]}`, "step 0: output must be a JSON object, got null"},
		"both shapes":        {scripted.FormatJSON, `{"steps": [{"text": "a"}], "agents": {"a": [{"text": "b"}]}}`, "set steps (one script for every agent type) or agents"},
		"neither shape":      {scripted.FormatJSON, `{}`, "the file has neither steps nor agents"},
		"no steps":           {scripted.FormatYAML, "agents:\n  a: []\n", `agent "a": the script has no steps`},
		"bad stop reason":    {scripted.FormatJSON, `{"steps": [{"text": "a", "stopReason": "stop"}]}`, `step 0: stopReason "stop" is not one of`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m, err := scripted.Parse([]byte(tc.data), tc.format)
			require.Nil(t, m)
			require.ErrorIs(t, err, scripted.ErrInvalidScript)
			require.ErrorContains(t, err, tc.msg)
		})
	}

	_, err := scripted.Parse([]byte(`{}`), "toml")
	require.EqualError(t, err, `scripted: unknown format "toml" (want "json" or "yaml")`)
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, err := scripted.Load(filepath.Join(dir, "script.toml"))
	require.ErrorContains(t, err, `unknown extension ".toml" (want .json, .yaml or .yml)`)

	_, err = scripted.Load(filepath.Join(dir, "missing.yaml"))
	require.ErrorIs(t, err, os.ErrNotExist)

	path := filepath.Join(dir, "bad.yml")
	require.NoError(t, os.WriteFile(path, []byte("steps:\n  - tezt: hi\n"), 0o600))
	_, err = scripted.Load(path)
	require.ErrorIs(t, err, scripted.ErrInvalidScript)
	require.True(t, strings.HasPrefix(err.Error(), path+": "), "the error names the file: %v", err)
	require.ErrorContains(t, err, `unknown field "tezt"`)
}

// FuzzParse: any input either fails with an error or yields a model that
// plays its first step without panicking, in both formats.
func FuzzParse(f *testing.F) {
	for _, file := range []string{"research.yaml", "research.json"} {
		data, err := os.ReadFile(filepath.Join("testdata", file))
		require.NoError(f, err)
		f.Add(data)
	}
	f.Add([]byte(`{"steps":[{"text":"a b","toolCalls":[{"name":"x","args":{"k":[1,{"z":null}]}}],"streamToolArgs":true}]}`))
	f.Add([]byte("steps:\n  - error: {message: x}\n  - deltas: [a, b]\n    expect: {lastRole: user}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, format := range []scripted.Format{scripted.FormatJSON, scripted.FormatYAML} {
			m, err := scripted.Parse(data, format)
			if err != nil {
				require.ErrorIs(t, err, scripted.ErrInvalidScript)
				continue
			}
			req := helix.ModelRequest{AgentType: "researcher", Messages: []helix.Message{helix.UserMessage("go")}}
			// The first delta cancels, so a step with a delay stops at its
			// second delta instead of pacing the fuzz run.
			ctx, cancel := context.WithCancel(t.Context())
			cb := helix.StreamCallbacks{OnTextDelta: func(string) { cancel() }, OnToolArgDelta: func(string, string) { cancel() }}
			_, _ = m.GenerateStep(ctx, req, cb)
			cancel()
		}
	})
}
