package steps

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/store"
)

// TracerName is the instrumentation scope of the engine's spans.
const TracerName = "github.com/helix-agents/helix-dbos"

// Attribute keys of the engine's spans (docs/observability.md lists them
// with their spans). The gen_ai.* keys are OpenTelemetry's generative-AI
// semantic conventions.
const (
	AttrOperation       = attribute.Key("gen_ai.operation.name")
	AttrAgentName       = attribute.Key("gen_ai.agent.name")
	AttrConversationID  = attribute.Key("gen_ai.conversation.id")
	AttrRequestModel    = attribute.Key("gen_ai.request.model")
	AttrResponseModel   = attribute.Key("gen_ai.response.model")
	AttrInputTokens     = attribute.Key("gen_ai.usage.input_tokens")
	AttrOutputTokens    = attribute.Key("gen_ai.usage.output_tokens")
	AttrFinishReasons   = attribute.Key("gen_ai.response.finish_reasons")
	AttrToolName        = attribute.Key("gen_ai.tool.name")
	AttrToolCallID      = attribute.Key("gen_ai.tool.call.id")
	AttrSessionID       = attribute.Key("helix.session.id")
	AttrParentSessionID = attribute.Key("helix.session.parent_id")
	AttrRunID           = attribute.Key("helix.run.id")
	AttrTurn            = attribute.Key("helix.run.turn")
	AttrWorkflowID      = attribute.Key("helix.run.workflow_id")
	AttrSegment         = attribute.Key("helix.run.segment")
	AttrWake            = attribute.Key("helix.run.wake")
	AttrRecovered       = attribute.Key("helix.run.recovered")
	AttrRunStatus       = attribute.Key("helix.run.status")
	AttrExecutorID      = attribute.Key("helix.executor.id")
	AttrStep            = attribute.Key("helix.step")
	AttrToolCalls       = attribute.Key("helix.step.tool_calls")
	AttrApproval        = attribute.Key("helix.tool.approval")
	AttrClientExecuted  = attribute.Key("helix.tool.client_executed")
	AttrErrorCode       = attribute.Key("helix.error.code")
	AttrSuspensionKind  = attribute.Key("helix.suspension.kind")
	AttrSuspensionEnd   = attribute.Key("helix.suspension.outcome")
	AttrWaitedMS        = attribute.Key("helix.suspension.wait_ms")
)

// Outcomes of a call that waited for a person (AttrApproval,
// AttrSuspensionEnd and the outcome label of helix_suspension_wait_seconds).
const (
	OutcomeApproved = "approved"
	OutcomeDenied   = "denied"
	OutcomeTimedOut = "timed_out"
	OutcomeAnswered = "answered"
	OutcomeErrored  = "error"
)

// Telemetry is the engine's traces and metrics as the loop sees them. It is
// a side channel: nothing in it changes what a step records, and a step
// replayed from its record produces no span and no observation.
type Telemetry struct {
	// Tracer starts the loop's spans; a no-op tracer when tracing is off.
	Tracer trace.Tracer
	// ExecutorID is this process's executor, an attribute of run spans.
	ExecutorID string
	// Metrics are the engine's instruments; never nil.
	Metrics *Metrics
}

// NewTelemetry returns the telemetry of an engine: tracer from tp (nil:
// no tracing) and a fresh set of instruments.
func NewTelemetry(tp trace.TracerProvider, executorID string) *Telemetry {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return &Telemetry{Tracer: tp.Tracer(TracerName), ExecutorID: executorID, Metrics: NewMetrics()}
}

// Metrics are the engine's Prometheus instruments. Their labels are names
// the application defines (agents, models, tools), never session IDs.
type Metrics struct {
	// StepDuration is helix_step_duration_seconds{agent}.
	StepDuration *prometheus.HistogramVec
	// ModelDuration is helix_model_call_duration_seconds{agent,model,success}.
	ModelDuration *prometheus.HistogramVec
	// ToolDuration is helix_tool_call_duration_seconds{agent,tool,success}.
	ToolDuration *prometheus.HistogramVec
	// SuspensionWait is helix_suspension_wait_seconds{agent,kind,outcome}.
	SuspensionWait *prometheus.HistogramVec
	// Recoveries is helix_run_recoveries_total{agent}.
	Recoveries *prometheus.CounterVec
	// Takeovers is helix_executor_takeovers_total.
	Takeovers prometheus.Counter
	// TakenWorkflows is helix_takeover_workflows_total.
	TakenWorkflows prometheus.Counter
	// GCSessions is helix_gc_sessions_deleted_total.
	GCSessions prometheus.Counter
	// GCPasses is helix_gc_passes_total.
	GCPasses prometheus.Counter

	all []prometheus.Collector
}

