package monitor

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/auditor/job"
	axmetrics "github.com/ax-scheduler/ax/internal/metrics"
	"github.com/ax-scheduler/ax/internal/metrics/metricstest"
	"github.com/ax-scheduler/ax/internal/natsembed"
	"github.com/ax-scheduler/ax/internal/servicetest"
	"github.com/ax-scheduler/ax/internal/wait/waittest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
	"github.com/ax-scheduler/ax/streams/natsauth/natsauthtest"
)

// TestMonitorReportsConsumerLag builds a backlog on AX_DISPATCH and
// AX_TRIGGERS — waiting, delivered and unacknowledged, redelivered — and
// scrapes the monitoring auditor's /metrics until its consumer and pool
// figures are those of the consumers' info in JetStream. The auditor runs
// as its own NATS user, so the test also shows that its permissions allow
// what the figures need and that it was refused nothing.
func TestMonitorReportsConsumerLag(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	top := streams.Default()
	passwords := map[natsauth.Role]string{natsauth.Dispatcher: "pw-dispatcher", natsauth.Auditor: "pw-auditor"}
	ns := natsauthtest.NewServer(t, natsembed.Options{Users: natsauth.Users(top, passwords, natsauth.Scope{})})
	refusals := map[natsauth.Role]*natsauthtest.Refusals{}
	connect := func(role natsauth.Role) *nats.Conn {
		t.Helper()
		nc, r := ns.Connect(string(role), passwords[role])
		refusals[role] = r
		return nc
	}
	js, err := jetstream.New(connect(natsauth.Dispatcher))
	if err != nil {
		t.Fatal(err)
	}
	if err := top.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Fatal(err)
	}

	// The backlog: consumers of two pools, and the dispatchers' consumer
	// on AX_TRIGGERS, with messages in every condition.
	publish := func(subject string, n int) {
		t.Helper()
		for i := range n {
			if _, err := js.Publish(ctx, subject, fmt.Appendf(nil, `{"n": %d}`, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	consumer := func(stream string, cfg jetstream.ConsumerConfig) jetstream.Consumer {
		t.Helper()
		c, err := js.CreateOrUpdateConsumer(ctx, stream, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	dispatch := top.DispatchStream()
	for _, p := range schemas.Priorities {
		consumer(dispatch, top.PoolConsumer(schemas.DefaultPool, p, "test.h"))
	}
	normal := consumer(dispatch, top.PoolConsumer(schemas.DefaultPool, schemas.PriorityNormal, "test.h"))
	consumer(dispatch, top.PoolConsumer("gpu", schemas.PriorityNormal, "test.h"))
	publish(top.Dispatch("gpu", schemas.PriorityNormal, "test.h"), 3)
	// Two of default/normal are taken; one comes back and is taken again
	// before more are there, so that the fetch can only be the redelivery:
	// two unacknowledged, one of them redelivered, and four waiting after.
	publish(top.Dispatch(schemas.DefaultPool, schemas.PriorityNormal, "test.h"), 2)
	// Another handler's queue of the same pool and priority adds to its figure.
	consumer(dispatch, top.PoolConsumer(schemas.DefaultPool, schemas.PriorityNormal, "test.other"))
	publish(top.Dispatch(schemas.DefaultPool, schemas.PriorityNormal, "test.other"), 1)
	publish(top.Dispatch(schemas.DefaultPool, schemas.PriorityUrgent, "test.h"), 2)
	batch, err := normal.FetchNoWait(2)
	if err != nil {
		t.Fatal(err)
	}
	var taken []jetstream.Msg
	for m := range batch.Messages() {
		taken = append(taken, m)
	}
	if len(taken) != 2 {
		t.Fatalf("fetched %d messages, want 2", len(taken))
	}
	if err := taken[0].Nak(); err != nil {
		t.Fatal(err)
	}
	again, err := normal.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	redelivered := 0
	for m := range again.Messages() {
		if md, _ := m.Metadata(); md == nil || md.NumDelivered != 2 {
			t.Fatalf("the message fetched again is not the redelivery: %+v", md)
		}
		redelivered++
	}
	if redelivered != 1 {
		t.Fatalf("fetched %d messages again, want the redelivery", redelivered)
	}
	publish(top.Dispatch(schemas.DefaultPool, schemas.PriorityNormal, "test.h"), 4)
	// The one attempt of default/low was given back for later: none
	// waits for delivery, yet it waits for a worker.
	publish(top.Dispatch(schemas.DefaultPool, schemas.PriorityLow, "test.h"), 1)
	low := consumer(dispatch, top.PoolConsumer(schemas.DefaultPool, schemas.PriorityLow, "test.h"))
	given, err := low.FetchNoWait(1)
	if err != nil {
		t.Fatal(err)
	}
	for m := range given.Messages() {
		if err := m.NakWithDelay(time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	triggers := consumer(top.TriggersStream(), top.DispatcherConsumer())
	publish(top.Trigger("etl"), 4)
	// An ephemeral reader makes no series.
	ordered, err := js.OrderedConsumer(ctx, top.TriggersStream(), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ordered.Fetch(1); err != nil {
		t.Fatal(err)
	}

	reg := axmetrics.NewRegistry()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	svc, err := New(Options{
		Base:        job.Base{Conn: connect(natsauth.Auditor), Store: store.New(storetest.NewDB(t)), Metrics: reg, RetryInterval: 50 * time.Millisecond, Logger: log},
		LagInterval: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Every message above is older than any look the auditor takes.
	started := time.Now()
	servicetest.Go(t, "auditor", svc.Run)
	srv := httptest.NewServer(axmetrics.Handler(reg))
	t.Cleanup(srv.Close)

	// What JetStream says, consumer by consumer.
	type key struct{ stream, consumer string }
	watched := map[key]jetstream.Consumer{{top.TriggersStream(), "dispatcher"}: triggers}
	for _, pool := range []string{schemas.DefaultPool, "gpu"} {
		for _, p := range schemas.Priorities {
			for _, h := range []string{"test.h", "test.other"} {
				if c, err := js.Consumer(ctx, dispatch, top.PoolConsumer(pool, p, h).Durable); err == nil {
					watched[key{dispatch, c.CachedInfo().Name}] = c
				}
			}
		}
	}
	// The auditor's own consumer on AX_AUDIT counts too.
	waitUntil(t, "the auditor to monitor", svc.Monitoring)
	monitor, err := js.Consumer(ctx, top.AuditStream(), MonitorConsumer)
	if err != nil {
		t.Fatal(err)
	}
	watched[key{top.AuditStream(), MonitorConsumer}] = monitor
	if len(watched) != 7 {
		t.Fatalf("%d consumers to check, want 7", len(watched))
	}
	// The last look's mismatches, said when the wait fails. Two minutes
	// bound a failing run only: a match ends the wait at once.
	var mismatch string
	defer func() {
		if t.Failed() && mismatch != "" {
			t.Logf("the metrics do not match the consumers' info: %s", mismatch)
		}
	}()
	waittest.ForTrue(t, "the metrics to match the consumers' info", 2*time.Minute, func() bool {
		families := metricstest.Scrape(t, srv)
		mismatch = ""
		waiting := map[[2]string]float64{}
		oldest := map[[2]string]float64{}
		oldestAt := map[[2]string]time.Time{}
		for k, c := range watched {
			info, err := c.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			labels := map[string]string{"stream": k.stream, "consumer": k.consumer}
			for name, want := range map[string]float64{
				"ax_consumer_pending":     float64(info.NumPending),
				"ax_consumer_ack_pending": float64(info.NumAckPending),
				"ax_consumer_redelivered": float64(info.NumRedelivered),
			} {
				if got, ok := gaugeValue(families, name, labels); !ok || got != want {
					mismatch += fmt.Sprintf("%s%v = %v (found %t), JetStream says %v; ", name, labels, got, ok, want)
				}
			}
			if got, ok := gaugeValue(families, "ax_consumer_last_active_seconds", labels); !ok || got < 0 || got > time.Since(info.Created).Seconds()+1 {
				mismatch += fmt.Sprintf("ax_consumer_last_active_seconds%v = %v (found %t); ", labels, got, ok)
			}
			if pool := info.Config.Metadata["ax_pool"]; pool != "" {
				waiting[[2]string{pool, info.Config.Metadata["ax_priority"]}] += float64(info.NumPending)
				// The oldest waiting attempt is the oldest message on the
				// consumer's subject that no worker acknowledged: AX_DISPATCH
				// is a work queue, which keeps no acknowledged message.
				stream, err := js.Stream(ctx, dispatch)
				if err != nil {
					t.Fatal(err)
				}
				age := 0.0
				k := [2]string{pool, info.Config.Metadata["ax_priority"]}
				first, err := stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(info.Config.FilterSubject))
				if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
					t.Fatal(err)
				}
				if err == nil {
					age = time.Since(first.Time).Seconds()
					if at, ok := oldestAt[k]; !ok || first.Time.Before(at) {
						oldestAt[k] = first.Time
					}
				}
				oldest[k] = max(oldest[k], age)
			}
		}
		for k, want := range waiting {
			labels := map[string]string{"pool": k[0], "priority": k[1]}
			if got, ok := gaugeValue(families, "ax_pool_waiting", labels); !ok || got != want {
				mismatch += fmt.Sprintf("ax_pool_waiting%v = %v (found %t), JetStream says %v; ", labels, got, ok, want)
			}
			// The oldest of the pool's queues at the priority, as of the
			// auditor's last look: at most as old as now, and at least as
			// old as it was when the auditor started, before its first look.
			age := oldest[k]
			atStart := 0.0
			if at, ok := oldestAt[k]; ok {
				atStart = started.Sub(at).Seconds()
			}
			got, ok := gaugeValue(families, "ax_pool_oldest_waiting_seconds", labels)
			if !ok || (age == 0) != (got == 0) || got > age+0.05 || got < atStart-0.05 {
				mismatch += fmt.Sprintf("ax_pool_oldest_waiting_seconds%v = %v (found %t), the oldest is %.3fs old; ", labels, got, ok, age)
			}
		}
		// Only durable consumers have series.
		if f := families["ax_consumer_pending"]; f == nil || len(f.GetMetric()) != len(watched) {
			mismatch += fmt.Sprintf("ax_consumer_pending has %d series, want %d (the durable consumers); ", len(f.GetMetric()), len(watched))
		}
		return mismatch == ""
	})
	// The figures are the backlog built above.
	normalName := top.PoolConsumer(schemas.DefaultPool, schemas.PriorityNormal, "test.h").Durable
	families := metricstest.Scrape(t, srv)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"ax_pool_waiting", map[string]string{"pool": "default", "priority": "normal"}, 5},
		{"ax_pool_waiting", map[string]string{"pool": "default", "priority": "urgent"}, 2},
		{"ax_pool_waiting", map[string]string{"pool": "default", "priority": "low"}, 0},
		{"ax_consumer_ack_pending", map[string]string{"stream": dispatch, "consumer": top.PoolConsumer(schemas.DefaultPool, schemas.PriorityLow, "test.h").Durable}, 1},
		{"ax_pool_waiting", map[string]string{"pool": "gpu", "priority": "normal"}, 3},
		{"ax_consumer_ack_pending", map[string]string{"stream": dispatch, "consumer": normalName}, 2},
		{"ax_consumer_redelivered", map[string]string{"stream": dispatch, "consumer": normalName}, 1},
		{"ax_consumer_pending", map[string]string{"stream": top.TriggersStream(), "consumer": "dispatcher"}, 4},
	} {
		if got, ok := gaugeValue(families, c.name, c.labels); !ok || got != c.want {
			t.Errorf("%s%v = %v (found %t), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	for role, r := range refusals {
		if errs := r.Errors(); len(errs) > 0 {
			t.Errorf("the server refused %s: %q", role, errs)
		}
	}
}

// gaugeValue returns the value of the gauge name with exactly labels.
func gaugeValue(families map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	f, ok := families[name]
	if !ok {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		if len(m.GetLabel()) != len(labels) {
			continue
		}
		if slices.IndexFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return labels[l.GetName()] != l.GetValue() }) < 0 {
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}
