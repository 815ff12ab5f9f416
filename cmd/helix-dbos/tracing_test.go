package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTracingWanted(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  map[string]string
		want bool
		err  bool
	}{
		{env: nil, want: false},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, want: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4318"}, want: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://localhost:4318/v1/traces"}, want: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_TRACES_EXPORTER": "none"}, want: false},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "true"}, want: false},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: true},
	} {
		got, err := tracingWanted(func(k string) string { return c.env[k] })
		require.Equal(t, c.err, err != nil, "%v: %v", c.env, err)
		require.Equal(t, c.want, got, "%v", c.env)
	}
}

// With OTEL_EXPORTER_OTLP_ENDPOINT set, serve's tracer provider exports
// over OTLP/HTTP to it, with the service name, and Shutdown flushes.
func TestTracerProviderExportsOverOTLPHTTP(t *testing.T) {
	received := make(chan string, 10)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		received <- r.URL.Path + " " + string(body)
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_SERVICE_NAME", "helix-test")

	tp, service, err := newTracerProvider(t.Context(), os.Getenv)
	require.NoError(t, err)
	require.NotNil(t, tp)
	require.Equal(t, "helix-test", service)
	_, span := tp.Tracer("test").Start(context.Background(), "a-span")
	span.End()
	require.NoError(t, tp.Shutdown(t.Context()))
	select {
	case got := <-received:
		require.Contains(t, got, "/v1/traces ")
		require.Contains(t, got, "a-span")
		require.Contains(t, got, "helix-test")
	default:
		t.Fatal("Shutdown returned without exporting the span")
	}

	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	tp, _, err = newTracerProvider(t.Context(), os.Getenv)
	require.NoError(t, err)
	require.Nil(t, tp, "no OTEL_* configuration: no tracing")
}
