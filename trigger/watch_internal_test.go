package trigger

import (
	"context"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

// TestWatchTasksEndsWithItsWatcher stops the tasks watcher and the
// context together, as a stopping service does: watchTasks must return, not
// spin on the closed updates channel (which is always ready).
func TestWatchTasksEndsWithItsWatcher(t *testing.T) {
	t.Parallel()
	srv := streamstest.NewServer(t, streams.Config{})
	_, js := srv.Connect()
	kv, err := js.KeyValue(t.Context(), srv.Topology.TasksBucket())
	if err != nil {
		t.Fatal(err)
	}
	s := &Service{top: srv.Topology}
	// Each round picks between two ready cases at random; 20 rounds
	// find the spin with a chance of 1 - 2^-20.
	for round := range 20 {
		w, err := kv.WatchAll(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for e := range w.Updates() {
			if e == nil {
				break // the initial values are in
			}
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := w.Stop(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- s.watchTasks(ctx, w, make(chan reload)) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("round %d: watchTasks = %v, want nil after its context ended", round, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: watchTasks did not return after its watcher and context ended", round)
		}
	}
}
