package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/executortest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
	"github.com/ax-scheduler/ax/streams/natsauth/natsauthtest"
)

// dispatcherJS is a JetStream context of the dispatcher's user, which may
// look at everything.
func (a *authSystem) dispatcherJS() jetstream.JetStream {
	a.t.Helper()
	js, err := jetstream.New(a.connect(string(natsauth.Dispatcher)))
	if err != nil {
		a.t.Fatal(err)
	}
	return js
}

// refusedBy waits until the server refused subject to the connection v
// watches, after action (which may time out waiting for an answer that
// never comes).
func refusedBy(t *testing.T, v *natsauthtest.Refusals, subject string, action func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := action(ctx); err == nil {
		t.Errorf("%s: answered, want refused", subject)
	}
	waitFor(t, "the server to refuse "+subject, time.Minute, func() (bool, error) { return v.Refused(subject), nil })
}

// TestPoolsAreABoundary acts as the default pool's executor, with the
// credential ax dev makes (its worker, the built-in handlers), against
// the gpu pool's waiting work: it can neither pull nor read nor make nor
// acknowledge on the gpu pool's consumer, nor make a consumer of its own
// on the gpu pool's subjects. The work stays waiting, and the gpu worker
// runs it. A worker whose handlers its credential does not name stops at
// start with an error that says so.
func TestPoolsAreABoundary(t *testing.T) {
	t.Parallel()
	a := newAuthSystem(t)
	ctx := context.Background()
	a.apply("task_name: gpu-echo\nexecution: {handler: builtin.echo}\ndispatch: {tags: [gpu]}\n")
	djs := a.dispatcherJS()
	stream := a.top.DispatchStream()
	gpu := a.top.PoolConsumer("gpu", schemas.PriorityNormal, executor.BuiltinEcho)
	if _, err := djs.CreateConsumer(ctx, stream, gpu); err != nil {
		t.Fatal(err)
	}
	id := a.fire("gpu-echo", map[string]string{"secret": "gpu payload"})
	a.waitState(id, schemas.StateDispatched, time.Minute)
	waiting := func() (pending, ackPending int) {
		t.Helper()
		c, err := djs.Consumer(ctx, stream, gpu.Durable)
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return int(info.NumPending), info.NumAckPending
	}
	waitFor(t, "the gpu attempt to wait on the gpu consumer", time.Minute, func() (bool, error) {
		p, _ := waiting()
		return p == 1, nil
	})
	msg, err := djs.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	seq := msg.CachedInfo().State.LastSeq

	nc, v := a.watch(string(natsauth.Executor))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	api := "$JS.API."
	changed := gpu
	changed.MaxAckPending = 1
	evil := a.top.WorkerConsumer(defaultWorker)
	evil.FilterSubject = a.top.Dispatch("gpu", schemas.PriorityNormal, executor.BuiltinEcho)
	ackSubject := fmt.Sprintf("$JS.ACK.%s.%s.1.%d.1.%d.0", stream, gpu.Durable, seq, time.Now().UnixNano())
	for _, c := range []struct {
		subject string
		action  func(context.Context) error
	}{
		{api + "CONSUMER.MSG.NEXT." + stream + "." + gpu.Durable, natsauthtest.Request(nc, api+"CONSUMER.MSG.NEXT."+stream+"."+gpu.Durable, `{"batch":1,"expires":1000000000}`)},
		{api + "CONSUMER.INFO." + stream + "." + gpu.Durable, func(ctx context.Context) error {
			_, err := js.Consumer(ctx, stream, gpu.Durable)
			return err
		}},
		{api + "CONSUMER.CREATE." + stream + "." + gpu.Durable + "." + gpu.FilterSubject, func(ctx context.Context) error {
			_, err := js.UpdateConsumer(ctx, stream, changed)
			return err
		}},
		// Its own worker consumer's name on the gpu pool's subject.
		{api + "CONSUMER.CREATE." + stream + "." + evil.Durable + "." + evil.FilterSubject, func(ctx context.Context) error {
			_, err := js.CreateConsumer(ctx, stream, evil)
			return err
		}},
		{ackSubject, func(ctx context.Context) error {
			// An ack subject is guessable from the stream's sequence; the
			// server refuses it before the consumer sees it.
			return errors.Join(nc.Publish(ackSubject, []byte("+ACK")), nc.FlushWithContext(ctx), errors.New("no answer to an ack"))
		}},
	} {
		refusedBy(t, v, c.subject, c.action)
	}
	if p, ack := waiting(); p != 1 || ack != 0 {
		t.Fatalf("after the attacks the gpu consumer has %d waiting and %d delivered, want the attempt waiting, undelivered", p, ack)
	}
	c, err := djs.Consumer(ctx, stream, gpu.Durable)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.CachedInfo().Config.MaxAckPending; got != gpu.MaxAckPending {
		t.Errorf("the gpu consumer's max ack pending is %d, want %d as the dispatcher made it", got, gpu.MaxAckPending)
	}
	if _, err := djs.Consumer(ctx, stream, evil.Durable); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Errorf("consumer %s: %v; want none, the refused create made nothing", evil.Durable, err)
	}

	// A default-pool worker that registers a handler its credential does
	// not name stops at start and says which.
	mux := builtinsMux()
	mux.HandleFunc("img.resize", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	svc, err := executor.New(executor.Options{Conn: a.connect(string(natsauth.Executor)), WorkerID: defaultWorker, Mux: mux, Logger: slog.New(zerolog.NewSlogHandler(a.log))})
	if err != nil {
		t.Fatal(err)
	}
	runErr := svc.Run(ctx)
	if runErr == nil || !strings.Contains(runErr.Error(), "does not name pool default and handler img.resize") {
		t.Errorf("a worker with a handler its credential lacks: Run = %v, want an error naming the handler", runErr)
	}

	// The gpu worker runs the attempt, its first.
	a.executor(gpuExecutor, "g1", "gpu")
	in := a.waitState(id, schemas.StateSucceeded, time.Minute)
	if in.WorkerID != "g1" || in.Attempt != 1 {
		t.Errorf("the gpu attempt ran on %q, attempt %d; want g1's first", in.WorkerID, in.Attempt)
	}
}

