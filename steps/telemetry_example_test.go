package steps_test

import (
	"context"
	"fmt"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/steps"
	"github.com/helix-agents/helix-dbos/store"
)

// A session stores its trace as a TracingContext; every run span of the
// session takes it back as its remote parent.
func ExampleTracingContextOf() {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	stored := steps.TracingContextOf(sc)
	fmt.Println(stored.TraceID, stored.RootSpanID, stored.Unsampled)

	parent := trace.SpanContextFromContext(steps.RemoteParent(context.Background(), stored))
	fmt.Println(parent.TraceID() == tid, parent.SpanID() == sid, parent.IsRemote(), parent.IsSampled())
	// Output:
	// 4bf92f3577b34da6a3ce929d0e0e4736 00f067aa0ba902b7 false
	// true true true true
}

// SpanContextOf refuses a context that is not a W3C trace and span ID.
func ExampleSpanContextOf() {
	_, ok := steps.SpanContextOf(&store.TracingContext{TraceID: "t", RootSpanID: "r"})
	fmt.Println(ok)
	// Output: false
}

// LogHook adds the trace and span IDs of a log event's context.
func ExampleLogHook() {
	log := zerolog.New(os.Stdout).Hook(steps.LogHook{})
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}))
	log.Info().Ctx(ctx).Str("event", "client_tool.suspended").Send()
	log.Info().Str("event", "engine.launched").Send()
	// Output:
	// {"level":"info","event":"client_tool.suspended","trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"00f067aa0ba902b7"}
	// {"level":"info","event":"engine.launched"}
}

// The engine's instruments are one prometheus.Collector.
func ExampleNewMetrics() {
	m := steps.NewMetrics()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	m.ModelDuration.WithLabelValues("support", "gpt-4o", "true").Observe(1.2)
	m.Takeovers.Inc()
	families, _ := reg.Gather()
	for _, f := range families {
		fmt.Println(f.GetName())
	}
	// Output:
	// helix_executor_takeovers_total
	// helix_model_call_duration_seconds
	// helix_takeover_workflows_total
}

// NewTelemetry without a tracer provider traces nothing.
func ExampleNewTelemetry() {
	tel := steps.NewTelemetry(nil, "host-1-abc")
	_, span := tel.Tracer.Start(context.Background(), "invoke_agent support")
	fmt.Println(span.IsRecording(), tel.ExecutorID)
	// Output: false host-1-abc
}

// The model label is the model the agent asks for, else the one that
// answered.
func ExampleModelLabel() {
	a := &helix.Agent{Name: "support"}
	fmt.Println(steps.ModelLabel(a, helix.StepResult{Model: "claude-sonnet-4"}), steps.ModelLabel(a, helix.StepResult{}))
	a.LLMConfig.Model = "gpt-4o"
	fmt.Println(steps.ModelLabel(a, helix.StepResult{Model: "gpt-4o-2024-08-06"}))
	// Output:
	// claude-sonnet-4 unknown
	// gpt-4o
}
