package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ax-scheduler/ax/dispatcher"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
)

// TestProgress runs a handler that reports its progress three times, each
// once the API shows the one before, and a handler that reports a hundred
// times at once: the API shows the latest each time, the throttle sends
// the burst as at most two reports (the first at once, the latest a second
// later), and no progress is a transition.
func TestProgress(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	s := newSystem(t, func(o *dispatcher.Options) { o.Metrics = reg })
	ctx := context.Background()
	next := make(chan struct{})
	mux := executor.NewMux()
	mux.HandleFunc("test.steps", func(ctx context.Context, task *executor.Job) (any, error) {
		for i := int64(1); i <= 3; i++ {
			if err := task.Progress(ctx, i, 3, fmt.Sprintf("step %d of 3", i)); err != nil {
				return nil, err
			}
			select {
			case <-next:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return "done", nil
	})
	burstDone := make(chan struct{})
	mux.HandleFunc("test.burst", func(ctx context.Context, task *executor.Job) (any, error) {
		for i := int64(1); i <= 100; i++ {
			if err := task.Progress(ctx, i, 0, ""); err != nil {
				return nil, err
			}
		}
		select {
		case <-burstDone:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		// Progress after the handler returned is refused; check it here
		// the other way: out-of-range values are.
		if err := task.Progress(ctx, 5, 4, ""); err == nil {
			return nil, fmt.Errorf("progress 5 of 4 was accepted")
		}
		return nil, nil
	})
	s.executor("w-progress", mux, 4)
	s.apply("task_name: steps\nexecution:\n  handler: test.steps\n")
	s.apply("task_name: burst\nexecution:\n  handler: test.burst\n")

	id := s.fire("steps", nil)
	progressOf := func(id int64) *schemas.InstanceProgress {
		t.Helper()
		in, err := s.client.GetInstance(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return in.Progress
	}
	for i := int64(1); i <= 3; i++ {
		waitFor(t, fmt.Sprintf("the API to show step %d", i), time.Minute, func() (bool, error) {
			p := progressOf(id)
			return p != nil && p.Done == i, nil
		})
		p := progressOf(id)
		if p.Total != 3 || p.Message != fmt.Sprintf("step %d of 3", i) || p.Attempt != 1 || p.At.IsZero() {
			t.Errorf("progress = %+v; want step %d of 3 of attempt 1", p, i)
		}
		next <- struct{}{}
	}
	in := s.waitState(id, schemas.StateSucceeded, time.Minute)
	if in.Progress == nil || in.Progress.Done != 3 {
		t.Errorf("progress after success = %+v; want the last, 3 of 3", in.Progress)
	}
	if got, want := path(in), []string{"→CREATED", "CREATED→DISPATCHED", "DISPATCHED→RUNNING", "RUNNING→SUCCEEDED"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("transitions = %v; want %v (progress is none)", got, want)
	}
	if n := counterValue(t, reg, "ax_dispatcher_progress_reports_total", "result", "applied"); n != 3 {
		t.Errorf("%v progress reports applied; want 3", n)
	}

	burst := s.fire("burst", nil)
	waitFor(t, "the burst's latest progress", time.Minute, func() (bool, error) {
		p := progressOf(burst)
		return p != nil && p.Done == 100, nil
	})
	// The first report went at once (with the values the handler had
	// reported by then), the others waited for the interval and only the
	// latest was sent: one or two reports, not a hundred.
	if n := counterValue(t, reg, "ax_dispatcher_progress_reports_total", "result", "applied"); n < 4 || n > 5 {
		t.Errorf("%v progress reports applied after the burst; want 3 + 1 or 2", n)
	}
	close(burstDone)
	s.waitState(burst, schemas.StateSucceeded, time.Minute)
	if n := counterValue(t, reg, "ax_dispatcher_progress_reports_total", "result", "dropped") +
		counterValue(t, reg, "ax_dispatcher_progress_reports_total", "result", "refused"); n != 0 {
		t.Errorf("%v progress reports dropped or refused; want none", n)
	}
}

// TestForgedProgress has builtin.sleep report its progress on the gpu pool
// while another worker of that pool and the default pool's executor forge
// progress reports on the attempt: the dispatcher refuses them (counted
// and on the timeline), and the instance shows its holder's progress only.
func TestForgedProgress(t *testing.T) {
	t.Parallel()
	a := newAuthSystem(t)
	ctx := context.Background()
	a.apply("task_name: gpu-sleep\nexecution:\n  handler: builtin.sleep\ndispatch:\n  tags: [gpu]\n")
	a.executor(gpuExecutor, "g1", "gpu")
	id := a.fire("gpu-sleep", map[string]float64{"seconds": 4})
	waitFor(t, "g1's progress on the instance", time.Minute, func() (bool, error) {
		in, err := a.store.GetInstance(ctx, id)
		return err == nil && in.Progress != nil, err
	})

	forged := schemas.Report{InstanceID: id, Attempt: 1, Kind: schemas.ReportProgress, StartedAt: time.Now(),
		At: time.Now().Add(time.Hour), Progress: &schemas.Progress{Done: 1, Total: 1, Message: "forged"}}
	for _, f := range []struct{ user, pool, worker string }{
		{gpuExecutor, "gpu", "g2"},                                      // another worker of the pool
		{string(natsauth.Executor), schemas.DefaultPool, defaultWorker}, // another pool, as the worker its user may be
	} {
		js, err := jetstream.New(a.connect(f.user))
		if err != nil {
			t.Fatal(err)
		}
		r := forged
		r.WorkerID = f.worker
		if _, err := streams.Publish(ctx, js, a.top.Report(f.pool, f.worker, id), "", r); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the forged progress to be refused and recorded", time.Minute, func() (bool, error) {
		kinds := a.events(id)
		return counterValue(t, a.reg, "ax_refused_reports_total", "kind", "progress") == 2 &&
			len(kinds) == 1 && kinds[0] == "refused_progress", nil
	})
	in := a.waitState(id, schemas.StateSucceeded, time.Minute)
	if p := in.Progress; p == nil || p.Message == "forged" || p.Total != 4000 || p.Attempt != 1 {
		t.Errorf("progress = %+v; want g1's, of 4000 ms", p)
	}
}

// TestProgressOfAnAttemptThatEndsInTheSameBatch plays an executor that sends
// no started report (a short attempt; docs/executor-protocol.md): its
// progress reports come while the instance is DISPATCHED, and the last one
// in the same batch as the final report (the recorder is paused until both
// are stored). Each is recorded: the first while the attempt is
// DISPATCHED, the last before the final report ends the attempt.
func TestProgressOfAnAttemptThatEndsInTheSameBatch(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	s := newSystem(t, func(o *dispatcher.Options) { o.Metrics = reg })
	ctx := context.Background()
	top := s.srv.Topology
	// No executor serves the handler: the test is the worker.
	s.apply("task_name: unserved\nexecution:\n  handler: test.unserved\n")
	id := s.fire("unserved", nil)
	s.waitState(id, schemas.StateDispatched, time.Minute)
	const worker = "w-proto"
	// Its record and grant keys, as an SDK writes them.
	s.putWorker(worker, map[string]any{"handlers": []string{"test.unserved"}})
	started := time.Now()
	report := func(kind schemas.ReportKind, p *schemas.Progress) {
		t.Helper()
		r := schemas.Report{InstanceID: id, Attempt: 1, WorkerID: worker, Kind: kind, StartedAt: started, At: time.Now(), Progress: p}
		if _, err := streams.Publish(ctx, s.js, top.Report(schemas.DefaultPool, worker, id), "", r); err != nil {
			t.Fatal(err)
		}
	}
	progressOf := func() *schemas.InstanceProgress {
		t.Helper()
		in, err := s.client.GetInstance(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return in.Progress
	}

	report(schemas.ReportProgress, &schemas.Progress{Done: 1, Total: 10, Message: "first"})
	waitFor(t, "the first progress report to be handled", time.Minute, func() (bool, error) {
		return counterValue(t, reg, "ax_dispatcher_progress_reports_total", "result", "applied")+
			counterValue(t, reg, "ax_dispatcher_progress_reports_total", "result", "dropped") == 1, nil
	})
	if p := progressOf(); p == nil || p.Done != 1 || p.Message != "first" {
		t.Fatalf("progress of the DISPATCHED attempt = %+v; want the first report's", p)
	}

	// The last progress and the final report, stored before the recorder
	// may take either: one batch.
	if _, err := s.js.PauseConsumer(ctx, top.ReportsStream(), top.RecorderConsumer().Durable, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	report(schemas.ReportProgress, &schemas.Progress{Done: 10, Total: 10, Message: "last"})
	report(schemas.ReportSucceeded, nil)
	waitFor(t, "both reports to be stored", time.Minute, func() (bool, error) {
		st, err := s.js.Stream(ctx, top.ReportsStream())
		if err != nil {
			return false, err
		}
		n, err := top.Held(ctx, st)
		return n == 2, err
	})
	if _, err := s.js.ResumeConsumer(ctx, top.ReportsStream(), top.RecorderConsumer().Durable); err != nil {
		t.Fatal(err)
	}
	in := s.waitState(id, schemas.StateSucceeded, time.Minute)
	if p := in.Progress; p == nil || p.Done != 10 || p.Message != "last" {
		t.Errorf("progress after success = %+v; want the last report's, 10 of 10", p)
	}
	if n := counterValue(t, reg, "ax_dispatcher_progress_reports_total", "result", "applied"); n != 2 {
		t.Errorf("%v progress reports applied; want 2", n)
	}
	if got, want := path(in), []string{"→CREATED", "CREATED→DISPATCHED", "DISPATCHED→RUNNING", "RUNNING→SUCCEEDED"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("transitions = %v; want %v", got, want)
	}
}
