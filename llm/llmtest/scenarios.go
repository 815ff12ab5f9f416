package llmtest

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	helix "github.com/helix-agents/helix-dbos"
)

// scenario is one entry of the suite: the request it sends, how it calls
// the model and what it expects.
type scenario struct {
	name Scenario
	// request builds the request sent.
	request func() helix.ModelRequest
	// hold holds back the last event of each streamed body until the
	// adapter forwarded something (success scenarios).
	hold bool
	// defaultFixtures replace missing adapter fixtures.
	defaultFixtures []Fixture
	// adjust changes a copy of the adapter's fixtures (sets Abort, Hang).
	adjust func([]Fixture)
	// idleTimeout is the Target's IdleTimeout (0: the adapter's default).
	idleTimeout time.Duration
	// call calls the model; nil calls GenerateStep with t.Context().
	call  func(ctx context.Context, m helix.Model, o *outcome) (helix.StepResult, error)
	check func(t *testing.T, o *outcome)
}

func ptr[T any](v T) *T { return &v }

func baseRequest(msgs ...helix.Message) helix.ModelRequest {
	return helix.ModelRequest{
		Messages:  append([]helix.Message{helix.SystemMessage(SystemPrompt)}, msgs...),
		Config:    helix.LLMConfig{Model: RequestModel, Temperature: ptr(0.2), MaxOutputTokens: 256},
		AgentID:   "conformance-session",
		AgentType: "conformance",
		Step:      1,
	}
}

func textRequest() helix.ModelRequest {
	return baseRequest(helix.UserMessage("What is the capital of France?"))
}

func toolRequest(question string) func() helix.ModelRequest {
	return func() helix.ModelRequest {
		r := baseRequest(helix.UserMessage(question))
		r.Tools = Tools
		return r
	}
}

// Conversation history of the conversation scenario.
const (
	convQuestion  = "What's the weather in Paris and the time in Tokyo?"
	convPreface   = "I'll look both up."
	convWeatherID = "call_weather_1"
	convTimeID    = "call_time_2"
	convWeather   = `{"temperature":18,"condition":"sunny"}`
	convTimeError = `{"error":"time service unavailable"}`
	convNudge     = "Please answer in one sentence."
)

func conversationRequest() helix.ModelRequest {
	r := baseRequest(
		helix.UserMessage(convQuestion),
		helix.AssistantMessage(convPreface,
			helix.ToolCall{ID: convWeatherID, Name: WeatherTool, Arguments: json.RawMessage(ParallelWeatherArgs)},
			helix.ToolCall{ID: convTimeID, Name: TimeTool, Arguments: json.RawMessage(ParallelTimeArgs)}),
		helix.ToolResultMessage(convWeatherID, WeatherTool, convWeather),
		helix.ToolResultMessage(convTimeID, TimeTool, convTimeError),
		helix.UserMessage(convNudge),
	)
	r.Tools = Tools
	r.Step = 2
	return r
}

// History of the thinking scenario: a previous turn whose reasoning (with a
// provider signature) must round-trip when the adapter sends thinking.
const (
	thinkPrevQuestion  = "What is 6 × 7?"
	thinkPrevAnswer    = "6 × 7 = 42."
	thinkPrevReasoning = "6 × 7 is 42."
	thinkPrevSignature = "EqQBCkgIBxABGAIqQKq3vPrevSignatureForConformance"
	thinkQuestion      = "What is 17 × 23?"
)

func thinkingRequest() helix.ModelRequest {
	prev := helix.AssistantMessage(thinkPrevAnswer)
	prev.Thinking = &helix.Thinking{Content: thinkPrevReasoning, Signature: thinkPrevSignature}
	return baseRequest(helix.UserMessage(thinkPrevQuestion), prev, helix.UserMessage(thinkQuestion))
}

