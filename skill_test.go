package helix_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
)

// emittedEvent is one custom event recorded by eventContext.
type emittedEvent struct {
	Name string
	Data json.RawMessage
}

// eventContext is a ToolContext that records emitted events with their
// JSON-encoded data (what the engine writes to the stream).
type eventContext struct {
	mu      sync.Mutex
	events  []emittedEvent
	emitErr error
}

func (c *eventContext) SessionID() string      { return "s" }
func (c *eventContext) RunID() string          { return "r" }
func (c *eventContext) AgentType() string      { return "assistant" }
func (c *eventContext) ToolCallID() string     { return "call-1" }
func (c *eventContext) ToolName() string       { return helix.LoadSkillToolName }
func (c *eventContext) Step() int              { return 1 }
func (c *eventContext) IdempotencyKey() string { return "wf-1/call-1" }
func (c *eventContext) GetState(into any) error {
	return json.Unmarshal([]byte(`{}`), into)
}
func (c *eventContext) SetState(any) error { return errors.New("skill tools must not write state") }
func (c *eventContext) Emit(name string, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, emittedEvent{Name: name, Data: b})
	return c.emitErr
}

func testSkills() []helix.Skill {
	return []helix.Skill{
		{
			Name:        "pdf-processing",
			Description: "Extract text & tables from <PDF> files.",
			Body:        "# PDF processing\nUse pdftotext.\n",
			Resources: map[string]string{
				"scripts/extract.sh": "#!/bin/sh\npdftotext \"$1\"\n",
				"references/api.md":  "line 1\nline 2\nline 3\nline 4\nline 5",
			},
		},
		{
			Name:        "deploy-runbook",
			Description: "How to deploy the service.",
			Body:        "# Deploy\n1. Build.\n2. Ship.",
		},
		{
			Name:        "code-review",
			Description: "Review a change for bugs.",
			Body:        "# Review\nRead the diff twice.",
			Resources:   map[string]string{"empty.txt": ""},
		},
	}
}

func skillAgent(t *testing.T) *helix.Agent {
	a := validAgent(t)
	a.Skills = testSkills()
	return a
}

func TestSkillsPromptFragment(t *testing.T) {
	t.Parallel()
	a := skillAgent(t)
	a.PreloadSkills = []string{"deploy-runbook", "no-such-skill", "code-review"}
	got := a.SkillsPromptFragment()

	want := `## Skills

Each skill below packages instructions, with optional reference files, for a specialized task. A Skill is NOT a tool: never call a skill's name as a tool. To use a skill, call the load_skill tool with the skill's name; it returns the skill's full instructions. Read a skill's bundled files with the read_skill_file tool. Skills marked loaded="true" are already active (see Active Skills below): do not load them again.

<available_skills>
<skill name="code-review" loaded="true">Review a change for bugs.</skill>
<skill name="deploy-runbook" loaded="true">How to deploy the service.</skill>
<skill name="pdf-processing">Extract text &amp; tables from &lt;PDF&gt; files.</skill>
</available_skills>

### Active Skills

<skill_content name="code-review">
# Review
Read the diff twice.
</skill_content>

<skill_content name="deploy-runbook">
# Deploy
1. Build.
2. Ship.
</skill_content>`
	require.Equal(t, want, got)
	require.NotContains(t, got, "no-such-skill", "an unknown preload name is skipped")
	require.Equal(t, []string{"no-such-skill"}, a.UnknownPreloadSkills())

	// Byte-stable whatever the order of Skills and PreloadSkills.
	b := skillAgent(t)
	b.Skills = []helix.Skill{a.Skills[2], a.Skills[0], a.Skills[1]}
	b.PreloadSkills = []string{"code-review", "deploy-runbook", "deploy-runbook"}
	require.Equal(t, got, b.SkillsPromptFragment())
	require.Nil(t, b.UnknownPreloadSkills())
}

func TestSkillsPromptFragmentWithoutPreload(t *testing.T) {
	t.Parallel()
	a := skillAgent(t)
	got := a.SkillsPromptFragment()
	require.True(t, strings.HasPrefix(got, "## Skills\n"))
	require.Contains(t, got, "A Skill is NOT a tool")
	require.NotContains(t, got, "loaded=")
	require.NotContains(t, got, "### Active Skills")
	require.True(t, strings.HasSuffix(got, "</available_skills>"))

	a.Skills = nil
	a.PreloadSkills = []string{"deploy-runbook"}
	require.Empty(t, a.SkillsPromptFragment(), "no skills, no fragment")
	require.Equal(t, []string{"deploy-runbook"}, a.UnknownPreloadSkills())
	require.NoError(t, a.Validate(), "an unknown preload name is a warning, not a definition error")
	var nilAgent *helix.Agent
	require.Empty(t, nilAgent.SkillsPromptFragment())
}

