package dispatcher

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/internal/servicetest"
	"github.com/ax-scheduler/ax/internal/wait"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

// TestIdleDispatcherLooksForFairAttemptsOnceASecond runs a dispatcher with
// nothing held for fair dispatch: it looks for held attempts once a second
// (fairIdle), not every fairInterval. It looked 40 times a second, a
// statement each, whether or not any task has a fairness key: most of an
// idle installation's statements.
func TestIdleDispatcherLooksForFairAttemptsOnceASecond(t *testing.T) {
	t.Parallel()
	srv := streamstest.NewServer(t, streams.Config{})
	conn, _ := srv.Connect()
	pool, sent := storetest.NewCounted(t)
	d, err := New(Options{Conn: conn, Store: store.New(pool), Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	servicetest.Start(t, "dispatcher", d)
	const look = "FROM fair_queues q"
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := wait.Until(ctx, func() (bool, error) { return sent.Count(look) > 0, nil }); err != nil {
		t.Fatalf("the dispatcher's first look for held attempts: %v", err)
	}
	// Nothing can be awaited to show that nothing happens: 1.5 s is 60
	// looks every fairInterval and one or two every fairIdle.
	time.Sleep(1500 * time.Millisecond)
	if n := sent.Count(look); n > 3 {
		t.Errorf("an idle dispatcher looked for held attempts %d times in 1.5 s, want at most 3", n)
	}
}
