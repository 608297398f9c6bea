package e2e_test

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/auditor"
	"github.com/ax-scheduler/ax/dispatcher"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/internal/logtest"
	"github.com/ax-scheduler/ax/internal/natsembed"
	"github.com/ax-scheduler/ax/internal/servicetest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/trigger"
)

// TestServicesStartOnceJetStreamAnswers starts every service while their
// nats-server is down (their connections wait for it, as on a cluster whose
// nodes are still starting, every JetStream request unanswered): none of
// them gives up. Each logs its failed start-up and tries again, and once
// the server is back, with the topology it had, each starts on its own and
// a firing runs.
func TestServicesStartOnceJetStreamAnswers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, err := natsembed.Start(natsembed.Options{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	url := first.ClientURL()
	port := first.Addr().(*net.TCPAddr).Port
	top := streams.Default()
	func() {
		nc, err := nats.Connect(url)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := top.Ensure(ctx, js, streams.Config{}); err != nil {
			t.Fatal(err)
		}
	}()
	first.Shutdown()
	first.WaitForShutdown()
	// The server comes back under the services; it stops after them.
	var again *server.Server
	t.Cleanup(func() {
		if again != nil {
			again.Shutdown()
			again.WaitForShutdown()
		}
	})
	// Connections that wait for the server, as a service's do.
	connect := func(name string) *nats.Conn {
		t.Helper()
		nc, err := nats.Connect(url, nats.Name(name), nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1),
			nats.ReconnectWait(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}

	pool := storetest.NewDB(t)
	st := store.New(pool)
	applyLedgerTask(t, st)
	logs := &logtest.Buffer{Echo: os.Stderr}
	log := zerolog.New(logs).Level(zerolog.WarnLevel)

	d, err := dispatcher.New(dispatcher.Options{Conn: connect("dispatcher"), Store: st, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	dRun := servicetest.Go(t, "dispatcher", d.Run)
	tr, err := trigger.New(trigger.Options{Conn: connect("trigger"), Store: st, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	trRun := servicetest.Go(t, "trigger", tr.Run)
	au, err := auditor.New(auditor.Options{Conn: connect("auditor"), Store: st, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	servicetest.Go(t, "auditor", au.Run)
	ledger := filepath.Join(t.TempDir(), "ledger")
	ex, err := executor.New(executor.Options{Conn: connect("executor"), WorkerID: "w-start", Mux: ledgerMux(ledger, 0), Logger: slog.New(zerolog.NewSlogHandler(log))})
	if err != nil {
		t.Fatal(err)
	}
	exRun := servicetest.Go(t, "executor", ex.Run)

	for _, failed := range []string{"dispatcher start-up failed", "trigger start-up failed", "audit relay start-up failed",
		"monitor start-up failed", "executor start-up failed"} {
		waitFor(t, "the log to say "+failed, time.Minute, func() (bool, error) {
			return strings.Contains(logs.String(), failed+"; trying again"), nil
		})
	}
	if again, err = natsembed.Start(natsembed.Options{Port: port, StoreDir: dir}); err != nil {
		t.Fatal(err)
	}
	for _, svc := range []struct {
		name  string
		ready <-chan struct{}
		run   *servicetest.Running
	}{{"dispatcher", d.Ready(), dRun}, {"trigger", tr.Ready(), trRun}, {"executor", ex.Ready(), exRun}} {
		select {
		case <-svc.ready:
		case <-svc.run.Done():
			t.Fatalf("%s stopped before it was ready: %v", svc.name, svc.run.Stop())
		case <-time.After(2 * time.Minute):
			t.Fatalf("%s not ready two minutes after JetStream came back", svc.name)
		}
	}
	waitFor(t, "the auditor to lead the relay and the monitoring", 2*time.Minute, func() (bool, error) {
		return au.Leading() && au.Monitoring(), nil
	})

	js, err := jetstream.New(connect("load"))
	if err != nil {
		t.Fatal(err)
	}
	ev := schemas.TriggerEvent{EventID: "after-start"}
	if _, err := streams.Publish(context.Background(), js, top.Trigger("ledger"), streams.TriggerMsgID("ledger", ev.EventID), ev); err != nil {
		t.Fatal(err)
	}
	waitLedgerEnded(t, pool, 1)
	checkExactlyOnce(t, pool, 1, ledger)
}
