package streams_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/internal/natsembed"
	"github.com/ax-scheduler/ax/streams"
)

// earlierTriggers is AX_TRIGGERS as an earlier AX made it: the firings and
// the schedules in one stream, with message schedules (and so rollups).
func earlierTriggers(top streams.Topology) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:              top.TriggersStream(),
		Subjects:          []string{top.Prefix() + ".trigger.>", top.Prefix() + ".sched.>"},
		MaxAge:            24 * time.Hour,
		Duplicates:        2 * time.Minute,
		AllowMsgSchedules: true,
	}
}

func startJS(t *testing.T) jetstream.JetStream { return startJSAt(t, t.TempDir()) }

// startJSAt starts a JetStream server that stores under dir, until the
// test ends, and connects to it.
func startJSAt(tb testing.TB, dir string) jetstream.JetStream {
	tb.Helper()
	s, err := natsembed.Start(natsembed.Options{StoreDir: dir})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	return js
}

// TestEnsureMigratesTriggers ensures the topology over an earlier
// AX_TRIGGERS: while it holds a pending schedule, Ensure stops with an
// error that says so and changes nothing; once it holds only taken
// firings, it is made again without schedules or rollups, and AX_FIRINGS
// takes the schedules' subjects.
func TestEnsureMigratesTriggers(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := startJS(t)
	top := streams.Default()
	if _, err := js.CreateStream(ctx, earlierTriggers(top)); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, top.Trigger("t"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(top.SchedFiring("t", "later"))
	m.Data = []byte(`{}`)
	m.Header.Set(streams.HeaderSchedule, "@at "+time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	m.Header.Set(streams.HeaderScheduleTarget, top.Trigger("t"))
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	err := top.Ensure(ctx, js, streams.Config{})
	if err == nil || !strings.Contains(err.Error(), "1 pending delayed firings") || !strings.Contains(err.Error(), "nats stream rm") {
		t.Fatalf("Ensure over a pending schedule: %v", err)
	}
	earlier, err := js.Stream(ctx, top.TriggersStream())
	if err != nil || earlier.CachedInfo().State.Msgs != 2 {
		t.Fatalf("the earlier stream was changed: %v", err)
	}

	if err := earlier.Purge(ctx, jetstream.WithPurgeSubject(top.Prefix()+".sched.>")); err != nil {
		t.Fatal(err)
	}
	if err := top.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Fatalf("Ensure over taken firings: %v", err)
	}
	st, err := js.Stream(ctx, top.TriggersStream())
	if err != nil {
		t.Fatal(err)
	}
	if c := st.CachedInfo().Config; c.AllowMsgSchedules || c.AllowRollup || len(c.Subjects) != 1 {
		t.Errorf("AX_TRIGGERS after the migration: schedules %v, rollups %v, subjects %v", c.AllowMsgSchedules, c.AllowRollup, c.Subjects)
	}
	if _, err := js.Stream(ctx, top.FiringsStream()); err != nil {
		t.Errorf("AX_FIRINGS: %v", err)
	}
	// Again: nothing to migrate.
	if err := top.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Errorf("Ensure again: %v", err)
	}
}
