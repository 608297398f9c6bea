package dispatcher

import (
	"encoding/json"

	"github.com/ax-scheduler/ax/schemas"
)

// cronPayload returns the payload of a cron firing: that of the trigger
// whose tick its event id names, from the task's definition, never from
// the event. A cron firing may come from anyone who may publish the
// task's trigger subject (checked only against the schedule), so its
// payload is what the operator who applied the definition wrote, as the
// command of an imported crontab line for builtin.shell is.
func cronPayload(def *schemas.Task, task, eventID string) json.RawMessage {
	i, _, ok := cronTick(task, eventID)
	if !ok || i >= len(def.Triggers) || def.Triggers[i].Type != schemas.TriggerTypeCron {
		return nil
	}
	return def.Triggers[i].Payload
}
