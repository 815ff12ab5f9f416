package scripted_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/llm/scripted"
)

// recorder collects what a model streams, one event per callback.
type recorder struct {
	mu     sync.Mutex
	events []string
	text   strings.Builder
	args   map[string]*strings.Builder
}

func (r *recorder) callbacks() helix.StreamCallbacks {
	add := func(format string, a ...any) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.events = append(r.events, fmt.Sprintf(format, a...))
	}
	return helix.StreamCallbacks{
		OnTextDelta: func(d string) {
			add("text %q", d)
			r.mu.Lock()
			r.text.WriteString(d)
			r.mu.Unlock()
		},
		OnThinking:     func(c string, complete bool) { add("thinking %q %t", c, complete) },
		OnToolArgStart: func(id, name string) { add("arg_start %s %s", id, name) },
		OnToolArgDelta: func(id, d string) {
			add("arg_delta %s", id)
			r.mu.Lock()
			if r.args == nil {
				r.args = map[string]*strings.Builder{}
			}
			if r.args[id] == nil {
				r.args[id] = &strings.Builder{}
			}
			r.args[id].WriteString(d)
			r.mu.Unlock()
		},
		OnToolArgEnd: func(id string) { add("arg_end %s", id) },
	}
}

// request returns a request of agentType whose history holds k completed
// steps (k assistant messages), each followed by a tool result.
func request(agentType string, k int) helix.ModelRequest {
	msgs := []helix.Message{helix.SystemMessage("be brief"), helix.UserMessage("go")}
	for i := range k {
		id := scripted.CallID(i, 0)
		msgs = append(msgs,
			helix.AssistantMessage("", helix.ToolCall{ID: id, Name: "noop", Arguments: json.RawMessage(`{}`)}),
			helix.ToolResultMessage(id, "noop", `{"ok":true}`))
	}
	return helix.ModelRequest{Messages: msgs, AgentType: agentType, AgentID: "s-1", Step: k + 1,
		Tools: []helix.ToolSpec{{Name: "noop"}, {Name: helix.FinishToolName}}}
}

func generate(t *testing.T, m helix.Model, req helix.ModelRequest) helix.StepResult {
	t.Helper()
	res, err := m.GenerateStep(t.Context(), req, helix.StreamCallbacks{})
	require.NoError(t, err)
	return res
}

// requireScriptError checks the two ways a script failure must match.
func requireScriptError(t *testing.T, err error, sentinel error, msg string) {
	t.Helper()
	require.ErrorIs(t, err, sentinel)
	var me *helix.ModelError
	require.ErrorAs(t, err, &me)
	require.Equal(t, helix.CodeModelError, me.Code)
	require.False(t, me.Recoverable, "the engine must not retry a request the script cannot answer")
	require.Equal(t, msg, me.Message)
}

func TestSplitWords(t *testing.T) {
	t.Parallel()
	for text, want := range map[string][]string{
		"":                      nil,
		"one":                   {"one"},
		"Hello, world.":         {"Hello, ", "world."},
		"  lead and trail  ":    {"  lead ", "and ", "trail  "},
		"two\n\nlines\tand tab": {"two\n\n", "lines\t", "and ", "tab"},
		"héllo wörld ✓":         {"héllo ", "wörld ", "✓"},
		"   ":                   {"   "},
	} {
		got := scripted.SplitWords(text)
		require.Equal(t, want, got, "%q", text)
		require.Equal(t, text, strings.Join(got, ""), "the deltas of %q must reconstruct it", text)
	}
}

