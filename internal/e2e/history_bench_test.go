package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// BenchmarkPipelineHistory measures the pipeline three times, on a fresh
// database each time: empty, then with AX_BENCH_HISTORY (default
// 1,000,000; make bench-history: 10,000,000) ended instances of the
// benchmark's own task in the history, then empty again, so that a drift of
// a shared machine's load over the long load shows as a difference of the
// two empty runs. The history's instances are spread over the 12 months
// before now, two transitions each, with their keys, as a year of an
// installation leaves them. Each time it reports a
// burst of AX_BENCH_N (default 20000) firings (instances/s, CPU per
// instance) and a steady AX_BENCH_RATE (default 200) firings/s for
// AX_BENCH_SECONDS (default 10) (firing → handler start p50 and p99). The
// history is loaded with INSERT … SELECT generate_series, straight into its
// partitions, with synchronous_commit off for the load alone, then
// vacuumed and analyzed (as a year-old installation's autovacuum has left
// it: otherwise autovacuum's first pass over the fresh rows runs during the
// measurement) and checkpointed; the measured part runs on the server's own settings (make
// bench-history: fsync on), printed beside the figures.
func BenchmarkPipelineHistory(b *testing.B) {
	history := envInt(b, "AX_BENCH_HISTORY", 1_000_000)
	for _, n := range []int{0, history, 0} {
		b.Run(fmt.Sprintf("history=%d", n), func(b *testing.B) {
			s := benchSystem(b)
			if n > 0 {
				loadHistory(b, s, n)
			}
			burstAndSteady(b, s)
		})
	}
}

