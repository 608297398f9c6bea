package e2e_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// TestPrioritiesAndTheirOverride queues a backlog of urgent work and a few
// low-priority firings before any executor runs: the worker drains urgent
// first, yet low-priority work starts long before the urgent backlog is
// gone (one pull round in five goes lowest first). A firing's priority
// overrides its task's.
func TestPrioritiesAndTheirOverride(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.apply(`
task_name: hurry
priority: urgent
execution:
  handler: builtin.echo
`)
	s.apply(`
task_name: later
priority: low
execution:
  handler: builtin.echo
`)
	ctx := context.Background()
	batch := streams.NewAsyncBatch(s.js)
	for i := range 40 {
		ev := schemas.TriggerEvent{EventID: fmt.Sprintf("u-%d", i)}
		m, _ := streams.NewMsg(s.srv.Topology.Trigger("hurry"), ev.EventID, ev)
		batch.Add(m)
	}
	for i := range 4 {
		ev := schemas.TriggerEvent{EventID: fmt.Sprintf("l-%d", i)}
		m, _ := streams.NewMsg(s.srv.Topology.Trigger("later"), ev.EventID, ev)
		batch.Add(m)
	}
	if err := batch.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	// The override: a low task fired as urgent is routed as urgent.
	res, err := s.client.Fire(ctx, "later", wire.FireRequest{Priority: schemas.PriorityUrgent})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every firing's instance", 60*time.Second, func() (bool, error) {
		var n int
		err := s.pool.QueryRow(ctx, `SELECT count(*) FROM instances`).Scan(&n)
		return n == 45, err
	})

	mux := builtinsMux()
	s.executor("solo", mux, 1)
	waitFor(t, "every instance to succeed", 30*time.Second, func() (bool, error) {
		var n int
		err := s.pool.QueryRow(ctx, `SELECT count(*) FROM instances WHERE state = 'SUCCEEDED'`).Scan(&n)
		return n == 45, err
	})

	type start struct {
		task     string
		priority schemas.Priority
		id       int64
		at       time.Time
	}
	var starts []start
	for _, task := range []string{"hurry", "later"} {
		for _, inst := range s.instances(task) {
			starts = append(starts, start{inst.Task, inst.Priority, inst.ID, *inst.StartedAt})
		}
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i].at.Before(starts[j].at) })
	override := starts[0]
	for _, st := range starts {
		if st.id == res.InstanceID {
			override = st
		}
	}
	if override.priority != schemas.PriorityUrgent {
		t.Errorf("the overridden firing has priority %s, want urgent", override.priority)
	}
	firstLow, lastUrgent := -1, -1
	for i, st := range starts {
		if st.priority == schemas.PriorityLow && firstLow < 0 {
			firstLow = i
		}
		if st.priority == schemas.PriorityUrgent {
			lastUrgent = i
		}
	}
	if firstLow < 0 || firstLow > 10 || firstLow > lastUrgent {
		t.Errorf("the first low-priority run started %dth of %d (the last urgent one %dth): low work must progress under an urgent backlog",
			firstLow+1, len(starts), lastUrgent+1)
	}
	if starts[0].priority != schemas.PriorityUrgent {
		t.Errorf("the first run was %s, want urgent first", starts[0].priority)
	}
}
