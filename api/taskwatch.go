package api

import (
	"context"
	"encoding/json"
	"time"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
	"github.com/ax-scheduler/ax/store"
)

// announceTask puts the task's version and enabled flag into the tasks
// bucket, which trigger services watch to re-plan the task's schedules
// without polling. It runs after the change is committed; if the put fails
// the change stands, and trigger services pick it up when they next load
// every task (at start).
func (s *Service) announceTask(ctx context.Context, rec store.TaskRecord) {
	// Task changes are rare: looking the bucket up each time costs nothing
	// that matters and keeps New free of I/O.
	data, err := json.Marshal(schemas.TaskEntry{Version: rec.Version, Enabled: rec.Enabled})
	if err == nil {
		kv, kvErr := s.js.KeyValue(ctx, s.opts.Topology.TasksBucket())
		if err = kvErr; err == nil {
			_, err = kv.Put(ctx, rec.Name, data)
		}
	}
	if err != nil {
		s.opts.Logger.Error().Err(err).Str("task", rec.Name).Msg("announce task change to trigger services")
	}
}

// forgetTask deletes a deleted task's key from the tasks bucket, so that
// trigger services drop its schedules at once (at their next start otherwise).
func (s *Service) forgetTask(ctx context.Context, name string) {
	kv, err := s.js.KeyValue(ctx, s.opts.Topology.TasksBucket())
	if err == nil {
		err = kv.Delete(ctx, name)
	}
	if err != nil {
		s.opts.Logger.Error().Err(err).Str("task", name).Msg("announce task deletion to trigger services")
	}
}

// nextFireTimes returns the next n firings of every cron trigger of def after now.
func nextFireTimes(def *schemas.Task, now time.Time, n int) []wire.TriggerTimes {
	var out []wire.TriggerTimes
	for i, tr := range def.Triggers {
		if tr.Type != schemas.TriggerTypeCron {
			continue
		}
		tr = tr.WithDefaults()
		local, err := taskdef.NextFireTimes(tr, now, n)
		if err != nil {
			continue // validated at apply; a zone missing here shows as no times
		}
		tt := wire.TriggerTimes{Trigger: i, Schedule: tr.Schedule, Timezone: tr.Timezone, Local: local}
		for _, t := range local {
			tt.UTC = append(tt.UTC, t.UTC())
		}
		out = append(out, tt)
	}
	return out
}
