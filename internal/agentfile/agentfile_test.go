package agentfile_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/agentfile"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
	"github.com/helix-agents/helix-dbos/llm/scripted"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// examplePath is the agent file checked in for `helix-dbos serve`.
const examplePath = "../../examples/agents.yaml"

func TestLoadTheExample(t *testing.T) {
	t.Parallel()
	agents, err := agentfile.Load(examplePath, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"assistant", "researcher", "intake", "publisher", "editor"}, agents.Names())

	assistant, ok := agents.Get("assistant")
	require.True(t, ok)
	researcher, _ := agents.Get("researcher")
	require.Equal(t, 6, assistant.MaxSteps)
	require.Contains(t, assistant.SystemPrompt, "Delegate research to the researcher,\nthen answer")
	require.Same(t, researcher, assistant.SubAgents()[0], "a sub-agent is the file's agent of that name")
	ask, ok := assistant.Tool("ask_user")
	require.True(t, ok)
	require.True(t, ask.ExecutesOnClient())
	require.Equal(t, 24*time.Hour, ask.ClientTimeout())
	require.JSONEq(t, `{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"]}`, string(ask.OutputSchema()))
	sub, ok := assistant.Tool("subagent__researcher")
	require.True(t, ok)
	require.Equal(t, "Researches a topic and returns a summary with its sources", sub.Description())
	require.JSONEq(t, helix.DefaultSubAgentInputSchema, string(sub.InputSchema()))

	publisher, _ := agents.Get("publisher")
	editor, _ := agents.Get("editor")
	publish, ok := publisher.Tool("publish")
	require.True(t, ok)
	require.True(t, publish.NeedsApprovalCheck())
	require.False(t, publish.ExecutesOnClient())
	require.Len(t, publisher.PersistentAgents, 1)
	require.Same(t, editor, publisher.PersistentAgents[0].Agent)
	require.Equal(t, helix.CompanionBlocking, publisher.PersistentAgents[0].Mode)
	for _, a := range agents.All {
		require.NoError(t, a.Validate(), a.Name)
		require.Same(t, assistant.Model, a.Model, "one script file, one model")
	}
}

// write puts files in a temporary directory and returns the path of the
// first.
func write(t *testing.T, files ...string) string {
	t.Helper()
	dir := t.TempDir()
	for i := 0; i+1 < len(files); i += 2 {
		p := filepath.Join(dir, files[i])
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(files[i+1]), 0o644))
	}
	return filepath.Join(dir, files[0])
}

const script = `
agents:
  a: [{text: hi}]
  b: [{output: {x: 1}}]
  c: [{output: {x: 1}}]
`

