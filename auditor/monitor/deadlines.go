package monitor

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
	"github.com/ax-scheduler/ax/store"
)

// deadlines holds for each run of a task with a deadline (see
// [schemas.Task.Deadline]) fired within the rule's window that is past its
// deadline and not done: waiting, running or failed. The reason names what
// it waits for: its calendar-aligned parents' missing ticks, its state, or
// its error.
func (m *monitor) deadlines(ctx context.Context, r rule, now time.Time) ([]store.AlertSignal, error) {
	runs, err := m.opts.Store.UndoneDeadlineRuns(ctx, now.Add(-r.p.Window))
	if err != nil {
		return nil, err
	}
	var out []store.AlertSignal
	for _, run := range runs {
		at, ok := taskdef.Deadline(run.Definition, run.FiredAt)
		if !ok || !now.After(at) {
			continue
		}
		what := "it is " + string(run.State)
		switch {
		case run.WaitReason != "":
			what = "it is WAITING, " + run.WaitReason
		case run.State == schemas.StateFailed:
			what = "it FAILED: " + run.Error
		}
		out = append(out, store.AlertSignal{Key: run.Task + "/" + strconv.FormatInt(run.InstanceID, 10), Task: run.Task,
			InstanceID: run.InstanceID,
			Reason: fmt.Sprintf("the run of %s fired at %s (instance %d) is not done by its deadline %s (%s); %s",
				run.Task, run.FiredAt.UTC().Format(time.RFC3339), run.InstanceID, at.Format(time.RFC3339), run.Definition.Deadline, what)})
	}
	return out, nil
}
