package dispatcher

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/internal/servicetest"
	"github.com/ax-scheduler/ax/internal/wait"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

// TestFiringInsertedWhileABatchAwaitsItsAcks holds the acknowledgements of
// one batch of firings (its rest waits before awaiting them) and fires
// again: the second firing's instance is committed and its trigger message
// acknowledged while the first batch still waits, and the first batch's
// trigger message stays un-acknowledged until its acknowledgements are
// awaited. Handled one batch at a time, the second firing waited for the
// first batch's acknowledgements.
func TestFiringInsertedWhileABatchAwaitsItsAcks(t *testing.T) {
	t.Parallel()
	srv := streamstest.NewServer(t, streams.Config{})
	conn, js := srv.Connect()
	st := store.New(storetest.NewDB(t))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	def := &schemas.Task{TaskName: "overlap", Execution: schemas.Execution{Handler: "test.noop"}}
	if _, _, err := st.ApplyTask(ctx, def, "test"); err != nil {
		t.Fatal(err)
	}
	d, err := New(Options{Conn: conn, Store: st, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	held, release := make(chan struct{}), make(chan struct{})
	d.beforeTriggerAcks = func(firings []firing) {
		for _, f := range firings {
			if f.event.EventID == "first" {
				close(held)
				<-release
				return
			}
		}
	}
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	servicetest.Start(t, "dispatcher", d)

	fire := func(eventID string) uint64 {
		t.Helper()
		m := nats.NewMsg(srv.Topology.Trigger("overlap"))
		m.Data = []byte(`{"event_id": "` + eventID + `"}`)
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	firstSeq := fire("first")
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the first firing's batch never came to await its acknowledgements")
	}
	first, err := st.InstanceByEvent(ctx, "overlap", "first")
	if err != nil {
		t.Fatalf("the first firing's instance is not committed before its acknowledgements are awaited: %v", err)
	}

	fire("second")
	var second schemas.Instance
	if err := wait.Until(ctx, func() (bool, error) {
		second, err = st.InstanceByEvent(ctx, "overlap", "second")
		if errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		return err == nil, err
	}); err != nil {
		t.Fatalf("the second firing was not inserted while the first batch awaited its acknowledgements: %v", err)
	}
	if second.ID <= first.ID {
		t.Errorf("second instance %d, first %d: the later firing's instance must come after", second.ID, first.ID)
	}
	cons, err := js.Consumer(ctx, srv.Topology.TriggersStream(), srv.Topology.DispatcherConsumer().Durable)
	if err != nil {
		t.Fatal(err)
	}
	// The second firing's message is acknowledged, the first's is not.
	var info *jetstream.ConsumerInfo
	if err := wait.Until(ctx, func() (bool, error) {
		info, err = cons.Info(ctx)
		return err == nil && info.NumAckPending == 1 && info.NumPending == 0, err
	}); err != nil {
		t.Fatalf("the second firing's message was not acknowledged while the first batch waited: %v (%+v)", err, info)
	}
	if info.AckFloor.Stream >= firstSeq {
		t.Errorf("ack floor at stream sequence %d, want below the first firing's %d: it was acknowledged before its publish was",
			info.AckFloor.Stream, firstSeq)
	}

	close(release)
	if err := wait.Until(ctx, func() (bool, error) {
		info, err = cons.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0, err
	}); err != nil {
		t.Fatalf("the first firing's message was not acknowledged once its batch went on: %v (%+v)", err, info)
	}
	stream, err := js.Stream(ctx, srv.Topology.DispatchStream())
	if err != nil {
		t.Fatal(err)
	}
	sinfo, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sinfo.State.Msgs != 2 {
		t.Errorf("%d dispatch messages stored, want 2 (one per instance)", sinfo.State.Msgs)
	}
}
