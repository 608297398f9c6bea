package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/internal/natsembed"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
	"github.com/ax-scheduler/ax/streams/natsauth/natsauthtest"
)

// TestDevUsersAttack holds every NATS user ax dev makes — read from the
// files it writes, nats-users.json and nats-workers.json, with a worker
// added as ax user add executor --ax-dev adds one and an extra pool of
// --pool — against a server with ax dev's authentication, and has each try
// to pull, acknowledge, change and delete every dispatch consumer that is
// not its own and the dispatcher's consumers, to update, purge and delete
// every stream, and to write the heartbeat of every worker but its own.
// Each try must be refused, and afterwards every consumer still holds its
// waiting and its delivered message, unchanged, every stream is as it was
// and no heartbeat was written. The roles' executor user, which ax dev no
// longer makes, must not connect.
func TestDevUsersAttack(t *testing.T) {
	t.Parallel()
	top := streams.Default()
	dir := t.TempDir()
	roles, err := devNATSUsers(dir)
	if err != nil {
		t.Fatal(err)
	}
	gpu, err := parseDevPool("gpu:train")
	if err != nil {
		t.Fatal(err)
	}
	mux := executor.NewMux()
	executor.RegisterBuiltins(mux)
	auth, _, err := devAuth(top, dir, roles, mux.Names(), []devPool{gpu})
	if err != nil {
		t.Fatal(err)
	}
	srv := natsauthtest.NewServer(t, natsembed.Options{StoreDir: filepath.Join(dir, "nats"), Auth: auth})
	// A worker attached while ax dev runs.
	node := natsauth.Scope{Pools: []string{schemas.DefaultPool}, WorkerID: "node-1", Handlers: []string{"node.greet"}}
	if _, err := natsauth.AddWorkerUser(devWorkersFile(dir), node); err != nil {
		t.Fatal(err)
	}

	// Every user, from the files, and what each owns: an executor user
	// its scope's queues and its worker's consumer and heartbeat.
	passwords := map[string]string{}
	data, err := os.ReadFile(filepath.Join(dir, "nats-users.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &passwords); err != nil {
		t.Fatal(err)
	}
	scopes := map[string]natsauth.Scope{
		devOwnUser: {Pools: []string{schemas.DefaultPool}, WorkerID: devWorkerID, Handlers: mux.Names()},
		gpu.user:   gpu.scope,
	}
	workers, err := natsauth.LoadWorkerUsers(devWorkersFile(dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range workers {
		passwords[u.Name], scopes[u.Name] = u.Password, u.Scope
	}
	if len(workers) != len(devExampleWorkers)+1 {
		t.Fatalf("nats-workers.json holds %d users, want the %d example workers' and node-1's", len(workers), len(devExampleWorkers))
	}
	executorUser := string(natsauth.Executor)
	if nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(executorUser, passwords[executorUser]), nats.NoReconnect()); err == nil {
		nc.Close()
		t.Errorf("the roles' executor user connected: ax dev must admit only one worker's executor users")
	}

	djs := srv.Dispatcher(passwords[string(natsauth.Dispatcher)])
	ctx := t.Context()
	// The dispatch consumers: each user's queues and own consumer, and one
	// of a handler nobody serves. Each holds one message delivered to the
	// dispatcher (its ack subject is what an attacker would ack) and one
	// waiting.
	type target struct {
		cfg     jetstream.ConsumerConfig
		subject string
		ack     string
	}
	var targets []*target
	add := func(cfg jetstream.ConsumerConfig, subject string) {
		if !slices.ContainsFunc(targets, func(x *target) bool { return x.cfg.Durable == cfg.Durable }) {
			targets = append(targets, &target{cfg: cfg, subject: subject})
		}
	}
	add(top.PoolConsumer(schemas.DefaultPool, schemas.PriorityNormal, "nobody.serves"), top.Dispatch(schemas.DefaultPool, schemas.PriorityNormal, "nobody.serves"))
	for _, s := range scopes {
		add(top.WorkerConsumer(s.WorkerID), top.DispatchWorker(s.WorkerID))
		for _, pool := range s.Pools {
			for _, h := range s.Handlers[:1] {
				add(top.PoolConsumer(pool, schemas.PriorityNormal, h), top.Dispatch(pool, schemas.PriorityNormal, h))
			}
		}
	}
	for _, x := range targets {
		c, err := djs.CreateOrUpdateConsumer(ctx, top.DispatchStream(), x.cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			if _, err := djs.Publish(ctx, x.subject, []byte(`{}`), jetstream.WithMsgID(fmt.Sprintf("%s-%d", x.subject, i))); err != nil {
				t.Fatal(err)
			}
		}
		batch, err := c.Fetch(1, jetstream.FetchMaxWait(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			x.ack = m.Reply()
		}
		if x.ack == "" {
			t.Fatalf("no message of %s delivered", x.cfg.Durable)
		}
	}
	for _, c := range []struct {
		stream string
		cfg    jetstream.ConsumerConfig
	}{{top.TriggersStream(), top.DispatcherConsumer()}, {top.ReportsStream(), top.RecorderConsumer()}} {
		if _, err := djs.CreateOrUpdateConsumer(ctx, c.stream, c.cfg); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := djs.Publish(ctx, top.Trigger("hello"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	before := natsauthtest.Snapshot(t, djs)

	owns := func(user, durable string) bool {
		s, ok := scopes[user]
		if !ok {
			return false
		}
		if durable == top.WorkerConsumer(s.WorkerID).Durable {
			return true
		}
		for _, pool := range s.Pools {
			for _, h := range s.Handlers {
				if durable == top.PoolConsumer(pool, schemas.PriorityNormal, h).Durable {
					return true
				}
			}
		}
		return false
	}
	api := "$JS.API."
	var users []string
	for user := range passwords {
		if user != string(natsauth.Dispatcher) {
			users = append(users, user)
		}
	}
	slices.Sort(users)
	if len(users) != 4+2+len(devExampleWorkers)+1 {
		t.Fatalf("users %v: want trigger, api, auditor, executor (refused above), %s, %s, the example workers' and node-1's", users, devOwnUser, gpu.user)
	}
	for _, user := range users {
		if user == executorUser {
			continue // refused above
		}
		nc, v := srv.Connect(user, passwords[user], nats.NoReconnect())
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		expect := func(what, subject string, action func(context.Context) error) {
			if !v.Try(t, subject, action) {
				t.Errorf("%s could %s (%s)", user, what, subject)
			}
		}
		for _, x := range targets {
			if owns(user, x.cfg.Durable) {
				continue
			}
			d := top.DispatchStream() + "." + x.cfg.Durable
			expect("pull "+x.cfg.Durable, api+"CONSUMER.MSG.NEXT."+d, natsauthtest.Request(nc, api+"CONSUMER.MSG.NEXT."+d, `{"batch":1,"no_wait":true}`))
			expect("acknowledge a message of "+x.cfg.Durable, x.ack, func(ctx context.Context) error {
				if err := nc.Publish(x.ack, nil); err != nil {
					return err
				}
				// No answer comes to an ack: give the refusal time to
				// arrive (it ends ctx), the effect is checked below.
				select {
				case <-ctx.Done():
				case <-time.After(10 * time.Second):
				}
				return nil
			})
			expect("delete "+x.cfg.Durable, api+"CONSUMER.DELETE."+d, natsauthtest.Request(nc, api+"CONSUMER.DELETE."+d, ""))
			changed := x.cfg
			changed.MaxAckPending = 1
			expect("change "+x.cfg.Durable, api+"CONSUMER.CREATE."+d+"."+x.cfg.FilterSubject, func(ctx context.Context) error {
				_, err := js.UpdateConsumer(ctx, top.DispatchStream(), changed)
				return err
			})
		}
		for _, c := range []string{top.TriggersStream() + "." + top.DispatcherConsumer().Durable, top.ReportsStream() + "." + top.RecorderConsumer().Durable} {
			expect("pull "+c, api+"CONSUMER.MSG.NEXT."+c, natsauthtest.Request(nc, api+"CONSUMER.MSG.NEXT."+c, `{"batch":1,"no_wait":true}`))
			expect("delete "+c, api+"CONSUMER.DELETE."+c, natsauthtest.Request(nc, api+"CONSUMER.DELETE."+c, ""))
		}
		for name, cfg := range before.Streams {
			expect("purge "+name, api+"STREAM.PURGE."+name, natsauthtest.Request(nc, api+"STREAM.PURGE."+name, ""))
			expect("delete "+name, api+"STREAM.DELETE."+name, natsauthtest.Request(nc, api+"STREAM.DELETE."+name, ""))
			sealed := cfg
			sealed.Sealed = true
			expect("seal "+name, api+"STREAM.UPDATE."+name, func(ctx context.Context) error {
				_, err := js.UpdateStream(ctx, sealed)
				return err
			})
		}
		for _, s := range scopes {
			if own, ok := scopes[user]; ok && own.WorkerID == s.WorkerID {
				continue
			}
			key := "$KV." + top.WorkersBucket() + "." + s.WorkerID
			expect("write "+s.WorkerID+"'s heartbeat", key, func(ctx context.Context) error {
				_, err := js.Publish(ctx, key, []byte(`{}`))
				return err
			})
			// A forged batch of final reports, as that worker.
			for _, pool := range s.Pools {
				batch := top.ReportBatch(pool, s.WorkerID)
				expect("publish a report batch as "+s.WorkerID, batch, func(ctx context.Context) error {
					_, err := js.Publish(ctx, batch, []byte(`{"reports":[]}`))
					return err
				})
			}
		}
		nc.Close()
	}

	after := natsauthtest.Snapshot(t, djs)
	after.CheckUnchanged(t, before)
	for _, x := range targets {
		c := top.DispatchStream() + "/" + x.cfg.Durable
		if after.Waiting[c] != 1 || after.Delivered[c] != 1 {
			t.Errorf("%s holds %d waiting and %d delivered, unacknowledged messages; want 1 and 1", c, after.Waiting[c], after.Delivered[c])
		}
	}
	if n := after.Msgs["KV_"+top.WorkersBucket()]; n != 0 {
		t.Errorf("%d heartbeats were written", n)
	}
}
