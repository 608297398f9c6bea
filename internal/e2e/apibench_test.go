package e2e_test

import (
	"context"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
)

// BenchmarkAPIPath measures the API path as ax bench does, in process:
// HTTP firings of the no-op task through the API (POST
// /v1/tasks/noop/runs) → handler start. First AX_BENCH_RATE (default 500)
// firings a second for AX_BENCH_SECONDS (default 5), each a request of its
// own, answered from the publish's acknowledgement (Prefer:
// respond-async; AX_BENCH_API_WAIT=1 lets the API wait for each instance,
// as it does without the preference): p50, p99 and p99.9 of fired_at →
// started_at, and of the request itself. Then a burst of AX_BENCH_N
// (default 20000) firings in requests of 1,000 (ax bench --batch 1000)
// from 8 requests at once: instances/s, first request → every instance
// ended. With AX_BENCH_AUDITOR=1 the auditor runs beside it.
func BenchmarkAPIPath(b *testing.B) {
	rate := envInt(b, "AX_BENCH_RATE", 500)
	seconds := envInt(b, "AX_BENCH_SECONDS", 5)
	n := envInt(b, "AX_BENCH_N", 20000)
	wait := envInt(b, "AX_BENCH_API_WAIT", 2) == 1
	s := benchSystem(b)
	ctx := context.Background()
	meter := s.newCostMeter(b)
	startCPUProfile(b)
	meter.start()
	fire := s.client.FireAsync
	if wait {
		fire = s.client.Fire
	}
	var (
		mu       sync.Mutex
		requests []time.Duration
		wg       sync.WaitGroup
	)
	fired := 0
	ticker := time.NewTicker(10 * time.Millisecond)
	start := time.Now()
	for fired < rate*seconds {
		<-ticker.C
		due := min(rate*seconds, int(time.Since(start).Seconds()*float64(rate))+1)
		for ; fired < due; fired++ {
			wg.Go(func() {
				t0 := time.Now()
				if _, err := fire(ctx, "noop", wire.FireRequest{}); err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				requests = append(requests, time.Since(t0))
				mu.Unlock()
			})
		}
	}
	ticker.Stop()
	wg.Wait()
	states := s.waitEnded(b, fired)
	cost := meter.stop(fired)
	p50, p99, p999 := s.reportStartLatency(b)
	reqP50, reqP99 := quantile(requests, 0.5), quantile(requests, 0.99)
	b.ReportMetric(float64(rate), "fired/s")
	b.ReportMetric(float64(reqP50.Microseconds())/1000, "p50_request_ms")
	b.ReportMetric(float64(reqP99.Microseconds())/1000, "p99_request_ms")
	how := "answered from the publish's acknowledgement (Prefer: respond-async)"
	if wait {
		how = "each request waiting for its instance (AX_BENCH_API_WAIT=1)"
	}
	benchf(b, "API steady %d firings/s for %d s, a request each, %s: fired_at → handler start p50 %.1f ms, p99 %.1f ms, p99.9 %.1f ms; request p50 %.1f ms, p99 %.1f ms; %d SUCCEEDED, %d FAILED",
		rate, seconds, how, p50, p99, p999, float64(reqP50.Microseconds())/1000, float64(reqP99.Microseconds())/1000,
		states[schemas.StateSucceeded], states[schemas.StateFailed])
	cost.log(b)

	// The burst, in requests of 1,000 firings (ax bench --batch 1000).
	const batch = 1000
	burstStart := time.Now()
	sem := make(chan struct{}, 8)
	for from := 0; from < n; from += batch {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			reqs := make([]wire.FireRequest, min(batch, n-from))
			items, err := s.client.FireBatch(ctx, "noop", reqs)
			if err != nil {
				b.Error(err)
				return
			}
			for _, it := range items {
				if it.Error != nil {
					b.Error(it.Error)
					return
				}
			}
		})
	}
	wg.Wait()
	states = s.waitEnded(b, fired+n)
	burst := float64(n) / time.Since(burstStart).Seconds()
	b.ReportMetric(burst, "api_burst_instances/s")
	b.ReportMetric(float64(states[schemas.StateSucceeded]), "succeeded")
	b.ReportMetric(float64(states[schemas.StateFailed]), "failed")
	b.ReportMetric(0, "ns/op")
	benchf(b, "API burst of %d firings in requests of %d (ax bench --batch %d), 8 at once: %.0f instances/s, first request → every instance ended; %d SUCCEEDED, %d FAILED in all",
		n, batch, batch, burst, states[schemas.StateSucceeded], states[schemas.StateFailed])
}

// quantile returns the q-quantile of d by the nearest rank, or 0.
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, max(0, int(math.Ceil(q*float64(len(s))))-1))]
}
