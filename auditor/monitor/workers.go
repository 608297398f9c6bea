package monitor

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// fleet is the monitoring leader's view of the executors, from a watch of
// ax-workers. A worker's key expiring (a purge marker: the bucket has limit
// markers) is a lost heartbeat; a worker deleting its key is a clean stop.
// A marker for a key that is not live — the marker a delete ages into, or
// one left before the watch began — counts as nothing. A fleet is used by
// one goroutine.
type fleet struct {
	log zerolog.Logger
	// workers holds the live workers' last records, by id.
	workers map[string]schemas.Worker
	// ready is set once the watch delivered the bucket's current keys.
	ready bool
	// taskPools are the pools enabled tasks dispatch to, as of the last refresh.
	taskPools []string
	// empty holds, for each pool with tasks and no live worker, since
	// when the monitor has seen it so.
	empty map[string]time.Time
	// the series each gauge has, to delete those that go.
	poolSeries, workerSeries map[string]bool
}

func newFleet(log zerolog.Logger) *fleet {
	return &fleet{log: log, workers: map[string]schemas.Worker{}, empty: map[string]time.Time{}}
}

// apply takes one update of the watch (nil: the initial keys are in).
func (f *fleet) apply(e jetstream.KeyValueEntry, m *metrics) {
	if e == nil {
		f.ready = true
		f.setGauges(m)
		return
	}
	if _, _, _, grant := streams.ParseGrantKey(e.Key()); grant {
		// A worker's grant key, renewed with its heartbeat: its expiry
		// is not another loss (see streams.GrantKey).
		return
	}
	switch e.Operation() {
	case jetstream.KeyValuePut:
		var w schemas.Worker
		if err := json.Unmarshal(e.Value(), &w); err != nil {
			f.log.Warn().Err(err).Str("worker_id", e.Key()).Msg("undecodable worker record ignored")
			return
		}
		f.workers[e.Key()] = w
	case jetstream.KeyValueDelete, jetstream.KeyValuePurge:
		w, live := f.workers[e.Key()]
		if !live {
			return
		}
		delete(f.workers, e.Key())
		counter := m.workersStopped
		if e.Operation() == jetstream.KeyValuePurge {
			counter = m.heartbeatsLost
			f.log.Warn().Str("worker_id", e.Key()).Strs("pools", w.Pools).Time("last_heartbeat", w.HeartbeatAt).
				Msg("worker lost: its heartbeats stopped")
		}
		for _, p := range w.Pools {
			counter.WithLabelValues(p).Inc()
		}
	}
	if f.ready {
		f.setGauges(m)
	}
}

// livePools returns the pools that have a live worker.
func (f *fleet) livePools() map[string]bool {
	out := make(map[string]bool)
	for _, w := range f.workers {
		for _, p := range w.Pools {
			out[p] = true
		}
	}
	return out
}

// setTaskPools records the pools tasks dispatch to and updates since when
// each has been without a live worker.
func (f *fleet) setTaskPools(pools []string, now time.Time, m *metrics) {
	f.taskPools = pools
	live := f.livePools()
	for p := range f.empty {
		if live[p] || !slices.Contains(pools, p) {
			delete(f.empty, p)
		}
	}
	for _, p := range pools {
		if _, ok := f.empty[p]; !ok && !live[p] {
			f.empty[p] = now
		}
	}
	f.setGauges(m)
}

// setGauges sets the worker and slot gauges of every pool that has a live
// worker or a task, and of every live worker.
func (f *fleet) setGauges(m *metrics) {
	type sums struct{ workers, slots, busy int }
	pools := make(map[string]*sums)
	for _, p := range f.taskPools {
		pools[p] = &sums{}
	}
	workerUtil := make(map[string]float64, len(f.workers))
	for id, w := range f.workers {
		if w.Slots > 0 {
			workerUtil[id] = float64(w.Busy) / float64(w.Slots)
		}
		for _, p := range w.Pools {
			s := pools[p]
			if s == nil {
				s = &sums{}
				pools[p] = s
			}
			s.workers++
			s.slots += w.Slots
			s.busy += w.Busy
		}
	}
	workers, slots, busy, util := map[string]float64{}, map[string]float64{}, map[string]float64{}, map[string]float64{}
	for p, s := range pools {
		workers[p], slots[p], busy[p], util[p] = float64(s.workers), float64(s.slots), float64(s.busy), 0
		if s.slots > 0 {
			util[p] = float64(s.busy) / float64(s.slots)
		}
	}
	// The four pool gauges have the same series.
	prev := f.poolSeries
	setGauges(m.slots, prev, slots)
	setGauges(m.slotsBusy, prev, busy)
	setGauges(m.slotUtilization, prev, util)
	f.poolSeries = setGauges(m.workers, prev, workers)
	f.workerSeries = setGauges(m.workerSlotUtil, f.workerSeries, workerUtil)
}