// Every mistake is reported with the file, the line, the agent and the
// field.
func TestErrors(t *testing.T) {
	t.Parallel()
	env := map[string]string{"SET_KEY": "sk-test"}
	for _, tc := range []struct {
		name, file string
		want       string // the error after "<dir>/agents.yaml"
	}{
		{"empty", ``, `: the file is empty: it needs a list of agents`},
		{"not YAML", "agents: [", `: not valid YAML:`},
		{"unknown top key", "agent: []", `:1: agent: unknown key "agent" (known keys here: agents); did you mean "agents"?`},
		{"no agents", "agents: []", `:1: agents: want a non-empty list of agents`},
		{"unknown agent key", `
agents:
  - name: a
    systemPromt: hi
    model: {provider: scripted, script: s.yaml}`, `:4: agent "a": systemPromt: unknown key "systemPromt" (known keys here: name, description, systemPrompt, maxSteps, model, outputSchema, initialState, clientTools, approvalTools, subAgents, persistentAgents, mcp); did you mean "systemPrompt"?`},
		{"no name", `
agents:
  - model: {provider: scripted, script: s.yaml}`, `:3: agent "#0": name: required`},
		{"invalid name", `
agents:
  - name: "a b"
    model: {provider: scripted, script: s.yaml}`, `:3: agent "a b": name: name "a b" may only contain letters, digits, '_' and '-'`},
		{"name is a number", `
agents:
  - name: 12
    model: {provider: scripted, script: s.yaml}`, `:3: agent "12": name: want text, got a number (12) (quote it to mean the text)`},
		{"no model", `
agents:
  - name: a`, `:3: agent "a": model: required`},
		{"unknown provider", `
agents:
  - name: a
    model: {provider: opneai, model: x}`, `:4: agent "a": model.provider: unknown provider "opneai" (want anthropic, openai, scripted); did you mean "openai"?`},
		{"api key in the file", `
agents:
  - name: a
    model: {provider: openai, model: gpt-4o-mini, apiKey: sk-123}`, `:4: agent "a": model.apiKey: API keys are never written in the agent file: set apiKeyEnv to the name of the environment variable that holds the key`},
		{"a key as apiKeyEnv", `
agents:
  - name: a
    model: {provider: openai, model: gpt-4o-mini, apiKeyEnv: sk-123}`, `:4: agent "a": model.apiKeyEnv: "sk-123" is not an environment variable name`},
		{"missing key variable", `
agents:
  - name: a
    model: {provider: openai, model: gpt-4o-mini, apiKeyEnv: MY_OPENAI_KEY}`, `:4: agent "a": model.apiKeyEnv: environment variable MY_OPENAI_KEY is not set: it must hold the openai API key (export MY_OPENAI_KEY=..., or name another variable in apiKeyEnv; or use provider: scripted to try without a key)`},
		{"missing default key variable", `
agents:
  - name: a
    model: {provider: anthropic, model: claude-sonnet-4-5}`, `:4: agent "a": model.apiKeyEnv: environment variable ANTHROPIC_API_KEY is not set`},
		{"key of another provider", `
agents:
  - name: a
    model: {provider: openai, model: x, script: s.yaml}`, `:4: agent "a": model.script: not a setting of provider openai (its keys: provider, model, baseURL, apiKeyEnv, headers, maxRetries, temperature, maxOutputTokens, providerOptions)`},
		{"provider options on scripted", `
agents:
  - name: a
    model: {provider: scripted, script: s.yaml, providerOptions: {top_p: 1}}`, `:4: agent "a": model.providerOptions: not a setting of provider scripted (its keys: provider, script)`},
		{"provider options not a mapping", `
agents:
  - name: a
    model: {provider: openai, model: gpt-4o-mini, apiKeyEnv: SET_KEY, providerOptions: [top_p]}`, `:4: agent "a": model.providerOptions: want a mapping (a JSON object written in YAML), got a list`},
		{"provider options as JSON text", `
agents:
  - name: a
    model: {provider: openai, model: gpt-4o-mini, apiKeyEnv: SET_KEY, providerOptions: '{"top_p": 1}'}`, `:4: agent "a": model.providerOptions: want a mapping (a JSON object written in YAML), got "{\"top_p\": 1}"`},
		{"provider options set what the adapter owns", `
agents:
  - name: a
    model:
      provider: anthropic
      model: claude-sonnet-4-5
      apiKeyEnv: SET_KEY
      providerOptions:
        top_k: 40
        stream: false`, `:10: agent "a": model.providerOptions.stream: cannot be set: the adapter sets it on every request`},
		{"thinking above maxOutputTokens", `
agents:
  - name: a
    model:
      provider: anthropic
      model: claude-sonnet-4-5
      apiKeyEnv: SET_KEY
      thinking: 2048
      maxOutputTokens: 1024`, `:8: agent "a": model.thinking: the thinking budget 2048 must be below maxOutputTokens (1024): Anthropic counts thinking in max tokens, so every request would be refused; raise maxOutputTokens or lower thinking`},
		{"thinking equal to maxTokens", `
agents:
  - name: a
    model: {provider: anthropic, model: claude-sonnet-4-5, apiKeyEnv: SET_KEY, maxTokens: 2048, thinking: 2048}`, `:4: agent "a": model.thinking: the thinking budget 2048 must be below maxTokens (2048): Anthropic counts thinking in max tokens, so every request would be refused; raise maxTokens or lower thinking`},
		{"thinking above maxTokens under maxOutputTokens", `
agents:
  - name: a
    model: {provider: anthropic, model: claude-sonnet-4-5, apiKeyEnv: SET_KEY, maxTokens: 2000, maxOutputTokens: 8000, thinking: 4000}`, `:4: agent "a": model.thinking: the thinking budget 4000 must be below maxTokens (2000)`},
		{"thinking above the default max tokens", `
agents:
  - name: a
    model: {provider: anthropic, model: claude-sonnet-4-5, apiKeyEnv: SET_KEY, thinking: 4096}`, `:4: agent "a": model.thinking: the thinking budget 4096 must be below the default max tokens (4096, as neither maxOutputTokens nor maxTokens is set): Anthropic counts thinking in max tokens, so every request would be refused; set maxTokens or maxOutputTokens above it or lower thinking`},
		{"thinking below the minimum", `
agents:
  - name: a
    model: {provider: anthropic, model: claude-sonnet-4-5, apiKeyEnv: SET_KEY, thinking: 1000}`, `:4: agent "a": model.thinking: the thinking budget 1000 is below Anthropic's minimum of 1024 tokens (0 turns thinking off)`},
		{"no model name", `
agents:
  - name: a
    model: {provider: openai}`, `:4: agent "a": model.model: required for provider openai, e.g. gpt-4o-mini`},
		{"no script", `
agents:
  - name: a
    model: {provider: scripted}`, `:4: agent "a": model.script: required for provider scripted`},
		{"missing script file", `
agents:
  - name: a
    model: {provider: scripted, script: nope.yaml}`, `:4: agent "a": model.script: scripted: load script: open `},
		{"agent not in the script", `
agents:
  - name: z
    model: {provider: scripted, script: s.yaml}`, `:4: agent "z": model.script: `},
		{"maxSteps", `
agents:
  - name: a
    maxSteps: 0
    model: {provider: scripted, script: s.yaml}`, `:4: agent "a": maxSteps: must be >= 1 (leave it out for the default of 10), got 0`},
		{"maxSteps text", `
agents:
  - name: a
    maxSteps: many
    model: {provider: scripted, script: s.yaml}`, `:4: agent "a": maxSteps: want a whole number, got "many"`},
		{"output schema not an object", `
agents:
  - name: a
    outputSchema: {type: string}
    model: {provider: scripted, script: s.yaml}`, `:4: agent "a": outputSchema: must describe a JSON object ("type": "object"), got {"type":"string"}`},
		{"invalid schema", `
agents:
  - name: a
    outputSchema: {type: object, properties: {x: {type: 12}}}
    model: {provider: scripted, script: s.yaml}`, `:4: agent "a": outputSchema: helix: invalid JSON Schema:`},
		{"schema as text", `
agents:
  - name: a
    outputSchema: '{"type": "object"}'
    model: {provider: scripted, script: s.yaml}`, `:4: agent "a": outputSchema: want a mapping (a JSON object written in YAML), got "{\"type\": \"object\"}"`},
		{"client tool without a name", `
agents:
  - name: a
    model: {provider: scripted, script: s.yaml}
    clientTools: [{description: x}]`, `:5: agent "a": clientTools[0].name: required`},
		{"reserved tool name", `
agents:
  - name: a
    model: {provider: scripted, script: s.yaml}
    clientTools: [{name: __finish__}]`, `:5: agent "a": clientTools[0].name: "__finish__" is reserved by the framework`},
		{"bad timeout", `
agents:
  - name: a
    model: {provider: scripted, script: s.yaml}
    clientTools: [{name: ask, timeout: 1d}]`, `:5: agent "a": clientTools[0].timeout: want a positive Go duration such as 30s, 15m or 24h, got "1d"`},
		{"unknown tool key", `
agents:
  - name: a
    model: {provider: scripted, script: s.yaml}
    clientTools: [{name: ask, execute: client}]`, `:5: agent "a": clientTools[0].execute: unknown key "execute" (known keys here: name, description, inputSchema, outputSchema, timeout)`},
		{"duplicate tool", `
agents:
  - name: a
    model: {provider: scripted, script: s.yaml}
    clientTools: [{name: ask}]
    approvalTools: [{name: ask}]`, `:6: agent "a": approvalTools: duplicate tool name "ask" (also on line 5)`},
		{"duplicate agent", `
agents:
  - name: a
    model: {provider: scripted, script: s.yaml}
  - name: a
    model: {provider: scripted, script: s.yaml}`, `:5: agent "a": name: duplicate agent name (also on line 3)`},
		{"unknown sub-agent", `
agents:
  - name: a
    model: {provider: scripted, script: s.yaml}
    subAgents: [bb]`, `:5: agent "a": subAgents[0]: no agent named "bb" in this file (agents: a)`},
		{"sub-agent without output schema", `
agents:
  - name: a
    model: {provider: scripted, script: s.yaml}
    subAgents: [b]
  - name: b
    model: {provider: scripted, script: s.yaml}`, `:5: agent "a": subAgents[0]: agent "b" has no outputSchema: a sub-agent returns a structured output, which becomes the tool result; give it one`},
		{"sub-agent cycle", `
agents:
  - name: a
    model: {provider: scripted, script: s.yaml}
    subAgents: [b]
  - name: b
    outputSchema: {type: object}
    model: {provider: scripted, script: s.yaml}
    subAgents: [c]
  - name: c
    outputSchema: {type: object}
    model: {provider: scripted, script: s.yaml}
    persistentAgents: [b]`, `:6: agent "b": subAgents: agents delegate in a cycle: b → c → b`},
		{"self delegation", `
agents:
  - name: b
    outputSchema: {type: object}
    model: {provider: scripted, script: s.yaml}
    subAgents: [b]`, `:3: agent "b": subAgents: agents delegate in a cycle: b → b`},
		{"own companion", `
agents:
  - name: b
    outputSchema: {type: object}
    model: {provider: scripted, script: s.yaml}
    persistentAgents: [b]`, `:6: agent "b": persistentAgents[0]: an agent cannot be its own companion`},
		{"companion mode", `
agents:
  - name: a
    model: {provider: scripted, script: s.yaml}
    persistentAgents: [{name: b, mode: async}]
  - name: b
    outputSchema: {type: object}
    model: {provider: scripted, script: s.yaml}`, `:5: agent "a": persistentAgents[0].mode: unknown mode "async" (want blocking or non-blocking)`},
		{"mcp server without a transport", `
agents:
  - name: a
    mcp: [{name: tracker}]
    model: {provider: scripted, script: s.yaml}`, `:4: agent "a": mcp[0]: mcp server "tracker": command/url: give a command (stdio) or a url (streamable HTTP)`},
		{"mcp unknown key", `
agents:
  - name: a
    mcp: [{name: tracker, url: "http://127.0.0.1:9/mcp", token: x}]
    model: {provider: scripted, script: s.yaml}`, `:4: agent "a": mcp[0].token: unknown key "token"`},
		{"mcp approval not a boolean", `
agents:
  - name: a
    mcp: [{name: tracker, command: srv, requireApproval: "yes"}]
    model: {provider: scripted, script: s.yaml}`, `:4: agent "a": mcp[0].requireApproval: want true or false, got`},
		{"mcp token in the file", `
agents:
  - name: a
    mcp: [{name: tracker, url: "http://127.0.0.1:9/mcp", bearerTokenEnv: "sk-123"}]
    model: {provider: scripted, script: s.yaml}`, `:4: agent "a": mcp[0].bearerTokenEnv: "sk-123" is not an environment variable name`},
		{"initial state", `
agents:
  - name: a
    initialState: [1]
    model: {provider: scripted, script: s.yaml}`, `:4: agent "a": initialState: want a mapping (a JSON object written in YAML), got a list`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := write(t, "agents.yaml", tc.file, "s.yaml", script)
			_, err := agentfile.Load(path, &agentfile.Options{Getenv: func(k string) string { return env[k] }})
			require.Error(t, err)
			var fe *agentfile.Error
			require.ErrorAs(t, err, &fe)
			require.Equal(t, path, fe.File)
			require.True(t, strings.HasPrefix(err.Error(), path+tc.want), "got:  %s\nwant: %s%s", err, path, tc.want)
		})
	}
}

