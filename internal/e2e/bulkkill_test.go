package e2e_test

import (
	"context"
	"log/slog"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/drill/system/systemtest"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/executortest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

// TestBulkFiringsExactlyOnceThroughADispatcherKill publishes batches of
// firings whose firings carry no event id (each takes
// seq-<stream sequence>-<index>), kills the only dispatcher, a real
// `ax dispatcher` process, with kill -9 once it has created some of their
// instances but not acknowledged every batch, and starts another, to which
// the batches come again: every firing has one instance, every instance
// SUCCEEDED after one run of its handler.
func TestBulkFiringsExactlyOnceThroughADispatcherKill(t *testing.T) {
	t.Parallel()
	bin := systemtest.BuildAX(t)
	ctx := context.Background()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	db := storetest.New(t)
	dbURL, pgPool := db.URL, db.Pool
	applyLedgerTask(t, store.New(pgPool))

	srv := streamstest.NewServer(t, streams.Config{LeaseTTL: leaseTTL})
	_, js := srv.Connect()
	top := srv.Topology
	dispatcher := func() *exec.Cmd { return startDispatcher(t, bin, srv.URL, dbURL, leaseTTL, "warn") }
	ledger := filepath.Join(t.TempDir(), "ledger")
	execConn, _ := srv.Connect()
	executortest.Run(t, executor.Options{Conn: execConn, WorkerID: "steady", Mux: ledgerMux(ledger, 0), Slots: 16, Logger: slog.New(zerolog.NewSlogHandler(log))})

	const batches, size = 8, 250
	batch := make([]schemas.TriggerEvent, size)
	data, err := schemas.MarshalTriggerBatch(batch)
	if err != nil {
		t.Fatal(err)
	}
	for range batches {
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: top.Trigger("ledger"), Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	count := func() (int, error) {
		var n int
		err := pgPool.QueryRow(ctx, `SELECT count(*) FROM instances WHERE task = 'ledger'`).Scan(&n)
		return n, err
	}

	first := dispatcher()
	var cons jetstream.Consumer
	waitFor(t, "the dispatcher's consumer", time.Minute, func() (bool, error) {
		var err error
		cons, err = js.Consumer(ctx, top.TriggersStream(), top.DispatcherConsumer().Durable)
		return err == nil, nil
	})
	// Killed once some instances exist while batches are taken but not
	// acknowledged (the dispatcher acknowledges a batch after its attempts
	// are stored).
	waitFor(t, "the first instances with batches unacknowledged", time.Minute, func() (bool, error) {
		n, err := count()
		if err != nil || n == 0 {
			return false, err
		}
		info, err := cons.Info(ctx)
		return err == nil && info.NumAckPending > 0, err
	})
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	atKill, err := count()
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed the dispatcher with %d of %d instances created, %d batches unacknowledged", atKill, batches*size, info.NumAckPending)
	if atKill == batches*size && info.NumAckPending == 0 {
		t.Fatal("the dispatcher was killed after it had handled every batch: nothing to deliver again")
	}

	dispatcher()
	waitLedgerEnded(t, pgPool, batches*size)
	waitFor(t, "every batch acknowledged", 2*time.Minute, func() (bool, error) {
		info, err := cons.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0, err
	})
	checkExactlyOnce(t, pgPool, batches*size, ledger)
}
