package dispatcher

import (
	"testing"

	"go.opentelemetry.io/otel/trace/noop"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
)

// Without a TracerProvider, a firing without a traceparent leaves its
// instance no trace context, and one with a traceparent passes it on
// unchanged to the instance and to its dispatch message: a caller's trace
// goes through an installation that does not trace.
func TestTraceContextWithoutProvider(t *testing.T) {
	t.Parallel()
	tr := newTracing(noop.NewTracerProvider())
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tc := range []struct {
		in   store.Trace
		want store.Trace
	}{
		{store.Trace{}, store.Trace{}},
		{store.Trace{Parent: parent, State: "vendor=x"}, store.Trace{Parent: parent, State: "vendor=x"}},
		{store.Trace{Parent: "not a traceparent"}, store.Trace{}},
	} {
		f := &firing{task: "t", event: schemas.TriggerEvent{EventID: "e"}, trace: tc.in}
		span := tr.startCreate(f)
		got := traceOf(span)
		endCreate(span, nil, nil)
		if got != tc.want {
			t.Errorf("instance of a firing with %+v keeps %+v, want %+v", tc.in, got, tc.want)
		}
		a := store.Attempt{ID: 1, Attempt: 1, Trace: got}
		d := tr.startDispatch(&a)
		if dispatched := traceOf(d).Parent; dispatched != tc.want.Parent {
			t.Errorf("dispatch message of an instance with %+v carries %q, want %q", got, dispatched, tc.want.Parent)
		}
		endDispatch(d, route{}, nil)
	}
}

// BenchmarkTracingOff is what the spans of one firing cost the
// dispatcher when nothing traces: its creation and its dispatch.
func BenchmarkTracingOff(b *testing.B) {
	tr := newTracing(nil) // the default: no provider
	f := &firing{task: "t", event: schemas.TriggerEvent{EventID: "e"}}
	b.ReportAllocs()
	for b.Loop() {
		span := tr.startCreate(f)
		a := store.Attempt{ID: 1, Attempt: 1, Trace: traceOf(span)}
		endCreate(span, &a, nil)
		endDispatch(tr.startDispatch(&a), route{}, nil)
	}
}
