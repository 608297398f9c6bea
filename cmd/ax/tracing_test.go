package main

import (
	"context"
	"testing"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The services get the SDK's provider when the OTEL_* variables ask for
// traces, and none (no spans, no cost) when they do not.
func TestStartTracingGivesTheServicesTheirProvider(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	tp, stop, err := startTracing(context.Background(), "ax-test", zerolog.Nop())
	if err != nil || tp != nil {
		t.Fatalf("without an endpoint: startTracing = %v, %v; want no provider", tp, err)
	}
	stop()

	global := otel.GetTracerProvider()
	t.Cleanup(func() { otel.SetTracerProvider(global) })
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	tp, stop, err = startTracing(context.Background(), "ax-test", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if _, ok := tp.(*sdktrace.TracerProvider); !ok {
		t.Fatalf("with an endpoint: startTracing gave %T, want the SDK's provider", tp)
	}
	if otel.GetTracerProvider() != tp {
		t.Fatalf("with an endpoint: the global provider is %T, want the one the services get", otel.GetTracerProvider())
	}
}
