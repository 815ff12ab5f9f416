package workflows

import (
	"context"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/steps"
	"github.com/helix-agents/helix-dbos/store"
)

// Tracing is a side channel of the loop: spans are started and ended around
// what an execution does, never recorded, and change no step's input or
// output. Spans of work done by an execution only: a step replayed from the
// journal starts no model or tool span (their spans are started inside the
// step bodies, which a replay does not run), and an agent step's span is
// ended (so exported) only when the execution ran something in it.

// runTrace is the tracing state of one workflow execution.
type runTrace struct {
	// span is the execution's run span (a no-op span when tracing is off
	// or the parent is not sampled); ctx carries the innermost open span
	// (the run's or the current step's), nil when not recording.
	span trace.Span
	ctx  context.Context
	// waited is set when the current step waited for a person in this
	// execution (its duration is then not a step's latency).
	waited bool
}

// startRun starts the run span of this execution, from the session's
// stored trace (the remote parent shared by every run of the session and
// every execution of a run: first run, recovery, takeover, resume days
// later), at began (when the execution started).
func (t *turn) startRun(began time.Time, in TurnInput, recovered bool) {
	tel, run := t.env.Telemetry, t.run
	if recovered {
		tel.Metrics.Recoveries.WithLabelValues(run.AgentType).Inc()
	}
	ctx, span := tel.Tracer.Start(steps.RemoteParent(context.Background(), run.Trace), "invoke_agent "+run.AgentType,
		trace.WithTimestamp(began), trace.WithSpanKind(trace.SpanKindInternal))
	t.tr.span = span
	if !span.IsRecording() {
		return
	}
	t.tr.ctx, t.j.span = ctx, span
	span.SetAttributes(steps.AttrOperation.String("invoke_agent"), steps.AttrAgentName.String(run.AgentType),
		steps.AttrConversationID.String(run.SessionID), steps.AttrSessionID.String(run.SessionID),
		steps.AttrRunID.String(run.RunID), steps.AttrTurn.Int(run.Turn), steps.AttrWorkflowID.String(run.WorkflowID),
		steps.AttrExecutorID.String(tel.ExecutorID), steps.AttrRecovered.Bool(recovered))
	if !run.IsRoot() {
		if p := run.Parent; p != nil {
			span.SetAttributes(steps.AttrParentSessionID.String(p.SessionID))
		}
	}
	if in.Segment > 0 {
		span.SetAttributes(steps.AttrSegment.Int(in.Segment))
	}
	if in.Wake > 0 {
		// A continuation of a run woken from hibernation: in the
		// session's trace, as the run's first execution.
		span.SetAttributes(steps.AttrWake.Int(in.Wake))
	}
}

// endRun ends the run span with the execution's outcome.
func (t *turn) endRun(out steps.Outcome, err error) {
	span := t.tr.span
	if span == nil {
		return
	}
	if span.IsRecording() {
		switch {
		case err != nil:
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		default:
			span.SetAttributes(steps.AttrRunStatus.String(string(out.Status)))
			if out.Status == helix.RunFailed {
				span.SetAttributes(steps.AttrErrorCode.String(out.Code))
				span.SetStatus(codes.Error, out.Error)
			}
		}
	}
	span.End()
}

