// Package traceparent takes a caller's W3C trace context (traceparent and
// tracestate headers) into a request's context, for the HTTP routes that
// start sessions: the session's runs continue the caller's trace.
//
// It may import only the standard library and OpenTelemetry.
package traceparent

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Extract returns ctx with the W3C trace context of r's headers as its
// remote parent span, unless ctx already has a span (middleware such as
// otelhttp started one, a child of that same context) or the headers have
// none. It uses the W3C propagator itself, not the global one, which is a
// no-op unless the application installs one.
func Extract(ctx context.Context, r *http.Request) context.Context {
	if trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(r.Header))
}
