package e2e_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/dispatcher"
	"github.com/ax-scheduler/ax/internal/servicetest"
	"github.com/ax-scheduler/ax/internal/wait/waittest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

// TestDispatcherRefusesAWorkerOfAnOlderProtocol runs a dispatcher that
// writes version 2 of the executor protocol and registers workers in
// ax-workers as a worker does: one that declares version 1 (an older
// worker) is refused at its registration with a control message on
// ax.control.<worker> naming both versions, once, not again at its next
// heartbeat; one that declares 2 is not refused.
func TestDispatcherRefusesAWorkerOfAnOlderProtocol(t *testing.T) {
	t.Parallel()
	srv := streamstest.NewServer(t, streams.Config{})
	dconn, _ := srv.Connect()
	d, err := dispatcher.New(dispatcher.Options{Conn: dconn, Store: store.New(storetest.NewDB(t)), Protocol: 2,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	servicetest.Start(t, "dispatcher", d)

	nc, js := srv.Connect()
	var mu sync.Mutex
	refusals := map[string][]schemas.Control{}
	sub, err := nc.Subscribe(srv.Topology.Control("*"), func(m *nats.Msg) {
		var c schemas.Control
		if json.Unmarshal(m.Data, &c) != nil || c.Action != schemas.ControlRefuse {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		id := strings.TrimPrefix(m.Subject, srv.Topology.Control(""))
		refusals[id] = append(refusals[id], c)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	refused := func(id string) []schemas.Control {
		mu.Lock()
		defer mu.Unlock()
		return append([]schemas.Control(nil), refusals[id]...)
	}
	kv, err := js.KeyValue(context.Background(), srv.Topology.WorkersBucket())
	if err != nil {
		t.Fatal(err)
	}
	register := func(id string, protocol int) {
		t.Helper()
		data, _ := json.Marshal(schemas.Worker{ID: id, Pools: []string{"default"}, Handlers: []string{"h"}, Slots: 1,
			StartedAt: time.Now(), HeartbeatAt: time.Now(), Protocol: protocol})
		if _, err := kv.Put(context.Background(), id, data); err != nil {
			t.Fatal(err)
		}
	}

	register("old", 1)
	waittest.ForTrue(t, "the old worker's refusal", time.Minute, func() bool { return len(refused("old")) > 0 })
	c := refused("old")[0]
	for _, want := range []string{"worker old is refused", "version 1 of the executor protocol", "write version 2", "declare 2 or later"} {
		if !strings.Contains(c.Reason, want) {
			t.Errorf("refusal %q lacks %q", c.Reason, want)
		}
	}
	if c.InstanceID != 0 || c.Attempt != 0 {
		t.Errorf("refusal names attempt %d/%d, want none", c.InstanceID, c.Attempt)
	}
	// Its next heartbeat, and a worker of version 2, then another old one:
	// the dispatcher's watch takes them in order, so once the last is
	// refused the two before were dealt with.
	register("old", 1)
	register("new", 2)
	register("older", 0)
	waittest.ForTrue(t, "the refusal of a worker that leaves the version out", time.Minute, func() bool { return len(refused("older")) > 0 })
	if n := len(refused("old")); n != 1 {
		t.Errorf("the old worker was refused %d times, want once (not at each heartbeat)", n)
	}
	if r := refused("new"); len(r) != 0 {
		t.Errorf("a worker of version 2 was refused: %v", r)
	}
}
