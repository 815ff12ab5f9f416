package engine_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/helixtest"
	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

// recorder is an in-memory tracer provider and what it recorded.
type recorder struct {
	*tracetest.SpanRecorder
	tp *sdktrace.TracerProvider

	mu      sync.Mutex
	changed chan struct{} // closed (and replaced) when a span ends
}

func newRecorder(t *testing.T) *recorder {
	r := &recorder{SpanRecorder: tracetest.NewSpanRecorder(), changed: make(chan struct{})}
	r.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r))
	t.Cleanup(func() { _ = r.tp.Shutdown(context.Background()) })
	return r
}

// OnEnd records s and wakes awaitEnded.
func (r *recorder) OnEnd(s sdktrace.ReadOnlySpan) {
	r.SpanRecorder.OnEnd(s)
	r.mu.Lock()
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// awaitEnded waits until n spans called name ended: a run's workflow ends
// (its run span with it) just after its outcome is recorded, which is
// what Handle.Result waits for.
func (r *recorder) awaitEnded(t *testing.T, name string, n int) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		r.mu.Lock()
		changed := r.changed
		r.mu.Unlock()
		if len(r.named(name)) >= n {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("%d span(s) %s ended, want %d", len(r.named(name)), name, n)
		}
	}
}

// named returns the ended spans called name (or starting with name+" ").
func (r *recorder) named(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.Ended() {
		if s.Name() == name || strings.HasPrefix(s.Name(), name+" ") {
			out = append(out, s)
		}
	}
	return out
}

// attr returns a span's attribute.
func attr(s sdktrace.ReadOnlySpan, key attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// withAttr keeps the spans whose attribute key has value v.
func withAttr(spans []sdktrace.ReadOnlySpan, key attribute.Key, v attribute.Value) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if attr(s, key) == v {
			out = append(out, s)
		}
	}
	return out
}

// tracedEngine is a kit engine whose spans go to rec.
func tracedEngine(t *testing.T, rec *recorder, opts helixtest.EngineOptions, agents ...*helix.Agent) *helixtest.Engine {
	if opts.DatabaseURL == "" {
		// The package's server (a kit engine would start a container).
		opts.DatabaseURL = pgtest.NewURL(t)
	}
	configure := opts.Configure
	opts.Configure = func(c *engine.Config) {
		c.TracerProvider = rec.tp
		if configure != nil {
			configure(c)
		}
	}
	return helixtest.NewEngine(t, opts, agents...)
}

// usage answers with tool calls and token usage.
func usage(in, out int, cs ...helix.ToolCall) func(helix.ModelRequest, helix.StreamCallbacks) (helix.StepResult, error) {
	return func(helix.ModelRequest, helix.StreamCallbacks) (helix.StepResult, error) {
		return helix.StepResult{Type: helix.StepToolCalls, ToolCalls: cs, StopReason: helix.StopToolUse, Model: "scripted-1",
			Usage: helix.Usage{InputTokens: in, OutputTokens: out}}, nil
	}
}

// approvals is an agent whose first step calls a server tool (n1) and two
// approval-gated transfers (t1, approved; t2, denied), then answers.
func approvals(runs *sync.Map, x *executions) *helix.Agent {
	return &helix.Agent{
		Name:      "payer",
		LLMConfig: helix.LLMConfig{Model: "test-model"},
		Tools:     []*helix.Tool{transferTool(runs), noteTool(x)},
		Model: script(usage(120, 30, call("n1", "note", `{"text":"x"}`),
			call("t1", "transfer", `{"to":"bob","amount":5}`), call("t2", "transfer", `{"to":"eve","amount":9}`)),
			text("paid")),
	}
}

