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

// BenchmarkPipeline fires AX_BENCH_N (default 20000) no-op instances through
// the real pipeline — trigger stream, dispatcher, PostgreSQL, dispatch stream,
// executor, reports, dispatcher — and reports end-to-end instances/s and the
// p50/p99 latency from firing to handler start. Run it with
//
//	make bench-pipeline
func BenchmarkPipeline(b *testing.B) {
	n := 20000
	if v := os.Getenv("AX_BENCH_N"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			b.Fatalf("AX_BENCH_N=%q: want a positive number", v)
		}
	}
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
	ctx := context.Background()
	var total time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		batch := streams.NewAsyncBatch(s.js)
		for j := range n {
			ev := schemas.TriggerEvent{EventID: fmt.Sprintf("bench-%d-%d", i, j), FiredAt: time.Now()}
			m, err := streams.NewMsg(s.srv.Topology.Trigger("noop"), ev.EventID, ev)
			if err != nil {
				b.Fatal(err)
			}
			batch.Add(m)
			if batch.Len() == 1000 {
				if err := batch.Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := batch.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		want := (i + 1) * n
		waitFor(b, "every instance to succeed", 10*time.Minute, func() (bool, error) {
			var done int
			err := s.pool.QueryRow(ctx, `SELECT count(*) FROM instances WHERE task = 'noop' AND state = 'SUCCEEDED'`).Scan(&done)
			return done >= want, err
		})
		total += time.Since(start)
	}
	var p50, p99 float64
	err := s.pool.QueryRow(ctx, `
SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)
FROM (SELECT extract(epoch FROM started_at - fired_at) * 1000 AS ms FROM instances WHERE task = 'noop') t`).Scan(&p50, &p99)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N*n)/total.Seconds(), "instances/s")
	b.ReportMetric(p50, "p50_start_ms")
	b.ReportMetric(p99, "p99_start_ms")
	b.ReportMetric(0, "ns/op")
}
