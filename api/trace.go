package api

import (
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// tracerName is the instrumentation scope of the API's spans.
const tracerName = "github.com/ax-scheduler/ax/api"

// traced wraps h, the handler of a POST route (a firing, a rerun, a
// cancel: what publishes), in a server span, a child of the request's
// W3C traceparent header when it has one. The firings the handler
// publishes carry the span's context (streams.Publish, streams.InjectTrace),
// so the caller's trace id is the firing's. Other routes are not traced:
// reads, which the console polls, would be most of the spans.
func (s *Service) traced(rt Route, h http.Handler) http.Handler {
	if rt.Method != http.MethodPost {
		return h
	}
	tp := s.opts.TracerProvider
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	tracer := tp.Tracer(tracerName)
	name := rt.Method + " " + rt.Pattern
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		if !span.SpanContext().IsValid() {
			h.ServeHTTP(w, r) // no tracing and nothing to pass on
			return
		}
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r.WithContext(ctx))
		if !span.IsRecording() {
			return
		}
		span.SetAttributes(attribute.String("http.request.method", rt.Method), attribute.String("http.route", rt.Pattern),
			attribute.Int("http.response.status_code", sw.status))
		if task := r.PathValue("name"); task != "" {
			span.SetAttributes(attribute.String("ax.task", task))
		}
		if sw.status >= http.StatusInternalServerError {
			span.SetStatus(codes.Error, http.StatusText(sw.status))
		}
	})
}