// The script error names what the script does script.
func TestAgentMissingFromTheScript(t *testing.T) {
	t.Parallel()
	path := write(t, "agents.yaml", "agents:\n  - name: z\n    model: {provider: scripted, script: s.yaml}\n", "s.yaml", script)
	_, err := agentfile.Load(path, nil)
	require.ErrorContains(t, err, `s.yaml has no script for agent "z" (it scripts: a, b, c): add an entry "z" under its agents`)
}

// A script of shared steps plays for every agent; scripts resolve against
// the agent file's directory; other providers can be added.
func TestSharedScriptAndCustomProvider(t *testing.T) {
	t.Parallel()
	path := write(t, "conf/agents.yaml", `
agents:
  - name: a
    model: {provider: scripted, script: scripts/shared.json}
  - name: b
    model: {provider: echo, model: x, temperature: 0.5, maxOutputTokens: 100}
`, "conf/scripts/shared.json", `{"steps": [{"text": "hi"}]}`)
	var got agentfile.ModelSpec
	agents, err := agentfile.Load(path, &agentfile.Options{Providers: map[string]agentfile.Provider{
		"echo": func(spec agentfile.ModelSpec, env agentfile.ProviderEnv) (helix.Model, error) {
			got = spec
			require.Equal(t, filepath.Dir(path), env.BaseDir)
			return scripted.New(scripted.Step{Text: "hi"}), nil
		},
	}})
	require.NoError(t, err)
	require.Equal(t, "x", got.Model)
	b, _ := agents.Get("b")
	require.Equal(t, "x", b.LLMConfig.Model)
	require.InDelta(t, 0.5, *b.LLMConfig.Temperature, 1e-9)
	require.Equal(t, 100, b.LLMConfig.MaxOutputTokens)
}