func TestTextStreamsAsDeltas(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		step       scripted.Step
		wantDeltas []string
	}{
		"words":            {scripted.Step{Text: "The quick brown fox."}, []string{"The ", "quick ", "brown ", "fox."}},
		"explicit deltas":  {scripted.Step{Deltas: []string{"Th", "e qu", "ick"}}, []string{"Th", "e qu", "ick"}},
		"text and deltas":  {scripted.Step{Text: "abc", Deltas: []string{"a", "bc"}}, []string{"a", "bc"}},
		"unicode":          {scripted.Step{Text: "naïve café ☕"}, []string{"naïve ", "café ", "☕"}},
		"tool call only":   {scripted.Step{ToolCalls: []scripted.Call{{Name: "noop"}}}, nil},
		"text before call": {scripted.Step{Text: "On it.", ToolCalls: []scripted.Call{{Name: "noop"}}}, []string{"On ", "it."}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var rec recorder
			res, err := scripted.New(tc.step).GenerateStep(t.Context(), request("a", 0), rec.callbacks())
			require.NoError(t, err)
			var want []string
			for _, d := range tc.wantDeltas {
				want = append(want, fmt.Sprintf("text %q", d))
			}
			require.Equal(t, want, rec.events)
			require.Equal(t, res.Content, rec.text.String(), "the deltas reconstruct the result's content")
		})
	}
}

func TestStepResultShape(t *testing.T) {
	t.Parallel()
	m := scripted.New(
		scripted.Step{Thinking: "plan", Text: "Searching.", ToolCalls: []scripted.Call{
			{Name: "search", Args: map[string]any{"q": "go"}},
			{ID: "mine", Name: "fetch", Args: json.RawMessage(`{"url": "https://example.org"}`)},
		}},
		scripted.Step{Text: "Done.", Output: map[string]int{"answer": 42}},
		scripted.Step{Text: "Plain answer."},
		scripted.Step{StopReason: helix.StopMaxTokens},
	)

	var rec recorder
	res, err := m.GenerateStep(t.Context(), request("a", 0), rec.callbacks())
	require.NoError(t, err)
	require.Equal(t, helix.StepToolCalls, res.Type)
	require.Equal(t, "Searching.", res.Content)
	require.Equal(t, &helix.Thinking{Content: "plan"}, res.Thinking)
	require.Equal(t, helix.StopToolUse, res.StopReason)
	require.Equal(t, scripted.ModelName, res.Model)
	require.Len(t, res.ToolCalls, 2)
	require.Equal(t, helix.ToolCall{ID: "call-0-0", Name: "search", Arguments: json.RawMessage(`{"q":"go"}`)}, res.ToolCalls[0])
	require.Equal(t, helix.ToolCall{ID: "mine", Name: "fetch", Arguments: json.RawMessage(`{"url": "https://example.org"}`)}, res.ToolCalls[1],
		"a json.RawMessage is used as is")
	require.Equal(t, []string{`thinking "plan" true`, `text "Searching."`}, rec.events, "thinking comes whole, before the text")

	res = generate(t, m, request("a", 1))
	require.Equal(t, helix.StepToolCalls, res.Type, "structured output is a __finish__ call")
	require.Equal(t, helix.StopToolUse, res.StopReason)
	require.Equal(t, []helix.ToolCall{{ID: "call-1-0", Name: helix.FinishToolName, Arguments: json.RawMessage(`{"answer":42}`)}}, res.ToolCalls)
	require.Equal(t, "Done.", res.Content)

	res = generate(t, m, request("a", 2))
	require.Equal(t, helix.StepText, res.Type)
	require.Equal(t, helix.StopEndTurn, res.StopReason)
	require.Empty(t, res.ToolCalls)

	res = generate(t, m, request("a", 3))
	require.Equal(t, helix.StopMaxTokens, res.StopReason, "an explicit stop reason is kept")
	require.Empty(t, res.Content)
}

func TestToolCallIDsAreDeterministicAndUnique(t *testing.T) {
	t.Parallel()
	two := scripted.Step{ToolCalls: []scripted.Call{{Name: "a"}, {Name: "b"}}, Output: map[string]any{}}
	m := scripted.New(scripted.Repeat(3, two)...)
	seen := map[string]bool{}
	for k := range 3 {
		res := generate(t, m, request("agent", k))
		require.Len(t, res.ToolCalls, 3)
		for i, call := range res.ToolCalls {
			require.Equal(t, fmt.Sprintf("call-%d-%d", k, i), call.ID)
			require.False(t, seen[call.ID], "ID %s repeats", call.ID)
			seen[call.ID] = true
		}
		again := generate(t, scripted.New(scripted.Repeat(3, two)...), request("agent", k))
		require.Equal(t, res.ToolCalls, again.ToolCalls, "a new Model (a new process) assigns the same IDs")
	}
}

