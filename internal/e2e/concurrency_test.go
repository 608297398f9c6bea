package e2e_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
)

// instances lists every instance of task, oldest first, with transitions.
func (s *system) instances(task string) []schemas.Instance {
	s.t.Helper()
	ctx := context.Background()
	list, err := s.store.ListInstances(ctx, store.InstanceFilter{Task: task, Limit: 500})
	if err != nil {
		s.t.Fatal(err)
	}
	out := make([]schemas.Instance, len(list))
	for i, inst := range list {
		if out[len(list)-1-i], err = s.store.GetInstance(ctx, inst.ID); err != nil {
			s.t.Fatal(err)
		}
	}
	return out
}

// gated serves "test.gate", which runs until release is closed or its context ends.
func gated(release <-chan struct{}) *executor.Mux {
	mux := executor.NewMux()
	mux.HandleFunc("test.gate", func(ctx context.Context, _ *executor.Job) (any, error) {
		select {
		case <-release:
			return nil, nil
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	})
	mux.HandleFunc("test.brief", func(ctx context.Context, _ *executor.Job) (any, error) {
		time.Sleep(10 * time.Millisecond)
		return nil, nil
	})
	return mux
}

func TestSerialFiringsNeverOverlap(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.executor("w1", gated(nil), 8)
	s.executor("w2", gated(nil), 8)
	s.apply(`
task_name: one-at-a-time
execution:
  handler: test.brief
concurrency:
  max_running_instances: 1
  blocking_strategy: serial
`)
	const n = 50
	s.fireMany("one-at-a-time", n)
	s.waitInState("one-at-a-time", schemas.StateSucceeded, n, 60*time.Second)
	type span struct{ start, end time.Time }
	var spans []span
	waited := 0
	for _, inst := range s.instances("one-at-a-time") {
		var sp span
		for _, tr := range inst.Transitions {
			switch {
			case tr.To == schemas.StateRunning:
				sp.start = tr.At
			case tr.From == schemas.StateRunning:
				sp.end = tr.At
			case tr.To == schemas.StateWaiting:
				waited++
			}
		}
		spans = append(spans, sp)
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].start.Before(spans[j].start) })
	for i := 1; i < len(spans); i++ {
		if spans[i].start.Before(spans[i-1].end) {
			t.Errorf("runs overlap: %v–%v and %v–%v", spans[i-1].start, spans[i-1].end, spans[i].start, spans[i].end)
		}
	}
	if waited == 0 {
		t.Error("no firing waited: the limit was never reached")
	}
}

func TestBlockingStrategies(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	release := make(chan struct{})
	s.executor("w1", gated(release), 8)
	for _, strategy := range []string{"discard", "buffer_one", "cancel_other"} {
		s.apply(fmt.Sprintf(`
task_name: %s
execution:
  handler: test.gate
concurrency:
  max_running_instances: 1
  blocking_strategy: %s
`, strings.ReplaceAll(strategy, "_", "-"), strategy))
	}
	ctx := context.Background()
	// The first firing of each runs and holds its slot.
	first := map[string]int64{}
	for _, task := range []string{"discard", "buffer-one", "cancel-other"} {
		first[task] = s.fire(task, nil)
		s.waitState(first[task], schemas.StateRunning, 60*time.Second)
	}
	for _, task := range []string{"discard", "buffer-one", "cancel-other"} {
		s.fireMany(task, 3)
	}
	s.drained(s.srv.Topology.TriggersStream(), "dispatcher")

	states := func(task string) []schemas.State {
		var out []schemas.State
		for _, inst := range s.instances(task) {
			out = append(out, inst.State)
		}
		return out
	}
	if got := states("discard"); fmt.Sprint(got) != "[RUNNING SKIPPED SKIPPED SKIPPED]" {
		t.Errorf("discard: states %v, want the first running and the rest SKIPPED", got)
	}
	if got := states("buffer-one"); fmt.Sprint(got) != "[RUNNING WAITING SKIPPED SKIPPED]" {
		t.Errorf("buffer_one: states %v, want one running, one waiting, the rest SKIPPED", got)
	}
	// cancel_other: each newer firing cancels the one running (or about to);
	// the last one runs.
	s.waitState(first["cancel-other"], schemas.StateCancelled, 60*time.Second)
	waitFor(t, "cancel_other to settle", 60*time.Second, func() (bool, error) {
		got := states("cancel-other")
		return fmt.Sprint(got) == "[CANCELLED CANCELLED CANCELLED RUNNING]", nil
	})
	close(release)
	buffered := s.instances("buffer-one")[1]
	s.waitState(buffered.ID, schemas.StateSucceeded, 60*time.Second)
	if inst, err := s.store.GetInstance(ctx, first["cancel-other"]); err != nil || !strings.Contains(inst.Error, "cancel_other") {
		t.Errorf("the cancelled run's error = %q (%v), want it to name cancel_other", inst.Error, err)
	}
}

func TestCancelStopsARunningAttemptAndFreesItsSlot(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	release := make(chan struct{})
	defer close(release)
	worker := s.executor("w1", gated(release), 4)
	s.apply(`
task_name: cancellable
execution:
  handler: test.gate
  retry:
    max_attempts: 3
concurrency:
  max_running_instances: 1
`)
	ctx := context.Background()
	running := s.fire("cancellable", nil)
	s.waitState(running, schemas.StateRunning, 60*time.Second)
	waiting := s.fire("cancellable", nil)
	s.waitState(waiting, schemas.StateWaiting, 60*time.Second)

	inst, err := s.client.Cancel(ctx, running, "wrong input")
	if err != nil {
		t.Fatal(err)
	}
	if inst.State != schemas.StateCancelled || inst.Error != "cancelled: wrong input" {
		t.Errorf("cancelled instance: %s, %q; want CANCELLED, \"cancelled: wrong input\"", inst.State, inst.Error)
	}
	last := inst.Transitions[len(inst.Transitions)-1]
	if last.From != schemas.StateRunning || last.Reason != "wrong input" || last.Operator == "" {
		t.Errorf("last transition %s→%s by %q: %q; want RUNNING→CANCELLED by the caller, with the reason",
			last.From, last.To, last.Operator, last.Reason)
	}
	// The freed slot starts the waiting instance; the cancelled attempt's
	// own failure report, when its worker stops it, changes nothing.
	s.waitState(waiting, schemas.StateRunning, 60*time.Second)
	waitFor(t, "the worker to stop the cancelled attempt", 60*time.Second, func() (bool, error) {
		return worker.Busy() == 1, nil
	})
	s.drained(s.srv.Topology.ReportsStream(), "recorder")
	after, err := s.store.GetInstance(ctx, running)
	if err != nil {
		t.Fatal(err)
	}
	if after.State != schemas.StateCancelled || len(after.Transitions) != len(inst.Transitions) {
		t.Errorf("after the worker stopped: %s with %d transitions, want it left CANCELLED with %d",
			after.State, len(after.Transitions), len(inst.Transitions))
	}

	// A waiting instance cancels too; an ended one is refused.
	if _, err := s.client.Cancel(ctx, waiting, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.Cancel(ctx, running, ""); err == nil || !strings.Contains(err.Error(), "already ended") {
		t.Errorf("cancel of an ended instance: %v, want a 409 saying it ended", err)
	}
}
