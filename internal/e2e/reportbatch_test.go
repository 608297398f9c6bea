package e2e_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ax-scheduler/ax/dispatcher"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// publishBatch publishes reports as one report batch of worker on pool's
// batch subject, as an executor would.
func (s *system) publishBatch(pool, worker string, reports ...schemas.Report) {
	s.t.Helper()
	if _, err := streams.Publish(context.Background(), s.js, s.srv.Topology.ReportBatch(pool, worker), "",
		schemas.ReportBatch{Reports: reports}); err != nil {
		s.t.Fatal(err)
	}
}

// finalOf is a final report of kind on attempt 1 of instance id by worker.
func finalOf(id int64, worker string, kind schemas.ReportKind) schemas.Report {
	r := schemas.Report{InstanceID: id, Attempt: 1, WorkerID: worker, Kind: kind, At: time.Now(), StartedAt: time.Now()}
	switch kind {
	case schemas.ReportSucceeded:
		r.Output = json.RawMessage(`{"from":"` + worker + `"}`)
	case schemas.ReportFailed:
		r.Error, r.Permanent = "broken", true
	}
	return r
}

// reportsLeft is how many reports AX_REPORTS holds (its keeper aside).
func (s *system) reportsLeft() uint64 {
	s.t.Helper()
	st, err := s.js.Stream(context.Background(), s.srv.Topology.ReportsStream())
	if err != nil {
		s.t.Fatal(err)
	}
	n, err := s.srv.Topology.Held(context.Background(), st)
	if err != nil {
		s.t.Fatal(err)
	}
	return n
}