// latencyBuckets span a fast tool (5 ms) to a long model answer (2 min).
var latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}

// waitBuckets span an answer within a second to a wait of a week.
var waitBuckets = []float64{1, 5, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600, 7 * 24 * 3600}

// NewMetrics returns unregistered instruments.
func NewMetrics() *Metrics {
	m := &Metrics{
		StepDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "helix_step_duration_seconds",
			Help:    "Time of an agent step executed by this process (model call, tools, commit), by agent; steps that waited for a person are in helix_suspension_wait_seconds instead.",
			Buckets: latencyBuckets,
		}, []string{"agent"}),
		ModelDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "helix_model_call_duration_seconds",
			Help:    "Latency of model calls made by this process, by agent and model, and whether the call failed.",
			Buckets: latencyBuckets,
		}, []string{"agent", "model", "success"}),
		ToolDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "helix_tool_call_duration_seconds",
			Help:    "Latency of server tool executions in this process, by agent and tool, and whether the tool failed.",
			Buckets: latencyBuckets,
		}, []string{"agent", "tool", "success"}),
		SuspensionWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "helix_suspension_wait_seconds",
			Help:    "How long a tool call waited for a person (from the durable suspension to the wake-up, across restarts), by agent, kind (client_tool, approval) and outcome (answered, approved, denied, timed_out, error).",
			Buckets: waitBuckets,
		}, []string{"agent", "kind", "outcome"}),
		Recoveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "helix_run_recoveries_total",
			Help: "Executions of runs that continued from recorded steps in this process (crash recovery, takeover, restart), by agent.",
		}, []string{"agent"}),
		Takeovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "helix_executor_takeovers_total",
			Help: "Executors (stopped, dead or whose lease expired) whose sessions this process took over.",
		}),
		TakenWorkflows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "helix_takeover_workflows_total",
			Help: "Pending workflows this process re-enqueued when it took an executor over.",
		}),
	}
	m.GCSessions = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "helix_gc_sessions_deleted_total",
		Help: "Sessions (roots, sub-agents, companions) deleted by this process's garbage-collection passes (the retention job of Config.Retention, Engine.CollectGarbage).",
	})
	m.GCPasses = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "helix_gc_passes_total",
		Help: "Retention passes this process ran while holding the cluster's garbage-collection lock.",
	})
	m.all = []prometheus.Collector{m.StepDuration, m.ModelDuration, m.ToolDuration, m.SuspensionWait,
		m.Recoveries, m.Takeovers, m.TakenWorkflows, m.GCSessions, m.GCPasses}
	return m
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.all {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.all {
		c.Collect(ch)
	}
}

var _ prometheus.Collector = (*Metrics)(nil)

// success is the success label's value.
func success(ok bool) string {
	if ok {
		return "true"
	}
	return "false"
}

// ModelLabel is the model label of a model call: the model the agent asks
// for, else the one that answered, else "unknown".
func ModelLabel(a *helix.Agent, res helix.StepResult) string {
	return firstNonEmpty(a.LLMConfig.Model, res.Model, "unknown")
}

