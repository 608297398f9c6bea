package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/auditor"
	"github.com/ax-scheduler/ax/devstack"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/internal/natsembed"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
	"github.com/ax-scheduler/ax/streams/natsauth/natsauthtest"
)

// TestNATSPermissions runs every service on a server with a user per role:
// the services do their work with their own users, and the executor's user
// is refused everything outside its pool's work.
func TestNATSPermissions(t *testing.T) {
	t.Parallel()
	top := streams.Default()
	passwords := map[natsauth.Role]string{}
	for _, role := range natsauth.Roles {
		passwords[role] = "pw-" + string(role)
	}
	ns := natsauthtest.NewServer(t, natsembed.Options{Users: natsauth.Users(top, passwords, natsauth.Scope{Pools: []string{"default"}, WorkerID: "w1",
		Handlers: []string{executor.BuiltinEcho, executor.BuiltinFail, executor.BuiltinSleep}})})
	connect := func(role natsauth.Role) (*nats.Conn, *natsauthtest.Refusals) {
		t.Helper()
		return ns.Connect(string(role), passwords[role])
	}
	if _, err := nats.Connect(ns.ClientURL()); err == nil {
		t.Error("an anonymous connection was accepted")
	}

	pool := storetest.NewDB(t)
	st := store.New(pool)
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	s := &system{t: t, store: st, pool: pool, log: log}

	// Each service on its own user, as ax dev runs them; a permission it
	// lacks shows up as a violation on its connection.
	serviceRefusals := map[natsauth.Role]*natsauthtest.Refusals{}
	byUser := map[string]string{}
	for _, role := range natsauth.Roles {
		serviceRefusals[role], byUser[string(role)] = natsauthtest.New(), passwords[role]
	}
	mux := builtinsMux()
	s.stack, _ = s.startStack(devstack.Options{NATSURL: ns.ClientURL(), Passwords: byUser,
		NATSOptions: func(user string) []nats.Option {
			return []nats.Option{nats.ErrorHandler(serviceRefusals[natsauth.Role(user)].Handler)}
		},
		Streams: streams.Config{LeaseTTL: leaseTTL}, Auditor: auditor.Options{PollInterval: 10 * time.Millisecond},
		Executors: []devstack.Executor{{Options: executor.Options{WorkerID: "w1", Mux: mux, Slots: 4}}}})
	s.serveAPI(s.stack.API)
	dispatchConn := s.stack.Conn("dispatcher")

	// A real attempt, end to end, with a mutex and task logs.
	s.apply(`
task_name: guarded
execution:
  handler: builtin.sleep
concurrency:
  mutex_key: "guarded"
`)
	id := s.fire("guarded", map[string]float64{"seconds": 0.1})
	s.waitState(id, schemas.StateSucceeded, 60*time.Second)
	ctx := context.Background()
	waitFor(t, "the attempt's log lines", 60*time.Second, func() (bool, error) {
		page, err := s.client.Logs(ctx, id, apiclient.LogQuery{})
		return err == nil && len(page.Lines) > 0, err
	})
	workers, err := s.client.ListWorkers(ctx)
	if err != nil || len(workers) != 1 || workers[0].ID != "w1" {
		t.Errorf("ListWorkers = %+v, %v", workers, err)
	}
	if _, missing, err := s.client.ListStreams(ctx); err != nil || len(missing) != 0 {
		t.Errorf("ListStreams: missing %v, %v", missing, err)
	}
	waitFor(t, "the audit trail on AX_AUDIT", 60*time.Second, func() (bool, error) {
		js, _ := jetstream.New(dispatchConn)
		stream, err := js.Stream(ctx, top.AuditStream())
		if err != nil {
			return false, err
		}
		return stream.CachedInfo().State.Msgs > 0, nil
	})
	for role, v := range serviceRefusals {
		if errs := v.Errors(); len(errs) > 0 {
			t.Errorf("the %s service was refused: %q", role, errs)
		}
	}

	// Work waiting for another pool, made by the dispatcher's user.
	djs, _ := jetstream.New(dispatchConn)
	gpu := top.PoolConsumer("gpu", schemas.PriorityNormal, executor.BuiltinSleep)
	if _, err := djs.CreateOrUpdateConsumer(ctx, top.DispatchStream(), gpu); err != nil {
		t.Fatal(err)
	}
	if _, err := djs.Publish(ctx, gpu.FilterSubject, []byte(`{"secret": "gpu work"}`)); err != nil {
		t.Fatal(err)
	}

	// The executor's user, on a connection of its own, is refused the rest.
	nc, v := connect(natsauth.Executor)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	refused := func(what, subject string, wantErr bool, action func(ctx context.Context) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- action(ctx) }()
		waitFor(t, "the server to refuse "+what, 60*time.Second, func() (bool, error) { return v.Refused(subject), nil })
		cancel()
		if err := <-done; wantErr && err == nil {
			t.Errorf("%s: no error", what)
		}
	}
	sub := func(subject string) func(context.Context) error {
		return func(context.Context) error {
			_, err := nc.SubscribeSync(subject)
			return err
		}
	}
	stream := top.DispatchStream()
	refused("subscribing to another pool's dispatch subject", gpu.FilterSubject, false, sub(gpu.FilterSubject))
	refused("subscribing to every dispatch subject", "ax.dispatch.>", false, sub("ax.dispatch.>"))
	refused("subscribing to another user's inbox", "_INBOX_api.>", false, sub("_INBOX_api.>"))
	refused("subscribing to the plain inbox", "_INBOX.>", false, sub("_INBOX.>"))
	refused("fetching another pool's work", "$JS.API.CONSUMER.MSG.NEXT."+stream+"."+gpu.Durable, true, natsauthtest.Request(nc, "$JS.API.CONSUMER.MSG.NEXT."+stream+"."+gpu.Durable, `{"batch": 1, "no_wait": true}`))
	refused("looking up another pool's consumer", "$JS.API.CONSUMER.INFO."+stream+"."+gpu.Durable, true, func(ctx context.Context) error {
		_, err := js.Consumer(ctx, stream, gpu.Durable)
		return err
	})
	// Its pool's work of a handler it does not serve.
	unserved := top.PoolConsumer("default", schemas.PriorityNormal, "billing.close")
	if _, err := djs.CreateOrUpdateConsumer(ctx, stream, unserved); err != nil {
		t.Fatal(err)
	}
	refused("fetching the work of a handler it does not serve", "$JS.API.CONSUMER.MSG.NEXT."+stream+"."+unserved.Durable, true, natsauthtest.Request(nc, "$JS.API.CONSUMER.MSG.NEXT."+stream+"."+unserved.Durable, `{"batch": 1, "no_wait": true}`))
	other := top.PoolConsumer("other", schemas.PriorityNormal, executor.BuiltinSleep)
	refused("making a consumer for another pool", "$JS.API.CONSUMER.CREATE."+stream+"."+other.Durable+"."+other.FilterSubject, true, func(ctx context.Context) error {
		_, err := js.CreateOrUpdateConsumer(ctx, stream, other)
		return err
	})
	refused("reading a dispatch message directly", "$JS.API.DIRECT.GET."+stream, true, natsauthtest.Request(nc, "$JS.API.DIRECT.GET."+stream, `{"seq": 1}`))
	refused("publishing a firing", "ax.trigger.x", true, func(ctx context.Context) error {
		_, err := js.Publish(ctx, "ax.trigger.x", []byte(`{}`))
		return err
	})
	refused("writing the tasks bucket", "$KV.ax-tasks.guarded", true, func(ctx context.Context) error {
		_, err := js.Publish(ctx, "$KV.ax-tasks.guarded", []byte(`{}`))
		return err
	})
	refused("writing another worker's heartbeat", "$KV.ax-workers.w2", false, func(ctx context.Context) error {
		return errors.Join(nc.Publish("$KV.ax-workers.w2", []byte(`{}`)), nc.Flush())
	})
	refused("listening to another worker's orders", "ax.control.w2", false, sub("ax.control.w2"))
	refused("purging a stream", "$JS.API.STREAM.PURGE."+stream, true, natsauthtest.Request(nc, "$JS.API.STREAM.PURGE."+stream, ""))
	refused("deleting a stream", "$JS.API.STREAM.DELETE."+stream, true, func(ctx context.Context) error {
		return js.DeleteStream(ctx, stream)
	})
	refused("changing a stream", "$JS.API.STREAM.UPDATE."+top.ReportsStream(), true, func(ctx context.Context) error {
		_, err := js.UpdateStream(ctx, jetstream.StreamConfig{Name: top.ReportsStream(), Subjects: []string{"ax.report.>"}})
		return err
	})

	// Nothing of it happened: the gpu work still waits, the streams are there.
	c, err := djs.Consumer(ctx, stream, gpu.Durable)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil || info.NumPending != 1 || info.NumAckPending != 0 {
		t.Errorf("gpu consumer = %+v, %v; want its message still pending", info, err)
	}
	if _, err := djs.Stream(ctx, stream); err != nil {
		t.Errorf("stream %s: %v", stream, err)
	}
	kv, err := djs.KeyValue(ctx, top.TasksBucket())
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, "guarded"); err == nil {
		var entry map[string]any
		if json.Unmarshal(e.Value(), &entry) != nil || len(entry) == 0 {
			t.Errorf("tasks bucket entry guarded = %s, overwritten", e.Value())
		}
	}
}
