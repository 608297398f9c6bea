package trigger_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/trigger"
)

// TestCronTriggerPayload fires a cron trigger's payload with each of its
// firings, and none with a trigger that has none: an imported crontab
// line's command reaches the shell handler this way.
func TestCronTriggerPayload(t *testing.T) {
	t.Parallel()
	e := newEnv(t, mustTime("2024-05-01T10:00:30Z"))
	e.apply("task_name: tp\nexecution: {handler: builtin.shell}\ntriggers:\n" +
		"- {type: cron, schedule: '0 * * * * *', payload: {command: 'echo  \"hi\" > /tmp/x', env: {A: b}}}\n" +
		"- {type: cron, schedule: '30 * * * * *'}\n")
	e.start(trigger.Options{})
	e.clock.WaitFor(t, func(_ time.Time, d []time.Time) bool { return len(d) == 1 && rfc(d[0]) == "2024-05-01T10:01:00Z" })
	e.clock.Step(t, 1)
	e.clock.WaitFor(t, func(_ time.Time, d []time.Time) bool { return len(d) == 1 && rfc(d[0]) == "2024-05-01T10:01:30Z" })
	e.clock.Step(t, 1)
	e.clock.WaitFor(t, func(_ time.Time, d []time.Time) bool { return len(d) == 1 && rfc(d[0]) == "2024-05-01T10:02:00Z" })
	evs := e.events()
	if len(evs) != 2 {
		t.Fatalf("fired %d events, want 2: %+v", len(evs), evs)
	}
	var got struct {
		Command string            `json:"command"`
		Env     map[string]string `json:"env"`
	}
	if err := json.Unmarshal(evs[0].Payload, &got); err != nil || got.Command != `echo  "hi" > /tmp/x` || got.Env["A"] != "b" {
		t.Errorf("first firing's payload = %s (%v), want the trigger's", evs[0].Payload, err)
	}
	if len(evs[1].Payload) != 0 {
		t.Errorf("second trigger's firing carries payload %s, want none", evs[1].Payload)
	}
}
