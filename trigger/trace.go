package trigger

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// tracerName is the instrumentation scope of the trigger service's spans.
const tracerName = "github.com/ax-scheduler/ax/trigger"

// newTracer returns the tracer of tp, or a no-op one when tp is nil.
func newTracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = noop.NewTracerProvider()
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

// startBackfillFire starts ax.trigger.fire for tick t of backfill bf,
// published as m: a root span, as a cron firing's, with the backfill's
// id, whose context m's traceparent header carries.
func (s *Service) startBackfillFire(bf *schemas.Backfill, t time.Time, m *nats.Msg) trace.Span {
	ctx, span := s.tracer.Start(context.Background(), "ax.trigger.fire", trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		span.SetAttributes(attribute.String("ax.task", bf.Task), attribute.Int("ax.trigger_index", bf.TriggerIndex),
			attribute.String("ax.tick", t.UTC().Format(time.RFC3339)), attribute.Int64("ax.backfill", bf.ID),
			attribute.String("messaging.system", "nats"), attribute.String("messaging.destination.name", m.Subject))
		streams.InjectTrace(ctx, m.Header)
	}
	return span
}

// endFire ends f's span once its publish was answered.
func endFire(f *firing) {
	if f.span == nil {
		return
	}
	endSpan(f.span, f.err)
	f.span = nil
}

// endSpan ends span, which failed with err when err is not nil.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
