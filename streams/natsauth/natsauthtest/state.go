package natsauthtest

import (
	"reflect"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/streams"
)

// State is what an attack on the topology must leave as it was: the
// streams, their messages and their consumers.
type State struct {
	Streams   map[string]jetstream.StreamConfig   // by stream name
	Msgs      map[string]uint64                   // messages per stream, a keeper aside
	Consumers map[string]jetstream.ConsumerConfig // by "stream/consumer"
	Waiting   map[string]uint64                   // a consumer's messages not yet delivered
	Delivered map[string]uint64                   // a consumer's messages delivered, unacknowledged
}

// Snapshot reads the State of every stream js sees (the dispatcher's user
// sees them all). It fails the test when a stream cannot be read.
func Snapshot(t testing.TB, js jetstream.JetStream) State {
	t.Helper()
	ctx := t.Context()
	s := State{Streams: map[string]jetstream.StreamConfig{}, Msgs: map[string]uint64{},
		Consumers: map[string]jetstream.ConsumerConfig{}, Waiting: map[string]uint64{}, Delivered: map[string]uint64{}}
	for name := range js.StreamNames(ctx).Name() {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info := st.CachedInfo()
		s.Streams[name] = info.Config
		// A work-queue stream's keeper is replaced while the dispatcher
		// runs (streams.Keeper): the messages that count are the others.
		if s.Msgs[name], err = streams.Default().Held(ctx, st); err != nil {
			t.Fatal(err)
		}
		for c := range st.ListConsumers(ctx).Info() {
			s.Consumers[name+"/"+c.Name] = c.Config
			s.Waiting[name+"/"+c.Name] = c.NumPending
			s.Delivered[name+"/"+c.Name] = uint64(c.NumAckPending)
		}
	}
	return s
}

// CheckUnchanged fails the test, naming what, for every stream, message
// count, consumer and consumer's count of waiting or delivered messages in
// which s differs from before.
func (s State) CheckUnchanged(t testing.TB, before State) {
	t.Helper()
	for name, cfg := range before.Streams {
		if !reflect.DeepEqual(s.Streams[name], cfg) {
			t.Errorf("stream %s is now %+v, was %+v", name, s.Streams[name], cfg)
		}
	}
	if len(s.Streams) != len(before.Streams) {
		t.Errorf("%d streams, were %d", len(s.Streams), len(before.Streams))
	}
	if !reflect.DeepEqual(s.Msgs, before.Msgs) {
		t.Errorf("messages per stream = %v, were %v", s.Msgs, before.Msgs)
	}
	if !reflect.DeepEqual(s.Consumers, before.Consumers) {
		t.Errorf("consumers = %+v, were %+v", s.Consumers, before.Consumers)
	}
	if !reflect.DeepEqual(s.Waiting, before.Waiting) || !reflect.DeepEqual(s.Delivered, before.Delivered) {
		t.Errorf("messages waiting %v and delivered %v per consumer, were %v and %v", s.Waiting, s.Delivered, before.Waiting, before.Delivered)
	}
}
