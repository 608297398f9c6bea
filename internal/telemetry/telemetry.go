// Package telemetry sets up OpenTelemetry's SDK for the ax binary from the
// standard OTEL_* environment variables. The services and the executor SDK
// use only OpenTelemetry's API (a TracerProvider given in their Options,
// or the global one); only cmd/ax, and tests that receive the spans, link
// the SDK and the exporter.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
)

// Enabled reports whether the environment asks for traces: an OTLP
// endpoint is set (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
// OTEL_EXPORTER_OTLP_ENDPOINT) or OTEL_TRACES_EXPORTER=otlp, and neither
// OTEL_TRACES_EXPORTER=none nor OTEL_SDK_DISABLED=true turns them off.
func Enabled() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch exp := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return false
	case "otlp":
		return true
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

// Setup returns a TracerProvider that exports spans over OTLP/HTTP as the
// OTEL_* variables say (endpoint, headers, timeout, compression,
// OTEL_TRACES_SAMPLER and its argument, OTEL_RESOURCE_ATTRIBUTES), named
// OTEL_SERVICE_NAME or else service; nil, and no exporter, when
// [Enabled] is false. Shut it down to flush the spans it holds.
func Setup(ctx context.Context, service string) (*sdktrace.TracerProvider, error) {
	if !Enabled() {
		return nil, nil
	}
	if exp := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")); exp != "" && exp != "otlp" && exp != "none" {
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: ax exports traces with otlp, or none", exp)
	}
	protocol := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if protocol != "" && protocol != "http/protobuf" {
		return nil, errors.New("OTEL_EXPORTER_OTLP_PROTOCOL=" + protocol + ": ax exports OTLP over HTTP (http/protobuf); " +
			"point it at the collector's OTLP/HTTP port (4318)")
	}
	exporter, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	// The environment's resource (OTEL_SERVICE_NAME,
	// OTEL_RESOURCE_ATTRIBUTES) overrides the service's own name.
	res, err := resource.New(ctx, resource.WithAttributes(semconv.ServiceName(service)), resource.WithFromEnv(),
		resource.WithTelemetrySDK(), resource.WithHost())
	if err != nil {
		return nil, fmt.Errorf("OpenTelemetry resource: %w", err)
	}
	// The sampler is the SDK's default: OTEL_TRACES_SAMPLER
	// (parentbased_always_on when unset).
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res)), nil
}
