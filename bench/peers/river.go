package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// noopArgs is River's no-op job. Submitted is the submit time in Unix
// nanoseconds, for the steady benchmark's latency.
type noopArgs struct {
	Submitted int64 `json:"s"`
}

func (noopArgs) Kind() string { return "noop" }

// noopWorker does nothing but record, when asked, how long after its
// submission each job started.
type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	mu      sync.Mutex
	started []time.Duration
	record  bool
}

func (w *noopWorker) Work(_ context.Context, job *river.Job[noopArgs]) error {
	if w.record {
		d := time.Since(time.Unix(0, job.Args.Submitted))
		w.mu.Lock()
		w.started = append(w.started, d)
		w.mu.Unlock()
	}
	return nil
}

// riverSystem is one River client on a fresh, migrated database.
type riverSystem struct {
	pool   *pgxpool.Pool
	client *river.Client[pgx.Tx]
	worker *noopWorker
}

// startRiver creates database db on the cluster at adminURL, migrates it
// for River and starts a client with MaxWorkers 1,000 on the default queue
// and fetchCooldown (zero: River's default of 100 ms).
func startRiver(ctx context.Context, c *cluster, db string, fetchCooldown time.Duration, record bool) (*riverSystem, error) {
	url, err := c.createDatabase(ctx, db)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("river: open pool: %w", err)
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("river: migrator: %w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		pool.Close()
		return nil, fmt.Errorf("river: migrate: %w", err)
	}
	w := &noopWorker{record: record}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1000}},
		Workers:       workers,
		FetchCooldown: fetchCooldown,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("river: new client: %w", err)
	}
	if err := client.Start(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("river: start client: %w", err)
	}
	return &riverSystem{pool: pool, client: client, worker: w}, nil
}

func (r *riverSystem) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = r.client.Stop(ctx)
	r.pool.Close()
}

// waitCompleted polls until want jobs are completed, as the AX benchmark
// polls for its instances: every 1 ms at first, then up to every 50 ms.
func (r *riverSystem) waitCompleted(ctx context.Context, want int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		var done int
		if err := r.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&done); err != nil {
			return fmt.Errorf("river: count completed jobs: %w", err)
		}
		if done >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("river: %d of %d jobs completed after %s", done, want, timeout)
		}
		time.Sleep(wait)
	}
}

// riverBurst inserts n no-op jobs with InsertMany in batches of 1,000 and
// measures first submit → the poll that sees the last one completed.
func riverBurst(ctx context.Context, c *cluster, db string, n int) (result, error) {
	r, err := startRiver(ctx, c, db, 0, false)
	if err != nil {
		return result{}, err
	}
	defer r.stop()
	meter, err := c.startMeter()
	if err != nil {
		return result{}, err
	}
	start := time.Now()
	for i := 0; i < n; i += 1000 {
		batch := make([]river.InsertManyParams, 0, 1000)
		for range min(1000, n-i) {
			batch = append(batch, river.InsertManyParams{Args: noopArgs{}})
		}
		if _, err := r.client.InsertMany(ctx, batch); err != nil {
			return result{}, fmt.Errorf("river: insert: %w", err)
		}
	}
	if err := r.waitCompleted(ctx, n, 5*time.Minute); err != nil {
		return result{}, err
	}
	elapsed := time.Since(start)
	res := result{Rate: float64(n) / elapsed.Seconds(), Succeeded: n}
	if err := meter.stop(&res, n); err != nil {
		return result{}, err
	}
	return res, nil
}

// riverSteady inserts rate no-op jobs a second for seconds, a batch with
// InsertMany every 10 ms as the AX benchmark fires them, with FetchCooldown
// 10 ms, and measures submit → handler start.
func riverSteady(ctx context.Context, c *cluster, db string, rate, seconds int) (result, error) {
	r, err := startRiver(ctx, c, db, 10*time.Millisecond, true)
	if err != nil {
		return result{}, err
	}
	defer r.stop()
	meter, err := c.startMeter()
	if err != nil {
		return result{}, err
	}
	const tick = 10 * time.Millisecond
	perTick := max(rate/int(time.Second/tick), 1)
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	inserted := 0
	for range seconds * int(time.Second/tick) {
		<-ticker.C
		batch := make([]river.InsertManyParams, perTick)
		now := time.Now().UnixNano()
		for i := range batch {
			batch[i] = river.InsertManyParams{Args: noopArgs{Submitted: now}}
		}
		if _, err := r.client.InsertMany(ctx, batch); err != nil {
			return result{}, fmt.Errorf("river: insert: %w", err)
		}
		inserted += perTick
	}
	if err := r.waitCompleted(ctx, inserted, 2*time.Minute); err != nil {
		return result{}, err
	}
	r.worker.mu.Lock()
	started := slices.Clone(r.worker.started)
	r.worker.mu.Unlock()
	slices.Sort(started)
	res := result{Rate: float64(perTick) * float64(time.Second/tick), Succeeded: inserted,
		P50: ms(percentile(started, 500)), P99: ms(percentile(started, 990)), P999: ms(percentile(started, 999))}
	if err := meter.stop(&res, inserted); err != nil {
		return result{}, err
	}
	return res, nil
}

// percentile returns the p-th per mille of sorted by the nearest-rank
// method, or 0 for none.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := (p*len(sorted) + 999) / 1000
	return sorted[max(rank, 1)-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
