package executor_test

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/executortest"
	"github.com/ax-scheduler/ax/internal/natsembed"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// signalWriter is a log writer that closes seen once a line holding want
// is written.
type signalWriter struct {
	want []byte
	seen chan struct{}
	once sync.Once
}

func (w *signalWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

// TestHandlerRunsOnlyAfterTheAckIsConfirmed gives a worker a dispatch
// message whose ack never reaches the server (its user may not publish
// acks): the handler must not run. An ack the server has not confirmed may
// be lost, with the message's delivery count, to a nats-server's kill -9;
// the message then comes again as a first delivery and, one lease TTL past
// the lease's expiry, finds no lease history: the drill's nats-kill ran a
// succeeded attempt twice so. With a plain ack, the handler ran here.
func TestHandlerRunsOnlyAfterTheAckIsConfirmed(t *testing.T) {
	t.Parallel()
	all := &server.SubjectPermission{Allow: []string{">"}}
	srv, err := natsembed.Start(natsembed.Options{StoreDir: t.TempDir(), Users: []*server.User{
		{Username: "admin", Password: "admin"},
		{Username: "worker", Password: "worker", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"$JS.ACK.>"}},
			Subscribe: all,
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	connect := func(user string) (*nats.Conn, jetstream.JetStream) {
		nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(user, user), nats.Name(t.Name()+" "+user),
			nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return nc, js
	}
	_, js := connect("admin")
	top := streams.Default()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	if err := top.Ensure(ctx, js, streams.Config{LeaseTTL: leaseTTL}); err != nil {
		t.Fatal(err)
	}

	ran := make(chan struct{}, 1)
	mux := executor.NewMux()
	mux.HandleFunc("h", func(context.Context, *executor.Job) (any, error) {
		ran <- struct{}{}
		return nil, nil
	})
	unconfirmed := &signalWriter{want: []byte("did not confirm the ack"), seen: make(chan struct{})}
	nc, _ := connect("worker")
	executortest.Run(t, executor.Options{
		Conn: nc, WorkerID: "w1", Mux: mux, StartedDelay: -1,
		Logger: slog.New(zerolog.NewSlogHandler(zerolog.New(zerolog.MultiLevelWriter(zerolog.NewTestWriter(t), unconfirmed)))),
	})

	d := schemas.Dispatch{InstanceID: 1, Attempt: 1, MaxAttempts: 3, Task: "t", Handler: "h",
		TimeoutMS: time.Minute.Milliseconds(), EventID: "e1", Priority: schemas.PriorityNormal,
		FiredAt: time.Now(), DispatchedAt: time.Now()}
	if _, err := streams.Publish(ctx, js, top.Dispatch(schemas.DefaultPool, schemas.PriorityNormal, "h"), "", d); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ran:
		t.Fatal("the handler ran before the server confirmed the ack of its dispatch message")
	case <-unconfirmed.seen:
	case <-ctx.Done():
		t.Fatal("the worker neither ran the attempt nor said that its ack was not confirmed")
	}
	select {
	case <-ran:
		t.Fatal("the handler ran although the server never confirmed the ack of its dispatch message")
	default:
	}
}
