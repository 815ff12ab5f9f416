package llmtest_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/llm/llmtest"
)

// capture is a testing.TB that records Errorf calls instead of failing.
type capture struct {
	testing.TB
	errs []string
}

func (c *capture) Helper() {}

func (c *capture) Errorf(format string, args ...any) {
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}

// CheckStream must catch each way a stream can disagree with its result.
func TestCheckStreamCatchesInconsistencies(t *testing.T) {
	t.Parallel()
	call := helix.ToolCall{ID: "c1", Name: "search", Arguments: json.RawMessage(`{"q":"x"}`)}
	ok := func(cb helix.StreamCallbacks) {
		cb.OnThinking("hm", false)
		cb.OnTextDelta("Hi")
		cb.OnToolArgStart("c1", "search")
		cb.OnToolArgDelta("c1", `{"q":`)
		cb.OnToolArgDelta("c1", `"x"}`)
		cb.OnToolArgEnd("c1")
	}
	good := helix.StepResult{Content: "Hi", Thinking: &helix.Thinking{Content: "hm"}, ToolCalls: []helix.ToolCall{call}}
	for name, tc := range map[string]struct {
		play func(helix.StreamCallbacks)
		res  helix.StepResult
		want string
	}{
		"consistent": {ok, good, ""},
		"text differs": {ok, helix.StepResult{Content: "Hello", Thinking: good.Thinking, ToolCalls: good.ToolCalls},
			"text deltas concatenate"},
		"thinking complete": {func(cb helix.StreamCallbacks) { cb.OnThinking("hm", true) }, helix.StepResult{Thinking: &helix.Thinking{Content: "hm"}},
			"complete=true"},
		"delta before start": {func(cb helix.StreamCallbacks) {
			cb.OnToolArgDelta("c1", `{"q":"x"}`)
			cb.OnToolArgStart("c1", "search")
			cb.OnToolArgEnd("c1")
		}, helix.StepResult{ToolCalls: []helix.ToolCall{call}}, "delta before start true"},
		"no end": {func(cb helix.StreamCallbacks) {
			cb.OnToolArgStart("c1", "search")
			cb.OnToolArgDelta("c1", `{"q":"x"}`)
		}, helix.StepResult{ToolCalls: []helix.ToolCall{call}}, "0 ends"},
		"wrong name": {func(cb helix.StreamCallbacks) {
			cb.OnToolArgStart("c1", "fetch")
			cb.OnToolArgDelta("c1", `{"q":"x"}`)
			cb.OnToolArgEnd("c1")
		}, helix.StepResult{ToolCalls: []helix.ToolCall{call}}, `names "fetch"`},
		"arguments differ": {func(cb helix.StreamCallbacks) {
			cb.OnToolArgStart("c1", "search")
			cb.OnToolArgDelta("c1", `{"q":"y"}`)
			cb.OnToolArgEnd("c1")
		}, helix.StepResult{ToolCalls: []helix.ToolCall{call}}, "streamed arguments"},
		"unknown call": {func(cb helix.StreamCallbacks) { cb.OnToolArgStart("c9", "search") }, helix.StepResult{}, "not in the result"},
		"invalid JSON": {func(helix.StreamCallbacks) {}, helix.StepResult{ToolCalls: []helix.ToolCall{{ID: "c1", Name: "x", Arguments: json.RawMessage(`{`)}}},
			"invalid JSON arguments"},
	} {
		rec := llmtest.NewRecorder()
		tc.play(rec.Callbacks())
		c := &capture{TB: t}
		llmtest.CheckStream(c, rec, tc.res)
		if tc.want == "" {
			require.Empty(t, c.errs, name)
			continue
		}
		require.NotEmpty(t, c.errs, name)
		require.Contains(t, strings.Join(c.errs, "\n"), tc.want, name)
	}
}

func TestJSONEqual(t *testing.T) {
	t.Parallel()
	require.True(t, llmtest.JSONEqual(`{"a":1,"b":[1,2]}`, `{ "b": [1, 2], "a": 1 }`))
	require.False(t, llmtest.JSONEqual(`{"a":1}`, `{"a":2}`))
	require.False(t, llmtest.JSONEqual(`{`, `{`))
}

// The server answers the n-th request with the n-th fixture, repeats the
// last, streams event by event and records what it received.
func TestServerReplaysAndRecords(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t,
		llmtest.Fixture{Status: 429, Body: `{"error":"slow"}`, Header: map[string]string{"Retry-After": "3"}},
		llmtest.Fixture{Body: "data: 1\n\ndata: 2\n\n"},
	)
	for i, want := range []struct {
		status      int
		contentType string
		body        string
	}{
		{429, "application/json", `{"error":"slow"}`},
		{200, "text/event-stream; charset=utf-8", "data: 1\n\ndata: 2\n\n"},
		{200, "text/event-stream; charset=utf-8", "data: 1\n\ndata: 2\n\n"},
	} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/x?k=v", strings.NewReader(fmt.Sprint(i)))
		require.NoError(t, err)
		req.Header.Set("X-Test", "yes")
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, want.status, resp.StatusCode)
		require.Equal(t, want.contentType, resp.Header.Get("Content-Type"))
		require.Equal(t, want.body, string(b))
	}
	reqs := srv.Requests()
	require.Len(t, reqs, 3)
	for i, r := range reqs {
		require.Equal(t, "/v1/x", r.Path)
		require.Equal(t, "k=v", r.RawQuery)
		require.Equal(t, "yes", r.Header.Get("X-Test"))
		require.Equal(t, fmt.Sprint(i), string(r.Body))
	}
}

// An aborted fixture cuts the connection: the client sees an error, not a
// clean end.
func TestServerAbort(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t, llmtest.Fixture{Body: "data: 1\n\n", Abort: true})
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, nil)
	require.NoError(t, err)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	_, err = io.ReadAll(resp.Body)
	require.Error(t, err)
}

// Every scenario's expectations are in the package documentation.
func TestScenariosAreDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	for _, s := range llmtest.Scenarios() {
		require.Contains(t, string(doc), "//   - "+string(s)+":", "scenario %s is not documented", s)
	}
}

// TestdataFixtures covers every scenario but timeout and stall, which
// have a default, so an adapter that passes it fails no scenario for want
// of fixtures.
func TestTestdataFixturesCoverEveryScenario(t *testing.T) {
	t.Parallel()
	fixtures := llmtest.TestdataFixtures(nil)
	for _, s := range llmtest.Scenarios() {
		if s == llmtest.ScenarioTimeout || s == llmtest.ScenarioStall {
			continue
		}
		require.NotEmpty(t, fixtures[s], "scenario %s", s)
	}
	require.Equal(t, 503, fixtures[llmtest.ScenarioOverloaded][0].Status)
	require.Equal(t, "1", fixtures[llmtest.ScenarioRateLimited][0].Header["Retry-After"])
	over := llmtest.TestdataFixtures(&llmtest.TestdataOpts{OverloadedStatus: 529})
	require.Equal(t, 529, over[llmtest.ScenarioOverloaded][0].Status)
}
