package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"

	"github.com/ax-scheduler/ax/schemas"
)

// hopTrace follows each instance of "noop" along the idle path, hop by
// hop, from what a listener on the bus sees and what PostgreSQL and the
// handler record:
//
//	fired      the benchmark's clock as it publishes the firing (fired_at)
//	trigger    the firing reaches a core subscriber of its subject: the server took it
//	insert     the statement that creates the instance writes its row (dispatched_at, PostgreSQL's clock_timestamp())
//	dispatch   the attempt reaches a core subscriber of the dispatch subjects: committed and published
//	doorbell   the first ring of its queue's doorbell after that
//	lease      the lease reaches a core subscriber of the leases bucket
//	started    the server confirmed the ack: the handler's start as its worker reports it (started_at)
//	handler    the handler runs
//
// Every clock is this machine's. The subscribers share the process with the
// services they watch, so a hop they see late was late for the services
// too. A hop's cost is the time from the previous mark; the report gives
// each hop's percentiles and, for the slowest 1% of instances, which hop
// held them up, with the runtime's GC pauses and PostgreSQL's checkpoints
// over the run.
type hopTrace struct {
	mu        sync.Mutex
	on        bool
	trigger   map[string]time.Time // by event id
	dispatch  map[int64]time.Time  // by instance id
	doorbells map[string][]time.Time
	ringOf    map[int64]string // the doorbell subject of each instance's queue
	lease     map[int64]time.Time
	handler   map[int64]time.Time

	subs          []*nats.Subscription
	gcBefore      runtime.MemStats
	checkpoints   [2]int64 // timed, requested, before the run
	checkpointsOK bool
}

func newHopTrace() *hopTrace {
	return &hopTrace{trigger: map[string]time.Time{}, dispatch: map[int64]time.Time{}, doorbells: map[string][]time.Time{},
		ringOf: map[int64]string{}, lease: map[int64]time.Time{}, handler: map[int64]time.Time{}}
}

// handlerStarted records that the handler of instance id runs now. Cheap
// and safe to call before start.
func (h *hopTrace) handlerStarted(id int64) {
	now := time.Now()
	h.mu.Lock()
	if h.on {
		h.handler[id] = now
	}
	h.mu.Unlock()
}

// start takes the first readings of the GC and the checkpoints and, when
// listen, subscribes to the subjects the hops cross, on a connection of its
// own. The listener is the benchmark's, not the pipeline's: the server
// delivers it a copy of every firing, dispatch, doorbell and lease, and
// its CPU counts in the process's.
func (h *hopTrace) start(b *testing.B, s *benchRig, listen bool) {
	runtime.ReadMemStats(&h.gcBefore)
	h.checkpointsOK = s.pool.QueryRow(context.Background(),
		`/* bench */ SELECT checkpoints_timed, checkpoints_req FROM pg_stat_bgwriter`).Scan(&h.checkpoints[0], &h.checkpoints[1]) == nil
	if !listen {
		return
	}
	nc, _ := s.srv.Connect()
	top := s.srv.Topology
	prefix := top.Prefix()
	// One channel for every subject: the connection's reader fills it in
	// the order the server sent the messages, and one goroutine stamps
	// them, so the marks of one instance keep their order.
	ch := make(chan *nats.Msg, 1<<16)
	for _, subject := range []string{top.Trigger("noop"), prefix + ".dispatch.>", prefix + ".ready.>", "$KV." + top.LeasesBucket() + ".>"} {
		ns, err := nc.ChanSubscribe(subject, ch)
		if err != nil {
			b.Fatal(err)
		}
		h.subs = append(h.subs, ns)
	}
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range ch {
			h.mark(m, time.Now(), prefix)
		}
	}()
	b.Cleanup(func() {
		nc.Close()
		close(ch)
		<-done
	})
	h.mu.Lock()
	h.on = true
	h.mu.Unlock()
}

// mark records the message m seen at at.
func (h *hopTrace) mark(m *nats.Msg, at time.Time, prefix string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case strings.HasPrefix(m.Subject, prefix+".dispatch."):
		d, err := schemas.DecodeDispatch(m.Data)
		if err != nil {
			return
		}
		if _, ok := h.dispatch[d.InstanceID]; !ok {
			h.dispatch[d.InstanceID] = at
			h.ringOf[d.InstanceID] = prefix + ".ready" + strings.TrimPrefix(m.Subject, prefix+".dispatch")
		}
	case strings.HasPrefix(m.Subject, prefix+".ready."):
		h.doorbells[m.Subject] = append(h.doorbells[m.Subject], at)
	case strings.HasPrefix(m.Subject, "$KV."):
		var l schemas.Lease
		if json.Unmarshal(m.Data, &l) == nil && l.InstanceID > 0 {
			if _, ok := h.lease[l.InstanceID]; !ok {
				h.lease[l.InstanceID] = at
			}
		}
	default:
		var ev schemas.TriggerEvent
		if json.Unmarshal(m.Data, &ev) == nil {
			h.trigger[ev.EventID] = at
		}
	}
}

// hopNames are the hops, each named by the mark it ends at.
var hopNames = []string{"fired→trigger", "trigger→insert", "insert→dispatch", "dispatch→doorbell", "doorbell→lease", "lease→started", "started→handler"}

// startedHops is how many of hopNames end at or before started.
const startedHops = 6