var scenarios = []scenario{
	{
		name: ScenarioText, request: textRequest, hold: true,
		check: func(t *testing.T, o *outcome) {
			requireSuccess(t, o)
			requireRequests(t, o, 1)
			requireText(t, o, TextAnswer)
			if o.res.StopReason != helix.StopEndTurn {
				t.Errorf("stop reason %q, want %q", o.res.StopReason, helix.StopEndTurn)
			}
			if o.res.Usage != TextUsage {
				t.Errorf("usage %+v, want %+v", o.res.Usage, TextUsage)
			}
			if o.res.Thinking != nil {
				t.Errorf("unexpected thinking %+v", o.res.Thinking)
			}
			if n := o.rec.Count(EventText); n < 2 {
				t.Errorf("%d text deltas, want at least 2 (the fixture streams the answer in pieces)", n)
			}
			d := o.decoded[0]
			want := []Message{{Role: helix.RoleUser, Content: "What is the capital of France?"}}
			if diff := diffMessages(want, d.Messages); diff != "" {
				t.Errorf("request messages: %s", diff)
			}
			if d.Temperature == nil || *d.Temperature != 0.2 {
				t.Errorf("request temperature %v, want 0.2 (LLMConfig.Temperature)", d.Temperature)
			}
			if d.MaxTokens != 256 {
				t.Errorf("request max tokens %d, want 256 (LLMConfig.MaxOutputTokens)", d.MaxTokens)
			}
			if len(d.Tools) != 0 {
				t.Errorf("request has %d tools, want none", len(d.Tools))
			}
		},
	},
	{
		name: ScenarioToolCall, request: toolRequest("What's the weather in Paris?"), hold: true,
		check: func(t *testing.T, o *outcome) {
			requireSuccess(t, o)
			requireRequests(t, o, 1)
			requireTools(t, o)
			if o.res.Content != "" && o.res.Content != ToolPreface {
				t.Errorf("content %q, want empty or %q", o.res.Content, ToolPreface)
			}
			requireCalls(t, o, []helix.ToolCall{{Name: WeatherTool, Arguments: json.RawMessage(WeatherArgs)}})
			if n := o.rec.Count(EventToolArgDelta); n < 2 {
				t.Errorf("%d argument deltas, want at least 2 (the fixture splits the arguments mid-JSON)", n)
			}
		},
	},
	{
		name: ScenarioParallelToolCalls, request: toolRequest(convQuestion), hold: true,
		check: func(t *testing.T, o *outcome) {
			requireSuccess(t, o)
			requireRequests(t, o, 1)
			requireCalls(t, o, []helix.ToolCall{
				{Name: WeatherTool, Arguments: json.RawMessage(ParallelWeatherArgs)},
				{Name: TimeTool, Arguments: json.RawMessage(ParallelTimeArgs)},
			})
			if n := o.rec.Count(EventToolArgStart); n != 2 {
				t.Errorf("%d tool_arg_start events, want 2", n)
			}
		},
	},
	{
		name: ScenarioConversation, request: conversationRequest, hold: true,
		check: func(t *testing.T, o *outcome) {
			requireSuccess(t, o)
			requireRequests(t, o, 1)
			requireText(t, o, ConversationAnswer)
			requireTools(t, o)
			want := []Message{
				{Role: helix.RoleUser, Content: convQuestion},
				{Role: helix.RoleAssistant, Content: convPreface, ToolCalls: []helix.ToolCall{
					{ID: convWeatherID, Name: WeatherTool, Arguments: json.RawMessage(ParallelWeatherArgs)},
					{ID: convTimeID, Name: TimeTool, Arguments: json.RawMessage(ParallelTimeArgs)},
				}},
				{Role: helix.RoleTool, ToolCallID: convWeatherID, Content: convWeather},
				{Role: helix.RoleTool, ToolCallID: convTimeID, Content: convTimeError, IsError: o.a.FlagsToolErrors},
				{Role: helix.RoleUser, Content: convNudge},
			}
			if diff := diffMessages(want, o.decoded[0].Messages); diff != "" {
				t.Errorf("request messages: %s", diff)
			}
		},
	},
	{
		name: ScenarioThinking, request: thinkingRequest, hold: true,
		check: func(t *testing.T, o *outcome) {
			requireSuccess(t, o)
			requireRequests(t, o, 1)
			requireText(t, o, ThinkingAnswer)
			if o.res.Thinking == nil || o.res.Thinking.Content != ThinkingContent {
				t.Errorf("thinking %+v, want content %q", o.res.Thinking, ThinkingContent)
			} else if o.a.ThinkingSignature != "" && o.res.Thinking.Signature != o.a.ThinkingSignature {
				t.Errorf("thinking signature %q, want %q", o.res.Thinking.Signature, o.a.ThinkingSignature)
			}
			if n := o.rec.Count(EventThinking); n < 2 {
				t.Errorf("%d thinking pieces, want at least 2 (the fixture streams the reasoning in pieces)", n)
			}
			seenText := false
			for _, e := range o.rec.Events() {
				seenText = seenText || e.Kind == EventText
				if e.Kind == EventThinking && seenText {
					t.Errorf("a thinking piece came after text: forward them in stream order")
					break
				}
			}
			prev := Message{Role: helix.RoleAssistant, Content: thinkPrevAnswer}
			if o.a.SendsThinking {
				prev.Thinking = &helix.Thinking{Content: thinkPrevReasoning, Signature: thinkPrevSignature}
			}
			want := []Message{{Role: helix.RoleUser, Content: thinkPrevQuestion}, prev, {Role: helix.RoleUser, Content: thinkQuestion}}
			if diff := diffMessages(want, o.decoded[0].Messages); diff != "" {
				t.Errorf("request messages: %s", diff)
			}
		},
	},
	{
		name: ScenarioCachedUsage, request: textRequest, hold: true,
		check: func(t *testing.T, o *outcome) {
			requireSuccess(t, o)
			requireRequests(t, o, 1)
			want := CachedUsage
			if !o.a.ReportsCacheWrites {
				want.CacheWriteTokens = 0
			}
			if o.res.Usage != want {
				t.Errorf("usage %+v, want %+v", o.res.Usage, want)
			}
			if o.res.Content == "" {
				t.Errorf("no content")
			}
		},
	},
	{
		name: ScenarioRateLimitRetry, request: textRequest, hold: true,
		check: func(t *testing.T, o *outcome) {
			requireSuccess(t, o)
			requireRequests(t, o, 2)
			requireText(t, o, TextAnswer)
			if len(o.requests) == 2 {
				if gap := o.requests[1].At.Sub(o.requests[0].At); gap < time.Second {
					t.Errorf("retried after %s, want at least the fixture's Retry-After of 1s (honoured beyond MaxBackoff %s, up to MaxRetryAfter %s)",
						gap, o.target.MaxBackoff, o.target.MaxRetryAfter)
				}
				if string(o.requests[0].Body) != string(o.requests[1].Body) {
					t.Errorf("the retry sent a different body:\n%s\n%s", o.requests[0].Body, o.requests[1].Body)
				}
			}
		},
	},
	{
		name: ScenarioRateLimited, request: textRequest,
		check: func(t *testing.T, o *outcome) {
			me := requireModelError(t, o, []string{helix.CodeProviderRateLimited}, true)
			requireStatus(t, me, http.StatusTooManyRequests)
			requireRequests(t, o, o.target.MaxRetries+1)
			requireNoEvents(t, o)
		},
	},
	{
		name: ScenarioRateLimitTooLong, request: textRequest,
		adjust: func(f []Fixture) {
			for i := range f {
				h := make(map[string]string, len(f[i].Header)+1)
				for k, v := range f[i].Header {
					// The provider's wait is the Retry-After set below.
					if !strings.EqualFold(k, "Retry-After") && !strings.EqualFold(k, "Retry-After-Ms") {
						h[k] = v
					}
				}
				h["Retry-After"] = "3600"
				f[i].Header = h
			}
		},
		check: func(t *testing.T, o *outcome) {
			me := requireModelError(t, o, []string{helix.CodeProviderRateLimited}, true)
			requireStatus(t, me, http.StatusTooManyRequests)
			requireRequests(t, o, 1)
			requireNoEvents(t, o)
			for _, want := range []string{"1h0m0s", "MaxRetryAfter"} {
				if !strings.Contains(me.Message, want) {
					t.Errorf("message %q does not mention %q (how long the provider asked to wait, and the setting)", me.Message, want)
				}
			}
		},
	},
	{
		name: ScenarioOverloaded, request: textRequest,
		check: func(t *testing.T, o *outcome) {
			me := requireModelError(t, o, []string{helix.CodeProviderOverloaded}, true)
			if me.StatusCode < 500 {
				t.Errorf("status %d, want the provider's 5xx", me.StatusCode)
			}
			requireRequests(t, o, o.target.MaxRetries+1)
			requireNoEvents(t, o)
		},
	},
	{
		name: ScenarioErrorEventRetry, request: textRequest, hold: true,
		check: func(t *testing.T, o *outcome) {
			requireSuccess(t, o)
			requireRequests(t, o, 2)
			requireText(t, o, TextAnswer)
		},
	},
	{
		name: ScenarioErrorEvent, request: textRequest,
		check: func(t *testing.T, o *outcome) {
			requireModelError(t, o, []string{helix.CodeProviderOverloaded, helix.CodeProviderUnavailable}, true)
			requireRequests(t, o, 1)
			requireForwarded(t, o)
		},
	},
	{
		name: ScenarioAuth, request: textRequest,
		check: func(t *testing.T, o *outcome) {
			me := requireModelError(t, o, []string{helix.CodeProviderAuth}, false)
			requireStatus(t, me, http.StatusUnauthorized)
			requireRequests(t, o, 1)
			requireNoEvents(t, o)
			if !strings.Contains(strings.ToLower(me.Message), "api key") {
				t.Errorf("message %q does not tell the user to check the API key", me.Message)
			}
		},
	},
	{
		name: ScenarioInvalidRequest, request: textRequest,
		check: func(t *testing.T, o *outcome) {
			me := requireModelError(t, o, []string{helix.CodeProviderInvalidRequest}, false)
			requireStatus(t, me, http.StatusBadRequest)
			requireRequests(t, o, 1)
			requireNoEvents(t, o)
			if !strings.Contains(me.Message, InvalidRequestMention) {
				t.Errorf("message %q does not carry the provider's explanation (mentioning %q)", me.Message, InvalidRequestMention)
			}
		},
	},
	{
		name: ScenarioStreamCut, request: textRequest,
		check: func(t *testing.T, o *outcome) {
			requireModelError(t, o, []string{helix.CodeProviderUnavailable}, true)
			requireRequests(t, o, 1)
			requireForwarded(t, o)
		},
	},
	{
		name: ScenarioConnectionDrop, request: textRequest,
		adjust: func(f []Fixture) { f[len(f)-1].Abort = true },
		check: func(t *testing.T, o *outcome) {
			requireModelError(t, o, []string{helix.CodeProviderUnavailable}, true)
			requireRequests(t, o, 1)
			requireForwarded(t, o)
		},
	},
	{
		name: ScenarioCancel, request: textRequest,
		adjust: func(f []Fixture) { f[len(f)-1].Hang = true },
		call: func(ctx context.Context, m helix.Model, o *outcome) (helix.StepResult, error) {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			cb := o.rec.Callbacks()
			text := cb.OnTextDelta
			cb.OnTextDelta = func(d string) {
				text(d)
				cancel()
			}
			return m.GenerateStep(ctx, o.req, cb)
		},
		check: func(t *testing.T, o *outcome) {
			if !errors.Is(o.err, context.Canceled) {
				t.Fatalf("error %v, want one matching context.Canceled", o.err)
			}
			requireRequests(t, o, 1)
			if got := o.rec.Text(); got == "" || !strings.HasPrefix(PartialText, got) {
				t.Errorf("forwarded text %q, want a non-empty prefix of %q", got, PartialText)
			}
		},
	},
	{
		name: ScenarioTimeout, request: textRequest,
		defaultFixtures: []Fixture{{Hang: true}},
		call: func(ctx context.Context, m helix.Model, o *outcome) (helix.StepResult, error) {
			ctx, cancel := context.WithTimeout(ctx, TestTimeout)
			defer cancel()
			return m.GenerateStep(ctx, o.req, o.rec.Callbacks())
		},
		check: func(t *testing.T, o *outcome) {
			requireModelError(t, o, []string{helix.CodeProviderTimeout}, true)
			if !errors.Is(o.err, context.DeadlineExceeded) {
				t.Errorf("error %v does not match context.DeadlineExceeded", o.err)
			}
			requireRequests(t, o, 1)
		},
	},
	{
		name: ScenarioStall, request: textRequest, idleTimeout: TestIdleTimeout,
		defaultFixtures: []Fixture{{Hang: true}},
		check: func(t *testing.T, o *outcome) {
			me := requireModelError(t, o, []string{helix.CodeProviderTimeout}, true)
			requireStalled(t, o, me)
			requireRequests(t, o, o.target.MaxRetries+1)
			requireNoEvents(t, o)
		},
	},
	{
		name: ScenarioStallMidStream, request: textRequest, idleTimeout: TestIdleTimeout,
		adjust: func(f []Fixture) { f[len(f)-1].Hang = true },
		check: func(t *testing.T, o *outcome) {
			me := requireModelError(t, o, []string{helix.CodeProviderTimeout}, true)
			requireStalled(t, o, me)
			requireRequests(t, o, 1)
			requireForwarded(t, o)
		},
	},
	{
		name: ScenarioMalformed, request: textRequest,
		check: func(t *testing.T, o *outcome) {
			requireModelError(t, o, []string{helix.CodeProviderError}, false)
			requireRequests(t, o, 1)
		},
	},
}