func TestPositionIsTheNumberOfAssistantMessages(t *testing.T) {
	t.Parallel()
	steps := make([]scripted.Step, 6)
	for i := range steps {
		steps[i] = scripted.Step{Text: fmt.Sprintf("step %d", i), ToolCalls: []scripted.Call{{Name: "noop"}}}
	}
	m := scripted.New(steps...)

	for k := range steps {
		req := request("a", k)
		require.Equal(t, k, scripted.Position(req.Messages))
		first := generate(t, m, req)
		require.Equal(t, fmt.Sprintf("step %d", k), first.Content, "a request with %d assistant messages plays step %d", k, k)
		require.Equal(t, first, generate(t, m, req), "the same request twice gives the same result")
		require.Equal(t, first, generate(t, scripted.New(steps...), req), "a new Model value (after a crash) gives the same result")
	}

	t.Run("multi-turn continues counting", func(t *testing.T) {
		t.Parallel()
		// Turn 1 had two steps; turn 2 starts with a new user message.
		req := request("a", 2)
		req.Messages = append(req.Messages, helix.AssistantMessage("turn 1 answer"), helix.UserMessage("and now?"))
		req.Step = 1
		require.Equal(t, "step 3", generate(t, m, req).Content, "req.Step restarts each turn; the position does not")
	})
}

func TestKeyedScripts(t *testing.T) {
	t.Parallel()
	m := scripted.NewKeyed(map[string][]scripted.Step{
		"parent": {{ToolCalls: []scripted.Call{{Name: "subagent__child"}}}, {Text: "The child said hi."}},
		"child":  {{Text: "hi"}},
	})
	require.Equal(t, "subagent__child", generate(t, m, request("parent", 0)).ToolCalls[0].Name)
	require.Equal(t, "The child said hi.", generate(t, m, request("parent", 1)).Content)
	require.Equal(t, "hi", generate(t, m, request("child", 0)).Content, "each session starts at step 0 of its own script")

	_, err := m.GenerateStep(t.Context(), request("stranger", 0), helix.StreamCallbacks{})
	requireScriptError(t, err, scripted.ErrUnknownAgent, `scripted model: no script for agent "stranger" (scripted agents: child, parent)`)

	_, err = m.GenerateStep(t.Context(), request("child", 1), helix.StreamCallbacks{})
	requireScriptError(t, err, scripted.ErrScriptExhausted,
		`scripted model: agent "child" asked for step 1 but its script has 1 steps (the step index is the number of assistant messages in the request)`)
}

func TestScriptExhausted(t *testing.T) {
	t.Parallel()
	m := scripted.New(scripted.Step{Text: "one"}, scripted.Step{Text: "two"})
	_, err := m.GenerateStep(t.Context(), request("writer", 2), helix.StreamCallbacks{})
	requireScriptError(t, err, scripted.ErrScriptExhausted,
		`scripted model: agent "writer" asked for step 2 but its script has 2 steps (the step index is the number of assistant messages in the request)`)
	require.NotErrorIs(t, err, scripted.ErrUnknownAgent)
}

