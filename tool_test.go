package helix_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
)

type weatherIn struct {
	City  string   `json:"city" jsonschema:"description=City name,minLength=1"`
	Days  int      `json:"days" jsonschema:"minimum=1,maximum=7"`
	Units string   `json:"units,omitempty" jsonschema:"enum=metric,enum=imperial"`
	Tags  []string `json:"tags,omitempty"`
	Where *struct {
		Lat float64 `json:"lat"`
		Lon float64 `json:"lon"`
	} `json:"where,omitempty"`
}

type weatherOut struct {
	Forecast string `json:"forecast"`
}

// fakeContext is a minimal in-memory ToolContext for tool unit tests.
type fakeContext struct {
	mu     sync.Mutex
	state  json.RawMessage
	events []string
}

func (f *fakeContext) SessionID() string      { return "s" }
func (f *fakeContext) RunID() string          { return "r" }
func (f *fakeContext) AgentType() string      { return "a" }
func (f *fakeContext) ToolCallID() string     { return "c" }
func (f *fakeContext) ToolName() string       { return "t" }
func (f *fakeContext) Step() int              { return 1 }
func (f *fakeContext) IdempotencyKey() string { return "wf-1:3" }
func (f *fakeContext) GetState(into any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state == nil {
		return json.Unmarshal([]byte(`{}`), into)
	}
	return json.Unmarshal(f.state, into)
}
func (f *fakeContext) SetState(s any) error {
	b, err := json.Marshal(s)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state = b
	return err
}
func (f *fakeContext) Emit(name string, _ any) error {
	f.events = append(f.events, name)
	return nil
}

func weatherTool(t *testing.T, opts ...helix.ToolOption) *helix.Tool {
	t.Helper()
	tool, err := helix.NewTool("weather", "Forecast for a city",
		func(ctx context.Context, in weatherIn, tc helix.ToolContext) (weatherOut, error) {
			if in.City == "Atlantis" {
				return weatherOut{}, errors.New("no such city")
			}
			if in.City == "Panic" {
				panic("kaboom")
			}
			return weatherOut{Forecast: in.City + " sunny"}, nil
		}, opts...)
	require.NoError(t, err)
	return tool
}

func TestSchemaDerivation(t *testing.T) {
	t.Parallel()
	tool := weatherTool(t)
	var s map[string]any
	require.NoError(t, json.Unmarshal(tool.InputSchema(), &s))
	require.Equal(t, "object", s["type"])
	require.Equal(t, false, s["additionalProperties"])
	require.ElementsMatch(t, []any{"city", "days"}, s["required"], "fields without omitempty are required")
	props := s["properties"].(map[string]any)
	require.Equal(t, "City name", props["city"].(map[string]any)["description"])
	require.Equal(t, []any{"metric", "imperial"}, props["units"].(map[string]any)["enum"])
	require.Equal(t, "object", props["where"].(map[string]any)["type"], "nested structs are inline")
	require.NotContains(t, string(tool.InputSchema()), "$ref")
	require.NotContains(t, string(tool.InputSchema()), "$schema")
	require.JSONEq(t, `{"type":"object","properties":{"forecast":{"type":"string"}},"required":["forecast"],"additionalProperties":false}`,
		string(tool.OutputSchema()))
	require.Equal(t, helix.ToolSpec{Name: "weather", Description: "Forecast for a city", InputSchema: tool.InputSchema()}, tool.Spec())

	raw, err := helix.SchemaFor[json.RawMessage]()
	require.NoError(t, err)
	require.JSONEq(t, `{"type":"object"}`, string(raw))
	anyTool := helix.MustNewTool("echo", "", func(ctx context.Context, in map[string]any, tc helix.ToolContext) (any, error) { return in, nil })
	require.Nil(t, anyTool.OutputSchema(), "an interface output is unconstrained")
}

