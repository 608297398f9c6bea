package devstack_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/devstack"
	"github.com/ax-scheduler/ax/internal/logtest"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
	"github.com/ax-scheduler/ax/streams/natsauth"
)

// TestStartEnsuresTheTopologyOnceJetStreamIsUp starts a stack that ensures
// the topology on a server whose JetStream is not up yet (as a cluster
// just started may not have heard from a peer): Start tries again, as the
// services' own start-ups do, and returns once JetStream is enabled.
// Start returned the first failure (a three-node cluster's "no suitable
// peers for placement, peer offline" failed the dashboard test's start).
func TestStartEnsuresTheTopologyOnceJetStreamIsUp(t *testing.T) {
	t.Parallel()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	st := store.New(storetest.NewDB(t))
	logs := &logtest.Buffer{}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	type started struct {
		s   *devstack.Stack
		err error
	}
	done := make(chan started, 1)
	go func() {
		s, err := devstack.Start(ctx, devstack.Options{NATSURL: ns.ClientURL(), Store: st, Ensure: true,
			Services: []natsauth.Role{natsauth.Trigger}, Logger: zerolog.New(logs)})
		done <- started{s, err}
	}()
	const retry = "ensuring the topology failed; trying again"
	for !strings.Contains(logs.String(), retry) {
		select {
		case r := <-done:
			t.Fatalf("Start returned %v before JetStream was up, want it to try again (log: %s)", r.err, logs.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := ns.EnableJetStream(&server.JetStreamConfig{StoreDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("Start once JetStream is up: %v", r.err)
	}
	if err := r.s.Stop(context.WithoutCancel(ctx)); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}