func TestSkillToolsInEffectiveTools(t *testing.T) {
	t.Parallel()
	a := validAgent(t)
	tools, err := a.EffectiveTools()
	require.NoError(t, err)
	require.Equal(t, []string{"weather"}, toolNames(tools), "no skills, no skill tools")

	a = skillAgent(t)
	a.OutputSchema = json.RawMessage(`{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"]}`)
	tools, err = a.EffectiveTools()
	require.NoError(t, err)
	require.Equal(t, []string{"weather", helix.LoadSkillToolName, helix.ReadSkillFileToolName, helix.FinishToolName}, toolNames(tools))
	for _, tool := range tools[1:3] {
		require.NotEmpty(t, tool.Description())
		require.False(t, tool.ExecutesOnClient())
		require.False(t, tool.NeedsApprovalCheck())
	}

	// A skill tool taken from one agent cannot be listed on another.
	b := validAgent(t)
	b.Tools = append(b.Tools, tools[1])
	err = b.Validate()
	var de *helix.DefinitionError
	require.ErrorAs(t, err, &de)
	require.Equal(t, "Tools[1]", de.Field)
	require.ErrorContains(t, err, "added automatically from Skills")
}

func toolNames(tools []*helix.Tool) []string {
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = t.Name()
	}
	return names
}

func skillTool(t *testing.T, a *helix.Agent, name string) *helix.Tool {
	t.Helper()
	tool, ok := a.Tool(name)
	require.True(t, ok, "agent has no %s tool", name)
	return tool
}

func TestLoadSkill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	load := skillTool(t, skillAgent(t), helix.LoadSkillToolName)
	tc := &eventContext{}

	out, err := load.Execute(ctx, json.RawMessage(`{"name":"pdf-processing"}`), tc)
	require.NoError(t, err)
	require.JSONEq(t, `{"name":"pdf-processing","body":"# PDF processing\nUse pdftotext.\n",
		"resources":["references/api.md","scripts/extract.sh"]}`, string(out))
	require.Len(t, tc.events, 1)
	require.Equal(t, helix.SkillLoadedEventName, tc.events[0].Name)
	require.Equal(t, "skill_loaded", tc.events[0].Name, "the event name is part of the stream protocol")
	require.JSONEq(t, `{"name":"pdf-processing"}`, string(tc.events[0].Data))

	out, err = load.Execute(ctx, json.RawMessage(`{"name":"deploy-runbook"}`), tc)
	require.NoError(t, err)
	var res helix.LoadSkillResult
	require.NoError(t, json.Unmarshal(out, &res))
	require.Equal(t, "# Deploy\n1. Build.\n2. Ship.", res.Body)
	require.Contains(t, string(out), `"resources":[]`, "no files is an empty list, not null")

	// An emit failure does not fail the load: the event is informational.
	out, err = load.Execute(ctx, json.RawMessage(`{"name":"code-review"}`), &eventContext{emitErr: errors.New("stream down")})
	require.NoError(t, err)
	require.Contains(t, string(out), "Read the diff twice.")
	_, err = load.Execute(ctx, json.RawMessage(`{"name":"code-review"}`), nil)
	require.NoError(t, err, "no ToolContext, no event")

	tc = &eventContext{}
	_, err = load.Execute(ctx, json.RawMessage(`{"name":"pdf"}`), tc)
	require.ErrorContains(t, err, `unknown skill "pdf": the available skills are code-review, deploy-runbook, pdf-processing`)
	require.Empty(t, tc.events, "a failed load emits nothing")
	_, err = load.Execute(ctx, json.RawMessage(`{}`), tc)
	require.ErrorIs(t, err, helix.ErrInvalidInput, "name is required")
}

func TestReadSkillFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	read := skillTool(t, skillAgent(t), helix.ReadSkillFileToolName)
	call := func(t *testing.T, args string) (helix.ReadSkillFileResult, error) {
		t.Helper()
		out, err := read.Execute(ctx, json.RawMessage(args), &eventContext{})
		var res helix.ReadSkillFileResult
		if err == nil {
			require.NoError(t, json.Unmarshal(out, &res))
		}
		return res, err
	}

	res, err := call(t, `{"name":"pdf-processing","path":"references/api.md"}`)
	require.NoError(t, err)
	require.Equal(t, helix.ReadSkillFileResult{Name: "pdf-processing", Path: "references/api.md",
		StartLine: 1, EndLine: 5, TotalLines: 5, Content: "line 1\nline 2\nline 3\nline 4\nline 5"}, res)

	lines := map[string]struct {
		args              string
		start, end, total int
		content           string
		errContains       string
	}{
		"range":              {args: `"startLine":2,"endLine":3`, start: 2, end: 3, total: 5, content: "line 2\nline 3\n"},
		"single line":        {args: `"startLine":5,"endLine":5`, start: 5, end: 5, total: 5, content: "line 5"},
		"start only":         {args: `"startLine":4`, start: 4, end: 5, total: 5, content: "line 4\nline 5"},
		"end only":           {args: `"endLine":2`, start: 1, end: 2, total: 5, content: "line 1\nline 2\n"},
		"end clamped":        {args: `"startLine":3,"endLine":99`, start: 3, end: 5, total: 5, content: "line 3\nline 4\nline 5"},
		"start zero":         {args: `"startLine":0`, errContains: "startLine must be >= 1 (lines are numbered from 1), got 0"},
		"start negative":     {args: `"startLine":-2,"endLine":1`, errContains: "startLine must be >= 1"},
		"end before start":   {args: `"startLine":3,"endLine":2`, errContains: "endLine 2 is before startLine 3"},
		"start past the end": {args: `"startLine":6`, errContains: "startLine 6 is past the end of the file, which has 5 lines"},
	}
	for name, c := range lines {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			res, err := call(t, `{"name":"pdf-processing","path":"references/api.md",`+c.args+`}`)
			if c.errContains != "" {
				require.ErrorContains(t, err, c.errContains)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.start, res.StartLine)
			require.Equal(t, c.end, res.EndLine)
			require.Equal(t, c.total, res.TotalLines)
			require.Equal(t, c.content, res.Content)
		})
	}

	// A trailing newline ends the last line; it does not start another.
	res, err = call(t, `{"name":"pdf-processing","path":"scripts/extract.sh","startLine":2}`)
	require.NoError(t, err)
	require.Equal(t, 2, res.TotalLines)
	require.Equal(t, "pdftotext \"$1\"\n", res.Content)

	// Paths are cleaned lexically before the lookup.
	res, err = call(t, `{"name":"pdf-processing","path":"./references//api.md","endLine":1}`)
	require.NoError(t, err)
	require.Equal(t, "references/api.md", res.Path)
	require.Equal(t, "line 1\n", res.Content)

	res, err = call(t, `{"name":"code-review","path":"empty.txt"}`)
	require.NoError(t, err)
	require.Equal(t, helix.ReadSkillFileResult{Name: "code-review", Path: "empty.txt"}, res)
	_, err = call(t, `{"name":"code-review","path":"empty.txt","startLine":1}`)
	require.ErrorContains(t, err, "past the end of the file, which has 0 lines")
}

