package natsauth_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/internal/natsembed"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
	"github.com/ax-scheduler/ax/streams/natsauth/natsauthtest"
)

// TestAuthenticatorAdmitsWorkersAddedWhileItRuns starts a server with an
// Authenticator, adds a worker user after it started, and checks that the
// worker connects with its scope's permissions and no more, that a wrong
// password and an unknown user are refused, and that the service user it
// was made with still connects.
func TestAuthenticatorAdmitsWorkersAddedWhileItRuns(t *testing.T) {
	t.Parallel()
	top := streams.Default()
	dir := t.TempDir()
	workers := filepath.Join(dir, "nats-workers.json")
	dispatcher := &server.User{Username: "dispatcher", Password: "pw-dispatcher"}
	srv := natsauthtest.NewServer(t, natsembed.Options{Auth: natsauth.NewAuthenticator(top, []*server.User{dispatcher}, workers)})
	dnc, _ := srv.Connect("dispatcher", "pw-dispatcher")
	djs, _ := jetstream.New(dnc)
	if err := top.Ensure(t.Context(), djs, streams.Config{}); err != nil {
		t.Fatal(err)
	}

	scope := natsauth.Scope{Pools: []string{schemas.DefaultPool}, WorkerID: "w1", Handlers: []string{"hello"}}
	u, err := natsauth.AddWorkerUser(workers, scope)
	if err != nil {
		t.Fatal(err)
	}
	if u.Name != "executor-w1" || u.Password == "" {
		t.Fatalf("worker user = %+v", u)
	}
	if fi, err := os.Stat(workers); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the worker users' file: %v, %v; want mode 0600", fi, err)
	}
	again, err := natsauth.AddWorkerUser(workers, scope)
	if err != nil || again.Password != u.Password || again.Name != u.Name {
		t.Fatalf("adding the worker again = %+v, %v; want the same user %+v", again, err, u)
	}

	for _, bad := range []nats.Option{nats.UserInfo(u.Name, u.Password+"x"), nats.UserInfo("executor-w2", u.Password), nats.UserInfo("", "")} {
		if nc, err := nats.Connect(srv.ClientURL(), bad, nats.NoReconnect()); err == nil {
			nc.Close()
			t.Errorf("a wrong credential connected")
		}
	}

	nc, r := srv.Connect(u.Name, u.Password)
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(t.Context(), top.WorkersBucket())
	if err != nil {
		t.Fatalf("the worker cannot use JetStream: %v", err)
	}
	if _, err := kv.Put(t.Context(), "w1", []byte(`{}`)); err != nil {
		t.Fatalf("the worker cannot write its heartbeat: %v", err)
	}
	subject := "$KV." + top.WorkersBucket() + ".w2"
	attempt(t, r, subject, func(ctx context.Context) error {
		_, err := kv.Put(ctx, "w2", []byte(`{}`))
		return err
	})
	if !r.Refused(subject) {
		t.Errorf("the worker user of w1 wrote w2's heartbeat")
	}
	dkv, _ := djs.KeyValue(t.Context(), top.WorkersBucket())
	if _, err := dkv.Get(t.Context(), "w2"); err == nil {
		t.Errorf("w2's heartbeat is in the bucket")
	}
}

// TestAddWorkerUserConcurrently adds workers from many goroutines at once:
// the lock keeps every one.
func TestAddWorkerUserConcurrently(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "nats-workers.json")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			s := natsauth.Scope{Pools: []string{schemas.DefaultPool}, WorkerID: "w" + string(rune('a'+i)), Handlers: []string{"hello"}}
			if _, err := natsauth.AddWorkerUser(path, s); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	users, err := natsauth.LoadWorkerUsers(path)
	if err != nil || len(users) != 8 {
		t.Fatalf("%d users (%v), want 8: %+v", len(users), err, users)
	}
	if _, err := natsauth.AddWorkerUser(path, natsauth.Scope{Pools: []string{schemas.DefaultPool}, Handlers: []string{"hello"}}); err == nil {
		t.Errorf("a worker user without a worker id was added")
	}
}
