package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// defaultServiceName is the service.name of serve's spans unless
// OTEL_SERVICE_NAME (or OTEL_RESOURCE_ATTRIBUTES) says otherwise.
const defaultServiceName = "helix-dbos"

// tracingWanted reports whether the environment asks for OTLP traces:
// OTEL_TRACES_EXPORTER=otlp, or an OTLP endpoint
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), unless
// OTEL_TRACES_EXPORTER names another exporter (none) or OTEL_SDK_DISABLED
// is true. It returns an error for an exporter serve does not have.
func tracingWanted(getenv func(string) string) (bool, error) {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false, nil
	}
	switch exp := strings.TrimSpace(strings.ToLower(getenv("OTEL_TRACES_EXPORTER"))); exp {
	case "otlp":
		return true, nil
	case "none":
		return false, nil
	case "":
		return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "", nil
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: serve exports traces with otlp (OTLP over HTTP) only; set otlp or none", exp)
	}
}

// newTracerProvider returns an OTLP/HTTP tracer provider configured by the
// standard OTEL_* variables (endpoint, headers, timeout, protocol
// details of otlptracehttp; OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES;
// the batch processor's OTEL_BSP_*; the sampler's OTEL_TRACES_SAMPLER), or
// nil when the environment does not ask for traces, with the service name
// its spans carry. Shut it down to flush.
func newTracerProvider(ctx context.Context, getenv func(string) string) (_ *sdktrace.TracerProvider, service string, _ error) {
	if ok, err := tracingWanted(getenv); !ok || err != nil {
		return nil, "", err
	}
	if p := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"); p == "grpc" || (p == "" && getenv("OTEL_EXPORTER_OTLP_PROTOCOL") == "grpc") {
		return nil, "", errors.New("OTEL_EXPORTER_OTLP_PROTOCOL=grpc: serve exports OTLP over HTTP (http/protobuf, port 4318); unset it or set http/protobuf")
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", defaultServiceName)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, "", fmt.Errorf("OpenTelemetry resource: %w", err)
	}
	service = defaultServiceName
	if v, ok := res.Set().Value("service.name"); ok {
		service = v.AsString()
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), service, nil
}
