package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/server"
)

// A W3C traceparent on POST /start and POST /chat makes the session's runs
// continue the caller's trace: the session stores it, and the run's spans
// are in it, under the caller's span.
func TestTraceparentIsHonoured(t *testing.T) {
	t.Parallel()
	rec := &runEnds{SpanRecorder: tracetest.NewSpanRecorder(), runs: make(chan struct{}, 16)}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	agents := []*helix.Agent{echoAgent()}
	h := newHarnessConfigured(t, "", server.Config{Agents: agents}, aisdkChat(t, agents...),
		func(c *engine.Config) { c.TracerProvider = tp })

	const (
		startTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
		chatTrace  = "0af7651916cd43dd8448eb211c80319c"
		callerSpan = "00f067aa0ba902b7"
	)
	res := h.do(http.MethodPost, "/start", "alice", map[string]any{"agentType": "echo", "message": "hi"},
		"traceparent", "00-"+startTrace+"-"+callerSpan+"-01")
	require.Equal(t, http.StatusAccepted, res.status, "body: %s", res.raw)
	started := res.body["sessionId"].(string)
	h.waitStatus("alice", started, "completed")
	h.openChat(http.MethodPost, "/chat", "alice", map[string]any{"id": "traced-chat", "trigger": "submit-message",
		"messages": []any{map[string]any{"id": "u1", "role": "user", "parts": []any{map[string]any{"type": "text", "text": "hi"}}}}},
		"traceparent", "00-"+chatTrace+"-"+callerSpan+"-01").rest()
	for range 2 { // the runs' workflows end just after their outcome is recorded
		select {
		case <-rec.runs:
		case <-time.After(30 * time.Second):
			t.Fatal("the runs' spans did not end")
		}
	}

	for id, trace := range map[string]string{started: startTrace, "traced-chat": chatTrace} {
		st, err := h.eng.Session(t.Context(), id)
		require.NoError(t, err)
		require.NotNil(t, st.TracingContext, id)
		require.Equal(t, trace, st.TracingContext.TraceID, "session %s continues the caller's trace", id)
		var execute, run sdktrace.ReadOnlySpan
		for _, s := range rec.Ended() {
			if s.SpanContext().TraceID().String() != trace {
				continue
			}
			switch {
			case strings.HasPrefix(s.Name(), "helix.execute"):
				execute = s
			case strings.HasPrefix(s.Name(), "invoke_agent"):
				run = s
			}
		}
		require.NotNil(t, execute, id)
		require.NotNil(t, run, id)
		require.Equal(t, callerSpan, execute.Parent().SpanID().String(), "the caller's span is the parent")
		require.True(t, execute.Parent().IsRemote())
		require.Equal(t, execute.SpanContext().SpanID(), run.Parent().SpanID())
	}
}

// runEnds records spans and signals each run span's end.
type runEnds struct {
	*tracetest.SpanRecorder
	runs chan struct{}
}

func (r *runEnds) OnEnd(s sdktrace.ReadOnlySpan) {
	r.SpanRecorder.OnEnd(s)
	if strings.HasPrefix(s.Name(), "invoke_agent ") {
		r.runs <- struct{}{}
	}
}

// /metrics shows the engine's instruments after a run, with no wiring.
func TestEngineMetricsOnTheServer(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "", "", server.Config{Agents: []*helix.Agent{echoAgent()}})
	id, _ := h.start("alice", map[string]any{"agentType": "echo", "message": "hi"})
	h.waitStatus("alice", id, "completed")
	// The model call is observed before its step is recorded (the step's
	// own duration only once it is, after the run's status changed).
	lines := h.metricLines(`helix_model_call_duration_seconds_count{agent="echo"`)
	require.Len(t, lines, 1)
	require.True(t, strings.HasSuffix(lines[0], " 1"), lines[0])
	require.NotEmpty(t, h.metricLines(`# HELP helix_executor_takeovers_total`))
}