func TestExpect(t *testing.T) {
	t.Parallel()
	req := request("checker", 1) // ... assistant(noop), tool(noop)
	for name, tc := range map[string]struct {
		expect scripted.Expect
		diff   string // "" when the request matches
	}{
		"all match": {scripted.Expect{LastRole: helix.RoleTool, LastMessageContains: `"ok"`, ToolResultFor: "noop",
			HasTools: []string{"noop", helix.FinishToolName}}, ""},
		"role":     {scripted.Expect{LastRole: helix.RoleUser}, `the last message has role "tool", want "user"`},
		"contains": {scripted.Expect{LastMessageContains: "weather"}, `the last message (tool) does not contain "weather": "{\"ok\":true}"`},
		"tool result": {scripted.Expect{ToolResultFor: "search"},
			`no result of a "search" call since the last assistant message (results for: noop)`},
		"tools": {scripted.Expect{HasTools: []string{"noop", "search"}}, `tool "search" is not offered (tools: noop, __finish__)`},
		"several": {scripted.Expect{LastRole: helix.RoleUser, HasTools: []string{"search"}},
			`the last message has role "tool", want "user"; tool "search" is not offered (tools: noop, __finish__)`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m := scripted.New(scripted.Step{Text: "0"}, scripted.Step{Text: "1", Expect: &tc.expect})
			var rec recorder
			res, err := m.GenerateStep(t.Context(), req, rec.callbacks())
			if tc.diff == "" {
				require.NoError(t, err)
				require.Equal(t, "1", res.Content)
				return
			}
			requireScriptError(t, err, scripted.ErrUnexpectedRequest,
				`scripted model: agent "checker" step 1: the request does not match the script: `+tc.diff)
			require.Empty(t, rec.events, "nothing streams before the request is checked")
		})
	}

	t.Run("results of earlier steps do not count", func(t *testing.T) {
		t.Parallel()
		req := request("checker", 1)
		req.Messages = append(req.Messages, helix.AssistantMessage("thinking aloud"), helix.UserMessage("continue"))
		m := scripted.New(scripted.Repeat(2, scripted.Step{Text: "x"}, scripted.Step{Text: "y", Expect: &scripted.Expect{ToolResultFor: "noop"}})...)
		_, err := m.GenerateStep(t.Context(), req, helix.StreamCallbacks{})
		require.ErrorIs(t, err, scripted.ErrUnexpectedRequest)
	})
}

func TestErrorStep(t *testing.T) {
	t.Parallel()
	m := scripted.New(
		scripted.Step{Error: &scripted.StepError{Message: "slow down", Code: helix.CodeProviderRateLimited, Recoverable: true, StatusCode: 429}},
		scripted.Step{Error: &scripted.StepError{Message: "boom"}},
	)
	var rec recorder
	res, err := m.GenerateStep(t.Context(), request("a", 0), rec.callbacks())
	require.Equal(t, helix.StepResult{}, res)
	var me *helix.ModelError
	require.ErrorAs(t, err, &me)
	require.Equal(t, &helix.ModelError{Code: helix.CodeProviderRateLimited, Message: "slow down", Recoverable: true, StatusCode: 429}, me)
	require.Empty(t, rec.events)

	_, err2 := m.GenerateStep(t.Context(), request("a", 0), helix.StreamCallbacks{})
	require.Equal(t, err, err2, "a failed step appends no assistant message, so the same request fails the same way")
	require.NotSame(t, me, err2, "every call gets its own error value")

	_, err = m.GenerateStep(t.Context(), request("a", 1), helix.StreamCallbacks{})
	require.Equal(t, &helix.ModelError{Code: helix.CodeModelError, Message: "boom"}, err, "a bare *helix.ModelError, as an adapter returns; the code defaults to model_error")
}

func TestDeltaDelayPacesTheStream(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		m := scripted.New(scripted.Step{Text: "one two three", DeltaDelay: 20 * time.Millisecond,
			StreamToolArgs: true, ToolCalls: []scripted.Call{{Name: "noop"}}})
		var at []time.Duration
		start := time.Now()
		cb := helix.StreamCallbacks{
			OnTextDelta:    func(string) { at = append(at, time.Since(start)) },
			OnToolArgDelta: func(string, string) { at = append(at, time.Since(start)) },
		}
		_, err := m.GenerateStep(t.Context(), request("a", 0), cb)
		require.NoError(t, err)
		ms := time.Millisecond
		require.Equal(t, []time.Duration{0, 20 * ms, 40 * ms, 60 * ms}, at, "no pause before the first delta, then one per delta, arguments included")
	})
}

