package e2e_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/internal/servicetest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/trigger"
	"github.com/ax-scheduler/ax/trigger/triggertest"
)

// TestTwoTriggersFireEachTickOnce runs two trigger services on the same
// per-second schedule for a minute of simulated time, with the real
// dispatcher: both publish every tick under the same Nats-Msg-Id (keyed
// with the store's secret, which outside publishers of AX_TRIGGERS lack),
// JetStream keeps one message of each, and PostgreSQL holds exactly one
// instance per tick.
func TestTwoTriggersFireEachTickOnce(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.apply(`
task_name: every-second
execution:
  handler: test.count
triggers:
  - type: cron
    schedule: "* * * * * *"
`)
	var published atomic.Int64
	nc, _ := s.srv.Connect()
	sub, err := nc.Subscribe(s.srv.Topology.Trigger("every-second"), func(*nats.Msg) { published.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	start := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	clock := triggertest.NewClock(start)
	for i := range 2 {
		s.trigger(fmt.Sprintf("trigger %d", i), clock)
	}
	const ticks = 60
	for range ticks {
		clock.Step(t, 2)
	}
	clock.WaitTimers(t, 2)
	s.drained(s.srv.Topology.TriggersStream(), "dispatcher")

	waitFor(t, "both replicas' publishes", 60*time.Second, func() (bool, error) {
		return published.Load() >= 2*ticks, nil
	})
	if n := published.Load(); n != 2*ticks {
		t.Errorf("the replicas published %d firings, want %d (each tick twice)", n, 2*ticks)
	}
	stream, err := s.js.Stream(context.Background(), s.srv.Topology.TriggersStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(context.Background(), jetstream.WithSubjectFilter(s.srv.Topology.Trigger("every-second")))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[s.srv.Topology.Trigger("every-second")]; n != ticks {
		t.Errorf("AX_TRIGGERS holds %d firings, want %d (one per tick)", n, ticks)
	}

	rows, err := s.pool.Query(context.Background(), `
		SELECT event_id, source, fired_at, count(*) OVER (PARTITION BY fired_at)
		FROM instances WHERE task = 'every-second' ORDER BY fired_at`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	i := 0
	for rows.Next() {
		var (
			eventID, source string
			firedAt         time.Time
			perTick         int
		)
		if err := rows.Scan(&eventID, &source, &firedAt, &perTick); err != nil {
			t.Fatal(err)
		}
		i++
		tick := start.Add(time.Duration(i) * time.Second)
		if perTick != 1 || !firedAt.Equal(tick) || source != string(schemas.SourceCron) || eventID != schemas.CronEventID("every-second", 0, tick) {
			t.Errorf("instance %d: %s (%s) fired at %v, %d for its tick; want %s at %v, one",
				i, eventID, source, firedAt.UTC(), perTick, schemas.CronEventID("every-second", 0, tick), tick)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if i != ticks {
		t.Errorf("%d instances, want %d: one per tick", i, ticks)
	}
}

// TestCronCatchUpIsRecorded starts a trigger service after a downtime: the
// ticks its catch_up policy fires late make instances whose creation says why.
func TestCronCatchUpIsRecorded(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.apply(`
task_name: nightly
execution:
  handler: test.count
triggers:
  - type: cron
    schedule: "0 * * * *"
    timezone: Europe/Berlin
    misfire: catch_up
    max_catch_up: 2
`)
	// The trigger last fired at 07:00 UTC; it is 10:00:30 now.
	ctx := context.Background()
	err := s.store.SaveTriggerStates(ctx, []store.TriggerState{{
		Task: "nightly", Schedule: "0 * * * *", Timezone: "Europe/Berlin", LastTick: time.Date(2024, 5, 1, 7, 0, 0, 0, time.UTC),
	}})
	if err != nil {
		t.Fatal(err)
	}
	clock := triggertest.NewClock(time.Date(2024, 5, 1, 10, 0, 30, 0, time.UTC))
	s.trigger("trigger", clock)
	clock.WaitTimers(t, 1)
	s.drained(s.srv.Topology.TriggersStream(), "dispatcher")

	rows, err := s.pool.Query(ctx, `
		SELECT i.fired_at, t.reason FROM instances i
		JOIN instance_transitions t ON t.instance_id = i.id AND t.to_state = 'CREATED'
		WHERE i.task = 'nightly' ORDER BY i.fired_at`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var (
			firedAt time.Time
			reason  string
		)
		if err := rows.Scan(&firedAt, &reason); err != nil {
			t.Fatal(err)
		}
		got = append(got, firedAt.UTC().Format(time.RFC3339)+" "+reason)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	const why = " misfire catch_up: missed tick fired late (2 of 3 missed ticks fired, oldest first)"
	want := []string{"2024-05-01T09:00:00Z" + why, "2024-05-01T10:00:00Z" + why}
	if !slices.Equal(got, want) {
		t.Errorf("instances:\n%v\nwant\n%v", got, want)
	}
}

// trigger starts a trigger service named name on its own connection, on
// clock, until the test's end.
func (s *system) trigger(name string, clock *triggertest.Clock) {
	s.t.Helper()
	conn, _ := s.srv.Connect()
	tr, err := trigger.New(trigger.Options{Conn: conn, Store: s.store, Clock: clock, Logger: s.log})
	if err != nil {
		s.t.Fatal(err)
	}
	servicetest.Start(s.t, name, tr)
}
