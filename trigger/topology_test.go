package trigger_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/internal/servicetest"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/trigger"
)

// TestRunLeavesTheOwnersTopologyAlone runs the trigger service against a
// topology its owner (the dispatcher) set up with settings of its own: the
// service uses it and resets nothing to its defaults.
func TestRunLeavesTheOwnersTopologyAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, mustTime("2024-05-01T10:00:00Z"))
	ctx := t.Context()
	owner := streams.Config{LeaseTTL: 5 * time.Second, TriggersMaxAge: 3 * time.Hour, DuplicateWindow: 30 * time.Second, Reconfigure: true}
	if err := e.srv.Topology.Ensure(ctx, e.js, owner); err != nil {
		t.Fatal(err)
	}
	conn, _ := e.srv.Connect()
	svc, err := trigger.New(trigger.Options{Conn: conn, Store: e.st, Clock: e.clock, Logger: zerolog.New(e.logs)})
	if err != nil {
		t.Fatal(err)
	}
	if err := servicetest.Start(t, "trigger", svc).Stop(); err != nil {
		t.Fatalf("trigger: %v", err)
	}

	leases, err := e.js.KeyValue(ctx, e.srv.Topology.LeasesBucket())
	if err != nil {
		t.Fatal(err)
	}
	status, err := leases.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if status.TTL() != owner.LeaseTTL {
		t.Errorf("the leases bucket's TTL is %v after the trigger service started, want the owner's %v", status.TTL(), owner.LeaseTTL)
	}
	stream, err := e.js.Stream(ctx, e.srv.Topology.TriggersStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.MaxAge != owner.TriggersMaxAge || info.Config.Duplicates != owner.DuplicateWindow {
		t.Errorf("the triggers stream keeps %v with a duplicate window of %v, want the owner's %v and %v",
			info.Config.MaxAge, info.Config.Duplicates, owner.TriggersMaxAge, owner.DuplicateWindow)
	}
}

// TestRunRefusesAMissingTopology starts the trigger service where no
// dispatcher made the topology: it stops at once, naming what is missing
// and how to make it, and creates nothing.
func TestRunRefusesAMissingTopology(t *testing.T) {
	t.Parallel()
	e := newEnv(t, mustTime("2024-05-01T10:00:00Z"))
	ctx := t.Context()
	name := e.srv.Topology.TriggersStream()
	if err := e.js.DeleteStream(ctx, name); err != nil {
		t.Fatal(err)
	}
	conn, _ := e.srv.Connect()
	svc, err := trigger.New(trigger.Options{Conn: conn, Store: store.New(e.db.Pool), Clock: e.clock, Logger: zerolog.New(e.logs)})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithTimeout(ctx, 30*time.Second) // a service that started would run on
	defer cancel()
	err = svc.Run(runCtx)
	if err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "ax dispatcher") {
		t.Fatalf("Run = %v, want an error naming %s and the dispatcher", err, name)
	}
	if _, err := e.js.Stream(ctx, name); err == nil {
		t.Errorf("the trigger service created %s", name)
	}
}
