package e2e_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/devstack"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/executortest"
	"github.com/ax-scheduler/ax/internal/natsembed"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
)

// fullStoreOutage is how long TestFinalReportsOutlastAFullJetStreamStore
// keeps the store full: longer than the 30 s an executor used to keep an
// unsent final report, plus lease TTLs.
const fullStoreOutage = 40 * time.Second

// TestFinalReportsOutlastAFullJetStreamStore: a nats-server with a small
// max_file_store fills up (a stream of the test's own takes what is left)
// while attempts run and end, and stays full for 40 s: lease renewals,
// final reports, dispatches and firings are all refused. Once the filler
// is deleted, every firing has one instance, every instance SUCCEEDED, and
// the ledger the handler appends to holds exactly one run of each: a
// worker keeps its final reports until they are stored, and the reaper
// does not run again an attempt whose lease lapsed while JetStream
// refused writes.
func TestFinalReportsOutlastAFullJetStreamStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)

	srv, err := natsembed.Start(natsembed.Options{StoreDir: t.TempDir(), MaxStore: 48 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	nc, err := nats.Connect(srv.ClientURL(), nats.Name(t.Name()), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	pool := storetest.NewDB(t)
	st := store.New(pool)
	applyLedgerTask(t, st)

	ledger := filepath.Join(t.TempDir(), "ledger")
	cfg := streams.Config{LeaseTTL: leaseTTL, LogsMaxBytes: 1 << 20}
	reg := prometheus.NewRegistry()
	stack, err := devstack.Start(ctx, devstack.Options{
		NATSURL: srv.ClientURL(), Store: st, Logger: log, Streams: cfg, Ensure: true, Metrics: reg,
		Services:  []natsauth.Role{natsauth.Dispatcher},
		Executors: []devstack.Executor{{Options: executor.Options{WorkerID: "full", SpoolDir: filepath.Join(t.TempDir(), "spool"), Mux: ledgerMux(ledger, 2*time.Second), Slots: 32}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stack.Stop(context.Background()); err != nil {
			t.Errorf("stop the stack: %v", err)
		}
	})
	top := streams.Default()

	// A first wave runs and succeeds before the fault.
	fire := func(from, n int) {
		for i := from; i < from+n; i++ {
			ev := schemas.TriggerEvent{EventID: "full-" + strconv.Itoa(i)}
			if _, err := streams.Publish(ctx, js, top.Trigger("ledger"), ev.EventID, ev); err != nil {
				t.Fatalf("fire %s: %v", ev.EventID, err)
			}
		}
	}
	fire(0, 10)
	waitFor(t, "the first wave to succeed", time.Minute, func() (bool, error) {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM instances WHERE state = 'SUCCEEDED'`).Scan(&n)
		return n == 10, err
	})
	// A second wave is running (each run takes 2 s) when the store fills.
	fire(10, 20)
	waitFor(t, "the second wave to run", time.Minute, func() (bool, error) {
		return len(ledgerRuns(t, ledger)) >= 25, nil
	})

	// The filler takes what is left of the store.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILLER", Subjects: []string{"filler"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 256<<10)
	for {
		if _, err := js.Publish(ctx, "filler", chunk); err != nil {
			// 10023 insufficient resources, 10047 storage resources exceeded.
			if apiErr := (*jetstream.APIError)(nil); !errors.As(err, &apiErr) || (apiErr.ErrorCode != 10023 && apiErr.ErrorCode != 10047) {
				t.Fatalf("fill the store: %v", err)
			}
			t.Logf("the store is full: %v", err)
			break
		}
	}
	// The dispatcher says so.
	waitFor(t, "the dispatcher to count its refused writes", 30*time.Second, func() (bool, error) {
		return counterValue(t, reg, "ax_publish_refusals_total", "reason", "store_full") > 0, nil
	})
	// (A duration, not a condition: the length of the outage is the test.)
	time.Sleep(fullStoreOutage)
	if err := js.DeleteStream(ctx, "FILLER"); err != nil {
		t.Fatal(err)
	}
	t.Logf("the store has room again")

	waitLedgerEnded(t, pool, 30)
	checkExactlyOnce(t, pool, 30, ledger)
	waitFor(t, "the dispatcher to see JetStream take writes again", 30*time.Second, func() (bool, error) {
		return gaugeValue(t, reg, "ax_jetstream_writable") == 1, nil
	})
}

// gaugeValue is the value of the gauge called name in reg (the sum, if it
// has labels).
func gaugeValue(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// TestFinalReportsOutlastAClusterWithoutQuorum: on a three-node cluster
// with the topology in three replicas, two nodes stop while attempts run
// and end, and stay down for 45 s: no stream has a quorum, so lease
// renewals, final reports and dispatches all go unanswered. Once the nodes
// are back, every firing has one instance, every instance SUCCEEDED, and
// the ledger holds exactly one run of each.
func TestFinalReportsOutlastAClusterWithoutQuorum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	cluster, pool := startClusterDispatcher(t, log)
	ledger := filepath.Join(t.TempDir(), "ledger")
	conn, _ := cluster.connect("exec")
	executortest.Run(t, executor.Options{Conn: conn, WorkerID: "exec", Mux: ledgerMux(ledger, 3*time.Second), Slots: 32, Logger: slog.New(zerolog.NewSlogHandler(log))})

	fire := func(from, n int) {
		for i := from; i < from+n; i++ {
			ev := schemas.TriggerEvent{EventID: "quorum-" + strconv.Itoa(i)}
			if _, err := streams.Publish(ctx, cluster.js, cluster.top.Trigger("ledger"), ev.EventID, ev); err != nil {
				t.Fatalf("fire %s: %v", ev.EventID, err)
			}
		}
	}
	fire(0, 10)
	waitFor(t, "the first wave to succeed", time.Minute, func() (bool, error) {
		return countSucceeded(t, pool) == 10, nil
	})
	fire(10, 20)
	waitFor(t, "the second wave to run", time.Minute, func() (bool, error) {
		return len(ledgerRuns(t, ledger)) >= 25, nil
	})

	// Two of the three nodes stop: no stream keeps a quorum.
	for _, node := range []int{1, 2} {
		cluster.Stop(node)
	}
	t.Logf("two nodes stopped")
	// (A duration, not a condition: the length of the outage is the test.)
	time.Sleep(45 * time.Second)
	for _, node := range []int{1, 2} {
		if err := cluster.Restart(node); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("the nodes are back")

	waitLedgerEnded(t, pool, 30)
	checkExactlyOnce(t, pool, 30, ledger)
}
