package executor_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

// newSmallWorld is a world whose server's JetStream file store is 16 MiB:
// fillStore fills it.
func newSmallWorld(t *testing.T) *world {
	t.Helper()
	return newWorldOn(t, streamstest.NewServerStore(t, streams.Config{LeaseTTL: leaseTTL, LogsMaxBytes: 1 << 20}, 16<<20))
}

// fillStore fills the server's JetStream store with a stream of the test's
// own, until a publish is refused for want of storage, and returns the func
// that deletes that stream: JetStream takes writes again.
func fillStore(t *testing.T, js jetstream.JetStream) (free func()) {
	t.Helper()
	ctx := t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILLER", Subjects: []string{"filler"}}); err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 256<<10)
	for {
		_, err := js.Publish(ctx, "filler", chunk)
		if err == nil {
			continue
		}
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || (apiErr.ErrorCode != 10023 && apiErr.ErrorCode != 10047) {
			t.Fatalf("fill the store: %v", err)
		}
		break
	}
	return func() {
		t.Helper()
		if err := js.DeleteStream(context.WithoutCancel(ctx), "FILLER"); err != nil {
			t.Fatal(err)
		}
	}
}

// lineWatch is a log writer that closes seen once a line holds want.
type lineWatch struct {
	want []byte
	once sync.Once
	seen chan struct{}
}

func (l *lineWatch) Write(p []byte) (int, error) {
	if bytes.Contains(p, l.want) {
		l.once.Do(func() { close(l.seen) })
	}
	return len(p), nil
}

// TestWorkerStartedWhileJetStreamRefusesWritesWaits: a worker started
// while JetStream's store is full cannot put its entry in ax-workers; it
// says so and tries again rather than exit, and starts once the store has
// room.
func TestWorkerStartedWhileJetStreamRefusesWritesWaits(t *testing.T) {
	t.Parallel()
	w := newSmallWorld(t)
	free := fillStore(t, w.js)
	mux, _ := gateMux()
	opts := w.options(mux)
	watch := &lineWatch{want: []byte("JetStream refuses the worker's entry"), seen: make(chan struct{})}
	opts.Logger = slog.New(zerolog.NewSlogHandler(zerolog.New(zerolog.MultiLevelWriter(zerolog.NewTestWriter(t), watch))))
	s, err := executor.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx) }()
	select {
	case <-watch.seen:
	case err := <-ran:
		t.Fatalf("the worker stopped while the store was full: %v", err)
	case <-time.After(wait):
		t.Fatalf("the worker did not say in %v that JetStream refuses its entry", wait)
	}
	select {
	case err := <-ran:
		t.Fatalf("the worker stopped while the store was full: %v", err)
	default:
	}
	free()
	select {
	case <-s.Ready():
	case err := <-ran:
		t.Fatalf("the worker stopped: %v", err)
	case <-time.After(wait):
		t.Fatalf("the worker did not start in %v after the store had room", wait)
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
}

// TestFinalReportRefusedIsSpooledAndSentAfterARestart: a final report that
// JetStream refuses (its store full) is written to the worker's spool; the
// worker, stopped while the store is still full, leaves it there; started
// again on the same spool once the store has room, it sends the report,
// with the message id it had, and empties the spool.
func TestFinalReportRefusedIsSpooledAndSentAfterARestart(t *testing.T) {
	t.Parallel()
	w := newSmallWorld(t)
	spool := t.TempDir()
	tune := func(o *executor.Options) {
		o.SpoolDir = spool
		o.ShutdownTimeout = 500 * time.Millisecond
	}
	g, cancel, done := w.attemptInGate(tune)
	w.nextOf(schemas.ReportStarted, 1)
	free := fillStore(t, w.js)
	close(g.open)
	spooled := func() []string {
		files, err := filepath.Glob(filepath.Join(spool, "*.report"))
		if err != nil {
			t.Fatal(err)
		}
		return files
	}
	eventually(t, "the refused final report to be spooled", func() bool { return len(spooled()) == 1 })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(wait):
		t.Fatalf("the worker did not stop in %v", wait)
	}
	if got := spooled(); len(got) != 1 {
		t.Fatalf("spool after the stop holds %v, want the unsent report", got)
	}

	free()
	mux, _ := gateMux()
	w.worker("w1", mux, tune)
	r := w.nextOf(schemas.ReportSucceeded, 1)
	if r.Attempt != 1 || r.WorkerID != "w1" {
		t.Fatalf("report %+v, want attempt 1 of worker w1", r.Report)
	}
	eventually(t, "the spool to be emptied", func() bool { return len(spooled()) == 0 })
}
