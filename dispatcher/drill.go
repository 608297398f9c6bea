package dispatcher

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
)

// drillFaultKind names the timeline event of a report the recorder refused
// on a drill's behalf.
const drillFaultKind = "drill_report_fault"

// drillFaultDelay is the base of the redelivery delay of a refused report;
// the jitter adds up to as much again.
const drillFaultDelay = 250 * time.Millisecond

// drillReportFaults injects the database jitter of Options.DrillFaults: of
// msgs, it refuses the first deliveries of the reports of drill-jitter
// instances (a nak with a jittered delay, as a failed transaction would
// leave them), notes each on the instance's timeline, and returns the
// messages to record now. Should the lookup fail, it injects nothing.
func (s *Service) drillReportFaults(ctx context.Context, msgs []jetstream.Msg) []jetstream.Msg {
	reports := make([][]schemas.Report, len(msgs))
	var ids []int64
	for i, m := range msgs {
		reports[i] = s.reportsIn(m)
		for _, r := range reports[i] {
			if r.InstanceID > 0 {
				ids = append(ids, r.InstanceID)
			}
		}
	}
	if len(ids) == 0 {
		return msgs
	}
	drill, err := s.opts.Store.DrillJitterInstances(ctx, ids)
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
		delay := drillFaultDelay + time.Duration(s.opts.RandFunc()*float64(drillFaultDelay))
		_ = m.NakWithDelay(delay)
		for _, r := range reports[i] {
			if !drill[r.InstanceID] {
				continue
			}
			s.log.Info().Int64("instance_id", r.InstanceID).Int("attempt", r.Attempt).Str("kind", string(r.Kind)).
				Uint64("delivery", md.NumDelivered).Dur("delay", delay).Msg("drill: report refused as a failed transaction would")
			if md.NumDelivered == 1 {
				events = append(events, store.Event{InstanceID: r.InstanceID, Attempt: r.Attempt, Kind: drillFaultKind + "_" + string(r.Kind),
					Operator: "dispatcher", At: s.now(),
					Reason: fmt.Sprintf("drill: the %s report is refused on its first %d deliveries, each redelivered after %s or more", r.Kind, schemas.DrillReportFaults, drillFaultDelay)})
			}
		}
	}
	if err := s.opts.Store.RecordEvents(ctx, events); err != nil {
		s.log.Warn().Err(err).Msg("drill: note refused reports on their timelines")
	}
	return kept
}

// reportsIn returns the reports a report message carries, as far as they
// decode: one, or a batch's.
func (s *Service) reportsIn(m jetstream.Msg) []schemas.Report {
	if _, _, ok := s.top.ReportBatchFrom(m.Subject()); ok {
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
