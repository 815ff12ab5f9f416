package steps_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
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
	// helix_gc_passes_total
	// helix_gc_sessions_deleted_total
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

// A run span's parent is the session's stored trace, whatever process
// runs it: RemoteParent puts it in a context.
func ExampleRemoteParent() {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	stored := &store.TracingContext{TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", RootSpanID: "00f067aa0ba902b7"}
	_, span := tp.Tracer("example").Start(steps.RemoteParent(context.Background(), stored), "invoke_agent support")
	span.End()
	run := rec.Ended()[0]
	fmt.Println(run.SpanContext().TraceID(), run.Parent().SpanID(), run.Parent().IsRemote())
	// Output: 4bf92f3577b34da6a3ce929d0e0e4736 00f067aa0ba902b7 true
}

// A tool call's span, ended with its result.
func ExampleTelemetry_StartToolSpan() {
	rec := tracetest.NewSpanRecorder()
	tel := steps.NewTelemetry(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), "host-1-abc")
	run := steps.RunInfo{SessionID: "s-1", RunID: "r-1", AgentType: "support"}
	call := helix.ToolCall{ID: "c-1", Name: "refund"}
	_, span := tel.StartToolSpan(context.Background(), run, 1, call, time.Time{})
	steps.EndToolSpan(span, steps.ToolResult{ToolCallID: "c-1", ToolName: "refund", Error: "order not found", ErrorCode: steps.CodeToolError}, time.Time{})
	s := rec.Ended()[0]
	fmt.Println(s.Name(), s.Status().Code, s.Status().Description)
	// Output: execute_tool refund Error order not found
}
