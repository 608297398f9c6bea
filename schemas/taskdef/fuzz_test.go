package taskdef

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
)

// FuzzParseTask feeds ParseTask arbitrary bytes. It must never panic; it
// rejects with a *ValidationError; and a task it accepts encodes to JSON
// that parses again to an equal task with sane defaults.
func FuzzParseTask(f *testing.F) {
	for _, tc := range taskAccepts {
		f.Add([]byte(tc.in))
	}
	for _, tc := range taskRejects {
		f.Add([]byte(tc.in))
	}
	if hello, err := os.ReadFile("../../examples/hello.yaml"); err == nil {
		f.Add(hello)
	}
	for _, seed := range taskFuzzSeeds {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		task, err := ParseTask(data)
		if err != nil {
			var verr *schemas.ValidationError
			if !errors.As(err, &verr) || len(verr.Problems) == 0 {
				t.Fatalf("ParseTask error %v (%T) is not a *ValidationError with problems", err, err)
			}
			return
		}
		encoded, err := json.Marshal(task)
		if err != nil {
			t.Fatalf("encode accepted task %+v: %v", task, err)
		}
		again, err := ParseTask(encoded)
		if err != nil {
			t.Fatalf("ParseTask accepted %q but not its encoding %s: %v", data, encoded, err)
		}
		if !reflect.DeepEqual(task, again) {
			t.Fatalf("%q parses to\n%+v\nits encoding %s to\n%+v", data, task, encoded, again)
		}
		d := task.WithDefaults()
		if to := d.TimeoutDuration(); to <= 0 || to > MaxTimeout {
			t.Fatalf("accepted timeout %q gives %v", task.Execution.Timeout, to)
		}
		if r := d.Execution.Retry; r.Initial() > r.Max() {
			t.Fatalf("accepted retry intervals %v..%v", r.Initial(), r.Max())
		}
	})
}

// FuzzParseTriggerEvent feeds ParseTriggerEvent arbitrary bytes. It must
// never panic; it rejects with a *ValidationError; an event it accepts
// encodes to JSON that parses again to an equal event; and its fast path
// accepts nothing the schema path refuses, and reads it the same.
func FuzzParseTriggerEvent(f *testing.F) {
	for _, tc := range triggerAccepts {
		f.Add([]byte(tc.in))
	}
	for _, tc := range triggerRejects {
		f.Add([]byte(tc.in))
	}
	if golden, err := os.ReadFile(goldenPath("trigger_event")); err == nil {
		f.Add(golden)
	}
	for _, seed := range triggerFuzzSeeds {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sameAsSchemaPath(t, data)
		ev, err := ParseTriggerEvent(data)
		if err != nil {
			var verr *schemas.ValidationError
			if !errors.As(err, &verr) || len(verr.Problems) == 0 {
				t.Fatalf("ParseTriggerEvent error %v (%T) is not a *ValidationError with problems", err, err)
			}
			return
		}
		encoded, err := json.Marshal(ev)
		if err != nil {
			t.Fatalf("encode accepted event %+v: %v", ev, err)
		}
		again, err := ParseTriggerEvent(encoded)
		if err != nil {
			t.Fatalf("ParseTriggerEvent accepted %q but not its encoding %s: %v", data, encoded, err)
		}
		// The payload passes as it was sent and is compacted when encoded; a
		// time keeps its instant, not necessarily its *time.Location.
		if !ev.FiredAt.Equal(again.FiredAt) || !ev.RunAt.Equal(again.RunAt) {
			t.Fatalf("fired_at %v, run_at %v became %v, %v", ev.FiredAt, ev.RunAt, again.FiredAt, again.RunAt)
		}
		ev.FiredAt, again.FiredAt = time.Time{}, time.Time{}
		ev.RunAt, again.RunAt = time.Time{}, time.Time{}
		if len(ev.Payload) > 0 {
			if ev.Payload, err = json.Marshal(ev.Payload); err != nil {
				t.Fatalf("accepted payload %q is not JSON: %v", data, err)
			}
		}
		for name, p := range ev.Parents {
			if len(p.Output) > 0 {
				if p.Output, err = json.Marshal(p.Output); err != nil {
					t.Fatalf("accepted output of parent %s in %q is not JSON: %v", name, data, err)
				}
				ev.Parents[name] = p
			}
		}
		if !reflect.DeepEqual(ev, again) {
			t.Fatalf("%q parses to\n%+v\nits encoding %s to\n%+v", data, ev, encoded, again)
		}
	})
}

// taskFuzzSeeds make sure FuzzParseTask starts from cron triggers (good
// and bad schedules, zones, misfire policies) and after entries, whatever
// the table tests hold.
var taskFuzzSeeds = []string{
	`{"task_name":"c","execution":{"handler":"h"},"triggers":[{"type":"cron","schedule":"0 2 * * *","timezone":"Europe/Paris","misfire":"run_once","max_catch_up":3}]}`,
	`{"task_name":"c","execution":{"handler":"h"},"triggers":[{"type":"cron","schedule":"*/5 * * * * *"}]}`,
	`{"task_name":"c","execution":{"handler":"h"},"triggers":[{"type":"cron","schedule":"@every 1h"}]}`,
	`{"task_name":"c","execution":{"handler":"h"},"triggers":[{"type":"cron","schedule":"61 25 * * *","timezone":"Mars/Olympus"}]}`,
	"task_name: c\nexecution: {handler: h}\ntriggers:\n  - type: cron\n    schedule: '30 9 * * MON-FRI'\n  - type: manual\n",
	`{"task_name":"d","execution":{"handler":"h"},"after":[{"task":"a","on":"failure"},{"task":"b"}]}`,
	`{"task_name":"d","execution":{"handler":"h"},"after":[{"task":"d"}]}`,
	"task_name: d\nexecution: {handler: h}\nafter:\n  - {task: c, on: always}\n",
}

// triggerFuzzSeeds make sure FuzzParseTriggerEvent starts from delays,
// run_at times and idempotency keys, good and bad.
var triggerFuzzSeeds = []string{
	`{"task":"t","delay":"90s","idempotency_key":"order-42"}`,
	`{"task":"t","delay":"-1s"}`,
	`{"task":"t","delay":"9999999999h"}`,
	`{"task":"t","run_at":"2025-03-01T09:00:00+01:00","idempotency_key":"k"}`,
	`{"task":"t","run_at":"2025-03-01T09:00:00Z","delay":"1m"}`,
	`{"task":"t","idempotency_key":"k","event_id":"e"}`,
	`{"task":"t","idempotency_key":"with space"}`,
	`{"task":"t","source":"cron","event_id":"cron:t@2025-03-01T02:00:00Z","fired_at":"2025-03-01T02:00:00Z"}`,
	`{"task":"t","source":"chain","parents":[{"task":"a","instance_id":1,"state":"SUCCEEDED"}]}`,
}