// The span tree of a run with a server tool and two approvals (one denied),
// started under a caller's span: everything is in the caller's trace, the
// run under the Execute span, steps under the run, the model and tool calls
// and the wait under their step, with their attributes.
func TestTraceSpanTree(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	var runs sync.Map
	var x executions
	agent := approvals(&runs, &x)
	e := tracedEngine(t, rec, helixtest.EngineOptions{Quiet: true}, agent)

	ctx, caller := rec.tp.Tracer("test").Start(t.Context(), "caller")
	h, err := e.Engine.Execute(ctx, agent, engine.Input{Message: "pay"}, nil)
	require.NoError(t, err)
	caller.End()
	e.AwaitPending(h.SessionID, "t1")
	e.AwaitPending(h.SessionID, "t2")
	e.Approve(h.SessionID, "t1")
	e.Deny(h.SessionID, "t2", "no")
	require.Equal(t, helix.AgentCompleted, e.Await(h).Status)
	rec.awaitEnded(t, "invoke_agent", 1)

	traceID := caller.SpanContext().TraceID()
	for _, s := range rec.Ended() {
		require.Equal(t, traceID, s.SpanContext().TraceID(), "span %s is in the caller's trace", s.Name())
	}
	st, err := e.Session(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.NotNil(t, st.TracingContext, "the session stores its trace")
	require.Equal(t, traceID.String(), st.TracingContext.TraceID)

	exec := rec.named("helix.execute")
	require.Len(t, exec, 1)
	require.Equal(t, caller.SpanContext().SpanID(), exec[0].Parent().SpanID())
	require.Equal(t, exec[0].SpanContext().SpanID().String(), st.TracingContext.RootSpanID)

	runSpans := rec.named("invoke_agent")
	require.Len(t, runSpans, 1, "one execution, one run span")
	run := runSpans[0]
	require.Equal(t, "invoke_agent payer", run.Name())
	require.Equal(t, exec[0].SpanContext().SpanID(), run.Parent().SpanID(), "the run's parent is the session's stored span")
	require.Equal(t, h.SessionID, attr(run, "helix.session.id").AsString())
	require.Equal(t, h.RunID, attr(run, "helix.run.id").AsString())
	require.Equal(t, e.ExecutorID(), attr(run, "helix.executor.id").AsString())
	require.False(t, attr(run, "helix.run.recovered").AsBool())
	require.Equal(t, "completed", attr(run, "helix.run.status").AsString())

	stepSpans := rec.named("helix.step")
	require.Len(t, stepSpans, 2)
	step := map[int64]sdktrace.ReadOnlySpan{}
	for _, s := range stepSpans {
		require.Equal(t, run.SpanContext().SpanID(), s.Parent().SpanID(), "steps are children of the run")
		step[attr(s, "helix.step").AsInt64()] = s
	}
	require.Contains(t, step, int64(1))
	require.Contains(t, step, int64(2))

	models := rec.named("chat")
	require.Len(t, models, 2)
	first := withAttr(models, "helix.step", attribute.IntValue(1))
	require.Len(t, first, 1)
	require.Equal(t, "chat test-model", first[0].Name())
	require.Equal(t, step[1].SpanContext().SpanID(), first[0].Parent().SpanID())
	require.Equal(t, "test-model", attr(first[0], "gen_ai.request.model").AsString())
	require.Equal(t, "scripted-1", attr(first[0], "gen_ai.response.model").AsString())
	require.EqualValues(t, 120, attr(first[0], "gen_ai.usage.input_tokens").AsInt64())
	require.EqualValues(t, 30, attr(first[0], "gen_ai.usage.output_tokens").AsInt64())

	tools := rec.named("execute_tool")
	require.Len(t, tools, 3, "n1, t1 and t2")
	byCall := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range tools {
		require.Equal(t, step[1].SpanContext().SpanID(), s.Parent().SpanID(), "tool calls are children of their step")
		byCall[attr(s, "gen_ai.tool.call.id").AsString()] = s
	}
	require.Equal(t, "execute_tool note", byCall["n1"].Name())
	require.Equal(t, "note", attr(byCall["n1"], "gen_ai.tool.name").AsString())
	require.Equal(t, "approved", attr(byCall["t1"], "helix.tool.approval").AsString())
	require.Equal(t, "denied", attr(byCall["t2"], "helix.tool.approval").AsString())

	waits := rec.named("helix.suspension")
	require.Len(t, waits, 2)
	for _, w := range waits {
		require.Equal(t, step[1].SpanContext().SpanID(), w.Parent().SpanID())
		require.Equal(t, "approval", attr(w, "helix.suspension.kind").AsString())
	}
	outcomes := []string{attr(waits[0], "helix.suspension.outcome").AsString(), attr(waits[1], "helix.suspension.outcome").AsString()}
	require.ElementsMatch(t, []string{"approved", "denied"}, outcomes)

	// The next turn, called from another trace, runs in the session's
	// trace; the call's span links to it.
	ctx2, other := rec.tp.Tracer("test").Start(t.Context(), "another caller")
	h2, err := e.Engine.Execute(ctx2, agent, engine.Input{Message: "again"}, &engine.ExecuteOptions{SessionID: h.SessionID})
	require.NoError(t, err)
	other.End()
	e.Await(h2) // the script has no third step: the turn fails, in the trace
	rec.awaitEnded(t, "invoke_agent", 2)
	next := withAttr(rec.named("invoke_agent"), "helix.run.id", attribute.StringValue(h2.RunID))
	require.Len(t, next, 1)
	require.Equal(t, traceID, next[0].SpanContext().TraceID(), "one trace per session across turns")
	require.Equal(t, st.TracingContext.RootSpanID, next[0].Parent().SpanID().String())
	exec = rec.named("helix.execute")
	require.Len(t, exec, 2)
	second := exec[1]
	require.Equal(t, other.SpanContext().TraceID(), second.SpanContext().TraceID())
	require.Len(t, second.Links(), 1)
	require.Equal(t, traceID, second.Links()[0].SpanContext.TraceID())
}

// In a run admitted through a queue, each segment is an execution with its
// run span, and the driver's wait is traced by the segment that resolves it.
func TestTraceQueuedRun(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	var runs sync.Map
	agent := payer(&runs)
	e := tracedEngine(t, rec, helixtest.EngineOptions{Quiet: true, Queue: &engine.QueueConfig{PollingInterval: 20 * time.Millisecond}}, agent)
	h := e.Start(agent, "pay")
	e.Approve(h.SessionID, e.AwaitPending(h.SessionID, "t1").ToolCallID)
	require.Equal(t, helix.AgentCompleted, e.Await(h).Status)
	rec.awaitEnded(t, "invoke_agent", 2)

	runSpans := rec.named("invoke_agent")
	require.Len(t, runSpans, 2, "two segments: until the wait, and from it")
	require.Equal(t, runSpans[0].SpanContext().TraceID(), runSpans[1].SpanContext().TraceID())
	waits := rec.named("helix.suspension")
	require.Len(t, waits, 1)
	require.Equal(t, "approved", attr(waits[0], "helix.suspension.outcome").AsString())
	tools := rec.named("execute_tool transfer")
	require.Len(t, tools, 1)
	require.Equal(t, "approved", attr(tools[0], "helix.tool.approval").AsString())
	require.Len(t, rec.named("chat"), 2)
}

// A session stopped while it waits for an approval and continued by a
// replacement engine stays one trace: both executions' run spans have the
// session's stored span as parent; the replayed model call and tool are
// not traced again, and the wait is measured from the durable suspension.
func TestTraceContinuesInAReplacement(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	var runs sync.Map
	agent := payer(&runs)
	first := tracedEngine(t, rec, helixtest.EngineOptions{Quiet: true}, agent)
	h := first.Start(agent, "pay bob")
	pending := first.AwaitPending(h.SessionID, "t1")
	first.Crash()

	second := first.Replacement(helixtest.ReplacementOptions{NewExecutorID: true})
	second.Approve(h.SessionID, "t1")
	require.Equal(t, helix.AgentCompleted, second.Await(second.Attach(h)).Status)
	rec.awaitEnded(t, "invoke_agent", 2)

	st, err := second.Session(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.NotNil(t, st.TracingContext)
	runSpans := rec.named("invoke_agent")
	require.Len(t, runSpans, 2, "one run span per execution")
	var recovered sdktrace.ReadOnlySpan
	for _, s := range runSpans {
		require.Equal(t, st.TracingContext.TraceID, s.SpanContext().TraceID().String(), "one trace across executions")
		require.Equal(t, st.TracingContext.RootSpanID, s.Parent().SpanID().String())
		require.Equal(t, h.RunID, attr(s, "helix.run.id").AsString())
		if attr(s, "helix.run.recovered").AsBool() {
			recovered = s
		}
	}
	require.NotNil(t, recovered, "the replacement's execution is marked recovered")
	require.Equal(t, second.ExecutorID(), attr(recovered, "helix.executor.id").AsString())

	require.Len(t, rec.named("chat"), 2, "step 1's model call (first engine) and step 2's: the replay calls nothing")
	tools := rec.named("execute_tool")
	require.Len(t, tools, 1)
	require.Equal(t, "approved", attr(tools[0], "helix.tool.approval").AsString())
	waits := rec.named("helix.suspension")
	require.Len(t, waits, 1)
	require.Equal(t, pending.CreatedAt, waits[0].StartTime().UnixMilli(), "the wait starts at the durable suspension")
	require.True(t, waits[0].StartTime().Before(recovered.StartTime()), "measured across the restart")
	for _, s := range append(tools, waits...) {
		require.Equal(t, recovered.SpanContext().TraceID(), s.SpanContext().TraceID())
	}

	require.InDelta(t, 1, metricValue(t, second.Metrics(), "helix_run_recoveries_total"), 0, "the replacement recovered the run")
	require.InDelta(t, 1, metricValue(t, second.Metrics(), "helix_executor_takeovers_total"), 0, "by taking the stopped executor over")
	require.InDelta(t, 1, metricValue(t, second.Metrics(), "helix_takeover_workflows_total"), 0)
	require.InDelta(t, 0, metricValue(t, first.Metrics(), "helix_run_recoveries_total"), 0)
}

// metricValue sums the counter samples called name that c collects.
func metricValue(t *testing.T, c prometheus.Collector, name string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	families, err := reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// A sub-agent's run spans are children of its parent's tool-call span, in
// the parent's trace.
func TestTraceSubAgentSpansAreChildren(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	parent := &helix.Agent{
		Name:  "lead",
		Tools: []*helix.Tool{helix.MustSubAgentTool(summarizer(func(string) {}), nil, nil)},
		Model: script(calls(call("s1", "subagent__summarizer", `{"task":"alpha"}`)), text("done")),
	}
	e := tracedEngine(t, rec, helixtest.EngineOptions{Quiet: true}, parent)
	h := e.Start(parent, "summarize")
	require.Equal(t, helix.AgentCompleted, e.Await(h).Status)
	rec.awaitEnded(t, "invoke_agent lead", 1)

	tool := rec.named("execute_tool subagent__summarizer")
	require.Len(t, tool, 1)
	child := rec.named("invoke_agent summarizer")
	require.Len(t, child, 1)
	require.Equal(t, tool[0].SpanContext().SpanID(), child[0].Parent().SpanID(), "the child's run is a child of the call")
	require.Equal(t, tool[0].SpanContext().TraceID(), child[0].SpanContext().TraceID())
	lead := rec.named("invoke_agent lead")
	require.Len(t, lead, 1)
	require.Equal(t, lead[0].SpanContext().TraceID(), child[0].SpanContext().TraceID())
	require.Equal(t, h.SessionID, attr(child[0], "helix.session.parent_id").AsString())
	require.True(t, tool[0].StartTime().Before(child[0].StartTime()) && !tool[0].EndTime().Before(child[0].EndTime()),
		"the call's span covers the child's run")
}

// A persistent companion's session is in its parent's trace: spawned, its
// run is a child of the spawning call; consulted again, its next run is
// in the same trace (under the spawning call, stored with its session).
func TestTraceCompanionInTheParentsTrace(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	parent := &helix.Agent{
		Name:             "lead",
		PersistentAgents: []helix.PersistentAgent{{Agent: consultant("advisor", nil, 1)}},
		Model: script(
			calls(call("c1", helix.CompanionSpawnAgent, `{"agentType":"advisor","name":"adv","message":"q1"}`)),
			calls(call("c2", helix.CompanionSendMessage, `{"name":"adv","message":"q2"}`)),
			text("consulted"),
		),
	}
	e := tracedEngine(t, rec, helixtest.EngineOptions{Quiet: true}, parent)
	h := e.Start(parent, "ask the advisor")
	require.Equal(t, helix.AgentCompleted, e.Await(h).Status)
	rec.awaitEnded(t, "invoke_agent lead", 1)

	lead := rec.named("invoke_agent lead")
	require.Len(t, lead, 1)
	spawn := rec.named("execute_tool " + helix.CompanionSpawnAgent)
	require.Len(t, spawn, 1)
	runs := rec.named("invoke_agent advisor")
	require.Len(t, runs, 2, "the spawn's run and the consultation's")
	for _, r := range runs {
		require.Equal(t, lead[0].SpanContext().TraceID(), r.SpanContext().TraceID(), "the companion's runs are in the parent's trace")
		require.Equal(t, spawn[0].SpanContext().SpanID(), r.Parent().SpanID(), "under the spawning call")
	}
}

// The run's log lines carry its trace and span IDs.
func TestLogsCarryTraceIDs(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	var logs syncBuffer
	agent := &helix.Agent{Name: "asker", Tools: []*helix.Tool{askUser()},
		Model: script(calls(call("q1", "ask_user", `{"question":"name?"}`)), text("thanks"))}
	e := tracedEngine(t, rec, helixtest.EngineOptions{Quiet: true, Configure: func(c *engine.Config) {
		l := zerolog.New(&logs)
		c.Logger = &l
	}}, agent)
	h := e.Start(agent, "ask")
	e.AwaitPending(h.SessionID, "q1")
	e.Answer(h.SessionID, "q1", answer{Answer: "Ada"})
	require.Equal(t, helix.AgentCompleted, e.Await(h).Status)
	rec.awaitEnded(t, "invoke_agent", 1)

	steps := map[string]bool{}
	for _, s := range rec.named("helix.step") {
		steps[s.SpanContext().SpanID().String()] = true
	}
	var line struct {
		Event   string `json:"event"`
		TraceID string `json:"trace_id"`
		SpanID  string `json:"span_id"`
	}
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if strings.Contains(l, `"client_tool.suspended"`) {
			require.NoError(t, json.Unmarshal([]byte(l), &line))
		}
	}
	require.Equal(t, "client_tool.suspended", line.Event, "the suspension is logged")
	require.Equal(t, rec.named("invoke_agent")[0].SpanContext().TraceID().String(), line.TraceID)
	require.True(t, steps[line.SpanID], "logged under its step's span")
}

// Tracing off (no provider installed): no span, no tracing context beyond
// the caller's, and the run completes as usual.
func TestNoTracingWithoutAProvider(t *testing.T) {
	t.Parallel()
	var runs sync.Map
	agent := payer(&runs)
	e := helixtest.NewEngine(t, helixtest.EngineOptions{DatabaseURL: pgtest.NewURL(t), Quiet: true}, agent)
	h := e.Start(agent, "pay")
	e.Approve(h.SessionID, e.AwaitPending(h.SessionID, "t1").ToolCallID)
	require.Equal(t, helix.AgentCompleted, e.Await(h).Status)
	st, err := e.Session(t.Context(), h.SessionID)
	require.NoError(t, err)
	require.Nil(t, st.TracingContext, "no trace to continue")

	// A caller's W3C context is kept even so: tracing turned on later
	// continues the caller's trace.
	tid, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	sid, _ := trace.SpanIDFromHex("b7ad6b7169203331")
	ctx := trace.ContextWithRemoteSpanContext(t.Context(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true}))
	h2, err := e.Engine.Execute(ctx, agent, engine.Input{Message: "pay again"}, nil)
	require.NoError(t, err)
	st, err = e.Session(t.Context(), h2.SessionID)
	require.NoError(t, err)
	require.NotNil(t, st.TracingContext)
	require.Equal(t, tid.String(), st.TracingContext.TraceID)
	require.Equal(t, sid.String(), st.TracingContext.RootSpanID)
	e.Approve(h2.SessionID, e.AwaitPending(h2.SessionID, "t1").ToolCallID)
	require.Equal(t, helix.AgentCompleted, e.Await(h2).Status)
}

// The engine's metrics observe what a run did: its steps, model calls by
// model, tool calls by tool and its wait for a person.
func TestEngineMetrics(t *testing.T) {
	t.Parallel()
	var runs sync.Map
	var x executions
	agent := approvals(&runs, &x)
	rec := newRecorder(t) // to know when the run's workflow ended
	e := tracedEngine(t, rec, helixtest.EngineOptions{Quiet: true}, agent)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(e.Metrics()))
	h := e.Start(agent, "pay")
	e.AwaitPending(h.SessionID, "t2")
	e.Approve(h.SessionID, "t1")
	e.Deny(h.SessionID, "t2", "no")
	require.Equal(t, helix.AgentCompleted, e.Await(h).Status)
	rec.awaitEnded(t, "invoke_agent", 1) // the last step is observed before the workflow ends

	families, err := reg.Gather()
	require.NoError(t, err)
	counts := map[string]uint64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := []string{f.GetName()}
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			counts[strings.Join(labels, ",")] = m.GetHistogram().GetSampleCount()
		}
	}
	require.EqualValues(t, 1, counts["helix_step_duration_seconds,agent=payer"], "step 2 (step 1 waited for people)")
	require.EqualValues(t, 2, counts["helix_model_call_duration_seconds,agent=payer,model=test-model,success=true"])
	require.EqualValues(t, 1, counts["helix_tool_call_duration_seconds,agent=payer,success=true,tool=note"])
	require.EqualValues(t, 1, counts["helix_tool_call_duration_seconds,agent=payer,success=true,tool=transfer"], "the approved call ran, the denied one did not")
	require.EqualValues(t, 1, counts["helix_suspension_wait_seconds,agent=payer,kind=approval,outcome=approved"])
	require.EqualValues(t, 1, counts["helix_suspension_wait_seconds,agent=payer,kind=approval,outcome=denied"])
	require.Equal(t, 0, testutil.CollectAndCount(e.Metrics(), "helix_run_recoveries_total"), "nothing recovered")
}