func TestValidationReportsEveryViolation(t *testing.T) {
	t.Parallel()
	tool := weatherTool(t)
	err := tool.ValidateArguments(json.RawMessage(`{"days": 9, "units": "kelvin", "extra": true, "where": {"lat": "north"}}`))
	var ve *helix.ValidationError
	require.ErrorAs(t, err, &ve)
	require.ErrorIs(t, err, helix.ErrInvalidInput)
	pointers := map[string]bool{}
	for _, v := range ve.Violations {
		pointers[v.Pointer] = true
	}
	for _, p := range []string{"", "/days", "/units", "/where", "/where/lat"} {
		require.True(t, pointers[p], "a violation at %q in %v", p, ve.Violations)
	}
	require.GreaterOrEqual(t, len(ve.Violations), 5)
	msg := err.Error()
	require.Contains(t, msg, `arguments of tool "weather"`)
	require.Contains(t, msg, "city")
	require.Contains(t, msg, "extra")

	require.NoError(t, tool.ValidateArguments(json.RawMessage(`{"city":"Oslo","days":3}`)))
	err = tool.ValidateArguments(json.RawMessage(`{"city":`))
	require.ErrorAs(t, err, &ve)
	require.Contains(t, ve.Violations[0].Message, "not valid JSON")
	require.Error(t, tool.ValidateOutput(json.RawMessage(`{"forecast": 3}`)))
	require.NoError(t, tool.ValidateOutput(json.RawMessage(`{"forecast": "rain"}`)))
}

func TestExecute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tool := weatherTool(t)
	tc := &fakeContext{}
	out, err := tool.Execute(ctx, json.RawMessage(`{"city":"Oslo","days":2}`), tc)
	require.NoError(t, err)
	require.JSONEq(t, `{"forecast":"Oslo sunny"}`, string(out))

	_, err = tool.Execute(ctx, json.RawMessage(`{"city":"Atlantis","days":2}`), tc)
	require.EqualError(t, err, "no such city", "tool errors pass through unchanged")

	_, err = tool.Execute(ctx, json.RawMessage(`{"city":"Panic","days":2}`), tc)
	var pe *helix.ToolPanicError
	require.ErrorAs(t, err, &pe, "a panic becomes an error, the process lives on")
	require.Equal(t, "kaboom", pe.Value)
	require.Contains(t, pe.Stack, "tool_test.go")

	_, err = tool.Execute(ctx, json.RawMessage(`{"days":2}`), tc)
	require.ErrorIs(t, err, helix.ErrInvalidInput, "arguments are validated before the function runs")

	seen := make(chan helix.ToolContext, 1)
	spy := helix.MustNewTool("spy", "", func(ctx context.Context, in struct{}, tc helix.ToolContext) (string, error) {
		got, _ := helix.ToolContextFrom(ctx)
		seen <- got
		return "ok", nil
	})
	_, err = spy.Execute(ctx, nil, tc)
	require.NoError(t, err)
	require.Same(t, tc, <-seen)

	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := tool.Execute(ctx, json.RawMessage(`{"city":"Oslo","days":1}`), tc)
			require.NoError(t, err)
		}()
	}
	wg.Wait()
}

