package e2e_test

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/dispatcher"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestWaitReasonOncePerChange pins issue 27's wait reasons on the
// dispatcher's side: an attempt that no live worker may take (its task
// wants a newer executor than any) is routed again every couple of
// seconds, and the dispatcher logs and writes its reason once, not on
// every retry (it logged 137 times for one instance); the API shows it,
// with its since kept from the first time.
func TestWaitReasonOncePerChange(t *testing.T) {
	var logs syncBuffer
	s := newSystem(t, func(o *dispatcher.Options) {
		o.Logger = zerolog.New(zerolog.MultiLevelWriter(&logs, zerolog.NewTestWriter(t))).Level(zerolog.WarnLevel)
	})
	s.executor("worker-1", builtinsMux(), 1)
	s.apply("task_name: picky\nexecution: {handler: builtin.echo}\nmin_worker_version: 99.0.0\n")
	id := s.fire("picky", nil)

	// Wait for three reroutes: each replaces the schedule on its subject.
	stream, err := s.js.Stream(context.Background(), streams.Default().FiringsStream())
	if err != nil {
		t.Fatal(err)
	}
	subject := streams.Default().Sched("route-" + strconv.FormatInt(id, 10) + "-1")
	seen := map[uint64]bool{}
	waitFor(t, "three reroutes of the attempt", time.Minute, func() (bool, error) {
		m, err := stream.GetLastMsgForSubject(context.Background(), subject)
		if err == jetstream.ErrMsgNotFound {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		seen[m.Sequence] = true
		return len(seen) >= 3, nil
	})
	in, err := s.client.GetInstance(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if in.Wait == nil || in.Wait.Kind != schemas.WaitNoWorker || !strings.Contains(in.Wait.Reason, "at version 99.0.0 or newer") ||
		!strings.Contains(in.Wait.Ends, "start an executor with --pool default that registers handler builtin.echo, at version 99.0.0") {
		t.Fatalf("the instance's wait = %+v", in.Wait)
	}
	if time.Since(in.Wait.Since) < 3*time.Second {
		t.Errorf("the wait is since %v, want its first time (before three reroutes)", in.Wait.Since)
	}
	var lines int
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"instance_id":`+strconv.FormatInt(id, 10)) && strings.Contains(l, "attempt waits") {
			lines++
		}
	}
	if lines != 1 {
		t.Errorf("the dispatcher logged the wait %d times over %d reroutes, want once:\n%s", lines, len(seen), logs.String())
	}
}
