package trigger

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/ax-scheduler/ax/streams"
)

// tracerName is the instrumentation scope of the trigger service's spans.
const tracerName = "github.com/ax-scheduler/ax/trigger"

// newTracer returns the tracer of tp, or of the global provider when tp
// is nil.
func newTracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(tracerName)
}

// startFire starts ax.trigger.fire, the root span of a cron firing's
// trace, as f is published: the dispatcher's span of its instance is its
// child (the message's traceparent header). It returns the header's
// value, "" when the span is a no-op (no TracerProvider).
func (s *Service) startFire(f *firing) string {
	_, f.span = s.tracer.Start(context.Background(), "ax.trigger.fire", trace.WithSpanKind(trace.SpanKindProducer))
	if !f.span.IsRecording() {
		return ""
	}
	f.span.SetAttributes(attribute.String("ax.task", f.key.Task), attribute.Int("ax.trigger_index", f.key.TriggerIndex),
		attribute.String("ax.tick", time.Unix(0, f.tick).UTC().Format(time.RFC3339)),
		attribute.String("messaging.system", "nats"), attribute.String("messaging.destination.name", f.subject))
	parent, _ := streams.TraceHeaders(trace.ContextWithSpan(context.Background(), f.span))
	return parent
}

// endFire ends f's span once its publish was answered.
func endFire(f *firing) {
	if f.span == nil {
		return
	}
	if f.err != nil {
		f.span.RecordError(f.err)
		f.span.SetStatus(codes.Error, f.err.Error())
	}
	f.span.End()
	f.span = nil
}