// The example's agents run: a sub-agent delegation, a client tool answered
// by a submission, an approval stand-in and a companion.
func TestTheExampleRuns(t *testing.T) {
	t.Parallel()
	agents, err := agentfile.Load(examplePath, nil)
	require.NoError(t, err)
	e, err := engine.New(t.Context(), engine.Config{DatabaseURL: pgtest.NewURL(t), ExecutorID: "agentfile-test"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	require.NoError(t, e.Register(agents.All...))
	require.NoError(t, e.Launch(t.Context()))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	run := func(name, session string) *engine.Handle {
		a, _ := agents.Get(name)
		h, err := e.Execute(ctx, a, engine.Input{Message: "hello"}, &engine.ExecuteOptions{SessionID: session})
		require.NoError(t, err)
		return h
	}

	res, err := run("assistant", "s-assistant").Await(ctx)
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	subs, err := e.SubSessions(ctx, "s-assistant")
	require.NoError(t, err)
	require.Len(t, subs, 1)
	require.Equal(t, "researcher", subs[0].AgentType)

	h := run("intake", "s-intake")
	res, err = h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, helix.AgentSuspendedClientTool, res.Status, res.Error)
	sub, err := helix.ClientToolResult(res.Suspended.ToolCallIDs[0], map[string]string{"answer": "Ada"})
	require.NoError(t, err)
	_, err = e.SubmitToolResult(ctx, "s-intake", sub)
	require.NoError(t, err)
	res, err = h.Await(ctx)
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)

	h = run("publisher", "s-publisher")
	res, err = h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, helix.AgentSuspendedClientTool, res.Status, res.Error)
	_, err = e.SubmitToolResult(ctx, "s-publisher", helix.Approve(res.Suspended.ToolCallIDs[0], "ok"))
	require.NoError(t, err)
	res, err = h.Await(ctx)
	require.NoError(t, err)
	require.Equal(t, helix.AgentCompleted, res.Status, res.Error)
	page, err := e.Messages(ctx, "s-publisher", nil)
	require.NoError(t, err)
	var results []string
	for _, m := range page.Messages {
		if m.Role == helix.RoleTool {
			results = append(results, m.ToolName+" "+m.Content)
		}
	}
	require.Len(t, results, 2)
	require.Contains(t, results[0], `companion__spawnAgent`)
	require.Contains(t, results[0], `approve`, "the editor companion answered")
	var published map[string]any
	require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(results[1], "publish ")), &published))
	require.Equal(t, map[string]any{"published": true, "url": "https://example.org/posts/1"}, published, "the declared result")
}