// RemoteParent returns ctx with the session's stored trace as its remote
// parent (ctx unchanged when the session has none).
func RemoteParent(ctx context.Context, tc *store.TracingContext) context.Context {
	sc, ok := SpanContextOf(tc)
	if !ok {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// SpanContextOf decodes a stored tracing context.
func SpanContextOf(tc *store.TracingContext) (trace.SpanContext, bool) {
	if tc == nil {
		return trace.SpanContext{}, false
	}
	tid, err := trace.TraceIDFromHex(tc.TraceID)
	if err != nil {
		return trace.SpanContext{}, false
	}
	sid, err := trace.SpanIDFromHex(tc.RootSpanID)
	if err != nil {
		return trace.SpanContext{}, false
	}
	var flags trace.TraceFlags
	if !tc.Unsampled {
		flags = trace.FlagsSampled
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags, Remote: true})
	return sc, sc.IsValid()
}

// TracingContextOf is the stored form of a span context (nil when it is not
// valid): the parent of every run span of the session it is stored with.
func TracingContextOf(sc trace.SpanContext) *store.TracingContext {
	if !sc.IsValid() {
		return nil
	}
	return &store.TracingContext{TraceID: sc.TraceID().String(), RootSpanID: sc.SpanID().String(), Unsampled: !sc.IsSampled()}
}

// StartToolSpan starts the span of a tool call under ctx's span.
func (t *Telemetry) StartToolSpan(ctx context.Context, run RunInfo, step int, call helix.ToolCall, start time.Time) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}
	if !start.IsZero() {
		opts = append(opts, trace.WithTimestamp(start))
	}
	ctx, span := t.Tracer.Start(ctx, "execute_tool "+call.Name, opts...)
	if span.IsRecording() {
		span.SetAttributes(AttrOperation.String("execute_tool"), AttrToolName.String(call.Name), AttrToolCallID.String(call.ID),
			AttrSessionID.String(run.SessionID), AttrStep.Int(step))
	}
	return ctx, span
}

// EndToolSpan ends a tool call's span with its result.
func EndToolSpan(span trace.Span, r ToolResult, end time.Time) {
	if span.IsRecording() && r.Error != "" {
		span.SetAttributes(AttrErrorCode.String(r.ErrorCode))
		span.SetStatus(codes.Error, r.Error)
	}
	if end.IsZero() {
		span.End()
		return
	}
	span.End(trace.WithTimestamp(end))
}

// LogHook adds the trace and span IDs of an event's context (zerolog's
// Event.Ctx) to the event: the engine's log lines of a run carry trace_id
// and span_id when tracing is on.
type LogHook struct{}

// Run implements zerolog.Hook.
func (LogHook) Run(e *zerolog.Event, _ zerolog.Level, _ string) {
	ctx := e.GetCtx()
	if ctx == nil {
		return
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		e.Str("trace_id", sc.TraceID().String()).Str("span_id", sc.SpanID().String())
	}
}

// startModelSpan starts the span of a model call under ctx's span (the
// step's).
func (t *Telemetry) startModelSpan(ctx context.Context, in ModelInput, def *AgentDef) (context.Context, trace.Span) {
	model := def.Agent.LLMConfig.Model
	name := "chat"
	if model != "" {
		name += " " + model
	}
	ctx, span := t.Tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		span.SetAttributes(AttrOperation.String("chat"), AttrAgentName.String(in.Run.AgentType),
			AttrSessionID.String(in.Run.SessionID), AttrStep.Int(in.Step))
		if model != "" {
			span.SetAttributes(AttrRequestModel.String(model))
		}
	}
	return ctx, span
}

// endModelCall ends a model call's span and observes its latency.
func (t *Telemetry) endModelCall(span trace.Span, run RunInfo, def *AgentDef, res helix.StepResult, err error, d time.Duration) {
	failed := err != nil || res.Type == helix.StepError
	t.Metrics.ModelDuration.WithLabelValues(run.AgentType, ModelLabel(def.Agent, res), success(!failed)).Observe(d.Seconds())
	if span.IsRecording() {
		span.SetAttributes(AttrInputTokens.Int(res.Usage.InputTokens), AttrOutputTokens.Int(res.Usage.OutputTokens),
			AttrToolCalls.Int(len(res.ToolCalls)))
		if res.Model != "" {
			span.SetAttributes(AttrResponseModel.String(res.Model))
		}
		if res.StopReason != "" {
			span.SetAttributes(AttrFinishReasons.StringSlice([]string{string(res.StopReason)}))
		}
		switch {
		case err != nil:
			span.SetStatus(codes.Error, err.Error())
		case res.Type == helix.StepError:
			span.SetAttributes(AttrErrorCode.String(res.ErrorCode))
			span.SetStatus(codes.Error, res.Error)
		}
	}
	span.End()
}