func TestDeltaDelayHonoursCancellation(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		m := scripted.New(scripted.Step{Text: strings.Repeat("word ", 10), DeltaDelay: 20 * time.Millisecond})
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		var rec recorder
		start := time.Now()
		res, err := m.GenerateStep(ctx, request("a", 0), rec.callbacks())
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, helix.StepResult{}, res)
		require.Equal(t, 50*time.Millisecond, time.Since(start), "the pause ends when the context does")
		require.Len(t, rec.events, 3, "deltas at 0, 20 and 40ms; the one due at 60ms never streams")
	})

	t.Run("already cancelled", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		var rec recorder
		_, err := scripted.New(scripted.Step{Text: "hi"}).GenerateStep(ctx, request("a", 0), rec.callbacks())
		require.ErrorIs(t, err, context.Canceled)
		require.Empty(t, rec.events)
	})
}

func TestStreamToolArgs(t *testing.T) {
	t.Parallel()
	long := map[string]string{"query": "durable execution for LLM agents — ünïcödé included"}
	m := scripted.New(scripted.Step{StreamToolArgs: true, ToolCalls: []scripted.Call{
		{Name: "search", Args: long}, {Name: "noop"},
	}})
	var rec recorder
	res, err := m.GenerateStep(t.Context(), request("a", 0), rec.callbacks())
	require.NoError(t, err)
	require.Equal(t, "arg_start call-0-0 search", rec.events[0])
	require.Greater(t, strings.Count(strings.Join(rec.events, "\n"), "arg_delta call-0-0"), 1, "long arguments stream in several deltas")
	require.Equal(t, []string{"arg_start call-0-1 noop", "arg_delta call-0-1", "arg_end call-0-1"}, rec.events[len(rec.events)-3:])
	for _, call := range res.ToolCalls {
		require.Equal(t, string(call.Arguments), rec.args[call.ID].String(), "the deltas of %s reconstruct its arguments", call.ID)
	}

	rec = recorder{}
	_, err = scripted.New(scripted.Step{ToolCalls: []scripted.Call{{Name: "noop"}}}).GenerateStep(t.Context(), request("a", 0), rec.callbacks())
	require.NoError(t, err)
	require.Empty(t, rec.events, "arguments stream only when asked")
}

func TestUsage(t *testing.T) {
	t.Parallel()
	m := scripted.New(scripted.Step{Text: "12345678", Thinking: "1234"}, scripted.Step{Text: "x", Usage: &helix.Usage{InputTokens: 7, OutputTokens: 3, CachedTokens: 5}})
	req := helix.ModelRequest{Messages: []helix.Message{helix.UserMessage("123456789")}}
	require.Equal(t, helix.Usage{InputTokens: 3, OutputTokens: 3}, generate(t, m, req).Usage, "one token per four bytes, rounded up")
	req.Messages = append(req.Messages, helix.AssistantMessage("12345678"), helix.UserMessage("more"))
	require.Equal(t, helix.Usage{InputTokens: 7, OutputTokens: 3, CachedTokens: 5}, generate(t, m, req).Usage)
}

