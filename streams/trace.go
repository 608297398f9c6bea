package streams

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Trace context on AX's messages: the W3C Trace Context headers, as HTTP
// carries them. A trigger event, a dispatch message and a single report
// carry the span context of the span that sent them, so that one firing is
// one trace across the services; a report batch carries each report's in
// its body (schemas.Report.Traceparent), since one header cannot name
// them all. Only the OpenTelemetry API is linked here: a program that
// installs no TracerProvider still passes on the context it was given.
const (
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)

var traceContext propagation.TraceContext

// headerCarrier reads and writes W3C headers on a NATS header, which is
// case-sensitive: it writes lower case, as W3C and other languages'
// clients do, and reads any case.
type headerCarrier nats.Header

func (c headerCarrier) Get(key string) string {
	if v := nats.Header(c).Get(key); v != "" {
		return v
	}
	for k, v := range c {
		if len(v) > 0 && strings.EqualFold(k, key) {
			return v[0]
		}
	}
	return ""
}

func (c headerCarrier) Set(key, value string) { nats.Header(c).Set(key, value) }

func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// InjectTrace sets the traceparent and tracestate headers of h from the
// span context of ctx; it sets nothing when ctx has no valid one. h must
// not be nil.
func InjectTrace(ctx context.Context, h nats.Header) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		traceContext.Inject(ctx, headerCarrier(h))
	}
}

// ExtractTrace returns ctx with the remote span context that h's
// traceparent and tracestate headers hold, or ctx itself when they hold
// none that is valid.
func ExtractTrace(ctx context.Context, h nats.Header) context.Context {
	if len(h) == 0 {
		return ctx
	}
	return traceContext.Extract(ctx, headerCarrier(h))
}

// TraceHeaders returns the traceparent and tracestate header values of
// the span context of ctx, "" when it has no valid one.
func TraceHeaders(ctx context.Context) (parent, state string) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return "", ""
	}
	c := propagation.MapCarrier{}
	traceContext.Inject(ctx, c)
	return c[HeaderTraceParent], c[HeaderTraceState]
}

// WithTraceHeaders returns ctx with the remote span context of the
// traceparent and tracestate values parent and state (as TraceHeaders
// returns them, or as PostgreSQL or a report body keeps them), or ctx
// itself when parent is empty or invalid.
func WithTraceHeaders(ctx context.Context, parent, state string) context.Context {
	if parent == "" {
		return ctx
	}
	c := propagation.MapCarrier{HeaderTraceParent: parent}
	if state != "" {
		c[HeaderTraceState] = state
	}
	return traceContext.Extract(ctx, c)
}

// TraceHeader returns the Header that AsyncBatch.AddData takes for the
// traceparent value parent, and false when parent is empty.
func TraceHeader(parent string) (Header, bool) {
	return Header{Key: HeaderTraceParent, Value: parent}, parent != ""
}

// TraceParent returns the traceparent header of h, in any case, "" for none.
func TraceParent(h nats.Header) string { return headerCarrier(h).Get(HeaderTraceParent) }

// TraceState returns the tracestate header of h, in any case, "" for none.
func TraceState(h nats.Header) string { return headerCarrier(h).Get(HeaderTraceState) }

// CopyTrace sets the traceparent and tracestate headers of dst to those
// of src, if it has them: a message published again on another subject
// stays in its trace.
func CopyTrace(dst, src nats.Header) {
	if p := TraceParent(src); p != "" {
		dst.Set(HeaderTraceParent, p)
		if s := TraceState(src); s != "" {
			dst.Set(HeaderTraceState, s)
		}
	}
}
