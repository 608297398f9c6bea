package main

import (
	"context"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"

	"github.com/ax-scheduler/ax/internal/telemetry"
)

// startTracing installs OpenTelemetry's SDK as the global TracerProvider
// when the OTEL_* variables ask for traces (see telemetry.Setup), named
// service unless OTEL_SERVICE_NAME says otherwise; the services, which
// use the global provider, then export their spans. Without an OTLP
// endpoint nothing is installed and the services' spans are no-ops. stop
// flushes the spans still held.
func startTracing(ctx context.Context, service string, log zerolog.Logger) (stop func(), err error) {
	tp, err := telemetry.Setup(ctx, service)
	if err != nil || tp == nil {
		return func() {}, err
	}
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	log.Info().Str("service_name", service).Msg("exporting traces over OTLP (the OTEL_* variables)")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			log.Warn().Err(err).Msg("flush the last spans")
		}
	}, nil
}