// traceStep runs one agent step (fn) under its span and observes its
// duration. The span is ended, and the duration observed, only when this
// execution ran something of the step: a step replayed whole from the
// journal leaves no span (a span never ended is never exported).
func (t *turn) traceStep(step int, fn func() (steps.Outcome, bool, error)) (steps.Outcome, bool, error) {
	before, began := t.j.executed, time.Now()
	parent := t.tr.ctx
	var span trace.Span
	if parent != nil {
		t.tr.ctx, span = t.env.Telemetry.Tracer.Start(parent, "helix.step")
		span.SetAttributes(steps.AttrStep.Int(step), steps.AttrSessionID.String(t.run.SessionID))
		t.j.span = span
	}
	t.tr.waited = false
	out, done, err := fn()
	if span != nil {
		t.tr.ctx, t.j.span = parent, trace.SpanFromContext(parent)
	}
	if t.j.executed == before && err == nil {
		return out, done, err
	}
	if err == nil && !t.tr.waited {
		t.env.Telemetry.Metrics.StepDuration.WithLabelValues(t.run.AgentType).Observe(time.Since(began).Seconds())
	}
	if span != nil {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
	return out, done, err
}

// logCtx is the context of the run's log lines: its trace and span when
// tracing is on (steps.LogHook adds their IDs).
func (t *turn) logCtx() context.Context {
	if t.tr.ctx == nil {
		return context.Background()
	}
	return t.tr.ctx
}

// traced gives a step body the current span as its parent (model and tool
// spans are started inside step bodies, so a replay starts none).
func traced[R any](t *turn, fn dbos.Step[R]) dbos.Step[R] {
	if t.tr.ctx == nil {
		return fn
	}
	span := trace.SpanFromContext(t.tr.ctx)
	return func(ctx context.Context) (R, error) { return fn(trace.ContextWithSpan(ctx, span)) }
}

// childTrace starts the span of a sub-agent call whose dispatch runs in
// this execution and returns it with the child session's tracing context:
// the parent's trace, the call's span as the child's runs' parent. With
// tracing off the child inherits the parent's stored context (one trace ID
// for the whole tree once tracing is on).
func (t *turn) childTrace(step int, call helix.ToolCall) (trace.Span, *store.TracingContext) {
	if t.tr.ctx == nil || t.j.has(t.j.next) {
		return nil, t.run.Trace
	}
	_, span := t.env.Telemetry.StartToolSpan(t.tr.ctx, t.run, step, call, time.Time{})
	return span, steps.TracingContextOf(span.SpanContext())
}

// waitOutcome names how a call that waited for a person was resolved.
func waitOutcome(c store.PendingClientToolCall) string {
	s := c.Submission
	switch {
	case c.TimedOutAt != 0 || s == nil:
		return steps.OutcomeTimedOut
	case s.Kind == helix.SubmissionApprovalResponse && s.IsApproved():
		return steps.OutcomeApproved
	case s.Kind == helix.SubmissionApprovalResponse:
		return steps.OutcomeDenied
	case s.Error != "":
		return steps.OutcomeErrored
	}
	return steps.OutcomeAnswered
}

// waitKind is the kind label of a call that waits for a person.
func waitKind(c store.PendingClientToolCall) string {
	if c.Kind == helix.SubmissionApprovalResponse {
		return "approval"
	}
	return "client_tool"
}

// traceWait records a wait for a person that ended in this execution: its
// suspension span, from the durable suspension time (so a wait that
// outlived a process is measured whole) to now, its observation, and, for
// a call whose tool does not run here (denied, timed out, executed by the
// client), the call's span.
func (t *turn) traceWait(step int, c store.PendingClientToolCall, call helix.ToolCall) {
	t.tr.waited = true
	tel, now := t.env.Telemetry, time.Now()
	outcome, kind := waitOutcome(c), waitKind(c)
	from := time.UnixMilli(c.CreatedAt)
	waited := now.Sub(from)
	if c.CreatedAt == 0 || waited < 0 {
		from, waited = now, 0
	}
	tel.Metrics.SuspensionWait.WithLabelValues(t.run.AgentType, kind, outcome).Observe(waited.Seconds())
	if t.tr.ctx == nil {
		return
	}
	_, span := tel.Tracer.Start(t.tr.ctx, "helix.suspension", trace.WithTimestamp(from))
	span.SetAttributes(steps.AttrSuspensionKind.String(kind), steps.AttrSuspensionEnd.String(outcome),
		steps.AttrToolCallID.String(c.ToolCallID), steps.AttrToolName.String(c.ToolName),
		steps.AttrWaitedMS.Int64(waited.Milliseconds()), steps.AttrStep.Int(step))
	span.End(trace.WithTimestamp(now))
	if outcome == steps.OutcomeApproved {
		return // its tool runs now, in its own span
	}
	_, tool := tel.StartToolSpan(t.tr.ctx, t.run, step, call, now)
	if kind == "approval" {
		tool.SetAttributes(steps.AttrApproval.String(outcome))
	} else {
		tool.SetAttributes(steps.AttrClientExecuted.Bool(true))
	}
	if outcome != steps.OutcomeAnswered {
		tool.SetStatus(codes.Error, outcome)
	}
	tool.End(trace.WithTimestamp(now))
}