func TestInvalidStepsPanicAtConstruction(t *testing.T) {
	t.Parallel()
	ok := scripted.Step{Text: "fine"}
	for name, tc := range map[string]struct {
		steps []scripted.Step
		msg   string
	}{
		"no steps":            {nil, "the script has no steps"},
		"empty step":          {[]scripted.Step{ok, {}}, "step 1: the step is empty"},
		"error with content":  {[]scripted.Step{{Text: "hi", Usage: &helix.Usage{}, Error: &scripted.StepError{Message: "x"}}}, "step 0: an error step carries nothing else, but it also sets text, usage"},
		"error no message":    {[]scripted.Step{{Error: &scripted.StepError{Code: helix.CodeProviderError}}}, "step 0: error.message is required"},
		"text/deltas":         {[]scripted.Step{{Text: "ab", Deltas: []string{"a", "c"}}}, `step 0: text and deltas disagree`},
		"call without name":   {[]scripted.Step{ok, {ToolCalls: []scripted.Call{{Name: "a"}, {Args: map[string]any{}}}}}, "step 1: toolCalls[1]: name is required"},
		"args not an object":  {[]scripted.Step{{ToolCalls: []scripted.Call{{Name: "a", Args: `{"q":1}`}}}}, `step 0: toolCalls[0] (a): args must be a JSON object, got "{\"q\":1}"`},
		"invalid raw args":    {[]scripted.Step{{ToolCalls: []scripted.Call{{Name: "a", Args: json.RawMessage(`{"q":`)}}}}, "step 0: toolCalls[0] (a): args are not valid JSON"},
		"unmarshalable args":  {[]scripted.Step{{ToolCalls: []scripted.Call{{Name: "a", Args: map[string]any{"f": func() {}}}}}}, "args do not marshal to JSON"},
		"output not object":   {[]scripted.Step{{Output: []int{1}}}, "step 0: output must be a JSON object, got [1]"},
		"finish and output":   {[]scripted.Step{{Output: map[string]any{}, ToolCalls: []scripted.Call{{Name: helix.FinishToolName}}}}, "calls __finish__ and output is set too"},
		"duplicate IDs":       {[]scripted.Step{{ToolCalls: []scripted.Call{{ID: "x", Name: "a"}, {ID: "x", Name: "b"}}}}, `step 0: tool calls 0 and 1 share the ID "x"`},
		"IDs across steps":    {scripted.Repeat(2, scripted.Step{ToolCalls: []scripted.Call{{ID: "x", Name: "a"}}}), `step 1: tool call ID "x" is already used by step 0`},
		"ID shadows default":  {[]scripted.Step{{ToolCalls: []scripted.Call{{ID: "call-1-0", Name: "a"}}}, {ToolCalls: []scripted.Call{{Name: "a"}}}}, `step 1: tool call ID "call-1-0" is already used by step 0`},
		"negative delay":      {[]scripted.Step{{Text: "x", DeltaDelay: -time.Second}}, "step 0: deltaDelay must be >= 0, got -1s"},
		"unknown stop reason": {[]scripted.Step{{Text: "x", StopReason: "done"}}, `step 0: stopReason "done" is not one of end_turn, stop_sequence, tool_use`},
		"bad expected role":   {[]scripted.Step{{Text: "x", Expect: &scripted.Expect{LastRole: "bot"}}}, `step 0: expect.lastRole "bot" is not a role`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			defer func() {
				r := recover()
				err, isErr := r.(error)
				require.True(t, isErr, "New must panic with an error, got %v", r)
				require.ErrorIs(t, err, scripted.ErrInvalidScript)
				require.Contains(t, err.Error(), tc.msg)
			}()
			scripted.New(tc.steps...)
		})
	}

	t.Run("keyed names the agent", func(t *testing.T) {
		t.Parallel()
		defer func() {
			err, _ := recover().(error)
			require.ErrorIs(t, err, scripted.ErrInvalidScript)
			require.EqualError(t, err, `scripted: invalid script: agent "b": step 0: the step is empty: give it text, deltas, toolCalls, output or an error (or a stopReason for a deliberately empty answer)`)
		}()
		scripted.NewKeyed(map[string][]scripted.Step{"a": {{Text: "x"}}, "b": {{}}})
	})
}

func TestScriptIsCopied(t *testing.T) {
	t.Parallel()
	calls := []scripted.Call{{Name: "a"}}
	deltas := []string{"x", "y"}
	m := scripted.New(scripted.Step{Deltas: deltas, ToolCalls: calls})
	calls[0].Name, deltas[0] = "changed", "changed"
	res := generate(t, m, request("a", 0))
	require.Equal(t, "xy", res.Content)
	require.Equal(t, "a", res.ToolCalls[0].Name)

	res.ToolCalls[0].Arguments[0] = '!'
	require.JSONEq(t, `{}`, string(generate(t, m, request("a", 0)).ToolCalls[0].Arguments), "a caller changing a result cannot change the script")
}

