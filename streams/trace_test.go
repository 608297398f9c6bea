package streams_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

// A delayed firing keeps its trace: the server publishes a message
// schedule with the schedule's headers but its own (Nats-Schedule*, the
// message id), so the firing it publishes on AX_FIRINGS carries the
// traceparent and tracestate the schedule was given.
func TestScheduledFiringKeepsTheTraceHeaders(t *testing.T) {
	t.Parallel()
	srv := streamstest.NewServer(t, streams.Config{})
	_, js := srv.Connect()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	top := srv.Topology
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	state, _ := trace.ParseTraceState("ax=1")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled,
		TraceState: state, Remote: true})
	target := top.APITrigger("t")
	m, err := streams.NewScheduleMsg(top.SchedFiring("t", "later"), target, "later", time.Now().Add(500*time.Millisecond),
		map[string]string{"event_id": "later"})
	if err != nil {
		t.Fatal(err)
	}
	streams.InjectTrace(trace.ContextWithRemoteSpanContext(ctx, sc), m.Header)
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	c, err := js.OrderedConsumer(ctx, top.FiringsStream(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{target}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Next(jetstream.FetchContext(ctx))
	if err != nil {
		t.Fatalf("the schedule published nothing to %s: %v", target, err)
	}
	if got.Headers().Get(streams.HeaderScheduler) == "" {
		t.Errorf("the message on %s has no %s header: not the schedule's (headers %v)", target, streams.HeaderScheduler, got.Headers())
	}
	if p, s := streams.TraceParent(got.Headers()), streams.TraceState(got.Headers()); p != "00-"+tid.String()+"-"+sid.String()+"-01" || s != "ax=1" {
		t.Errorf("the scheduled firing carries traceparent %q, tracestate %q; want the schedule's (headers %v)", p, s, got.Headers())
	}
}