// Steps a recovery replays from the journal are not traced again: a crash
// after step 1's commit leaves step 1's spans to the first engine; the
// replacement traces only steps 2 and 3.
func TestTraceNoDuplicateSpansOnReplay(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	var x executions
	agent := &helix.Agent{Name: "noter", Tools: []*helix.Tool{noteTool(&x)},
		Model: script(calls(call("n1", "note", `{"text":"a"}`)), calls(call("n2", "note", `{"text":"b"}`)), text("done"))}
	crash := helixtest.AfterCommit(1)
	first := tracedEngine(t, rec, helixtest.EngineOptions{Quiet: true, CrashAt: &crash}, agent)
	h := first.Start(agent, "note twice")
	first.AwaitCrash()
	second := first.Replacement(helixtest.ReplacementOptions{})
	require.Equal(t, helix.AgentCompleted, second.Await(second.Attach(h)).Status)
	rec.awaitEnded(t, "invoke_agent", 2)

	require.Len(t, rec.named("invoke_agent"), 2)
	require.Len(t, rec.named("chat"), 3, "one model span per model call")
	tools := rec.named("execute_tool")
	require.Len(t, tools, 2)
	require.NotEqual(t, attr(tools[0], "gen_ai.tool.call.id"), attr(tools[1], "gen_ai.tool.call.id"))
	stepSpans := rec.named("helix.step")
	require.Len(t, withAttr(stepSpans, "helix.step", attribute.IntValue(1)), 1, "step 1 was replayed, not traced again")
	require.Len(t, withAttr(stepSpans, "helix.step", attribute.IntValue(2)), 1)
	require.Len(t, withAttr(stepSpans, "helix.step", attribute.IntValue(3)), 1)
}
