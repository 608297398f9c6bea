package executor

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// The executor's span of an attempt, ax.executor.run: a consumer span,
// child of the dispatcher's span that routed the attempt (the dispatch
// message's traceparent header), from the lease to the stored final
// report. The handler's context carries it, so a handler's own spans
// (and the calls it makes with an instrumented client) join the firing's
// trace. The final report names it (schemas.Report.Traceparent), so the
// dispatcher's span of the recorded report is its child. Only the
// OpenTelemetry API is linked (not its global provider, which links a
// logger and more): the spans go where Options.TracerProvider sends them,
// nowhere without one; the trace context passes on either way.

// tracerName is the instrumentation scope of the executor's spans.
const tracerName = "github.com/ax-scheduler/ax/executor"

// tracer returns the worker's tracer: its option's provider's, or one
// that records nothing.
func (o *Options) tracer() trace.Tracer {
	if o.TracerProvider != nil {
		return o.TracerProvider.Tracer(tracerName)
	}
	return noop.NewTracerProvider().Tracer(tracerName)
}

// startRun starts the span of the attempt of p, a child of the trace
// context its dispatch message carries.
func (s *Service) startRun(p *pending) trace.Span {
	parent := streams.ExtractTrace(context.Background(), p.msg.Headers())
	d := &p.d
	_, span := s.tracer.Start(parent, "ax.executor.run", trace.WithSpanKind(trace.SpanKindConsumer))
	// Attributes only for a span that records them: without a provider
	// the span records nothing, and building them cost a run allocations.
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("ax.task", d.Task),
			attribute.Int64("ax.instance_id", d.InstanceID),
			attribute.Int("ax.attempt", d.Attempt),
			attribute.String("ax.pool", poolOf(d)),
			attribute.String("ax.handler", d.Handler),
			attribute.String("ax.worker_id", s.opts.WorkerID),
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", p.msg.Subject()),
		)
	}
	return span
}

// endRun records the outcome of the attempt's final report rep on its
// span: the handler's error (err) and the report's kind and error.
func endRun(span trace.Span, rep *schemas.Report, err error) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.String("ax.outcome", string(rep.Kind)))
	if rep.Kind == schemas.ReportSucceeded {
		return
	}
	if rep.Permanent {
		span.SetAttributes(attribute.Bool("ax.permanent", true))
	}
	if err != nil {
		span.RecordError(err)
	}
	span.SetStatus(codes.Error, rep.Error)
}

// traceparentOf returns the traceparent header value of span, "" when its
// span context is not valid.
func traceparentOf(span trace.Span) string {
	parent, _ := streams.TraceHeaders(trace.ContextWithSpan(context.Background(), span))
	return parent
}