func TestReadSkillFileRejects(t *testing.T) {
	t.Parallel()
	read := skillTool(t, skillAgent(t), helix.ReadSkillFileToolName)
	cases := map[string]struct {
		args string
		want []string
	}{
		"parent":            {`{"name":"pdf-processing","path":"../x"}`, []string{`"../x" contains ".."`, "its files are references/api.md, scripts/extract.sh"}},
		"absolute":          {`{"name":"pdf-processing","path":"/etc/passwd"}`, []string{`"/etc/passwd" is absolute`}},
		"escape after join": {`{"name":"pdf-processing","path":"a/../../b"}`, []string{`contains ".."`}},
		"inner parent":      {`{"name":"pdf-processing","path":"references/../references/api.md"}`, []string{`contains ".."`}},
		"backslash parent":  {`{"name":"pdf-processing","path":"..\\secrets"}`, []string{`contains ".."`}},
		"empty":             {`{"name":"pdf-processing","path":""}`, []string{"the path is empty"}},
		"dot":               {`{"name":"pdf-processing","path":"./"}`, []string{"names the skill itself"}},
		"unknown file":      {`{"name":"pdf-processing","path":"references/nope.md"}`, []string{`skill "pdf-processing" has no file "references/nope.md"; its files are references/api.md, scripts/extract.sh`}},
		"no files":          {`{"name":"deploy-runbook","path":"a.md"}`, []string{`has no file "a.md"; it bundles no files`}},
		"unknown skill":     {`{"name":"nope","path":"a.md"}`, []string{`unknown skill "nope": the available skills are code-review, deploy-runbook, pdf-processing`}},
		"missing path":      {`{"name":"pdf-processing"}`, []string{"missing property 'path'"}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			out, err := read.Execute(context.Background(), json.RawMessage(c.args), &eventContext{})
			require.Error(t, err)
			require.Nil(t, out)
			for _, w := range c.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

func TestSkillToolsSnapshotTheDefinition(t *testing.T) {
	t.Parallel()
	a := skillAgent(t)
	read := skillTool(t, a, helix.ReadSkillFileToolName)
	a.Skills[0].Resources["references/api.md"] = "changed"
	out, err := read.Execute(context.Background(), json.RawMessage(`{"name":"pdf-processing","path":"references/api.md","endLine":1}`), nil)
	require.NoError(t, err)
	require.Contains(t, string(out), `"content":"line 1\n"`, "a replayed step must return what the first run returned")
}

func TestSkillValidation(t *testing.T) {
	t.Parallel()
	require.NoError(t, skillAgent(t).Validate())

	cases := map[string]struct {
		mutate func(a *helix.Agent)
		field  string
		reason string
	}{
		"empty name":     {func(a *helix.Agent) { a.Skills[1].Name = "" }, "Skills[1].Name", "empty"},
		"underscore":     {func(a *helix.Agent) { a.Skills[1].Name = "deploy_runbook" }, "Skills[1].Name", "no '_'"},
		"uppercase":      {func(a *helix.Agent) { a.Skills[1].Name = "Deploy" }, "Skills[1].Name", "lowercase letters, digits and '-'"},
		"long name":      {func(a *helix.Agent) { a.Skills[0].Name = strings.Repeat("a", 65) }, "Skills[0].Name", "longer than 64"},
		"duplicate":      {func(a *helix.Agent) { a.Skills[2].Name = "pdf-processing" }, "Skills[2].Name", `duplicate skill name "pdf-processing" (also Skills[0])`},
		"no description": {func(a *helix.Agent) { a.Skills[1].Description = " \n" }, "Skills[1].Description", "when to use it"},
		"no body":        {func(a *helix.Agent) { a.Skills[2].Body = "" }, "Skills[2].Body", "load_skill returns"},
		"empty path":     {func(a *helix.Agent) { a.Skills[0].Resources[""] = "x" }, `Skills[0].Resources[""]`, "the path is empty"},
		"absolute path":  {func(a *helix.Agent) { a.Skills[0].Resources["/etc/passwd"] = "x" }, `Skills[0].Resources["/etc/passwd"]`, "absolute"},
		"parent path":    {func(a *helix.Agent) { a.Skills[0].Resources["../x"] = "x" }, `Skills[0].Resources["../x"]`, `contains ".."`},
		"inner parent":   {func(a *helix.Agent) { a.Skills[0].Resources["a/../b"] = "x" }, `Skills[0].Resources["a/../b"]`, `contains ".."`},
		"backslash":      {func(a *helix.Agent) { a.Skills[0].Resources[`refs\a.md`] = "x" }, `Skills[0].Resources["refs\\a.md"]`, "'/'"},
		"unclean path":   {func(a *helix.Agent) { a.Skills[0].Resources["./refs//a.md"] = "x" }, `Skills[0].Resources["./refs//a.md"]`, `write it as "refs/a.md"`},
		"dot path":       {func(a *helix.Agent) { a.Skills[0].Resources["."] = "x" }, `Skills[0].Resources["."]`, "not a file"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a := skillAgent(t)
			c.mutate(a)
			err := a.Validate()
			require.ErrorIs(t, err, helix.ErrInvalidDefinition)
			var de *helix.DefinitionError
			require.ErrorAs(t, err, &de)
			require.Equal(t, "agent", de.Kind)
			require.Equal(t, c.field, de.Field)
			require.Contains(t, err.Error(), c.reason)
			_, err = a.EffectiveTools()
			require.ErrorIs(t, err, helix.ErrInvalidDefinition)
		})
	}

	require.NoError(t, helix.ValidateSkillName("a-1"))
	require.Error(t, helix.ValidateSkillName(helix.LoadSkillToolName), "a skill name never equals a framework tool name")
}
