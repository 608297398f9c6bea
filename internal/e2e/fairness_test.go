package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/executortest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// fairRun is one run of the fairness scenario: tenant a fires a backlog,
// then tenants b to j fire a few each.
type fairRun struct {
	fair            bool          // the task declares dispatch.fairness
	backlog, few    int           // firings of tenant a; of each other tenant
	workers, slots  int           // executors, and slots of each
	work            time.Duration // how long each run takes
	firingBatchSize int           // firings per trigger message
}

// fairStart is when one run started, and for which tenant.
type fairStart struct {
	tenant string
	wait   time.Duration // firing → start
	at     time.Time
}

// fairResult is what a fairRun saw.
type fairResult struct {
	starts   []fairStart // in the order they started
	fired    time.Time   // when the first firing was published
	finished time.Time   // when the last run ended
}

// run fires the scenario on s and returns once every run ended.
func (r fairRun) run(tb testing.TB, s *system) fairResult {
	tb.Helper()
	def := "task_name: tenants\nexecution:\n  handler: fair.work\n"
	if r.fair {
		def += "dispatch:\n  fairness:\n    key: \"{{.tenant}}\"\n"
	}
	s.apply(def)
	var (
		mu  sync.Mutex
		res fairResult
	)
	total := r.backlog + 9*r.few
	done := make(chan struct{})
	mux := executor.NewMux()
	mux.HandleFunc("fair.work", func(ctx context.Context, j *executor.Job) (any, error) {
		now := time.Now()
		var p struct{ Tenant string }
		if err := json.Unmarshal(j.Payload, &p); err != nil {
			return nil, executor.Permanent(err)
		}
		mu.Lock()
		res.starts = append(res.starts, fairStart{tenant: p.Tenant, wait: now.Sub(j.FiredAt), at: now})
		mu.Unlock()
		if r.work > 0 {
			time.Sleep(r.work)
		}
		mu.Lock()
		defer mu.Unlock()
		if res.finished = time.Now(); len(res.starts) == total {
			select {
			case <-done:
			default:
				close(done)
			}
		}
		return nil, nil
	})
	for i := range r.workers {
		conn, _ := s.srv.Connect()
		executortest.Run(tb, executor.Options{Conn: conn, WorkerID: fmt.Sprintf("fair-%d", i), Mux: mux, Slots: r.slots,
			Logger: slog.New(zerolog.NewSlogHandler(s.log))})
	}
	ctx := context.Background()
	batch := streams.NewAsyncBatch(s.js)
	fire := func(tenant string, n int) {
		payload, _ := json.Marshal(map[string]string{"tenant": tenant})
		for from := 0; from < n; from += r.firingBatchSize {
			evs := make([]schemas.TriggerEvent, min(r.firingBatchSize, n-from))
			now := time.Now()
			for i := range evs {
				evs[i] = schemas.TriggerEvent{EventID: fmt.Sprintf("%s-%d", tenant, from+i), FiredAt: now, Payload: payload}
			}
			data, err := schemas.MarshalTriggerBatch(evs)
			if err != nil {
				tb.Fatal(err)
			}
			m := nats.NewMsg(s.srv.Topology.Trigger("tenants"))
			m.Data = data
			batch.Add(m)
		}
		if err := batch.Wait(ctx); err != nil {
			tb.Fatal(err)
		}
	}
	res.fired = time.Now()
	fire("a", r.backlog)
	for _, tenant := range []string{"b", "c", "d", "e", "f", "g", "h", "i", "j"} {
		fire(tenant, r.few)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		mu.Lock()
		n := len(res.starts)
		mu.Unlock()
		tb.Fatalf("%d of %d runs started in 5 minutes", n, total)
	}
	mu.Lock()
	defer mu.Unlock()
	return res
}

// small returns the waits of the runs of tenants b to j, sorted, and how
// many runs of tenant a started after the last of them.
func (res fairResult) small() (waits []time.Duration, aAfter int) {
	last := -1
	for i, st := range res.starts {
		if st.tenant != "a" {
			waits, last = append(waits, st.wait), i
		}
	}
	for _, st := range res.starts[last+1:] {
		if st.tenant == "a" {
			aAfter++
		}
	}
	slices.Sort(waits)
	return waits, aAfter
}

// percentile returns the p-th percentile of sorted waits.
func percentile(waits []time.Duration, p float64) time.Duration {
	if len(waits) == 0 {
		return 0
	}
	return waits[min(len(waits)-1, int(p*float64(len(waits))))]
}

// TestFairnessLetsOtherTenantsStartBeforeABacklogDrains fires a backlog of
// tenant a and then a few firings of tenants b to j, of a task whose
// fairness key is the tenant: every run of b to j starts while most of a's
// backlog still waits. Without fairness they all start after it.
func TestFairnessLetsOtherTenantsStartBeforeABacklogDrains(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	r := fairRun{fair: true, backlog: 2000, few: 5, workers: 2, slots: 4, work: 5 * time.Millisecond, firingBatchSize: 500}
	res := r.run(t, s)
	waits, aAfter := res.small()
	t.Logf("b-j: p50 %v, max %v firing→start; %d of a's %d runs started after the last of them",
		percentile(waits, 0.5), percentile(waits, 1), aAfter, r.backlog)
	if aAfter < r.backlog/2 {
		t.Errorf("only %d of tenant a's %d runs started after the last run of tenants b-j: the others waited behind a's backlog", aAfter, r.backlog)
	}
	var held int
	if err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM fair_queue`).Scan(&held); err != nil || held != 0 {
		t.Errorf("fair_queue holds %d attempts after every run (%v), want none", held, err)
	}
}
