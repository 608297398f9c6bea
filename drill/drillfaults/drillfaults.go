// Package drillfaults holds the faults ax drill rehearses inside the
// dispatcher: a [dispatcher.Faults] that ax dev and ax dispatcher
// --drill-faults hand to the dispatcher, which production leaves nil.
//
// The one fault is database jitter: the recorder refuses the first
// schemas.DrillReportFaults deliveries of the reports of instances of
// tasks of type schemas.DrillJitterTaskType and they are redelivered after
// a jittered delay, as if PostgreSQL had failed the transaction (a report
// batch that carries one is refused whole, as that transaction would refuse
// it). No other report is touched: drill tasks are applied through the API
// only. It costs one query per batch of reports. See docs/drill.md.
package drillfaults

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/dispatcher"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// FaultKind names the timeline event of a report the recorder refused on
// a drill's behalf (suffixed with the report's kind).
const FaultKind = "drill_report_fault"

// faultDelay is the base of the redelivery delay of a refused report; the
// jitter adds up to as much again.
const faultDelay = 250 * time.Millisecond

// Options configure [New].
type Options struct {
	// Store looks up the drill's instances and notes the faults on their
	// timelines (required).
	Store *store.Store
	// Topology names the report subjects (default streams.Default()).
	Topology streams.Topology
	// Logger logs each refused report (default: none).
	Logger zerolog.Logger
	// NowFunc tells the time (default time.Now); RandFunc returns a number
	// in [0, 1) for the jitter (default math/rand/v2).
	NowFunc  func() time.Time
	RandFunc func() float64
}

// Jitter is the database jitter of a drill, as a [dispatcher.Faults].
// Safe for concurrent use.
type Jitter struct{ opts Options }

var _ dispatcher.Faults = (*Jitter)(nil)

// New returns the database jitter of opts.
func New(opts Options) *Jitter {
	if opts.Topology.IsZero() {
		opts.Topology = streams.Default()
	}
	if opts.NowFunc == nil {
		opts.NowFunc = time.Now
	}
	if opts.RandFunc == nil {
		opts.RandFunc = rand.Float64
	}
	return &Jitter{opts: opts}
}

// RecordReports refuses, of msgs, the first deliveries of the reports of
// drill-jitter instances (a nak with a jittered delay, as a failed
// transaction would leave them), notes each on the instance's timeline,
// and returns the messages to record now. Should the lookup fail, it
// injects nothing.
func (j *Jitter) RecordReports(ctx context.Context, msgs []jetstream.Msg) []jetstream.Msg {
	reports := make([][]schemas.Report, len(msgs))
	var ids []int64
	for i, m := range msgs {
		reports[i] = j.reportsIn(m)
		for _, r := range reports[i] {
			if r.InstanceID > 0 {
				ids = append(ids, r.InstanceID)
			}
		}
	}
	if len(ids) == 0 {
		return msgs
	}
	drill, err := j.opts.Store.DrillJitterInstances(ctx, ids)
	if err != nil || len(drill) == 0 {
		return msgs
	}
	kept := msgs[:0:0]
	var events []store.Event
	for i, m := range msgs {
		// A batch with a drill instance's report is refused whole, as a
		// failed transaction would refuse it.
		md, err := m.Metadata()
		faulted := err == nil && md.NumDelivered <= schemas.DrillReportFaults &&
			slices.ContainsFunc(reports[i], func(r schemas.Report) bool { return drill[r.InstanceID] })
		if !faulted {
			kept = append(kept, m)
			continue
		}
		events = append(events, j.refuse(m, md.NumDelivered, reports[i], drill)...)
	}
	if err := j.opts.Store.RecordEvents(ctx, events); err != nil {
		j.opts.Logger.Warn().Err(err).Msg("drill: note refused reports on their timelines")
	}
	return kept
}

// refuse naks m, its delivery-th, whose reports are those of drill
// instances (drill) or not, and returns the timeline events of the first
// delivery.
func (j *Jitter) refuse(m jetstream.Msg, delivery uint64, reports []schemas.Report, drill map[int64]bool) []store.Event {
	delay := faultDelay + time.Duration(j.opts.RandFunc()*float64(faultDelay))
	_ = m.NakWithDelay(delay)
	var events []store.Event
	for _, r := range reports {
		if !drill[r.InstanceID] {
			continue
		}
		j.opts.Logger.Info().Int64("instance_id", r.InstanceID).Int("attempt", r.Attempt).Str("kind", string(r.Kind)).
			Uint64("delivery", delivery).Dur("delay", delay).Msg("drill: report refused as a failed transaction would")
		if delivery == 1 {
			events = append(events, store.Event{InstanceID: r.InstanceID, Attempt: r.Attempt, Kind: FaultKind + "_" + string(r.Kind),
				Operator: "dispatcher", At: j.opts.NowFunc(),
				Reason: fmt.Sprintf("drill: the %s report is refused on its first %d deliveries, each redelivered after %s or more", r.Kind, schemas.DrillReportFaults, faultDelay)})
		}
	}
	return events
}

// reportsIn returns the reports a report message carries, as far as they
// decode: one, or a batch's.
func (j *Jitter) reportsIn(m jetstream.Msg) []schemas.Report {
	if _, _, ok := j.opts.Topology.ReportBatchFrom(m.Subject()); ok {
		var b schemas.ReportBatch
		_ = json.Unmarshal(m.Data(), &b)
		return b.Reports
	}
	var r schemas.Report
	if json.Unmarshal(m.Data(), &r) != nil {
		return nil
	}
	return []schemas.Report{r}
}