func TestDefinitionRejections(t *testing.T) {
	t.Parallel()
	noop := func(ctx context.Context, in struct{}, tc helix.ToolContext) (string, error) { return "", nil }
	cases := map[string]struct {
		build func() error
		field string
	}{
		"client+finishWith": {func() error {
			_, err := helix.NewClientTool[struct{}, string]("c", "", helix.FinishWith())
			return err
		}, "FinishWith"},
		"client+approval": {func() error {
			_, err := helix.NewClientTool[struct{}, string]("c", "", helix.RequireApproval())
			return err
		}, "RequireApproval"},
		"finishWith+approval": {func() error {
			_, err := helix.NewTool("f", "", noop, helix.FinishWith(), helix.RequireApproval())
			return err
		}, "RequireApproval"},
		"timeout on a server tool": {func() error {
			_, err := helix.NewTool("s", "", noop, helix.ClientTimeout(time.Second))
			return err
		}, "ClientTimeout"},
		"non-positive timeout": {func() error {
			_, err := helix.NewClientTool[struct{}, string]("c", "", helix.ClientTimeout(0))
			return err
		}, "ClientTimeout"},
		"nil function": {func() error {
			_, err := helix.NewTool[struct{}, string]("n", "", nil)
			return err
		}, "fn"},
		"scalar input": {func() error {
			_, err := helix.NewTool("s", "", func(ctx context.Context, in string, tc helix.ToolContext) (string, error) { return in, nil })
			return err
		}, "input schema"},
		"slice input": {func() error {
			_, err := helix.NewTool("s", "", func(ctx context.Context, in []int, tc helix.ToolContext) (int, error) { return 0, nil })
			return err
		}, "input schema"},
		"bad raw schema": {func() error {
			_, err := helix.NewRawTool("r", "", json.RawMessage(`{"type": 12}`), nil,
				func(ctx context.Context, a json.RawMessage, tc helix.ToolContext) (json.RawMessage, error) {
					return a, nil
				})
			return err
		}, "input schema"},
		"reserved name":   {func() error { _, err := helix.NewTool(helix.FinishToolName, "", noop); return err }, "name"},
		"load_skill":      {func() error { _, err := helix.NewTool("load_skill", "", noop); return err }, "name"},
		"subagent prefix": {func() error { _, err := helix.NewTool("subagent__x", "", noop); return err }, "name"},
		"companion prefix": {func() error {
			_, err := helix.NewTool("companion__spawnAgent", "", noop)
			return err
		}, "name"},
		"bad characters": {func() error { _, err := helix.NewTool("has space", "", noop); return err }, "name"},
		"too long": {func() error {
			_, err := helix.NewTool("x234567890123456789012345678901234567890123456789012345678901234X", "", noop)
			return err
		}, "name"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := c.build()
			var de *helix.DefinitionError
			require.ErrorAs(t, err, &de)
			require.ErrorIs(t, err, helix.ErrInvalidDefinition)
			require.Equal(t, "tool", de.Kind)
			require.Equal(t, c.field, de.Field)
		})
	}
	require.Panics(t, func() { helix.MustNewTool[struct{}, string]("x", "", nil) })
	require.NoError(t, helix.ValidateToolName("get_weather-2"))
	require.True(t, helix.IsSubAgentTool("subagent__researcher"))
	require.True(t, helix.IsCompanionTool("companion__sendMessage"))
	require.True(t, helix.IsFinishTool("__finish__"))
	require.ElementsMatch(t, []string{"__finish__", "load_skill", "read_skill_file"}, helix.ReservedToolNames())
}

func TestClientTool(t *testing.T) {
	t.Parallel()
	tool, err := helix.NewClientTool[struct {
		Question string `json:"question"`
	}, struct {
		Answer string `json:"answer"`
	}]("ask_user", "Ask the user", helix.ClientTimeout(time.Minute))
	require.NoError(t, err)
	require.True(t, tool.ExecutesOnClient())
	require.Equal(t, time.Minute, tool.ClientTimeout())
	_, err = tool.Execute(context.Background(), json.RawMessage(`{"question":"?"}`), &fakeContext{})
	require.ErrorContains(t, err, "executes on the client")
	require.Error(t, tool.ValidateOutput(json.RawMessage(`{"answer": 1}`)), "submitted results are validated")
	require.NoError(t, tool.ValidateOutput(json.RawMessage(`{"answer": "yes"}`)))

	raw, err := helix.NewRawClientTool("pick", "", json.RawMessage(`{"type":"object"}`), nil)
	require.NoError(t, err)
	require.NoError(t, raw.ValidateOutput(json.RawMessage(`[1,2]`)))
	require.Error(t, raw.ValidateOutput(json.RawMessage(`[1,`)))
}

