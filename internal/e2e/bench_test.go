package e2e_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// benchSystem starts a system with one executor of 256 slots serving the
// no-op task "noop".
func benchSystem(b *testing.B) *system {
	s := newSystem(b)
	s.log = zerolog.Nop()
	mux := executor.NewMux()
	mux.HandleFunc("bench.noop", func(context.Context, *executor.Task) (any, error) { return nil, nil })
	s.executor("bench", mux, 256)
	s.apply(`
task_name: noop
execution:
  handler: bench.noop
`)
	return s
}

// fireNoop publishes one firing of "noop", asynchronously into batch.
func (s *system) fireNoop(b *testing.B, batch *streams.AsyncBatch, eventID string) {
	ev := schemas.TriggerEvent{EventID: eventID, FiredAt: time.Now()}
	m, err := streams.NewMsg(s.srv.Topology.Trigger("noop"), eventID, ev)
	if err != nil {
		b.Fatal(err)
	}
	batch.Add(m)
}

// waitSucceeded waits until want instances of "noop" have succeeded.
func (s *system) waitSucceeded(b *testing.B, want int) {
	waitFor(b, "every instance to succeed", 10*time.Minute, func() (bool, error) {
		var done int
		err := s.pool.QueryRow(context.Background(),
			`SELECT count(*) FROM instances WHERE task = 'noop' AND state = 'SUCCEEDED'`).Scan(&done)
		return done >= want, err
	})
}

// reportStartLatency reports the p50 and p99 of firing → handler start over
// every instance of "noop".
func (s *system) reportStartLatency(b *testing.B) {
	var p50, p99 float64
	err := s.pool.QueryRow(context.Background(), `
SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)
FROM (SELECT extract(epoch FROM started_at - fired_at) * 1000 AS ms FROM instances WHERE task = 'noop') t`).Scan(&p50, &p99)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(p50, "p50_start_ms")
	b.ReportMetric(p99, "p99_start_ms")
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

// BenchmarkPipelineThroughput fires AX_BENCH_N (default 20000) no-op
// instances at once through the real pipeline — trigger stream, dispatcher,
// PostgreSQL, dispatch stream, executor, reports, dispatcher — and reports
// end-to-end instances/s, from the first firing to the last SUCCEEDED. Its
// start latencies are those of a backlog: they measure queueing.
func BenchmarkPipelineThroughput(b *testing.B) {
	n := envInt(b, "AX_BENCH_N", 20000)
	s := benchSystem(b)
	ctx := context.Background()
	var total time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		batch := streams.NewAsyncBatch(s.js)
		for j := range n {
			s.fireNoop(b, batch, fmt.Sprintf("burst-%d-%d", i, j))
			if batch.Len() == 1000 {
				if err := batch.Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := batch.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		s.waitSucceeded(b, (i+1)*n)
		total += time.Since(start)
	}
	b.ReportMetric(float64(b.N*n)/total.Seconds(), "instances/s")
	s.reportStartLatency(b)
	b.ReportMetric(0, "ns/op")
}

// BenchmarkPipelineLatency fires no-op instances at a steady AX_BENCH_RATE per
// second (default 1000) for AX_BENCH_SECONDS (default 5) and reports the p50
// and p99 latency from firing to handler start: the pipeline's latency when
// it keeps up, without a backlog.
func BenchmarkPipelineLatency(b *testing.B) {
	rate := envInt(b, "AX_BENCH_RATE", 1000)
	seconds := envInt(b, "AX_BENCH_SECONDS", 5)
	s := benchSystem(b)
	ctx := context.Background()
	const tick = 10 * time.Millisecond
	perTick := max(rate/int(time.Second/tick), 1)
	fired := 0
	for i := 0; i < b.N; i++ {
		ticker := time.NewTicker(tick)
		batch := streams.NewAsyncBatch(s.js)
		for t := 0; t < seconds*int(time.Second/tick); t++ {
			<-ticker.C
			for range perTick {
				s.fireNoop(b, batch, fmt.Sprintf("paced-%d", fired))
				fired++
			}
			if err := batch.Wait(ctx); err != nil {
				b.Fatal(err)
			}
		}
		ticker.Stop()
		s.waitSucceeded(b, fired)
	}
	b.ReportMetric(float64(perTick)*float64(time.Second/tick), "fired/s")
	s.reportStartLatency(b)
	b.ReportMetric(0, "ns/op")
}
