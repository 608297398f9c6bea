package e2e_test

import (
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/devstack"
	"github.com/ax-scheduler/ax/internal/gctune"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
)

// BenchmarkFairness is issue 29's fairness benchmark: tenant a fires
// 10,000 firings (AX_BENCH_FAIR_BACKLOG), then tenants b to j fire 10
// each, on four executors of 16 slots running a no-op handler, once with
// the task's fairness key set to the tenant and once without. It prints
// b-j's firing → start (p50, p99, max), how many of a's runs started after
// the last of b-j's, and the throughput of all the runs (firings per
// second from the first firing to the last run's end): the price of the
// feature. Run it with go run ./internal/tools/withpg -fsync on -- go test
// -run '^$' -bench BenchmarkFairness -benchtime 1x ./internal/e2e/.
func BenchmarkFairness(b *testing.B) {
	backlog := envInt(b, "AX_BENCH_FAIR_BACKLOG", 10000)
	for _, fair := range []bool{false, true} {
		name := "none"
		if fair {
			name = "fairness"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				benchGC.Do(func() { benchGCSetting = gctune.Apply() })
				s := newSystemTTL(b, streams.DefaultLeaseTTL)
				s.log = zerolog.Nop()
				// The auditor as a deployment runs it (relay and monitor).
				s.startStack(devstack.Options{NATSURL: s.srv.URL, Streams: streams.Config{LeaseTTL: streams.DefaultLeaseTTL},
					Services: []natsauth.Role{natsauth.Auditor}})
				benchf(b, "settings: %s; auditor on", s.benchSettings(b, streams.DefaultLeaseTTL))
				r := fairRun{fair: fair, backlog: backlog, few: 10, workers: 4, slots: 16, firingBatchSize: 1000}
				res := r.run(b, s)
				waits, aAfter := res.small()
				total := len(res.starts)
				elapsed := res.finished.Sub(res.fired)
				benchf(b, "b-j firing→start p50 %v p99 %v max %v; %d of a's %d runs started after the last of b-j's; "+
					"%d runs in %v: %.0f runs/s",
					percentile(waits, 0.5).Round(time.Millisecond), percentile(waits, 0.99).Round(time.Millisecond),
					percentile(waits, 1).Round(time.Millisecond), aAfter, backlog, total, elapsed.Round(time.Millisecond),
					float64(total)/elapsed.Seconds())
				b.ReportMetric(percentile(waits, 0.99).Seconds(), "p99-s")
				b.ReportMetric(float64(total)/elapsed.Seconds(), "runs/s")
			}
		})
	}
}
