package dispatcher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/internal/wait"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

// pullRig is a stream BULK (subjects bulk.>, in memory) with a durable
// consumer C on a NATS server of its own, for consumeBatches to consume.
type pullRig struct {
	t    *testing.T
	ctx  context.Context
	nc   *nats.Conn
	js   jetstream.JetStream
	cons jetstream.Consumer
}

func newPullRig(t *testing.T) *pullRig {
	t.Helper()
	srv := streamstest.NewServer(t, streams.Config{})
	nc, js := srv.Connect()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BULK", Subjects: []string{"bulk.>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateConsumer(ctx, "BULK", jetstream.ConsumerConfig{Durable: "C", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	return &pullRig{t: t, ctx: ctx, nc: nc, js: js, cons: cons}
}

// run runs consumeBatches on the rig's consumer until the test ends.
func (r *pullRig) run(size, maxBytes int, handle batchHandler) {
	ctx, cancel := context.WithCancel(r.ctx)
	errc := make(chan error, 1)
	go func() { errc <- consumeBatches(ctx, r.ctx, r.cons, size, 1, maxBytes, handle) }()
	r.t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			r.t.Error(err)
		}
	})
}

// bulk returns n bytes that read as a batch of firings: a message that
// ends the batch it is taken into.
func bulk(n int) []byte {
	data := bytes.Repeat([]byte(" "), n)
	data[0], data[n-1] = '[', ']'
	return data
}

func (r *pullRig) publish(data []byte) {
	r.t.Helper()
	if _, err := r.js.Publish(r.ctx, "bulk.x", data); err != nil {
		r.t.Fatal(err)
	}
}

// TestConsumeBatchesPullsBoundedByBytes: every pull request consumeBatches
// sends carries a max_bytes, that of pullByteLimit, above the server's
// max_payload, and a message as large as a client may publish (its data
// max_payload bytes, to which the server's count adds its subject and
// reply) still reaches the handler: a max_bytes of max_payload would have
// wedged the consumer on it.
func TestConsumeBatchesPullsBoundedByBytes(t *testing.T) {
	t.Parallel()
	r := newPullRig(t)
	maxPayload := r.nc.MaxPayload()
	pulls, err := r.nc.SubscribeSync("$JS.API.CONSUMER.MSG.NEXT.BULK.C")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	handled := make(chan int, 1)
	r.run(10, pullByteLimit(maxPayload), func(_ context.Context, msgs []jetstream.Msg, t *turn) {
		defer t.pass()
		for _, m := range msgs {
			_ = m.Ack()
			handled <- len(m.Data())
		}
	})
	r.publish(bulk(int(maxPayload)))
	select {
	case n := <-handled:
		if n != int(maxPayload) {
			t.Fatalf("handled a message of %d bytes, want %d", n, maxPayload)
		}
	case <-r.ctx.Done():
		t.Fatal("the message of max_payload bytes was not handled")
	}

	// The first pull, which the message answered, and any since.
	for i := 0; ; i++ {
		// The first was sent before the message was handled; any other
		// is already here too, or is none.
		timeout := time.Millisecond
		if i == 0 {
			timeout = 10 * time.Second
		}
		m, err := pulls.NextMsg(timeout)
		if i > 0 && errors.Is(err, nats.ErrTimeout) {
			break
		}
		if err != nil {
			t.Fatalf("pull request %d: %v", i, err)
		}
		var req struct {
			Batch    int `json:"batch"`
			MaxBytes int `json:"max_bytes"`
		}
		if err := json.Unmarshal(m.Data, &req); err != nil {
			t.Fatalf("pull request %d %s: %v", i, m.Data, err)
		}
		if req.MaxBytes != pullByteLimit(maxPayload) || int64(req.MaxBytes) <= maxPayload {
			t.Errorf("pull request %d %s: max_bytes %d, want %d (above max_payload %d)", i, m.Data, req.MaxBytes, pullByteLimit(maxPayload), maxPayload)
		}
	}
}

// TestConsumeBatchesHoldsBoundedBytes holds the first batch while 100 bulk
// messages of 100 kB wait in the stream, 20 times the byte limit: the
// client stops taking them once what it holds reaches the limit (the
// server keeps messages no pull asks for), instead of the 2*size = 100
// messages the count alone allows; once the batch is let go, every
// message is handled.
func TestConsumeBatchesHoldsBoundedBytes(t *testing.T) {
	t.Parallel()
	r := newPullRig(t)
	const (
		msgs     = 100
		msgSize  = 100 << 10
		maxBytes = 1 << 20
	)
	for range msgs {
		r.publish(bulk(msgSize))
	}
	release := make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) })
	handled := make(chan struct{}, msgs)
	first := true
	r.run(msgs/2, maxBytes, func(_ context.Context, batch []jetstream.Msg, t *turn) {
		defer t.pass()
		if first {
			first = false
			<-release
		}
		for _, m := range batch {
			_ = m.Ack()
			handled <- struct{}{}
		}
	})

	// The client has stopped: messages are left, no pull waits for them,
	// and none was delivered since the poll before, which saw the same.
	var info *jetstream.ConsumerInfo
	var before uint64
	if err := wait.Until(r.ctx, func() (bool, error) {
		var err error
		if info, err = r.cons.Info(r.ctx); err != nil {
			return false, err
		}
		stopped := info.NumAckPending > 0 && info.NumPending > 0 && info.NumWaiting == 0
		delivered := info.Delivered.Consumer
		if !stopped {
			delivered = 0
		}
		still := delivered > 0 && delivered == before
		before = delivered
		return still, nil
	}); err != nil {
		t.Fatalf("the client never stopped pulling with messages left in the stream: %v (%+v)", err, info)
	}
	// The held batch, the messages waiting for it, and a pull's worth that
	// the client received but not yet handed over.
	if held := info.NumAckPending * msgSize; held > 3*maxBytes {
		t.Errorf("the client holds %d messages, %d bytes, over 3 times the limit %d", info.NumAckPending, held, maxBytes)
	}

	once.Do(func() { close(release) })
	for i := range msgs {
		select {
		case <-handled:
		case <-r.ctx.Done():
			t.Fatalf("%d of %d messages handled", i, msgs)
		}
	}
}
