package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/devstack"
	"github.com/ax-scheduler/ax/dispatcher"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

// newBareSystem starts a system without a dispatcher, with a lease TTL of
// ttl: the test starts and stops dispatchers itself with startDispatcher.
func newBareSystem(t *testing.T, ttl time.Duration) *system {
	t.Helper()
	srv := streamstest.NewServer(t, streams.Config{LeaseTTL: ttl})
	_, js := srv.Connect()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	s := &system{t: t, srv: srv, js: js, store: st, pool: pool, log: log}
	s.stack, _ = s.startStack(devstack.Options{NATSURL: srv.URL, Services: []natsauth.Role{natsauth.API}})
	s.serveAPI(s.stack.API)
	return s
}

// startDispatcher starts a dispatcher on s with a lease TTL of ttl and
// returns once it is ready; stop stops it and waits until it has.
func (s *system) startDispatcher(ttl time.Duration, tune ...func(*dispatcher.Options)) (stop func()) {
	s.t.Helper()
	opts := devstack.Options{NATSURL: s.srv.URL, Streams: streams.Config{LeaseTTL: ttl}, Services: []natsauth.Role{natsauth.Dispatcher}}
	for _, f := range tune {
		f(&opts.Dispatcher)
	}
	stack, stop := s.startStack(opts)
	s.dispatcher = stack.Dispatcher
	return stop
}

// counterValue is the sum of the counters called name in reg whose label
// label has the value value.
func counterValue(t testing.TB, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// TestFinalReportsUnrecordedPastTheLeaseAreNotReaped holds the invariant
// that a success in AX_REPORTS is never lost to the reaper: the executor
// finishes while no dispatcher runs, a dispatcher that then takes the final
// reports dies holding them (they stay in AX_REPORTS, out of reach for the
// consumer's ack wait), and a new dispatcher starts after the retired
// leases aged into expiry markers ("lease") or after the attempts outlived
// their timeout ("timeout"). The reaper must leave every attempt to its
// report: each instance ends SUCCEEDED at attempt 1 with one handler run.
func TestFinalReportsUnrecordedPastTheLeaseAreNotReaped(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, cause string
		ttl         time.Duration
		timeout     string
	}{
		// The deleted leases age into markers 2 s after the handlers end;
		// no attempt is near its timeout.
		{name: "lease", cause: "lease expired", ttl: leaseTTL, timeout: "10m"},
		// The attempts are overdue after 5 s (and a 100 ms grace), long
		// before their leases' markers.
		{name: "timeout", cause: "timeout", ttl: time.Minute, timeout: "5s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lateReports(t, tc.cause, tc.ttl, tc.timeout)
		})
	}
}

func lateReports(t *testing.T, cause string, ttl time.Duration, timeout string) {
	const n = 5
	ctx := context.Background()
	s := newBareSystem(t, ttl)
	stopFirst := s.startDispatcher(ttl)
	task := "late-" + cause[:5]
	s.apply(fmt.Sprintf(`
task_name: %s
execution:
  handler: ledger
  timeout: %s
`, task, timeout))

	// The ledger counts the handler's runs per instance.
	var mu sync.Mutex
	runs := make(map[int64]int)
	release := make(chan struct{})
	mux := executor.NewMux()
	mux.HandleFunc("ledger", func(ctx context.Context, t *executor.Job) (any, error) {
		mu.Lock()
		runs[t.InstanceID]++
		mu.Unlock()
		select {
		case <-release:
			return map[string]int64{"instance": t.InstanceID}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	s.executor("worker", mux, n)
	s.fireMany(task, n)
	waitFor(t, "every instance to run", 30*time.Second, func() (bool, error) {
		list := s.instances(task)
		running := 0
		for _, inst := range list {
			if inst.State == schemas.StateRunning {
				running++
			}
		}
		return running == n, nil
	})
	stopFirst()
	close(release)

	// The final reports are stored once the handlers return; take them as
	// a dispatcher would, and die holding them.
	cons, err := s.js.Consumer(ctx, s.srv.Topology.ReportsStream(), s.srv.Topology.RecorderConsumer().Durable)
	if err != nil {
		t.Fatal(err)
	}
	var held []jetstream.Msg
	took := 0 // the final reports they carry: a batch carries several
	deadline := time.Now().Add(30 * time.Second)
	for took < n && time.Now().Before(deadline) {
		batch, err := cons.Fetch(n-took, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			reports := []schemas.Report{{}}
			var err error
			if _, _, ok := s.srv.Topology.ReportBatchFrom(m.Subject()); ok {
				var b schemas.ReportBatch
				err = json.Unmarshal(m.Data(), &b)
				reports = b.Reports
			} else {
				err = json.Unmarshal(m.Data(), &reports[0])
			}
			for _, r := range reports {
				if err != nil || r.Kind != schemas.ReportSucceeded {
					t.Fatalf("report %s, want a success", m.Data())
				}
			}
			held = append(held, m)
			took += len(reports)
		}
	}
	if took < n {
		t.Fatalf("took %d final reports, want %d", took, n)
	}

	// A new dispatcher: its reaper sees every attempt's lease expire (or
	// its timeout pass) while the reports are out of its recorder's reach.
	reg := prometheus.NewRegistry()
	s.startDispatcher(ttl, func(o *dispatcher.Options) {
		o.Metrics = reg
		o.TimeoutCheck = 100 * time.Millisecond
		o.TimeoutGrace = 100 * time.Millisecond
	})
	waitFor(t, "the reaper to leave every attempt to its report", 30*time.Second, func() (bool, error) {
		if counterValue(t, reg, "ax_dispatcher_reaper_left_to_report_total", "cause", cause) >= n {
			return true, nil
		}
		for _, inst := range s.instances(task) {
			if inst.State != schemas.StateRunning {
				return true, nil // the reaper acted: the checks below say how
			}
		}
		return false, nil
	})
	// The dead dispatcher's reports come back to the living one.
	for _, m := range held {
		if err := m.Nak(); err != nil {
			t.Fatal(err)
		}
	}
	for _, inst := range s.instances(task) {
		got := s.waitState(inst.ID, schemas.StateSucceeded, 30*time.Second)
		if got.Attempt != 1 {
			t.Errorf("instance %d succeeded at attempt %d, want 1: %v", got.ID, got.Attempt, path(got))
		}
		for _, tr := range got.Transitions {
			if tr.Operator == store.OperatorReaper {
				t.Errorf("instance %d: the reaper moved it %s→%s (%s)", got.ID, tr.From, tr.To, tr.Reason)
			}
		}
		mu.Lock()
		if runs[got.ID] != 1 {
			t.Errorf("instance %d: the handler ran %d times, want 1", got.ID, runs[got.ID])
		}
		mu.Unlock()
	}
}