func TestApprovalGate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tc := &fakeContext{}
	args := json.RawMessage(`{"city":"Oslo","days":2}`)

	plain := weatherTool(t)
	req, err := plain.RequiresApproval(ctx, args, tc)
	require.NoError(t, err)
	require.False(t, req)
	require.False(t, plain.NeedsApprovalCheck())

	always := weatherTool(t, helix.RequireApproval())
	req, err = always.RequiresApproval(ctx, args, tc)
	require.NoError(t, err)
	require.True(t, req)
	require.True(t, always.NeedsApprovalCheck())
	require.False(t, always.HasApprovalPredicate())

	pred := func(ctx context.Context, in weatherIn, tc helix.ToolContext) (bool, error) {
		switch in.City {
		case "Err":
			return false, errors.New("lookup failed")
		case "Panic":
			panic("predicate blew up")
		}
		return in.Days > 3, nil
	}
	gated := weatherTool(t, helix.RequireApprovalWhen(pred))
	require.True(t, gated.HasApprovalPredicate())
	for _, c := range []struct {
		args    string
		want    bool
		wantErr bool
	}{
		{`{"city":"Oslo","days":2}`, false, false},
		{`{"city":"Oslo","days":5}`, true, false},
		{`{"city":"Err","days":1}`, true, true},   // error: fail closed
		{`{"city":"Panic","days":1}`, true, true}, // panic: fail closed
		{`{"days":1}`, true, true},                // invalid input: fail closed
	} {
		req, err := gated.RequiresApproval(ctx, json.RawMessage(c.args), tc)
		require.Equal(t, c.want, req, c.args)
		require.Equal(t, c.wantErr, err != nil, c.args)
	}
	_, err = gated.RequiresApproval(ctx, json.RawMessage(`{"city":"Panic","days":1}`), tc)
	var pe *helix.ToolPanicError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "approval predicate", pe.Where)
}

func TestUpdateState(t *testing.T) {
	t.Parallel()
	type counter struct {
		N     int      `json:"n"`
		Notes []string `json:"notes"`
	}
	tc := &fakeContext{state: json.RawMessage(`{"n":1,"notes":["a"]}`)}
	require.NoError(t, helix.UpdateState(tc, func(s *counter) error {
		s.N++
		s.Notes = append(s.Notes, "b")
		return nil
	}))
	got, err := helix.GetState[counter](tc)
	require.NoError(t, err)
	require.Equal(t, counter{N: 2, Notes: []string{"a", "b"}}, got)

	before := string(tc.state)
	require.Error(t, helix.UpdateState(tc, func(s *counter) error {
		s.N = 100
		return errors.New("changed my mind")
	}))
	require.Equal(t, before, string(tc.state), "nothing written when fn fails")
}

func TestFinishTool(t *testing.T) {
	t.Parallel()
	schema := json.RawMessage(`{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"]}`)
	f, err := helix.NewFinishTool(schema)
	require.NoError(t, err)
	require.Equal(t, helix.FinishToolName, f.Name())
	require.JSONEq(t, string(schema), string(f.InputSchema()))
	require.NotEmpty(t, f.Description())
	require.Error(t, f.ValidateArguments(json.RawMessage(`{}`)))
	_, err = f.Execute(context.Background(), json.RawMessage(`{"answer":"x"}`), nil)
	require.ErrorContains(t, err, "handled by the runtime")
	_, err = helix.NewFinishTool(json.RawMessage(`{"type":"string"}`))
	require.ErrorIs(t, err, helix.ErrInvalidDefinition, "the output must be an object")
	_, err = helix.NewFinishTool(nil)
	require.Error(t, err)
}

func FuzzValidateArguments(f *testing.F) {
	tool := helix.MustNewTool("weather", "", func(ctx context.Context, in weatherIn, tc helix.ToolContext) (string, error) { return "", nil })
	for _, s := range []string{`{"city":"x","days":1}`, `{}`, `[]`, `null`, `{"days":"9"}`, `{"where":{"lat":1}}`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := tool.ValidateArguments(b)
		if err == nil && !json.Valid(b) {
			t.Fatalf("invalid JSON %q accepted", b)
		}
	})
}
