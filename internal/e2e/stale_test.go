package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/dispatcher"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/internal/logtest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// TestStaleReportLeavesATrace: a report of an attempt that another attempt
// fenced out changes nothing, and yet it is counted
// (ax_stale_reports_total), logged with the instance and attempt, and shown
// in the instance's timeline as an event — not as a transition.
func TestStaleReportLeavesATrace(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	var logs logtest.Buffer
	s := newSystem(t, func(o *dispatcher.Options) {
		o.Metrics = reg
		o.Logger = zerolog.New(&logs).Level(zerolog.InfoLevel)
	})
	s.apply("task_name: fenced\nexecution: {handler: test.fenced, retry: {max_attempts: 2, initial_interval_sec: 0}}\n")
	mux := executor.NewMux()
	mux.HandleFunc("test.fenced", func(_ context.Context, t *executor.Job) (any, error) {
		if t.Attempt == 1 {
			return nil, errors.New("first attempt fails")
		}
		return "second", nil
	})
	s.executor("w1", mux, 2)
	id := s.fire("fenced", nil)
	before := s.waitState(id, schemas.StateSucceeded, 30*time.Second)
	if before.Attempt != 2 {
		t.Fatalf("succeeded at attempt %d, want 2", before.Attempt)
	}

	// Attempt 1's success, arriving now: fenced out by attempt 2.
	late := schemas.Report{InstanceID: id, Attempt: 1, WorkerID: "ghost", Kind: schemas.ReportSucceeded,
		At: time.Now(), StartedAt: time.Now()}
	if _, err := streams.Publish(context.Background(), s.js, s.srv.Topology.Report(schemas.DefaultPool, late.WorkerID, id), "", late); err != nil {
		t.Fatal(err)
	}
	s.drained(s.srv.Topology.ReportsStream(), "recorder")

	after, err := s.client.GetInstance(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if after.State != schemas.StateSucceeded || after.Attempt != 2 || len(after.Transitions) != len(before.Transitions) {
		t.Errorf("the stale report changed the instance: %s attempt %d, %d transitions (was %d)",
			after.State, after.Attempt, len(after.Transitions), len(before.Transitions))
	}
	if len(after.Events) != 1 {
		t.Fatalf("timeline events %+v, want one stale_succeeded event", after.Events)
	}
	e := after.Events[0]
	if e.Kind != "stale_succeeded" || e.Attempt != 1 || e.Operator != "worker:ghost" ||
		!strings.Contains(e.Reason, "SUCCEEDED at attempt 2") {
		t.Errorf("event %+v, want stale_succeeded of attempt 1 by worker:ghost naming the current attempt", e)
	}
	if n := counterValue(t, reg, "ax_stale_reports_total", "kind", "succeeded"); n != 1 {
		t.Errorf("ax_stale_reports_total{kind=succeeded} = %v, want 1", n)
	}
	var logged bool
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, `"message":"stale report refused"`) && strings.Contains(line, `"level":"info"`) &&
			strings.Contains(line, `"attempt":1`) && strings.Contains(line, `"instance_id":`) {
			logged = true
		}
	}
	if !logged {
		t.Errorf("no info line \"stale report refused\" with instance_id and attempt in:\n%s", logs.String())
	}

	// Its redelivery (or a second copy) adds no second event.
	if _, err := streams.Publish(context.Background(), s.js, s.srv.Topology.Report(schemas.DefaultPool, late.WorkerID, id), "", late); err != nil {
		t.Fatal(err)
	}
	s.drained(s.srv.Topology.ReportsStream(), "recorder")
	again, err := s.client.GetInstance(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Events) != 1 {
		t.Errorf("timeline events after a second copy: %+v, want still one", again.Events)
	}
}

// TestStartedReportAfterItsSuccessSendsNoCancel: a started report that
// comes after its own attempt's success (it waited in AX_REPORTS, or came
// again) orders no cancel: the worker finished the attempt, and a cancel
// order for it was noise on its control subject (127 in one run of issue
// 25's battery). A started report of an attempt that is not the
// instance's still does, and comes after: the dispatcher sends its orders
// in the order of the reports, so the first order the test receives says
// whether one came for the success.
func TestStartedReportAfterItsSuccessSendsNoCancel(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	var runs atomic.Int64
	s.apply(countTask)
	s.executor("w1", countingMux(&runs), 2)
	id := s.fire("hello", nil)
	in := s.waitState(id, schemas.StateSucceeded, 30*time.Second)
	if in.Attempt != 1 || in.WorkerID != "w1" {
		t.Fatalf("succeeded at attempt %d on %q, want attempt 1 on w1", in.Attempt, in.WorkerID)
	}

	nc, _ := s.srv.Connect()
	orders, err := nc.SubscribeSync(s.srv.Topology.Control("w1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	started := func(attempt int) {
		t.Helper()
		r := schemas.Report{InstanceID: id, Attempt: attempt, WorkerID: "w1", Kind: schemas.ReportStarted, At: time.Now(), StartedAt: time.Now()}
		if _, err := streams.Publish(context.Background(), s.js, s.srv.Topology.Report(schemas.DefaultPool, r.WorkerID, id), "", r); err != nil {
			t.Fatal(err)
		}
		s.drained(s.srv.Topology.ReportsStream(), "recorder")
	}
	started(1) // late: attempt 1 SUCCEEDED
	started(2) // an attempt that is not the instance's: cancelled
	m, err := orders.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("no cancel order for the started report of attempt 2: %v", err)
	}
	var c schemas.Control
	if err := json.Unmarshal(m.Data, &c); err != nil {
		t.Fatal(err)
	}
	if c.Action != schemas.ControlCancel || c.InstanceID != id || c.Attempt != 2 {
		t.Errorf("first control order %+v, want the cancel of attempt 2: attempt 1 ended SUCCEEDED on w1, nothing runs to cancel", c)
	}
}
