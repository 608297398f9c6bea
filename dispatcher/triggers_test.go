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

// batchRig is a dispatcher whose trigger batches a test holds with its
// hooks, on a NATS server and a database of its own.
type batchRig struct {
	t   *testing.T
	ctx context.Context
	srv *streamstest.Server
	js  jetstream.JetStream
	st  *store.Store
	d   *Service
}

// newBatchRig applies defs and makes a dispatcher, which start runs once
// the test has set its hooks.
func newBatchRig(t *testing.T, defs ...*schemas.Task) *batchRig {
	t.Helper()
	srv := streamstest.NewServer(t, streams.Config{})
	conn, js := srv.Connect()
	st := store.New(storetest.NewDB(t))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	for _, def := range defs {
		if _, _, err := st.ApplyTask(ctx, def, "test"); err != nil {
			t.Fatal(err)
		}
	}
	d, err := New(Options{Conn: conn, Store: st, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	return &batchRig{t: t, ctx: ctx, srv: srv, js: js, st: st, d: d}
}

func (b *batchRig) start() { servicetest.Start(b.t, "dispatcher", b.d) }

// fire publishes a firing of task with eventID and returns its stream sequence.
func (b *batchRig) fire(task, eventID string) uint64 {
	b.t.Helper()
	m := nats.NewMsg(b.srv.Topology.Trigger(task))
	m.Data = []byte(`{"event_id": "` + eventID + `"}`)
	ack, err := b.js.PublishMsg(b.ctx, m)
	if err != nil {
		b.t.Fatal(err)
	}
	return ack.Sequence
}

// instance waits for the instance of task's firing eventID.
func (b *batchRig) instance(task, eventID, why string) schemas.Instance {
	b.t.Helper()
	var in schemas.Instance
	if err := wait.Until(b.ctx, func() (bool, error) {
		var err error
		in, err = b.st.InstanceByEvent(b.ctx, task, eventID)
		if errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		return err == nil, err
	}); err != nil {
		b.t.Fatalf("%s: %v", why, err)
	}
	return in
}

// consumer waits for the dispatcher's consumer to have taken every firing
// and to wait for the acknowledgement of pending of them.
func (b *batchRig) consumer(pending int, why string) *jetstream.ConsumerInfo {
	b.t.Helper()
	cons, err := b.js.Consumer(b.ctx, b.srv.Topology.TriggersStream(), b.srv.Topology.DispatcherConsumer().Durable)
	if err != nil {
		b.t.Fatal(err)
	}
	var info *jetstream.ConsumerInfo
	if err := wait.Until(b.ctx, func() (bool, error) {
		info, err = cons.Info(b.ctx)
		return err == nil && info.NumAckPending == pending && info.NumPending == 0, err
	}); err != nil {
		b.t.Fatalf("%s: %v (%+v)", why, err, info)
	}
	return info
}

// dispatched returns the instance ids of the dispatch messages stored, in
// the stream's order.
func (b *batchRig) dispatched() []int64 {
	b.t.Helper()
	stream, err := b.js.Stream(b.ctx, b.srv.Topology.DispatchStream())
	if err != nil {
		b.t.Fatal(err)
	}
	info, err := stream.Info(b.ctx)
	if err != nil {
		b.t.Fatal(err)
	}
	var ids []int64
	keeper := b.srv.Topology.Keeper(b.srv.Topology.DispatchStream())
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := stream.GetMsg(b.ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // a keeper replaced since (streams.Keeper)
		}
		if err != nil {
			b.t.Fatal(err)
		}
		if m.Subject == keeper {
			continue
		}
		d, err := streams.Decode[schemas.Dispatch](m.Subject, m.Data)
		if err != nil {
			b.t.Fatal(err)
		}
		ids = append(ids, d.InstanceID)
	}
	return ids
}

// hold holds the first batch that carries the firing eventID until free
// is called; held is closed once it holds it. A test frees it (defer) before
// its cleanup stops the dispatcher, which waits for the batch.
type hold struct {
	eventID       string
	held, release chan struct{}
}

func newHold(eventID string) *hold {
	return &hold{eventID: eventID, held: make(chan struct{}), release: make(chan struct{})}
}

func (h *hold) hook(firings []firing) {
	for _, f := range firings {
		if f.event.EventID == h.eventID {
			select {
			case <-h.held:
				return // held once
			default:
			}
			close(h.held)
			<-h.release
			return
		}
	}
}

func (h *hold) wait(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	select {
	case <-h.held:
	case <-ctx.Done():
		t.Fatalf("%s never came", what)
	}
}

func (h *hold) free() {
	select {
	case <-h.release:
	default:
		close(h.release)
	}
}

var plainTask = &schemas.Task{TaskName: "overlap", Execution: schemas.Execution{Handler: "test.noop"}}

// TestFiringInsertedWhileABatchAwaitsItsAcks holds the acknowledgements of
// one batch of firings (it waits before it awaits them) and fires again:
// the second firing's instance is committed and its trigger message
// acknowledged while the first batch still waits, and the first batch's
// trigger message stays un-acknowledged until its acknowledgements are
// awaited. Handled one batch at a time, the second firing waited for the
// first batch's acknowledgements.
func TestFiringInsertedWhileABatchAwaitsItsAcks(t *testing.T) {
	t.Parallel()
	b := newBatchRig(t, plainTask)
	h := newHold("first")
	defer h.free()
	b.d.setHooks(testHooks{beforeAcks: h.hook})
	b.start()

	firstSeq := b.fire("overlap", "first")
	h.wait(t, b.ctx, "the first firing's batch awaiting its acknowledgements")
	first, err := b.st.InstanceByEvent(b.ctx, "overlap", "first")
	if err != nil {
		t.Fatalf("the first firing's instance is not committed before its acknowledgements are awaited: %v", err)
	}
	b.fire("overlap", "second")
	second := b.instance("overlap", "second", "the second firing was not inserted while the first batch awaited its acknowledgements")
	if second.ID <= first.ID {
		t.Errorf("second instance %d, first %d: the later firing's instance must come after", second.ID, first.ID)
	}
	info := b.consumer(1, "the second firing's message was not acknowledged while the first batch waited")
	if info.AckFloor.Stream >= firstSeq {
		t.Errorf("ack floor at stream sequence %d, want below the first firing's %d: it was acknowledged before its publish was",
			info.AckFloor.Stream, firstSeq)
	}
	h.free()
	b.consumer(0, "the first firing's message was not acknowledged once its batch went on")
	if got := b.dispatched(); len(got) != 2 || got[0] != first.ID || got[1] != second.ID {
		t.Errorf("dispatch messages of instances %v, want [%d %d]", got, first.ID, second.ID)
	}
}

// TestBatchesInsertTogetherAndPublishInTurn holds a batch of firings
// before it writes and fires again: the second firing's instance is
// committed meanwhile (its batch does not wait for the first's commit),
// but its attempt is published only after the first batch's, in the
// order the firings came, and neither firing is acknowledged before its
// attempt is stored.
func TestBatchesInsertTogetherAndPublishInTurn(t *testing.T) {
	t.Parallel()
	b := newBatchRig(t, plainTask)
	h := newHold("first")
	defer h.free()
	b.d.setHooks(testHooks{beforeWrites: h.hook})
	b.start()

	b.fire("overlap", "first")
	h.wait(t, b.ctx, "the first firing's batch writing")
	b.fire("overlap", "second")
	second := b.instance("overlap", "second", "the second firing was not inserted while the first batch was held before its insert")
	if got := b.dispatched(); len(got) != 0 {
		t.Errorf("dispatch messages of instances %v stored while the batch before is held, want none", got)
	}
	b.consumer(2, "both firings taken, neither acknowledged")
	h.free()
	b.consumer(0, "the firings were not acknowledged once the first batch went on")
	first := b.instance("overlap", "first", "the first firing's instance")
	if got := b.dispatched(); len(got) != 2 || got[0] != first.ID || got[1] != second.ID {
		t.Errorf("dispatch messages of instances %v, want the first firing's %d, then the second's %d", got, first.ID, second.ID)
	}
}

// TestLimitedFiringsWaitTheirTurn holds a batch that creates an instance of
// a task with max_running_instances 1 before it writes, and fires the task
// again: the second batch waits for the first to pass its turn before it
// writes, so the first firing takes the task's slot and the second waits
// (WAITING), as they came.
func TestLimitedFiringsWaitTheirTurn(t *testing.T) {
	t.Parallel()
	b := newBatchRig(t, &schemas.Task{TaskName: "limited", Execution: schemas.Execution{Handler: "test.noop"},
		Concurrency: schemas.Concurrency{MaxRunningInstances: 1}})
	h := newHold("first")
	defer h.free()
	waiting := make(chan struct{})
	b.d.setHooks(testHooks{beforeWrites: h.hook, waitsTurn: func(firings []firing) {
		for _, f := range firings {
			if f.event.EventID == "second" {
				close(waiting)
			}
		}
	}})
	b.start()

	b.fire("limited", "first")
	h.wait(t, b.ctx, "the first firing's batch writing")
	b.fire("limited", "second")
	select {
	case <-waiting:
	case <-b.ctx.Done():
		t.Fatal("the second firing's batch never waited for its turn")
	}
	h.free()
	b.consumer(0, "the firings were not acknowledged once the first batch went on")
	first := b.instance("limited", "first", "the first firing's instance")
	second := b.instance("limited", "second", "the second firing's instance")
	if first.State != schemas.StateDispatched || second.State != schemas.StateWaiting {
		t.Errorf("first firing's instance %s, second's %s; want DISPATCHED, then WAITING: the task's slot goes to the firing that came first",
			first.State, second.State)
	}
}

// TestLeaseWatchBeginsBeforeTheFirstDispatch: once the dispatcher is
// ready, and so consumes firings, its lease book has a beginning. Begun
// beside the consumers, the book could begin after an attempt's dispatch,
// and the fence failed the first redelivery of that attempt, which never
// ran, as lost (TestRedeliveryOfAnAttemptThatNeverRanRunsIt, internal/e2e,
// at attempt 2 on a loaded machine).
func TestLeaseWatchBeginsBeforeTheFirstDispatch(t *testing.T) {
	t.Parallel()
	srv := streamstest.NewServer(t, streams.Config{})
	conn, _ := srv.Connect()
	st := store.New(storetest.NewDB(t))
	d, err := New(Options{Conn: conn, Store: st, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	servicetest.Start(t, "dispatcher", d)
	d.book.mu.Lock()
	since := d.book.since
	d.book.mu.Unlock()
	if since.IsZero() {
		t.Fatal("the dispatcher is ready, and consumes firings, before its watch of the leases began")
	}
}
