package dispatcher

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// The dispatcher's spans (docs/operations.md, "Traces"):
//
//   - ax.dispatcher.create, one a firing that makes an instance: a child
//     of the trace context the trigger message carries (the API's span,
//     the trigger service's, or an outside publisher's own traceparent).
//     The instance keeps its context in PostgreSQL (store.Trace), so that
//     every attempt, however late it is scheduled, continues the trace.
//   - ax.dispatcher.dispatch, one an attempt routed: a child of the
//     instance's context, with the route decision; its context rides in
//     the dispatch message's traceparent header to the executor.
//   - ax.dispatcher.report, one a final report recorded: a child of the
//     executor's span of the attempt (the report's traceparent), with the
//     outcome.
//   - ax.dispatcher.retry, a child of the report's span when its outcome
//     schedules another attempt.
//
// Without a TracerProvider the spans are OpenTelemetry's no-op ones: a
// firing that came without a traceparent costs a few comparisons, and
// one that came with one still passes it on.

// tracerName is the instrumentation scope of the dispatcher's spans.
const tracerName = "github.com/ax-scheduler/ax/dispatcher"

// The start options of the spans, made once: a span's options are the
// one allocation left when nothing traces.
var (
	consumerSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
	producerSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer)}
)

// tracing makes the dispatcher's spans.
type tracing struct{ tracer trace.Tracer }

func newTracing(tp trace.TracerProvider) tracing {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return tracing{tracer: tp.Tracer(tracerName)}
}

// traceOf returns the trace context of span as PostgreSQL keeps it.
func traceOf(span trace.Span) store.Trace {
	if !span.SpanContext().IsValid() {
		return store.Trace{}
	}
	p, s := streams.TraceHeaders(trace.ContextWithSpan(context.Background(), span))
	return store.Trace{Parent: p, State: s}
}

// startCreate starts the span of the instance that firing f makes.
func (t tracing) startCreate(f *firing) trace.Span {
	parent := streams.WithTraceHeaders(context.Background(), f.trace.Parent, f.trace.State)
	_, span := t.tracer.Start(parent, "ax.dispatcher.create", consumerSpan...)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("ax.task", f.task), attribute.String("ax.event_id", f.event.EventID),
			attribute.String("ax.source", string(f.event.Source)), attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", f.msg.Subject()))
	}
	return span
}

// endCreate ends the span of the instance a, or of a firing that made
// none (a is nil) because err.
func endCreate(span trace.Span, a *store.Attempt, err error) {
	if span.IsRecording() {
		switch {
		case a != nil:
			span.SetAttributes(attribute.Int64("ax.instance_id", a.ID), attribute.String("ax.state", string(a.State)),
				attribute.Bool("ax.existing", a.Republished))
		case err != nil:
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// startDispatch starts the span of attempt a's routing, a child of the
// instance's trace context.
func (t tracing) startDispatch(a *store.Attempt) trace.Span {
	if a.Trace.Parent == "" {
		return trace.SpanFromContext(context.Background()) // no-op: nothing to continue, nothing sampled
	}
	parent := streams.WithTraceHeaders(context.Background(), a.Trace.Parent, a.Trace.State)
	_, span := t.tracer.Start(parent, "ax.dispatcher.dispatch", producerSpan...)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("ax.task", a.Task), attribute.Int64("ax.instance_id", a.ID),
			attribute.Int("ax.attempt", a.Attempt), attribute.String("ax.pool", a.Pool),
			attribute.String("ax.handler", a.Handler), attribute.String("ax.strategy", string(a.Strategy)))
	}
	return span
}

// endDispatch ends the span of an attempt routed by r, or not routed
// because err.
func endDispatch(span trace.Span, r route, err error) {
	if span.IsRecording() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		} else {
			span.SetAttributes(attribute.String("messaging.system", "nats"),
				attribute.String("messaging.destination.name", r.subject), attribute.String("ax.worker_id", r.worker))
			if r.pool != "" {
				span.SetAttributes(attribute.String("ax.pool", r.pool))
			}
		}
	}
	span.End()
}

// startReport starts the span of final report r, recorded with outcome
// o from start on: a child of the executor's span of the attempt.
func (t tracing) startReport(ctx context.Context, r *schemas.Report, o *store.Outcome, start time.Time) (context.Context, trace.Span) {
	if r.Traceparent == "" {
		return ctx, trace.SpanFromContext(context.Background())
	}
	parent := streams.WithTraceHeaders(ctx, r.Traceparent, "")
	ctx, span := t.tracer.Start(parent, "ax.dispatcher.report", trace.WithSpanKind(trace.SpanKindConsumer), trace.WithTimestamp(start))
	if span.IsRecording() {
		span.SetAttributes(attribute.String("ax.task", o.Task), attribute.Int64("ax.instance_id", r.InstanceID),
			attribute.Int("ax.attempt", r.Attempt), attribute.String("ax.worker_id", r.WorkerID),
			attribute.String("ax.pool", r.Pool), attribute.String("ax.outcome", string(r.Kind)),
			attribute.Bool("ax.applied", o.Applied), attribute.String("ax.state", string(o.State)))
		if r.Kind == schemas.ReportFailed {
			span.SetStatus(codes.Error, r.Error)
		}
	}
	return ctx, span
}

// refuseReport ends a report's span with why it was refused.
func refuseReport(span trace.Span, reason string) {
	if span.IsRecording() {
		span.SetAttributes(attribute.Bool("ax.refused", true))
		span.SetStatus(codes.Error, reason)
	}
	span.End()
}

// retrySpan records, under the report's span in ctx, that o's next
// attempt was scheduled after wait.
func (t tracing) retrySpan(ctx context.Context, o *store.Outcome, wait time.Duration, err error) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return
	}
	t.retry(ctx, o, wait, err)
}

// reapedRetrySpan records that the reaper scheduled o's next attempt after
// wait, o's attempt failed because cause: no report came, so the span is a
// child of the instance's trace context, beside its attempts' dispatches.
func (t tracing) reapedRetrySpan(o *store.Outcome, wait time.Duration, cause string, err error) {
	if o.Trace.Parent == "" {
		return
	}
	t.retry(streams.WithTraceHeaders(context.Background(), o.Trace.Parent, o.Trace.State), o, wait, err,
		attribute.String("ax.cause", cause))
}

// retry records an ax.dispatcher.retry span of o, a child of ctx's.
func (t tracing) retry(ctx context.Context, o *store.Outcome, wait time.Duration, err error, attrs ...attribute.KeyValue) {
	_, span := t.tracer.Start(ctx, "ax.dispatcher.retry", trace.WithAttributes(
		attribute.String("ax.task", o.Task), attribute.Int64("ax.instance_id", o.InstanceID),
		attribute.Int("ax.attempt", o.Attempt+1), attribute.Int64("ax.retry_wait_ms", wait.Milliseconds())),
		trace.WithAttributes(attrs...))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