func requireSuccess(t *testing.T, o *outcome) {
	t.Helper()
	if o.err != nil {
		t.Fatalf("GenerateStep: %v", o.err)
	}
}

func requireText(t *testing.T, o *outcome, want string) {
	t.Helper()
	if o.res.Content != want {
		t.Errorf("content %q, want %q", o.res.Content, want)
	}
	if len(o.res.ToolCalls) != 0 {
		t.Errorf("unexpected tool calls %+v", o.res.ToolCalls)
	}
	if o.res.StopReason != helix.StopEndTurn {
		t.Errorf("stop reason %q, want %q", o.res.StopReason, helix.StopEndTurn)
	}
}

// requireCalls checks the result's calls by name and arguments, their IDs
// (set and distinct) and the tool_use stop reason.
func requireCalls(t *testing.T, o *outcome, want []helix.ToolCall) {
	t.Helper()
	if o.res.Type != helix.StepToolCalls {
		t.Errorf("result type %q, want %q", o.res.Type, helix.StepToolCalls)
	}
	if o.res.StopReason != helix.StopToolUse {
		t.Errorf("stop reason %q, want %q", o.res.StopReason, helix.StopToolUse)
	}
	if len(o.res.ToolCalls) != len(want) {
		t.Fatalf("%d tool calls %+v, want %d", len(o.res.ToolCalls), o.res.ToolCalls, len(want))
	}
	ids := map[string]bool{}
	for i, c := range o.res.ToolCalls {
		if c.ID == "" || ids[c.ID] {
			t.Errorf("tool call %d has an empty or repeated ID %q", i, c.ID)
		}
		ids[c.ID] = true
		if c.Name != want[i].Name || !JSONEqual(string(c.Arguments), string(want[i].Arguments)) {
			t.Errorf("tool call %d is %s %s, want %s %s", i, c.Name, c.Arguments, want[i].Name, want[i].Arguments)
		}
	}
}

