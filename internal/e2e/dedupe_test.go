package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
)

// awaitEvent waits for the instance of (task, eventID) and returns it with
// its transitions.
func (s *system) awaitEvent(task, eventID string) schemas.Instance {
	s.t.Helper()
	ctx := context.Background()
	var id int64
	waitFor(s.t, "the instance of "+task+" event "+eventID, 60*time.Second, func() (bool, error) {
		in, err := s.store.InstanceByEvent(ctx, task, eventID)
		if errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		id = in.ID
		return err == nil, err
	})
	inst, err := s.store.GetInstance(ctx, id)
	if err != nil {
		s.t.Fatal(err)
	}
	return inst
}

// TestEventIDsAreScopedByTask fires the same event id, and the same
// idempotency key, on two tasks: each task gets its instance, since the
// duplicate window of the triggers stream spans every task's subject but
// each firing's Nats-Msg-Id names its task.
func TestEventIDsAreScopedByTask(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.apply("task_name: alpha\nexecution: {handler: builtin.echo}\n")
	s.apply("task_name: beta\nexecution: {handler: builtin.echo}\n")
	ctx := context.Background()
	for _, task := range []string{"alpha", "beta"} {
		if _, err := s.client.Fire(ctx, task, wire.FireRequest{EventID: "x"}); err != nil {
			t.Fatalf("fire %s: %v", task, err)
		}
		if _, err := s.client.Fire(ctx, task, wire.FireRequest{IdempotencyKey: "k"}); err != nil {
			t.Fatalf("fire %s: %v", task, err)
		}
		// An outside publisher sets Nats-Msg-Id <task>/<event id>, as
		// docs/protocol.md tells; the event id is what follows the task.
		s.publishWithID(task, task+"/y", `{"payload": 1}`)
	}
	for _, id := range []string{"x", "idem-k", "y"} {
		for _, task := range []string{"alpha", "beta"} {
			s.awaitEvent(task, id)
		}
	}
}

// TestUserIDsCannotTakeAXsOwn holds AX's own event ids out of every user's
// reach: the API refuses an event id in AX's namespace, and a plain NATS
// firing that uses one is recorded SKIPPED under its stream sequence, so a
// user's "retry-<id>-2" can neither block the dispatcher's retry of that
// instance nor make an instance of its own.
func TestUserIDsCannotTakeAXsOwn(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	release := make(chan struct{})
	mux := executor.NewMux()
	mux.HandleFunc("test.fail-first", func(ctx context.Context, task *executor.Job) (any, error) {
		if task.Attempt > 1 {
			return "ok", nil
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, errors.New("first attempt fails")
	})
	s.executor("w1", mux, 2)
	released := false
	t.Cleanup(func() { // before the executor stops
		if !released {
			close(release)
		}
	})
	s.apply("task_name: flaky\nexecution: {handler: test.fail-first, retry: {max_attempts: 2, initial_interval_sec: 0}}\n")
	s.apply("task_name: other\nexecution: {handler: test.fail-first}\n")
	id := s.fire("flaky", nil)
	retryID := fmt.Sprintf("retry-%d-2", id)

	for _, req := range []wire.FireRequest{{EventID: retryID}, {EventID: "cron:flaky:0:2025-01-01T00:00:00Z"},
		{EventID: "e1/shard-0"}, {EventID: "idem-k"}, {IdempotencyKey: "k/shard-1"}} {
		for _, task := range []string{"flaky", "other"} {
			_, err := s.client.Fire(context.Background(), task, req)
			var ae *wire.Error
			if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || !strings.Contains(ae.Message, "AX's own namespace") {
				t.Errorf("fire %s with %+v: %v, want 400 naming AX's namespace", task, req, err)
			}
		}
	}
	// Plain NATS: the id in the body, and in the header.
	s.publish("flaky", `{"event_id": "`+retryID+`"}`)
	s.publishWithID("other", retryID, `{}`)
	s.publishWithID("other", "other/"+retryID, `{}`)
	s.drained(s.srv.Topology.TriggersStream(), "dispatcher")
	for _, task := range []string{"flaky", "other"} {
		if _, err := s.store.InstanceByEvent(context.Background(), task, retryID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("task %s has an instance for %s (%v); want none", task, retryID, err)
		}
	}
	var skipped int
	if err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM instances i
		WHERE state = 'SKIPPED' AND event_id LIKE 'seq-%' AND EXISTS (SELECT 1 FROM instance_transition_log t
			WHERE t.instance_id = i.id AND t.to_state = 'SKIPPED' AND t.reason LIKE '%AX''s own namespace%')`).Scan(&skipped); err != nil {
		t.Fatal(err)
	}
	if skipped != 3 {
		t.Errorf("%d plain firings with AX's ids recorded SKIPPED under their sequence, want 3", skipped)
	}

	close(release)
	released = true
	inst := s.waitState(id, schemas.StateSucceeded, 60*time.Second)
	if inst.Attempt != 2 {
		t.Errorf("instance %d succeeded at attempt %d, want 2 (its retry)", id, inst.Attempt)
	}
}
