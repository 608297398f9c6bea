package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ax-scheduler/ax/dispatcher"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
)

// publishWithID publishes body to a task's trigger subject with a
// Nats-Msg-Id, as a plain NATS client may.
func (s *system) publishWithID(task, msgID, body string) {
	s.t.Helper()
	m := nats.NewMsg(s.srv.Topology.Trigger(task))
	m.Data = []byte(body)
	m.Header.Set(nats.MsgIdHdr, msgID)
	if _, err := s.js.PublishMsg(context.Background(), m); err != nil {
		s.t.Fatal(err)
	}
}

// labelledCounter returns the value of the counter name with labels in reg.
func labelledCounter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// TestRefusedFiringsDelayNoOther publishes firings PostgreSQL cannot store
// among good ones, as a plain NATS client: every good one is created
// promptly, each bad one is recorded SKIPPED with the reason, and the
// refusals are counted.
func TestRefusedFiringsDelayNoOther(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	s := newSystem(t, func(o *dispatcher.Options) { o.Metrics = reg })
	s.apply("task_name: sturdy\nexecution: {handler: builtin.echo}\n")
	bad := []struct {
		msgID, body, reason string
	}{
		{"bad-nul", `{"event_id": "bad-nul", "payload": {"note": "a\u0000b"}}`, "payload.note: holds a NUL character"},
		{"bad-surrogate", `{"event_id": "bad-\ud800"}`, "event_id: holds a lone UTF-16 surrogate"},
		{"bad-utf8", "{\"run_id\": \"r\xff\"}", "run_id: is not valid UTF-8"},
	}
	// PostgreSQL refuses this one, and only PostgreSQL knows it: a JSON
	// number beyond what jsonb's numeric holds.
	const pgRefused = `{"event_id": "bad-number", "payload": {"n": 1e200000}}`
	for i := range 9 {
		if i < len(bad) {
			s.publishWithID("sturdy", bad[i].msgID, bad[i].body)
		}
		if i == 4 {
			s.publish("sturdy", pgRefused)
		}
		s.publish("sturdy", fmt.Sprintf(`{"event_id": "good-%d", "payload": {"n": %d}}`, i, i))
	}
	ctx := context.Background()
	start := time.Now()
	waitFor(t, "the 9 good firings", 60*time.Second, func() (bool, error) {
		var n int
		err := s.pool.QueryRow(ctx, `SELECT count(*) FROM instances WHERE task = 'sturdy' AND event_id LIKE 'good-%' AND state = 'DISPATCHED'`).Scan(&n)
		return n == 9, err
	})
	t.Logf("9 good firings created %v after the last publish", time.Since(start).Round(time.Millisecond))

	skipped := func(eventID, reason string) {
		t.Helper()
		var inst schemas.Instance
		waitFor(t, "instance of "+eventID, 60*time.Second, func() (bool, error) {
			var err error
			inst, err = s.store.InstanceByEvent(ctx, "sturdy", eventID)
			if errors.Is(err, store.ErrNotFound) {
				return false, nil
			}
			return err == nil, err
		})
		inst, err := s.store.GetInstance(ctx, inst.ID) // with its transitions
		if err != nil {
			t.Fatal(err)
		}
		last := inst.Transitions[len(inst.Transitions)-1]
		if inst.State != schemas.StateSkipped || !strings.Contains(last.Reason, reason) {
			t.Errorf("firing %s: %s with reason %q, want SKIPPED with %q", eventID, inst.State, last.Reason, reason)
		}
	}
	for _, b := range bad {
		skipped(b.msgID, b.reason)
	}
	skipped("bad-number", "PostgreSQL refused the firing: value overflows numeric format")
	s.drained(s.srv.Topology.TriggersStream(), "dispatcher")

	const name = "ax_dispatcher_refused_firings_total"
	if n := labelledCounter(t, reg, name, map[string]string{"stage": "validate", "action": "skipped"}); n != 3 {
		t.Errorf("%s{stage=validate,action=skipped} = %v, want 3", name, n)
	}
	if n := labelledCounter(t, reg, name, map[string]string{"stage": "postgres", "action": "skipped"}); n != 1 {
		t.Errorf("%s{stage=postgres,action=skipped} = %v, want 1", name, n)
	}
}
