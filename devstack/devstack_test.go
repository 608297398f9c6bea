package devstack_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/api"
	"github.com/ax-scheduler/ax/api/apitest"
	"github.com/ax-scheduler/ax/devstack"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/internal/natsembed"
	"github.com/ax-scheduler/ax/internal/wait/waittest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
)

func TestMain(m *testing.M) { waittest.VerifyTestMain(m) }

// authServer starts a NATS server with a user per role, as ax dev's, and
// returns its URL and the passwords by user.
func authServer(t *testing.T) (string, map[string]string) {
	t.Helper()
	roles := map[natsauth.Role]string{}
	passwords := map[string]string{}
	for _, role := range natsauth.Roles {
		roles[role] = "pw-" + string(role)
		passwords[string(role)] = roles[role]
	}
	users := natsauth.Users(streams.Default(), roles, natsauth.Scope{Pools: []string{schemas.DefaultPool}, WorkerID: "w1",
		Handlers: []string{executor.BuiltinEcho, executor.BuiltinFail, executor.BuiltinSleep}})
	ns, err := natsembed.Start(natsembed.Options{StoreDir: t.TempDir(), Users: users})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	return ns.ClientURL(), passwords
}

// TestStackRunsEveryService starts every service and an executor, each as
// its own NATS user, and the API on a port it listens on by the time Start
// returns; Stop stops them all without an error.
func TestStackRunsEveryService(t *testing.T) {
	t.Parallel()
	url, passwords := authServer(t)
	st := store.New(storetest.NewDB(t))
	apitest.Admin(t, st)
	// A port free now, for the API.
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := free.Addr().String()
	free.Close()
	mux := executor.NewMux()
	executor.RegisterBuiltins(mux)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	s, err := devstack.Start(ctx, devstack.Options{
		NATSURL: url, Passwords: passwords, Store: st, Ensure: true,
		Streams:   streams.Config{LeaseTTL: 2 * time.Second},
		API:       api.Options{Addr: addr},
		Executors: []devstack.Executor{{Options: executor.Options{WorkerID: "w1", Mux: mux}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"dispatcher", "trigger", "executor", "api", "auditor"} {
		if nc := s.Conn(name); nc == nil || !nc.IsConnected() {
			t.Errorf("Conn(%q) = %v, want a live connection", name, nc)
		}
	}
	if got := s.Conn("dispatcher").Opts.User; got != string(natsauth.Dispatcher) {
		t.Errorf("the dispatcher connects as %q, want %q", got, natsauth.Dispatcher)
	}
	// No retry: the API listens once Start has returned.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("the API does not accept a connection once Start returned: %v", err)
	}
	c.Close()
	select {
	case <-s.Failed():
		t.Fatal("the stack failed")
	default:
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	for _, name := range []string{"dispatcher", "api"} {
		if !s.Conn(name).IsClosed() {
			t.Errorf("Stop left the %s's connection open", name)
		}
	}
}

// TestStartFailsWithTheService starts a stack whose API cannot listen:
// Start returns the API's error, having stopped the dispatcher it started.
func TestStartFailsWithTheService(t *testing.T) {
	t.Parallel()
	url, passwords := authServer(t)
	st := store.New(storetest.NewDB(t))
	apitest.Admin(t, st)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	_, err = devstack.Start(ctx, devstack.Options{NATSURL: url, Passwords: passwords, Store: st,
		Services: []natsauth.Role{natsauth.API, natsauth.Dispatcher}, API: api.Options{Addr: taken.Addr().String()}})
	if err == nil || !strings.Contains(err.Error(), "api stopped before it was ready") || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Start = %v, want the API's listen error", err)
	}
}

// TestStartRefusesAnUnknownService checks Options.Services before any I/O.
func TestStartRefusesAnUnknownService(t *testing.T) {
	t.Parallel()
	_, err := devstack.Start(t.Context(), devstack.Options{NATSURL: "nats://127.0.0.1:1", Store: &store.Store{},
		Services: []natsauth.Role{natsauth.Executor}})
	if err == nil || !strings.Contains(err.Error(), "Options.Executors") {
		t.Fatalf("Start with the executor role as a service = %v, want a refusal that names Options.Executors", err)
	}
}
