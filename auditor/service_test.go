package auditor

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ax-scheduler/ax/internal/metrics"
	"github.com/ax-scheduler/ax/internal/natsembed"
	"github.com/ax-scheduler/ax/internal/wait/waittest"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

func TestMain(m *testing.M) { waittest.VerifyTestMain(m) }

// TestRunsBothJobs runs one auditor and waits for it to lead both the
// relay and monitoring, with both jobs' metrics in the one registry, then
// checks that Run returns once its context ends.
func TestRunsBothJobs(t *testing.T) {
	t.Parallel()
	srv := streamstest.NewServer(t, streams.Config{})
	conn, _ := srv.Connect()
	reg := metrics.NewRegistry()
	s, err := New(Options{Conn: conn, Store: store.New(storetest.NewDB(t)), Metrics: reg,
		PollInterval: 5 * time.Millisecond, RetryInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	waittest.For(t, "the auditor to lead the relay and the monitor", time.Minute, func() (bool, error) {
		select {
		case err := <-done:
			return false, fmt.Errorf("Run returned %v before the auditor led both jobs", err)
		default:
			return s.Leading() && s.Monitoring(), nil
		}
	})
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range families {
		seen[f.GetName()] = true
	}
	for _, name := range []string{"ax_audit_relay_leader", "ax_monitor_leader"} {
		if !seen[name] {
			t.Errorf("the registry has no %s", name)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v after its context ended, want nil", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return within 60s of its context ending")
	}
}

func TestRunNeedsTheAuditStream(t *testing.T) {
	t.Parallel()
	ns, err := natsembed.Start(natsembed.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	s, err := New(Options{Conn: nc, Store: store.New(storetest.NewDB(t))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(t.Context()) }()
	select {
	case err := <-done:
		// The job that fails first stops the other, which may then
		// return nil: one error at least, naming the stream.
		if err == nil || !strings.Contains(err.Error(), "stream AX_AUDIT") {
			t.Errorf("Run without the topology = %v, want an error naming AX_AUDIT", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run without the topology did not return within 60s")
	}
}

func TestNewRequires(t *testing.T) {
	t.Parallel()
	if _, err := New(Options{Store: &store.Store{}}); err == nil || !strings.Contains(err.Error(), "Conn") {
		t.Errorf("New without Conn = %v", err)
	}
	if _, err := New(Options{Conn: &nats.Conn{}}); err == nil || !strings.Contains(err.Error(), "Store") {
		t.Errorf("New without Store = %v", err)
	}
}
