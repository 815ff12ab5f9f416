package traceparent_test

import (
	"context"
	"fmt"
	"net/http/httptest"

	"go.opentelemetry.io/otel/trace"

	"github.com/helix-agents/helix-dbos/internal/traceparent"
)

func ExampleExtract() {
	r := httptest.NewRequest("POST", "/start", nil)
	r.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	sc := trace.SpanContextFromContext(traceparent.Extract(context.Background(), r))
	fmt.Println(sc.TraceID(), sc.SpanID(), sc.IsRemote(), sc.IsSampled())

	// A context that has a span already (middleware's) keeps it.
	own := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}}))
	fmt.Println(trace.SpanContextFromContext(traceparent.Extract(own, r)).TraceID())
	// Output:
	// 4bf92f3577b34da6a3ce929d0e0e4736 00f067aa0ba902b7 true true
	// 01000000000000000000000000000000
}
