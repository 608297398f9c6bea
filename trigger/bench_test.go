package trigger

import (
	"context"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/internal/servicetest"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

// BenchmarkHundredThousandCronTasks registers 100,000 cron tasks in one
// trigger service and reports:
//
//   - bytes/task: the heap the service keeps per task once all are planned
//     (HeapAlloc after GC, less the same before the service started);
//   - p50_ms, p99_ms, max_ms: how late the service publishes a tick, from
//     its scheduled instant to the publish call, on the real clock, over five
//     seconds in which 1,000 tasks fall due every second.
//
// 60,000 tasks fire once a minute, 1,000 at each second of it ("<s> * * * *
// *"); 40,000 fire once a year and wait in the heap. The firings go to an
// embedded NATS server (memory storage), the trigger state to PostgreSQL
// (TEST_DATABASE_URL). It runs once whatever b.N is:
//
//	go test -run '^$' -bench HundredThousand -benchtime 1x ./trigger/
func BenchmarkHundredThousandCronTasks(b *testing.B) {
	const (
		tasks      = 100_000
		perMinute  = 60_000
		warmup     = 2 * time.Second
		measureFor = 5 * time.Second
	)
	cfg := streams.Config{Storage: jetstream.MemoryStorage}
	srv := streamstest.NewServer(b, cfg)
	conn, _ := srv.Connect()
	db := storetest.New(b)
	ctx := context.Background()
	// The tasks and their trigger state, as a service that ran before left
	// them: planning then queues no state to save.
	if _, err := db.Pool.Exec(ctx, `
		INSERT INTO tasks (name, version, definition)
		SELECT name, 1, jsonb_build_object(
			'task_name', name, 'execution', jsonb_build_object('handler', 'bench.noop'),
			'triggers', jsonb_build_array(jsonb_build_object('type', 'cron', 'schedule', schedule, 'timezone', 'UTC', 'misfire', 'skip')))
		FROM (SELECT 'bench-' || lpad(i::text, 6, '0') AS name,
			CASE WHEN i < $1 THEN (i % 60)::text || ' * * * * *' ELSE '0 0 0 1 1 *' END AS schedule
			FROM generate_series(0, $2 - 1) AS i) AS t`, perMinute, tasks); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `
		INSERT INTO trigger_state (task, trigger_index, schedule, timezone, last_tick)
		SELECT name, 0, definition->'triggers'->0->>'schedule', 'UTC', now() FROM tasks`); err != nil {
		b.Fatal(err)
	}

	svc, err := New(Options{Conn: conn, Store: store.New(db.Pool)})
	if err != nil {
		b.Fatal(err)
	}
	var (
		before, after runtime.MemStats
		loadedAt      time.Time
		late          = make([]time.Duration, 0, 2*perMinute)
		ticks         = make([]int64, 0, 2*perMinute)
	)
	runtime.GC()
	runtime.ReadMemStats(&before)
	svc.onLoaded = func() {
		// Run's loops have not started: nothing fires while this measures.
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&after)
		loadedAt = time.Now()
	}
	svc.onPublish = func(tick int64) {
		late = append(late, time.Duration(time.Now().UnixNano()-tick))
		ticks = append(ticks, tick)
	}
	b.ResetTimer()
	// Ready is closed after onLoaded has run.
	running := servicetest.Start(b, "trigger", svc)
	time.Sleep(warmup + measureFor + time.Second)
	if err := running.Stop(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()

	// The samples of the ticks due within the measured five seconds.
	from, to := loadedAt.Add(warmup).UnixNano(), loadedAt.Add(warmup+measureFor).UnixNano()
	var samples []time.Duration
	for i, tick := range ticks {
		if tick >= from && tick < to {
			samples = append(samples, late[i])
		}
	}
	if len(samples) < 4*1000 {
		b.Fatalf("%d firings measured, want about %d", len(samples), int(measureFor/time.Second)*1000)
	}
	slices.Sort(samples)
	ms := func(q float64) float64 {
		return float64(samples[int(q*float64(len(samples)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/tasks, "bytes/task")
	b.ReportMetric(ms(0.5), "p50_ms")
	b.ReportMetric(ms(0.99), "p99_ms")
	b.ReportMetric(ms(1), "max_ms")
	b.ReportMetric(float64(len(samples)), "firings")
}