// loadHistory writes n ended instances of "noop" into the history.
func loadHistory(b *testing.B, s *benchRig, n int) {
	ctx := context.Background()
	start := time.Now()
	now := time.Now().UTC().Truncate(time.Second)
	from := now.AddDate(-1, 0, 0)
	if _, err := s.store.EnsureHistoryPartitions(ctx, store.HistoryMonth, from, now); err != nil {
		b.Fatal(err)
	}
	// Instance g (1..n) fired (g/n) of a year before now; its ids stay
	// below those the benchmark's instances draw. Its event id is g
	// zero-padded, so that the keys' primary key, like every other index
	// of the history, is appended to in order instead of split at random.
	const firedAt = `$3::timestamptz - ($3::timestamptz - $4::timestamptz) * (g::float8 / $5)`
	const eventID = `'hist-' || lpad(g::text, 12, '0')`
	// Two loaders, on their own connections, each a table at a time in
	// chunks: the instances and their keys, and the transitions (twice the
	// rows), so that both cores of a small machine load.
	loaders := [][]string{{
		`INSERT INTO instance_history (id, task, task_version, event_id, source, state, attempt, max_attempts,
				priority, pool, handler, timeout_ms, payload, fired_at, created_at, dispatched_at, started_at,
				finished_at, updated_at, run_id, worker_id, moved_at)
			SELECT g, 'noop', 1, ` + eventID + `, 'event', 'SUCCEEDED', 1, 1, 'normal', 'default', 'bench.noop', 3600000,
				'{"n": 1}', f, f, f, f, f + interval '5 ms', f + interval '5 ms', 'run-' || g, 'bench', $3
			FROM generate_series($1::bigint, $2::bigint) g, LATERAL (SELECT ` + firedAt + ` AS f) t`,
		`INSERT INTO instance_history_keys (task, event_id, id, fired_at)
			SELECT 'noop', ` + eventID + `, g, ` + firedAt + ` FROM generate_series($1::bigint, $2::bigint) g`,
	}, {
		`INSERT INTO instance_transition_history (id, instance_id, task, from_state, to_state, attempt, operator, at, fired_at)
			SELECT 2 * g - 1 + k, g, 'noop', CASE WHEN k = 0 THEN 'RUNNING' END, CASE WHEN k = 0 THEN 'DISPATCHED' ELSE 'SUCCEEDED' END,
				1, 'dispatcher', f, f
			FROM generate_series($1::bigint, $2::bigint) g, LATERAL (SELECT ` + firedAt + ` AS f) t, generate_series(0, 1) k`,
	}}
	const chunk = 500_000
	load := func(sqls []string) error {
		conn, err := s.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		if _, err := conn.Exec(ctx, `SET synchronous_commit = off`); err != nil {
			return err
		}
		defer func() { _, _ = conn.Exec(ctx, `RESET synchronous_commit`) }()
		for lo := 1; lo <= n; lo += chunk {
			hi := min(lo+chunk-1, n)
			for _, sql := range sqls {
				if _, err := conn.Exec(ctx, sql, lo, hi, now, from, n); err != nil {
					return fmt.Errorf("load history %d-%d: %w", lo, hi, err)
				}
			}
		}
		return nil
	}
	var wg sync.WaitGroup
	errs := make([]error, len(loaders))
	for i, sqls := range loaders {
		wg.Go(func() { errs[i] = load(sqls) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	loaded := time.Since(start)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	for _, sql := range []string{
		`SELECT setval(pg_get_serial_sequence('instances', 'id'), $1)`,
		`SELECT setval(pg_get_serial_sequence('instance_transitions', 'id'), 2 * $1)`,
	} {
		if _, err := conn.Exec(ctx, sql, int64(n)); err != nil {
			b.Fatal(err)
		}
	}
	for _, sql := range []string{`VACUUM (ANALYZE) instance_history`, `VACUUM (ANALYZE) instance_transition_history`,
		`VACUUM (ANALYZE) instance_history_keys`, `CHECKPOINT`} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			b.Fatal(err)
		}
	}
	var size string
	if err := conn.QueryRow(ctx, `SELECT pg_size_pretty(pg_database_size(current_database()))`).Scan(&size); err != nil {
		b.Fatal(err)
	}
	parts, err := s.store.HistoryPartitions(ctx)
	if err != nil {
		b.Fatal(err)
	}
	benchf(b, "history: %d ended instances in %d monthly partitions, %d transitions, %d keys, loaded in %.0f s (%.0f s with VACUUM, ANALYZE and CHECKPOINT; two loaders, chunks of %d); database %s",
		n, len(parts), 2*n, n, loaded.Seconds(), time.Since(start).Seconds(), chunk, size)
}

// burstAndSteady runs the burst, then the steady load, and reports both.
func burstAndSteady(b *testing.B, s *benchRig) {
	ctx := context.Background()
	n := envInt(b, "AX_BENCH_N", 20000)
	rate := envInt(b, "AX_BENCH_RATE", 200)
	seconds := envInt(b, "AX_BENCH_SECONDS", 10)
	serviceLabel("bench")

	meter := s.newCostMeter(b)
	meter.start()
	start := time.Now()
	batch := streams.NewAsyncBatch(s.js)
	for j := range n {
		s.fireNoop(b, batch, fmt.Sprintf("burst-%d", j))
		if batch.Len() == 1000 {
			if err := batch.Wait(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := batch.Wait(ctx); err != nil {
		b.Fatal(err)
	}
	states := s.waitEnded(b, n)
	took := time.Since(start)
	cost := meter.stop(n)
	b.ReportMetric(float64(n)/took.Seconds(), "instances/s")
	benchf(b, "burst of %d no-op firings: %.0f instances/s (%.2f s); %d SUCCEEDED, %d FAILED",
		n, float64(n)/took.Seconds(), took.Seconds(), states[schemas.StateSucceeded], states[schemas.StateFailed])
	cost.log(b)

	const tick = 10 * time.Millisecond
	perTick := max(rate/int(time.Second/tick), 1)
	fired := s.firePaced(b, batch, tick, perTick, seconds, 0)
	states = s.waitEnded(b, n+fired)
	var p50, p99 float64
	err := s.pool.QueryRow(ctx, `
SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)
FROM (SELECT extract(epoch FROM started_at - fired_at) * 1000 AS ms FROM instances
	WHERE task = 'noop' AND event_id LIKE 'paced-%') t`).Scan(&p50, &p99)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(p50, "p50_start_ms")
	b.ReportMetric(p99, "p99_start_ms")
	b.ReportMetric(0, "ns/op")
	benchf(b, "steady %d firings/s for %d s: firing → handler start p50 %.1f ms, p99 %.1f ms; %d SUCCEEDED, %d FAILED in all",
		perTick*int(time.Second/tick), seconds, p50, p99, states[schemas.StateSucceeded], states[schemas.StateFailed])
}
