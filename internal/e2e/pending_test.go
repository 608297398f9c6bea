package e2e_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// TestPendingFirings pins issue 27's scheduled firings: a delayed firing
// is listed with its due time and answers GET /v1/tasks/{task}/runs/{event}
// (202, not 404) before its instance exists; one cancelled never fires
// (no firing reaches the stream the dispatcher reads, no instance), while
// its neighbour due at the same time runs; one fired now runs at once
// under its event id.
func TestPendingFirings(t *testing.T) {
	s := newSystem(t)
	s.executor("worker-1", builtinsMux(), 2)
	s.apply("task_name: later\nexecution: {handler: builtin.echo}\n")
	ctx := context.Background()
	fire := func(id, delay string) {
		t.Helper()
		res, err := s.client.Fire(ctx, "later", wire.FireRequest{EventID: id, Delay: delay, Payload: []byte(`{"id":"` + id + `"}`)})
		if err != nil || res.RunAt.IsZero() {
			t.Fatalf("fire %s with delay %s: %+v, %v", id, delay, res, err)
		}
	}
	fire("cancelled", "5s")
	fire("kept", "5s")
	fire("hurried", "1h")

	list, err := s.client.ListFirings(ctx, "later", 0)
	if err != nil {
		t.Fatal(err)
	}
	due := map[string]time.Time{}
	for _, f := range list.Firings {
		due[f.EventID] = f.RunAt
	}
	if len(due) != 3 || time.Until(due["hurried"]) < 50*time.Minute || time.Until(due["kept"]) > 6*time.Second ||
		list.Firings[2].EventID != "hurried" {
		t.Fatalf("pending firings = %+v, want the three, soonest first", list.Firings)
	}
	var pending *apiclient.PendingError
	if _, err := s.client.InstanceByEvent(ctx, "later", "cancelled"); !errors.As(err, &pending) || !pending.Firing.RunAt.Equal(due["cancelled"]) {
		t.Fatalf("GET /v1/tasks/later/runs/cancelled = %v, want the pending firing", err)
	}

	if _, err := s.client.CancelFiring(ctx, "later", "cancelled"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.CancelFiring(ctx, "later", "cancelled"); !apiclient.IsNotFound(err) {
		t.Errorf("cancel again = %v, want 404", err)
	}
	now, err := s.client.FireNow(ctx, "later", "hurried")
	if err != nil || now.EventID != "hurried" {
		t.Fatalf("fire now = %+v, %v", now, err)
	}
	hurried, err := s.client.WaitFiring(ctx, "later", "hurried")
	if err != nil {
		t.Fatal(err)
	}
	s.waitState(hurried.ID, schemas.StateSucceeded, time.Minute)

	// The neighbour due with the cancelled one runs; by then the cancelled
	// one would have fired.
	kept, err := s.client.WaitFiring(ctx, "later", "kept")
	if err != nil {
		t.Fatal(err)
	}
	s.waitState(kept.ID, schemas.StateSucceeded, time.Minute)
	if _, err := s.store.InstanceByEvent(ctx, "later", "cancelled"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the cancelled firing made an instance: %v", err)
	}
	_, js := s.srv.Connect()
	stream, err := js.Stream(ctx, streams.Default().FiringsStream())
	if err != nil {
		t.Fatal(err)
	}
	scheduler := streams.Default().SchedFiring("later", "cancelled")
	for seq := uint64(1); ; seq++ {
		m, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(streams.Default().APITrigger("later")))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if m.Header.Get(streams.HeaderScheduler) == scheduler {
			t.Errorf("the cancelled schedule fired: message %d on %s", m.Sequence, m.Subject)
		}
		seq = m.Sequence
	}
	if list, err := s.client.ListFirings(ctx, "", 0); err != nil || len(list.Firings) != 0 {
		t.Errorf("pending firings at the end = %+v, %v; want none", list.Firings, err)
	}
}