// requireTools checks the tools sent.
func requireTools(t *testing.T, o *outcome) {
	t.Helper()
	got := o.decoded[0].Tools
	if len(got) != len(Tools) {
		t.Fatalf("request has %d tools, want %d", len(got), len(Tools))
	}
	for i, w := range Tools {
		g := got[i]
		if g.Name != w.Name || g.Description != w.Description || !JSONEqual(string(g.InputSchema), string(w.InputSchema)) {
			t.Errorf("tool %d sent as %s %q %s, want %s %q %s", i, g.Name, g.Description, g.InputSchema, w.Name, w.Description, w.InputSchema)
		}
	}
}

func requireStatus(t *testing.T, me *helix.ModelError, status int) {
	t.Helper()
	if me.StatusCode != status {
		t.Errorf("status %d, want %d", me.StatusCode, status)
	}
}

// requireForwarded checks that the deltas of a stream that broke were
// forwarded before the error, and nothing was invented.
func requireForwarded(t *testing.T, o *outcome) {
	t.Helper()
	if got := o.rec.Text(); got != PartialText {
		t.Errorf("forwarded text %q before the failure, want %q", got, PartialText)
	}
}

// requireStalled checks the failure of a stream that went silent: the
// idle watchdog's, not the call's deadline (there is none), naming the
// setting to change.
func requireStalled(t *testing.T, o *outcome, me *helix.ModelError) {
	t.Helper()
	if errors.Is(o.err, context.DeadlineExceeded) {
		t.Errorf("error %v matches context.DeadlineExceeded, but the call had no deadline: the stream stalled", o.err)
	}
	if !strings.Contains(me.Message, "IdleTimeout") {
		t.Errorf("message %q does not name the setting to change (IdleTimeout)", me.Message)
	}
}
