package natsauth_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/internal/natsembed"
	"github.com/ax-scheduler/ax/internal/wait/waittest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
	"github.com/ax-scheduler/ax/streams/natsauth/natsauthtest"
)

// bed is a server with the users natsauth makes, and the topology and the
// dispatcher's consumers made by the dispatcher's user.
type bed struct {
	top       streams.Topology
	srv       *natsauthtest.Server
	passwords map[natsauth.Role]string
	djs       jetstream.JetStream
}

func newBed(t *testing.T) *bed {
	t.Helper()
	b := &bed{top: streams.Default(), passwords: map[natsauth.Role]string{}}
	for _, role := range natsauth.Roles {
		b.passwords[role] = "pw-" + string(role)
	}
	b.srv = natsauthtest.NewServer(t, natsembed.Options{Users: natsauth.Users(b.top, b.passwords, natsauth.MatrixScope)})
	b.djs = b.srv.Dispatcher(b.passwords[natsauth.Dispatcher])
	ctx := t.Context()
	for _, c := range []struct {
		stream string
		cfg    jetstream.ConsumerConfig
	}{
		{b.top.TriggersStream(), b.top.DispatcherConsumer()},
		{b.top.ReportsStream(), b.top.RecorderConsumer()},
		{b.top.DispatchStream(), b.top.PoolConsumer(schemas.DefaultPool, schemas.PriorityNormal, "hello")},
	} {
		if _, err := b.djs.CreateOrUpdateConsumer(ctx, c.stream, c.cfg); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// connect connects as role on its own inbox prefix.
func (b *bed) connect(t *testing.T, role natsauth.Role) (*nats.Conn, *natsauthtest.Refusals) {
	t.Helper()
	return b.srv.Connect(string(role), b.passwords[role])
}

// attempt runs action until it returns or the server refuses subject to
// the connection r watches. Whether it worked is for the caller to check
// by its effect.
func attempt(t *testing.T, r *natsauthtest.Refusals, subject string, action func(context.Context) error) {
	t.Helper()
	r.Try(t, subject, action)
}

// TestServiceUsersCannotReconfigure acts as each service user but the
// dispatcher, the topology's owner: none may delete, pull from or change
// the dispatcher's consumers, nor create, update, seal, purge or delete a
// stream; every stream, consumer and message is as it was afterwards.
func TestServiceUsersCannotReconfigure(t *testing.T) {
	t.Parallel()
	b := newBed(t)
	ctx := t.Context()
	top := b.top
	for _, subject := range []string{top.Trigger("a"), top.Trigger("b"), top.Audit("a"), top.Audit("b"), top.Log(1, "w1"), top.Dispatch(schemas.DefaultPool, schemas.PriorityNormal, "hello")} {
		if _, err := b.djs.Publish(ctx, subject, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	// A consumer's pending count may lag a message just stored: the bed
	// is set once every consumer counts its messages.
	pool := top.PoolConsumer(schemas.DefaultPool, schemas.PriorityNormal, "hello")
	var before natsauthtest.State
	waittest.For(t, "the bed to be set", 30*time.Second, func() (bool, error) {
		before = natsauthtest.Snapshot(t, b.djs)
		return before.Msgs[top.AuditStream()] == 2 && before.Waiting[top.TriggersStream()+"/dispatcher"] == 2 &&
			before.Waiting[top.DispatchStream()+"/"+pool.Durable] == 1, nil
	})

	for _, role := range []natsauth.Role{natsauth.Trigger, natsauth.API, natsauth.Auditor, natsauth.Executor} {
		nc, r := b.connect(t, role)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		update := func(stream string, change func(*jetstream.StreamConfig)) func(context.Context) error {
			return func(ctx context.Context) error {
				cfg := before.Streams[stream]
				change(&cfg)
				_, err := js.UpdateStream(ctx, cfg)
				return err
			}
		}
		api := "$JS.API."
		dispatcher := top.DispatcherConsumer()
		changed := dispatcher
		changed.MaxAckPending = 1
		for _, a := range []struct {
			subject string
			action  func(context.Context) error
		}{
			{api + "CONSUMER.DELETE." + top.TriggersStream() + ".dispatcher", natsauthtest.Request(nc, api+"CONSUMER.DELETE."+top.TriggersStream()+".dispatcher", "")},
			{api + "CONSUMER.MSG.NEXT." + top.TriggersStream() + ".dispatcher", natsauthtest.Request(nc, api+"CONSUMER.MSG.NEXT."+top.TriggersStream()+".dispatcher", `{"batch":1,"no_wait":true}`)},
			{api + "CONSUMER.CREATE." + top.TriggersStream() + ".dispatcher." + dispatcher.FilterSubject, func(ctx context.Context) error {
				_, err := js.UpdateConsumer(ctx, top.TriggersStream(), changed)
				return err
			}},
			{api + "CONSUMER.DELETE." + top.ReportsStream() + ".recorder", natsauthtest.Request(nc, api+"CONSUMER.DELETE."+top.ReportsStream()+".recorder", "")},
			{api + "CONSUMER.DELETE." + top.DispatchStream() + "." + pool.Durable, natsauthtest.Request(nc, api+"CONSUMER.DELETE."+top.DispatchStream()+"."+pool.Durable, "")},
			{api + "STREAM.UPDATE." + top.AuditStream(), update(top.AuditStream(), func(c *jetstream.StreamConfig) { c.MaxMsgs = 1 })},
			{api + "STREAM.UPDATE." + top.LogsStream(), update(top.LogsStream(), func(c *jetstream.StreamConfig) { c.Sealed = true })},
			{api + "STREAM.UPDATE.KV_" + top.LeasesBucket(), update("KV_"+top.LeasesBucket(), func(c *jetstream.StreamConfig) { c.MaxAge = time.Hour })},
			{api + "STREAM.PURGE." + top.AuditStream(), natsauthtest.Request(nc, api+"STREAM.PURGE."+top.AuditStream(), "")},
			{api + "STREAM.DELETE." + top.LogsStream(), natsauthtest.Request(nc, api+"STREAM.DELETE."+top.LogsStream(), "")},
			{api + "STREAM.CREATE.EVIL", func(ctx context.Context) error {
				_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVIL", Subjects: []string{"evil.>"}})
				return err
			}},
		} {
			attempt(t, r, a.subject, a.action)
			if !r.Refused(a.subject) {
				t.Errorf("%s was not refused %s", role, a.subject)
			}
		}
	}

	natsauthtest.Snapshot(t, b.djs).CheckUnchanged(t, before)
	// The owner still may: the permissions did not stop the dispatcher.
	if err := b.djs.DeleteConsumer(ctx, top.ReportsStream(), "recorder"); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Errorf("the dispatcher cannot delete its consumer: %v", err)
	}
}

// TestExecutorCannotForgeReportBatches acts as the executor user of worker
// w1 of the default pool: a report batch on another worker's or another
// pool's batch subject is refused by the server, and only the one on its
// own reaches AX_REPORTS.
func TestExecutorCannotForgeReportBatches(t *testing.T) {
	t.Parallel()
	b := newBed(t)
	nc, r := b.connect(t, natsauth.Executor)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	publish := func(subject string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := js.Publish(ctx, subject, []byte(`{"reports":[]}`))
			return err
		}
	}
	for _, subject := range []string{b.top.ReportBatch(schemas.DefaultPool, "w2"), b.top.ReportBatch("gpu", natsauth.MatrixScope.WorkerID)} {
		if !r.Try(t, subject, publish(subject)) {
			t.Errorf("the executor of %s could publish a report batch on %s", natsauth.MatrixScope.WorkerID, subject)
		}
	}
	own := b.top.ReportBatch(schemas.DefaultPool, natsauth.MatrixScope.WorkerID)
	if err := publish(own)(t.Context()); err != nil {
		t.Fatalf("publish a report batch on its own subject %s: %v", own, err)
	}
	st, err := b.djs.Stream(t.Context(), b.top.ReportsStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Errorf("AX_REPORTS holds %d messages, want only the batch on %s", info.State.Msgs, own)
	}
}

// TestExecutorCannotRollUpItsBuckets acts as the executor user of worker
// w1 (issue 24, hole 1): it publishes Nats-Rollup "all" and "sub" on keys
// of the mutex and once buckets, which every executor may write. The
// server refuses them, and every key the other holders had is still there.
// (ax-leases and ax-workers keep roll-ups: nats-server turns them on with
// the limit markers those buckets need; see docs/security.md.)
func TestExecutorCannotRollUpItsBuckets(t *testing.T) {
	t.Parallel()
	b := newBed(t)
	ctx := t.Context()
	nc, _ := b.connect(t, natsauth.Executor)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, bucket := range []string{b.top.MutexBucket(), b.top.OnceBucket()} {
		kv, err := b.djs.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"held-1", "held-2", "held-3"} {
			if _, err := kv.Put(ctx, key, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
		}
		for _, rollup := range []string{jetstream.MsgRollupAll, jetstream.MsgRollupSubject} {
			for _, key := range []string{"held-1", "attacker"} {
				m := nats.NewMsg("$KV." + bucket + "." + key)
				m.Header.Set(jetstream.MsgRollup, rollup)
				m.Header.Set("KV-Operation", "PURGE")
				if _, err := js.PublishMsg(ctx, m); err == nil {
					t.Errorf("the executor published Nats-Rollup: %s on %s", rollup, m.Subject)
				}
			}
		}
		keys, err := kv.Keys(ctx)
		if err != nil {
			t.Fatalf("keys of %s: %v", bucket, err)
		}
		if len(keys) != 3 {
			t.Errorf("%s holds the keys %v after the roll-ups, want held-1, held-2 and held-3", bucket, keys)
		}
		st, err := b.djs.Stream(ctx, "KV_"+bucket)
		if err != nil {
			t.Fatal(err)
		}
		if n := st.CachedInfo().State.Msgs; n != 3 {
			t.Errorf("KV_%s holds %d messages after the roll-ups, want 3", bucket, n)
		}
	}
}