// TestReportBatch sends the dispatcher one report batch, as a worker of the
// default pool, that carries two true final reports, one that names
// another worker than the subject, one on another pool's attempt, a
// started report (which a batch may not carry) and a second final report
// of an attempt it already reports. The two true ones are applied, in one
// statement; the two forged ones refused, counted in
// ax_refused_reports_total and on their instances' timelines, like single
// reports; the other two dropped; the batch acknowledged.
func TestReportBatch(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	s := newSystem(t, func(o *dispatcher.Options) { o.Metrics = reg })
	s.apply("task_name: batched\nexecution: {handler: nobody.has}\n")
	s.apply("task_name: batched-gpu\nexecution: {handler: nobody.has}\ndispatch: {tags: [gpu]}\n")
	ok1, ok2, forged, started := s.fire("batched", nil), s.fire("batched", nil), s.fire("batched", nil), s.fire("batched", nil)
	gpu := s.fire("batched-gpu", nil)
	for _, id := range []int64{ok1, ok2, forged, started, gpu} {
		s.waitState(id, schemas.StateDispatched, time.Minute)
	}

	// wA's record and grant keys, as its SDK writes them.
	s.putWorker("wA", map[string]any{"handlers": []string{"nobody.has"}})
	early := finalOf(started, "wA", schemas.ReportStarted)
	again := finalOf(ok1, "wA", schemas.ReportFailed)
	s.publishBatch(schemas.DefaultPool, "wA",
		finalOf(ok1, "wA", schemas.ReportSucceeded), finalOf(forged, "wB", schemas.ReportSucceeded),
		finalOf(ok2, "wA", schemas.ReportFailed), finalOf(gpu, "wA", schemas.ReportSucceeded), early, again)

	succeeded := s.waitState(ok1, schemas.StateSucceeded, time.Minute)
	var out map[string]string
	if err := json.Unmarshal(succeeded.Output, &out); err != nil || succeeded.WorkerID != "wA" || out["from"] != "wA" {
		t.Errorf("instance %d: worker %q output %s, want wA's success", ok1, succeeded.WorkerID, succeeded.Output)
	}
	s.waitState(ok2, schemas.StateFailed, time.Minute)
	waitFor(t, "the forged reports to be refused and recorded", time.Minute, func() (bool, error) {
		return counterValue(t, reg, "ax_refused_reports_total", "kind", "succeeded") == 2 &&
			len(s.events(forged)) > 0 && len(s.events(gpu)) > 0, nil
	})
	for _, id := range []int64{forged, gpu} {
		if kinds := s.events(id); len(kinds) != 1 || kinds[0] != "refused_succeeded" {
			t.Errorf("instance %d: events %v, want its refused report on the timeline", id, kinds)
		}
	}
	for _, id := range []int64{forged, gpu, started} {
		in, err := s.store.GetInstance(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if in.State != schemas.StateDispatched || in.WorkerID != "" {
			t.Errorf("instance %d: %s by %q, want DISPATCHED as it was", id, in.State, in.WorkerID)
		}
	}

	// One statement recorded both attempts' transitions: they share a
	// transaction.
	var txs int
	if err := s.pool.QueryRow(context.Background(),
		`SELECT count(DISTINCT xmin::text) FROM instance_transitions WHERE instance_id = ANY($1) AND to_state <> 'CREATED' AND to_state <> 'DISPATCHED'`,
		[]int64{ok1, ok2}).Scan(&txs); err != nil {
		t.Fatal(err)
	}
	if txs != 1 {
		t.Errorf("the batch's two reports were recorded in %d transactions, want 1", txs)
	}
	waitFor(t, "the batch to be acknowledged", time.Minute, func() (bool, error) { return s.reportsLeft() == 0, nil })
}

// TestReaperLeavesAttemptsToTheirBatchedFinals holds the reaper's
// invariant for report batches: a worker's final reports, sent as one
// batch, are taken by a dispatcher that dies holding them, and the
// attempts' leases lapse. A new dispatcher's reaper finds each attempt's
// final report in the stored batch and leaves the attempt to it: every
// instance ends SUCCEEDED at attempt 1, the reaper moving none.
func TestReaperLeavesAttemptsToTheirBatchedFinals(t *testing.T) {
	t.Parallel()
	const n = 3
	ctx := context.Background()
	s := newBareSystem(t, leaseTTL)
	stopFirst := s.startDispatcher(leaseTTL)
	s.apply("task_name: held\nexecution: {handler: nobody.has, timeout: 10m}\n")
	s.fireMany("held", n)
	var ids []int64
	waitFor(t, "every instance to be dispatched", time.Minute, func() (bool, error) {
		ids = ids[:0]
		for _, in := range s.instances("held") {
			if in.State == schemas.StateDispatched {
				ids = append(ids, in.ID)
			}
		}
		return len(ids) == n, nil
	})

	// Act as worker wA: lease each attempt once (never renewed, so each
	// lapses a lease TTL later) and report it started, with its record and
	// grant keys as an SDK writes them.
	s.putWorker("wA", map[string]any{"handlers": []string{"nobody.has"}})
	leases, err := s.js.KeyValue(ctx, s.srv.Topology.LeasesBucket())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		lease, _ := json.Marshal(schemas.Lease{InstanceID: id, Attempt: 1, WorkerID: "wA", AcquiredAt: time.Now()})
		if _, err := leases.Create(ctx, streams.LeaseKey(id, 1), lease); err != nil {
			t.Fatal(err)
		}
		if _, err := streams.Publish(ctx, s.js, s.srv.Topology.Report(schemas.DefaultPool, "wA", id), "",
			finalOf(id, "wA", schemas.ReportStarted)); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		s.waitState(id, schemas.StateRunning, time.Minute)
	}
	stopFirst()

	// The finals, in one batch, taken by a dispatcher that dies holding it.
	var finals []schemas.Report
	for _, id := range ids {
		finals = append(finals, finalOf(id, "wA", schemas.ReportSucceeded))
	}
	s.publishBatch(schemas.DefaultPool, "wA", finals...)
	cons, err := s.js.Consumer(ctx, s.srv.Topology.ReportsStream(), s.srv.Topology.RecorderConsumer().Durable)
	if err != nil {
		t.Fatal(err)
	}
	var held jetstream.Msg
	waitFor(t, "the batch to be taken", time.Minute, func() (bool, error) {
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return false, err
		}
		for m := range batch.Messages() {
			if _, _, ok := s.srv.Topology.ReportBatchFrom(m.Subject()); !ok {
				t.Fatalf("took %s on %s, want the batch", m.Data(), m.Subject())
			}
			held = m
		}
		return held != nil, nil
	})

	// A new dispatcher: its reaper sees every lease lapse while the batch
	// is out of its recorder's reach.
	reg := prometheus.NewRegistry()
	s.startDispatcher(leaseTTL, func(o *dispatcher.Options) { o.Metrics = reg })
	waitFor(t, "the reaper to leave every attempt to its batched report", time.Minute, func() (bool, error) {
		if counterValue(t, reg, "ax_dispatcher_reaper_left_to_report_total", "cause", "lease expired") >= n {
			return true, nil
		}
		for _, in := range s.instances("held") {
			if in.State != schemas.StateRunning {
				return true, nil // the reaper acted: the checks below say how
			}
		}
		return false, nil
	})
	if err := held.Nak(); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		got := s.waitState(id, schemas.StateSucceeded, time.Minute)
		if got.Attempt != 1 || got.WorkerID != "wA" {
			t.Errorf("instance %d succeeded at attempt %d by %q, want attempt 1 by wA: %v", id, got.Attempt, got.WorkerID, path(got))
		}
		for _, tr := range got.Transitions {
			if tr.Operator == store.OperatorReaper {
				t.Errorf("instance %d: the reaper moved it %s→%s (%s)", id, tr.From, tr.To, tr.Reason)
			}
		}
	}
}