func TestGenerateAndRepeat(t *testing.T) {
	t.Parallel()
	const n = 1000
	noop := scripted.Step{ToolCalls: []scripted.Call{{Name: "noop"}}}
	finish := scripted.Step{Output: map[string]bool{"done": true}}
	repeated := scripted.New(scripted.Repeat(n, noop, finish)...)
	generated := scripted.Generate(func(index int, req helix.ModelRequest) (scripted.Step, error) {
		switch {
		case index < n:
			return noop, nil
		case index == n:
			return finish, nil
		}
		return scripted.Step{}, fmt.Errorf("%w: only %d steps", scripted.ErrScriptExhausted, n+1)
	})
	for _, k := range []int{0, 1, n - 1, n} {
		want := generate(t, repeated, request("bench", k))
		require.Equal(t, want, generate(t, generated, request("bench", k)))
		if k < n {
			require.Equal(t, "noop", want.ToolCalls[0].Name)
			require.Equal(t, scripted.CallID(k, 0), want.ToolCalls[0].ID)
		} else {
			require.Equal(t, helix.FinishToolName, want.ToolCalls[0].Name)
		}
	}
	_, err := repeated.GenerateStep(t.Context(), request("bench", n+1), helix.StreamCallbacks{})
	require.ErrorIs(t, err, scripted.ErrScriptExhausted)

	_, err = generated.GenerateStep(t.Context(), request("bench", n+1), helix.StreamCallbacks{})
	require.ErrorIs(t, err, scripted.ErrScriptExhausted, "a StepFunc's error is returned, wrapped")
	require.EqualError(t, err, `scripted model: agent "bench" step 1001: scripted: script exhausted: only 1001 steps`)

	invalid := scripted.Generate(func(int, helix.ModelRequest) (scripted.Step, error) { return scripted.Step{}, nil })
	_, err = invalid.GenerateStep(t.Context(), request("bench", 0), helix.StreamCallbacks{})
	requireScriptError(t, err, scripted.ErrInvalidScript,
		`scripted model: agent "bench" step 0: invalid step: the step is empty: give it text, deltas, toolCalls, output or an error (or a stopReason for a deliberately empty answer)`)
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	m := scripted.NewKeyed(map[string][]scripted.Step{
		"a": scripted.Repeat(10, scripted.Step{Text: "working on it", StreamToolArgs: true, ToolCalls: []scripted.Call{{Name: "noop", Args: map[string]int{"n": 1}}}}),
		"b": {{Text: "b's answer"}},
	})
	want := generate(t, m, request("a", 5))
	var wg sync.WaitGroup
	results := make([]helix.StepResult, 64)
	for i := range results {
		wg.Go(func() {
			var rec recorder
			agent, k := "a", 5
			if i%2 == 1 {
				agent, k = "b", 0
			}
			res, err := m.GenerateStep(context.Background(), request(agent, k), rec.callbacks())
			if err == nil && rec.text.String() != res.Content {
				err = errors.New("streamed text differs from the content")
			}
			if err != nil {
				res.Content = err.Error()
			}
			results[i] = res
		})
	}
	wg.Wait()
	for i, res := range results {
		if i%2 == 0 {
			require.Equal(t, want, res)
		} else {
			require.Equal(t, "b's answer", res.Content)
		}
	}
}

func TestResultRoundTripsAsJSON(t *testing.T) {
	t.Parallel()
	m := scripted.New(scripted.Step{Thinking: "hmm", Text: "Calling.", ToolCalls: []scripted.Call{{Name: "a", Args: map[string]any{"n": 1.5}}},
		Output: map[string]any{"answer": "x"}})
	res := generate(t, m, request("a", 0))
	b, err := json.Marshal(res)
	require.NoError(t, err)
	var back helix.StepResult
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, res, back, "the engine checkpoints the result as JSON")
}
