package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ax-scheduler/ax/internal/servicetest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/trigger"
	"github.com/ax-scheduler/ax/trigger/triggertest"
)

// fireMany publishes n firings of task at once, straight to the stream, so
// that the dispatcher sees them together.
func (s *system) fireMany(task string, n int) { s.fireEach(task, n, nil) }

// fireEach is fireMany with the i-th firing's payload payload(i) (none
// when payload is nil).
func (s *system) fireEach(task string, n int, payload func(i int) any) {
	s.t.Helper()
	batch := streams.NewAsyncBatch(s.js)
	for i := range n {
		// "fire-" keeps ids of tasks such as cancel-other out of AX's own
		// namespace (schemas.ReservedEventID).
		ev := schemas.TriggerEvent{EventID: fmt.Sprintf("fire-%s-%d", task, i)}
		if payload != nil {
			data, err := json.Marshal(payload(i))
			if err != nil {
				s.t.Fatal(err)
			}
			ev.Payload = data
		}
		m, err := streams.NewMsg(s.srv.Topology.Trigger(task), ev.EventID, ev)
		if err != nil {
			s.t.Fatal(err)
		}
		batch.Add(m)
	}
	if err := batch.Wait(context.Background()); err != nil {
		s.t.Fatal(err)
	}
}

// waitInState waits until n instances of task are in state.
func (s *system) waitInState(task string, state schemas.State, n int, timeout time.Duration) {
	s.t.Helper()
	waitFor(s.t, fmt.Sprintf("%d instances of %s %s", n, task, state), timeout, func() (bool, error) {
		var k int
		err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM instances WHERE task = $1 AND state = $2`,
			task, string(state)).Scan(&k)
		return k == n, err
	})
}

// clockTrigger runs trigger services on a simulated clock, one at a time.
type clockTrigger struct {
	s     *system
	clock *triggertest.Clock
}

// start starts a trigger service on the clock and returns what stops it.
func (c clockTrigger) start() (stop func()) {
	t := c.s.t
	t.Helper()
	conn, _ := c.s.srv.Connect()
	svc, err := trigger.New(trigger.Options{Conn: conn, Store: c.s.store, Clock: c.clock, Logger: c.s.log})
	if err != nil {
		t.Fatal(err)
	}
	r := servicetest.Start(t, "trigger", svc)
	return func() {
		if err := r.Stop(); err != nil {
			t.Errorf("trigger: %v", err)
		}
	}
}

// stepTo steps the clock tick by tick up to last, and waits until the
// trigger has fired task's tick at last and saved it as its last tick.
func (c clockTrigger) stepTo(task string, last time.Time) {
	t := c.s.t
	t.Helper()
	for c.clock.Now().Before(last) {
		c.clock.Step(t, 1)
	}
	c.clock.WaitTimers(t, 1)
	waitFor(t, "the trigger to save its last tick", time.Minute, func() (bool, error) {
		states, err := c.s.store.GetTriggerStates(context.Background(), []string{task})
		return states[store.TriggerKey{Task: task}].LastTick.Equal(last), err
	})
}

// sleep60 is every firing's payload for builtin.sleep to run 60 s.
func sleep60(int) any { return map[string]int{"seconds": 60} }