// report joins the marks with the instances' rows and prints the hops
// (when start listened), then the GC's cycles and PostgreSQL's checkpoints
// over the run.
func (h *hopTrace) report(b *testing.B, s *benchRig) {
	var gc runtime.MemStats
	runtime.ReadMemStats(&gc)
	if len(h.subs) == 0 {
		benchf(b, "hops: not traced (AX_BENCH_HOPS=0: no listener on the bus beside the pipeline)")
	} else {
		h.reportHops(b, s)
	}
	h.reportRuntime(b, s, gc)
}

// reportHops prints the hops of the instances traced end to end.
func (h *hopTrace) reportHops(b *testing.B, s *benchRig) {
	for _, ns := range h.subs {
		_ = ns.Unsubscribe()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.on = false
	rows, err := s.pool.Query(context.Background(), `/* bench */
SELECT id, event_id, fired_at, dispatched_at, started_at FROM instances WHERE task = 'noop' AND started_at IS NOT NULL`)
	if err != nil {
		b.Fatal(err)
	}
	type traced struct {
		total time.Duration
		hops  []time.Duration
	}
	var all []traced
	hops := make([][]time.Duration, len(hopNames))
	var id int64
	var eventID string
	var fired, inserted, started time.Time
	incomplete := 0
	_, err = pgx.ForEachRow(rows, []any{&id, &eventID, &fired, &inserted, &started}, func() error {
		trig, ok1 := h.trigger[eventID]
		disp, ok2 := h.dispatch[id]
		lease, ok3 := h.lease[id]
		hand, ok4 := h.handler[id]
		ring, ok5 := firstAfter(h.doorbells[h.ringOf[id]], disp)
		if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
			incomplete++
			return nil
		}
		marks := []time.Time{fired, trig, inserted, disp, ring, lease, started, hand}
		t := traced{total: started.Sub(fired)}
		for i := range hopNames {
			d := marks[i+1].Sub(marks[i])
			t.hops = append(t.hops, d)
			hops[i] = append(hops[i], d)
		}
		all = append(all, t)
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	if len(all) == 0 {
		benchf(b, "hops: no instance traced end to end (%d incomplete)", incomplete)
		return
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	benchf(b, "hops of %d instances traced end to end (%d incomplete), ms (p50 / p99 / max):", len(all), incomplete)
	for i, name := range hopNames {
		slices.Sort(hops[i])
		benchf(b, "  %-18s %6.2f / %6.2f / %6.2f", name, ms(pct(hops[i], 0.5)), ms(pct(hops[i], 0.99)), ms(hops[i][len(hops[i])-1]))
	}
	// Which hop held up the slowest 1% (firing → started)?
	slices.SortFunc(all, func(a, b traced) int { return int(b.total - a.total) })
	slow := all[:max(len(all)/100, 1)]
	blame := make([]int, len(hopNames))
	var spent = make([]time.Duration, len(hopNames))
	for _, t := range slow {
		worst := 0
		for i, d := range t.hops[:startedHops] {
			if d > t.hops[worst] {
				worst = i
			}
			spent[i] += d
		}
		blame[worst]++
	}
	var parts []string
	for i, name := range hopNames[:startedHops] {
		parts = append(parts, fmt.Sprintf("%s %d (mean %.1f ms)", name, blame[i], ms(spent[i]/time.Duration(len(slow)))))
	}
	benchf(b, "  the slowest %d (firing → started %.1f to %.1f ms) were held up most by: %s", len(slow), ms(slow[len(slow)-1].total), ms(slow[0].total), strings.Join(parts, ", "))
}

// reportRuntime prints the GC's cycles and pauses since start, gc the
// runtime's statistics now, and PostgreSQL's checkpoints.
func (h *hopTrace) reportRuntime(b *testing.B, s *benchRig, gc runtime.MemStats) {
	pauses := gc.PauseTotalNs - h.gcBefore.PauseTotalNs
	var longest uint64
	for i := h.gcBefore.NumGC; i < gc.NumGC && i < h.gcBefore.NumGC+256; i++ {
		longest = max(longest, gc.PauseNs[i%256])
	}
	// The setting the benchmark runs with (gctune's), not GOGC's default.
	line := fmt.Sprintf("  GC: %d cycles, %.2f ms of pauses, the longest %.2f ms (%s)", gc.NumGC-h.gcBefore.NumGC,
		float64(pauses)/1e6, float64(longest)/1e6, benchGCSetting)
	var timed, req int64
	if h.checkpointsOK && s.pool.QueryRow(context.Background(),
		`/* bench */ SELECT checkpoints_timed, checkpoints_req FROM pg_stat_bgwriter`).Scan(&timed, &req) == nil {
		line += fmt.Sprintf("; PostgreSQL checkpoints: %d timed, %d requested", timed-h.checkpoints[0], req-h.checkpoints[1])
	}
	benchf(b, "%s", line)
}

// firstAfter returns the first of the sorted times ts that is not before t.
func firstAfter(ts []time.Time, t time.Time) (time.Time, bool) {
	i, _ := slices.BinarySearchFunc(ts, t, func(a, b time.Time) int { return a.Compare(b) })
	if i == len(ts) {
		return time.Time{}, false
	}
	return ts[i], true
}

// pct returns the q-quantile of the sorted durations ds.
func pct(ds []time.Duration, q float64) time.Duration {
	return ds[min(int(q*float64(len(ds))), len(ds)-1)]
}
