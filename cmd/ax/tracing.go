package main

import (
	"context"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ax-scheduler/ax/internal/telemetry"
)

// startTracing installs OpenTelemetry's SDK as the global TracerProvider
// when the OTEL_* variables ask for traces (see telemetry.Setup), named
// service unless OTEL_SERVICE_NAME says otherwise, and returns it for the
// services' Options. Without an OTLP endpoint nothing is installed and tp
// is nil: the services make no spans, and spend nothing on them. stop
// flushes the spans still held.
func startTracing(ctx context.Context, service string, log zerolog.Logger) (tp trace.TracerProvider, stop func(), err error) {
	sdk, err := telemetry.Setup(ctx, service)
	if err != nil || sdk == nil {
		return nil, func() {}, err
	}
	otel.SetTracerProvider(sdk)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	log.Info().Str("service_name", service).Msg("exporting traces over OTLP (the OTEL_* variables)")
	return sdk, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := sdk.Shutdown(ctx); err != nil {
			log.Warn().Err(err).Msg("flush the last spans")
		}
	}, nil
}
