package monitor

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/auditor/job"
	"github.com/ax-scheduler/ax/auditor/relay"
	"github.com/ax-scheduler/ax/internal/wait/waittest"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

func TestMain(m *testing.M) { waittest.VerifyTestMain(m) }

// env is a NATS server with the topology and a database, for monitors.
type env struct {
	t   *testing.T
	srv *streamstest.Server
	js  jetstream.JetStream
	st  *store.Store
	log zerolog.Logger
	// auditVersion is the audit protocol version the relay publishes (0:
	// its default).
	auditVersion int
}

// auditor is a running monitor beside an outbox relay, as an auditor runs
// them: stop ends both and waits for their Run to return.
type auditor struct {
	*Service
	stop func()
}

// start runs a monitor and a relay (which puts the outbox the test writes
// on AX_AUDIT) until ctx ends, stop is called or the test ends; tune may
// set the monitor's options and test hooks.
func (e *env) start(ctx context.Context, batchSize int, tune func(*Service)) *auditor {
	e.t.Helper()
	conn, _ := e.srv.Connect()
	rel, err := relay.New(relay.Options{
		Base:         job.Base{Conn: conn, Store: e.st, BatchSize: batchSize, RetryInterval: 50 * time.Millisecond, Logger: e.log},
		PollInterval: 5 * time.Millisecond,
		Version:      e.auditVersion,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	svc, err := New(Options{Base: job.Base{Conn: conn, Store: e.st, BatchSize: batchSize, RetryInterval: 50 * time.Millisecond, Logger: e.log}})
	if err != nil {
		e.t.Fatal(err)
	}
	if tune != nil {
		tune(svc)
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for name, run := range map[string]func(context.Context) error{"relay": rel.Run, "monitor": svc.Run} {
		wg.Go(func() {
			if err := run(ctx); err != nil {
				e.t.Errorf("%s: %v", name, err)
			}
		})
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			wg.Wait()
		})
	}
	e.t.Cleanup(stop)
	return &auditor{Service: svc, stop: stop}
}