// TestFakeHeartbeatsAreRefused acts as the default pool's executor: the
// heartbeats of five fake workers are refused, the bucket holds no such
// worker, and every hash-routed firing runs on the one true worker.
func TestFakeHeartbeatsAreRefused(t *testing.T) {
	t.Parallel()
	a := newAuthSystem(t)
	ctx := context.Background()
	nc, v := a.watch(string(natsauth.Executor))
	for i := range 5 {
		fake := fmt.Sprintf("fake%d", i)
		subject := "$KV." + a.top.WorkersBucket() + "." + fake
		rec := fmt.Sprintf(`{"id":%q,"pools":["default"],"slots":16,"busy":0,"version":"9.9.9","started_at":%q,"heartbeat_at":%q}`,
			fake, time.Now().Format(time.RFC3339Nano), time.Now().Format(time.RFC3339Nano))
		refusedBy(t, v, subject, natsauthtest.Request(nc, subject, rec))
	}
	kv, err := a.dispatcherJS().KeyValue(ctx, a.top.WorkersBucket())
	if err != nil {
		t.Fatal(err)
	}
	if keys, err := kv.Keys(ctx); err == nil || !errors.Is(err, jetstream.ErrNoKeysFound) {
		t.Fatalf("the workers bucket holds %v (%v); want no worker yet", keys, err)
	}

	mux := builtinsMux()
	executortest.Run(t, executor.Options{Conn: a.connect(string(natsauth.Executor)), WorkerID: defaultWorker, Mux: mux, Slots: 4, Logger: slog.New(zerolog.NewSlogHandler(a.log))})
	a.routedTo(defaultWorker)
	a.apply("task_name: pinned\nexecution: {handler: builtin.echo}\ndispatch: {strategy: hash, hash_key: 'c-{{.customer}}'}\n")
	var ids []int64
	for i := range 10 {
		ids = append(ids, a.fire("pinned", map[string]any{"customer": i}))
	}
	for _, id := range ids {
		if in := a.waitState(id, schemas.StateSucceeded, time.Minute); in.WorkerID != defaultWorker {
			t.Errorf("instance %d ran on %q, want %s", id, in.WorkerID, defaultWorker)
		}
	}
	keys, err := kv.Keys(ctx)
	// The true worker's heartbeat, and its grant keys beside it.
	keys = slices.DeleteFunc(keys, func(k string) bool {
		w, _, _, grant := streams.ParseGrantKey(k)
		return grant && w == defaultWorker
	})
	if err != nil || len(keys) != 1 || keys[0] != defaultWorker {
		t.Errorf("the workers bucket holds %v (%v) besides %s's grant keys; want %s alone", keys, err, defaultWorker, defaultWorker)
	}
}
