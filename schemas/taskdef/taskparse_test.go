package taskdef

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
)

// The tests build task definitions from a minimal valid one.

// root returns the minimal task with more top-level fields (a JSON fragment).
func root(fields string) string {
	if fields == "" {
		return `{"task_name":"demo","execution":{"handler":"builtin.echo"}}`
	}
	return `{"task_name":"demo","execution":{"handler":"builtin.echo"},` + fields + `}`
}

// exec returns the minimal task with more execution fields.
func exec(fields string) string {
	return `{"task_name":"demo","execution":{"handler":"builtin.echo",` + fields + `}}`
}

// handlerTask returns the minimal task with the given handler field.
func handlerTask(field string) string {
	return `{"task_name":"demo","execution":{` + field + `}}`
}

// retry returns the minimal task with the given retry fields.
func retry(fields string) string { return exec(`"retry":{` + fields + `}`) }

func ptr[T any](v T) *T { return &v }

// minimal is the task that root("") parses to.
func minimal() *schemas.Task {
	return &schemas.Task{TaskName: "demo", Execution: schemas.Execution{Handler: "builtin.echo"}}
}

// with returns minimal() changed by f.
func with(f func(*schemas.Task)) *schemas.Task {
	t := minimal()
	f(t)
	return t
}

var taskAccepts = []struct {
	name string
	in   string
	want *schemas.Task
}{
	{"minimal json", root(""), minimal()},
	{"minimal yaml", "task_name: demo\nexecution:\n  handler: builtin.echo\n", minimal()},
	{"json after spaces", "\n\t  " + root(""), minimal()},
	{"retention in days, archived", "task_name: demo\nexecution: {handler: builtin.echo}\nretention: 90d\narchive: true\n",
		with(func(t *schemas.Task) { t.Retention, t.Archive = "90d", new(true) })},
	{"retention as a duration", root(`"retention":"36h"`), with(func(t *schemas.Task) { t.Retention = "36h" })},
	{"yaml flow style", "task_name: demo\nexecution: {handler: builtin.echo}\n", minimal()},
	{"yaml with comments", "# a task\ntask_name: demo # its name\nexecution:\n  handler: builtin.echo\n", minimal()},
	{"task_name one char", `{"task_name":"a","execution":{"handler":"h"}}`, &schemas.Task{TaskName: "a", Execution: schemas.Execution{Handler: "h"}}},
	{"task_name digits, _ and -", `{"task_name":"0-a_b","execution":{"handler":"h"}}`, &schemas.Task{TaskName: "0-a_b", Execution: schemas.Execution{Handler: "h"}}},
	{"task_name 64 chars", `{"task_name":"` + strings.Repeat("a", 64) + `","execution":{"handler":"h"}}`, &schemas.Task{TaskName: strings.Repeat("a", 64), Execution: schemas.Execution{Handler: "h"}}},
	{"task_type", root(`"task_type":"report"`), with(func(t *schemas.Task) { t.TaskType = "report" })},
	{"owner", root(`"owner":"Data Team <data@example.com>"`), with(func(t *schemas.Task) { t.Owner = "Data Team <data@example.com>" })},
	{"description", root(`"description":"Builds the daily report."`), with(func(t *schemas.Task) { t.Description = "Builds the daily report." })},
	{"triggers", root(`"triggers":[{"type":"event"},{"type":"manual"}]`), with(func(t *schemas.Task) {
		t.Triggers = []schemas.Trigger{{Type: schemas.TriggerTypeEvent}, {Type: schemas.TriggerTypeManual}}
	})},
	{"empty triggers", root(`"triggers":[]`), minimal()},
	{"handler with dots and dashes", handlerTask(`"handler":"Billing.invoice-v2_x"`), &schemas.Task{TaskName: "demo", Execution: schemas.Execution{Handler: "Billing.invoice-v2_x"}}},
	{"handler 128 chars", handlerTask(`"handler":"` + strings.Repeat("h", 128) + `"`), &schemas.Task{TaskName: "demo", Execution: schemas.Execution{Handler: strings.Repeat("h", 128)}}},
	{"timeout 90s", exec(`"timeout":"90s"`), with(func(t *schemas.Task) { t.Execution.Timeout = "90s" })},
	{"timeout 1h30m", exec(`"timeout":"1h30m"`), with(func(t *schemas.Task) { t.Execution.Timeout = "1h30m" })},
	{"timeout fractional", exec(`"timeout":"1.5h"`), with(func(t *schemas.Task) { t.Execution.Timeout = "1.5h" })},
	{"timeout 7 days", exec(`"timeout":"168h"`), with(func(t *schemas.Task) { t.Execution.Timeout = "168h" })},
	{"timeout 500ms", exec(`"timeout":"500ms"`), with(func(t *schemas.Task) { t.Execution.Timeout = "500ms" })},
	{"timeout seconds", exec(`"timeout":1800`), with(func(t *schemas.Task) { t.Execution.Timeout = "1800s" })},
	{"timeout fractional seconds", exec(`"timeout":0.5`), with(func(t *schemas.Task) { t.Execution.Timeout = "0.5s" })},
	{"timeout seconds exponent", exec(`"timeout":1e3`), with(func(t *schemas.Task) { t.Execution.Timeout = "1000s" })},
	{"timeout 7 days of seconds", exec(`"timeout":604800`), with(func(t *schemas.Task) { t.Execution.Timeout = "604800s" })},
	{"timeout seconds yaml", "task_name: demo\nexecution:\n  handler: builtin.echo\n  timeout: 1800\n", with(func(t *schemas.Task) { t.Execution.Timeout = "1800s" })},
	{"cron as the schedule's name", root(`"triggers":[{"type":"cron","cron":"0 2 * * *","timezone":"Asia/Shanghai"}]`), with(func(t *schemas.Task) {
		t.Triggers = []schemas.Trigger{{Type: schemas.TriggerTypeCron, Schedule: "0 2 * * *", Timezone: "Asia/Shanghai"}}
	})},
	{"cron and schedule in two triggers", root(`"triggers":[{"type":"cron","schedule":"@daily"},{"type":"cron","cron":"@hourly","misfire":"catch_up","max_catch_up":3}]`), with(func(t *schemas.Task) {
		t.Triggers = []schemas.Trigger{{Type: schemas.TriggerTypeCron, Schedule: "@daily"}, {Type: schemas.TriggerTypeCron, Schedule: "@hourly", Misfire: schemas.MisfireCatchUp, MaxCatchUp: 3}}
	})},
	{"cron yaml", "task_name: demo\nexecution: {handler: builtin.echo}\ntriggers:\n  - {type: cron, cron: \"*/10 * * * * *\"}\n", with(func(t *schemas.Task) {
		t.Triggers = []schemas.Trigger{{Type: schemas.TriggerTypeCron, Schedule: "*/10 * * * * *"}}
	})},
	{"retry full", retry(`"max_attempts":5,"backoff":"exp","initial_interval_sec":0.5,"max_interval_sec":60`), with(func(t *schemas.Task) {
		t.Execution.Retry = schemas.Retry{MaxAttempts: 5, Backoff: schemas.BackoffExponential, InitialIntervalSec: ptr(0.5), MaxIntervalSec: ptr(60.0)}
	})},
	{"retry linear", retry(`"backoff":"linear"`), with(func(t *schemas.Task) { t.Execution.Retry.Backoff = schemas.BackoffLinear })},
	{"retry fixed", retry(`"backoff":"fixed"`), with(func(t *schemas.Task) { t.Execution.Retry.Backoff = schemas.BackoffFixed })},
	{"retry 100 attempts", retry(`"max_attempts":100`), with(func(t *schemas.Task) { t.Execution.Retry.MaxAttempts = 100 })},
	{"retry at once", retry(`"initial_interval_sec":0`), with(func(t *schemas.Task) { t.Execution.Retry.InitialIntervalSec = ptr(0.0) })},
	{"retry max equals initial", retry(`"initial_interval_sec":5,"max_interval_sec":5`), with(func(t *schemas.Task) {
		t.Execution.Retry.InitialIntervalSec, t.Execution.Retry.MaxIntervalSec = ptr(5.0), ptr(5.0)
	})},
	{"retry empty", retry(``), minimal()},
	{"concurrency", root(`"concurrency":{"max_running_instances":2,"blocking_strategy":"buffer_one"}`), with(func(t *schemas.Task) {
		t.Concurrency = schemas.Concurrency{MaxRunningInstances: 2, BlockingStrategy: schemas.BlockBufferOne}
	})},
	{"concurrency no limit", root(`"concurrency":{"max_running_instances":0,"blocking_strategy":"discard"}`), with(func(t *schemas.Task) {
		t.Concurrency.BlockingStrategy = schemas.BlockDiscard
	})},
	{"concurrency cancel_other", root(`"concurrency":{"blocking_strategy":"cancel_other"}`), with(func(t *schemas.Task) { t.Concurrency.BlockingStrategy = schemas.BlockCancelOther })},
	{"concurrency serial", root(`"concurrency":{"blocking_strategy":"serial"}`), with(func(t *schemas.Task) { t.Concurrency.BlockingStrategy = schemas.BlockSerial })},
	{"dispatch", root(`"dispatch":{"strategy":"pull","tags":["gpu","eu-west_1"]}`), with(func(t *schemas.Task) {
		t.Dispatch = schemas.DispatchPolicy{Strategy: schemas.DispatchPull, Tags: []string{"gpu", "eu-west_1"}}
	})},
	{"dispatch eight tags", root(`"dispatch":{"tags":["a","b","c","d","e","f","g","h"]}`), with(func(t *schemas.Task) {
		t.Dispatch.Tags = []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	})},
	{"dispatch tag 32 chars", root(`"dispatch":{"tags":["` + strings.Repeat("t", 32) + `"]}`), with(func(t *schemas.Task) { t.Dispatch.Tags = []string{strings.Repeat("t", 32)} })},
	{"dispatch tag containing worker", root(`"dispatch":{"tags":["workers"]}`), with(func(t *schemas.Task) { t.Dispatch.Tags = []string{"workers"} })},
	{"dispatch empty tags", root(`"dispatch":{"tags":[]}`), minimal()},
	{"dispatch hash without key", root(`"dispatch":{"strategy":"hash","tags":["data-node-a","data-node-b"]}`), with(func(t *schemas.Task) {
		t.Dispatch = schemas.DispatchPolicy{Strategy: schemas.DispatchHash, Tags: []string{"data-node-a", "data-node-b"}}
	})},
	{"dispatch tags_all", root(`"dispatch":{"tags_all":["gpu","eu"]}`), with(func(t *schemas.Task) { t.Dispatch.TagsAll = []string{"gpu", "eu"} })},
	{"dispatch hash", root(`"dispatch":{"strategy":"hash","hash_key":"{{.customer}}"}`), with(func(t *schemas.Task) {
		t.Dispatch.Strategy, t.Dispatch.HashKey = schemas.DispatchHash, "{{.customer}}"
	})},
	{"dispatch worker", root(`"dispatch":{"strategy":"worker","worker":"box-1"}`), with(func(t *schemas.Task) {
		t.Dispatch.Strategy, t.Dispatch.Worker = schemas.DispatchWorker, "box-1"
	})},
	{"priority urgent", root(`"priority":"urgent"`), with(func(t *schemas.Task) { t.Priority = schemas.PriorityUrgent })},
	{"priority low", root(`"priority":"low"`), with(func(t *schemas.Task) { t.Priority = schemas.PriorityLow })},
	{"min_worker_version", root(`"min_worker_version":"1.4.0"`), with(func(t *schemas.Task) { t.MinWorkerVersion = "1.4.0" })},
	{"min_worker_version prerelease", root(`"min_worker_version":"2.0.0-rc.1"`), with(func(t *schemas.Task) { t.MinWorkerVersion = "2.0.0-rc.1" })},
	{"schema_version", root(`"schema_version":3`), with(func(t *schemas.Task) { t.SchemaVersion = 3 })},
	{"payload_schema compacted", root(`"payload_schema": { "type": "object",  "required": ["id"] }`), with(func(t *schemas.Task) {
		t.PayloadSchema = json.RawMessage(`{"type":"object","required":["id"]}`)
	})},
	{"payload_schema draft-07", root(`"payload_schema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"string"}`), with(func(t *schemas.Task) {
		t.PayloadSchema = json.RawMessage(`{"$schema":"http://json-schema.org/draft-07/schema#","type":"string"}`)
	})},
	{"payload_schema local ref", root(`"payload_schema":{"$ref":"#/$defs/id","$defs":{"id":{"type":"integer"}}}`), with(func(t *schemas.Task) {
		t.PayloadSchema = json.RawMessage(`{"$ref":"#/$defs/id","$defs":{"id":{"type":"integer"}}}`)
	})},
	{"payload_schema yaml", "task_name: demo\nexecution: {handler: builtin.echo}\npayload_schema:\n  type: object\n  properties:\n    id: {type: integer}\n", with(func(t *schemas.Task) {
		t.PayloadSchema = json.RawMessage(`{"properties":{"id":{"type":"integer"}},"type":"object"}`)
	})},
	{"yaml everything", `
task_name: nightly-report
task_type: report
owner: data-team
description: Builds the nightly report.
triggers:
  - type: event
execution:
  handler: reports.nightly
  timeout: 10m
  retry: {max_attempts: 3, backoff: exp, initial_interval_sec: 10, max_interval_sec: 600}
concurrency: {max_running_instances: 1, blocking_strategy: discard}
dispatch: {strategy: pull, tags: [eu, gpu]}
priority: urgent
min_worker_version: "1.2.0"
schema_version: 2
`, &schemas.Task{
		TaskName: "nightly-report", TaskType: "report", Owner: "data-team", Description: "Builds the nightly report.",
		Triggers: []schemas.Trigger{{Type: schemas.TriggerTypeEvent}},
		Execution: schemas.Execution{Handler: "reports.nightly", Timeout: "10m", Retry: schemas.Retry{
			MaxAttempts: 3, Backoff: schemas.BackoffExponential, InitialIntervalSec: ptr(10.0), MaxIntervalSec: ptr(600.0)}},
		Concurrency:      schemas.Concurrency{MaxRunningInstances: 1, BlockingStrategy: schemas.BlockDiscard},
		Dispatch:         schemas.DispatchPolicy{Strategy: schemas.DispatchPull, Tags: []string{"eu", "gpu"}},
		Priority:         schemas.PriorityUrgent,
		MinWorkerVersion: "1.2.0",
		SchemaVersion:    2,
	}},
}

func TestParseTaskAccepts(t *testing.T) {
	t.Parallel()
	for _, tc := range taskAccepts {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseTask([]byte(tc.in))
			if err != nil {
				t.Fatalf("ParseTask: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseTask =\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

var taskRejects = []struct {
	name  string
	in    string
	field string // the field of the problem the test looks for
	msg   string // a part of its message
}{
	// The document.
	{"empty", "", "", "is empty"},
	{"blank", " \n\t", "", "is empty"},
	{"json syntax", "{\"task_name\": \"demo\",\n \"execution\": {]}", "", "is not valid JSON: invalid character ']' looking for beginning of object key string, at line 2, column 16"},
	{"json truncated", `{"task_name": "demo"`, "", "is not valid JSON: it ends too early, at line 1, column 21"},
	{"json trailing data", root("") + " {}", "", "unexpected data after the top-level value, at line 1, column 62"},
	{"yaml syntax", "task_name: demo\nexecution: [\n", "", "is not valid YAML: line 2:"},
	{"yaml flow style at the root is read as JSON", "{task_name: demo, execution: {handler: h}}", "", "is not valid JSON: invalid character 't' looking for beginning of object key string, at line 1, column 2"},
	{"yaml tab indent", "task_name: demo\nexecution:\n\thandler: x\n", "", "is not valid YAML: line 3:"},
	{"yaml duplicate key", "task_name: a\ntask_name: b\nexecution: {handler: h}\n", "", `is not valid YAML: line 2: key "task_name" already set in map`},
	{"yaml scalar", "hello", "", "must be an object, not a string"},
	{"yaml list", "- task_name: demo\n", "", "must be an object, not a list"},
	{"yaml null", "~", "", "must be an object, not null"},
	{"json array", `[` + root("") + `]`, "", "must be an object, not a list"},

	// task_name.
	{"task_name missing", `{"execution":{"handler":"h"}}`, "task_name", "is required"},
	{"task_name empty", `{"task_name":"","execution":{"handler":"h"}}`, "task_name", "must match ^[a-z0-9][a-z0-9_-]{0,63}$: lower-case letters, digits, '_' and '-' only"},
	{"task_name upper case", `{"task_name":"Demo","execution":{"handler":"h"}}`, "task_name", "since it becomes a NATS subject token"},
	{"task_name dot", `{"task_name":"a.b","execution":{"handler":"h"}}`, "task_name", "must match"},
	{"task_name space", `{"task_name":"a b","execution":{"handler":"h"}}`, "task_name", "must match"},
	{"task_name wildcard", `{"task_name":"*","execution":{"handler":"h"}}`, "task_name", "must match"},
	{"task_name leading dash", `{"task_name":"-a","execution":{"handler":"h"}}`, "task_name", "must match"},
	{"task_name 65 chars", `{"task_name":"` + strings.Repeat("a", 65) + `","execution":{"handler":"h"}}`, "task_name", "must match"},
	{"task_name number", "task_name: 7\nexecution: {handler: h}\n", "task_name", "must be a string, not a number; put it in quotes"},

	// task_type, owner, description.
	{"task_type too long", root(`"task_type":"` + strings.Repeat("x", 65) + `"`), "task_type", "must be at most 64 characters long (it has 65)"},
	{"task_type not a string", root(`"task_type":["a"]`), "task_type", "must be a string, not a list"},
	{"owner too long", root(`"owner":"` + strings.Repeat("x", 257) + `"`), "owner", "must be at most 256 characters long"},
	{"owner not a string", root(`"owner":true`), "owner", "must be a string, not true or false; put it in quotes"},
	{"description too long", root(`"description":"` + strings.Repeat("x", 4097) + `"`), "description", "must be at most 4096 characters long"},

	// triggers.
	{"triggers not a list", root(`"triggers":{"type":"event"}`), "triggers", "must be a list, not an object"},
	{"trigger not an object", root(`"triggers":["event"]`), "triggers[0]", "must be an object, not a string"},
	{"trigger type missing", root(`"triggers":[{}]`), "triggers[0].type", "is required"},
	{"trigger type unknown", root(`"triggers":[{"type":"event"},{"type":"interval"}]`), "triggers[1].type", "must be one of event, manual, cron"},
	{"trigger unknown field", root(`"triggers":[{"type":"event","every":"1m"}]`), "triggers[0]", `unknown field "every"; remove it (allowed: cron, max_catch_up, misfire, payload, schedule, timezone, type)`},
	{"cron on event", root(`"triggers":[{"type":"event","cron":"* * * * *"}]`), "triggers[0].cron", "must be left out unless type is cron; remove it or set type: cron"},
	{"cron and schedule", root(`"triggers":[{"type":"cron","cron":"0 2 * * *","schedule":"0 2 * * *"}]`), "triggers[0].schedule",
		"must be left out when cron is set: cron and schedule name the same field; keep one of them"},
	{"cron trigger without schedule", root(`"triggers":[{"type":"cron","timezone":"UTC"}]`), "triggers[0].schedule", "is required"},
	{"cron bad", root(`"triggers":[{"type":"event"},{"type":"cron","cron":"0 25 * * *"}]`), "triggers[1].cron", "is not a valid cron expression"},
	{"cron empty", root(`"triggers":[{"type":"cron","cron":""}]`), "triggers[0].cron", "must not be empty"},
	{"too many triggers", root(`"triggers":[` + strings.TrimSuffix(strings.Repeat(`{"type":"event"},`, 33), ",") + `]`), "triggers", "must have at most 32 items (it has 33)"},

	// retention and archive.
	{"retention without unit", root(`"retention":"90"`), "retention", `must be a whole number of days such as "90d"`},
	{"retention weeks", root(`"retention":"2w"`), "retention", `must be a whole number of days such as "90d"`},
	{"retention too short", root(`"retention":"10m"`), "retention", "at least 1h"},
	{"retention zero days", root(`"retention":"0d"`), "retention", "at least 1h"},
	{"retention too long", root(`"retention":"36501d"`), "retention", "at most 36500d"},
	{"retention a number", root(`"retention":90`), "retention", "must be a string"},
	{"archive not a boolean", root(`"archive":"yes"`), "archive", "must be true or false"},

	// execution.
	{"execution missing", `{"task_name":"demo"}`, "execution", "is required"},
	{"execution not an object", `{"task_name":"demo","execution":"builtin.echo"}`, "execution", "must be an object, not a string"},
	{"handler missing", `{"task_name":"demo","execution":{"timeout":"1m"}}`, "execution.handler", "is required"},
	{"handler empty", handlerTask(`"handler":""`), "execution.handler", "must match ^[A-Za-z0-9._-]{1,128}$"},
	{"handler space", handlerTask(`"handler":"echo it"`), "execution.handler", "the name an executor registered the handler under"},
	{"handler slash", handlerTask(`"handler":"a/b"`), "execution.handler", "must match"},
	{"handler 129 chars", handlerTask(`"handler":"` + strings.Repeat("h", 129) + `"`), "execution.handler", "must match"},
	{"handler number", "task_name: demo\nexecution: {handler: 42}\n", "execution.handler", "must be a string, not a number"},
	{"execution unknown field", exec(`"command":"rm -rf /"`), "execution", `unknown field "command"; remove it (allowed: handler, retry, shards, slots, timeout)`},

	// execution.timeout.
	{"timeout without unit", exec(`"timeout":"90"`), "execution.timeout", `must be a Go duration such as "90s", "10m" or "1h30m"`},
	{"timeout in days", exec(`"timeout":"1d"`), "execution.timeout", "must be a Go duration"},
	{"timeout negative", exec(`"timeout":"-1s"`), "execution.timeout", "must be a Go duration"},
	{"timeout with space", exec(`"timeout":"1h 30m"`), "execution.timeout", "must be a Go duration"},
	{"timeout zero", exec(`"timeout":"0s"`), "execution.timeout", "must be longer than zero"},
	{"timeout below a nanosecond", exec(`"timeout":"0.1ns"`), "execution.timeout", "must be longer than zero"},
	{"timeout over 7 days", exec(`"timeout":"168h1s"`), "execution.timeout", "must be at most 168h (7 days)"},
	{"timeout overflow", exec(`"timeout":"99999999999h"`), "execution.timeout", "must be a Go duration"},
	{"timeout zero seconds", exec(`"timeout":0`), "execution.timeout", "must be greater than 0"},
	{"timeout negative seconds", exec(`"timeout":-5`), "execution.timeout", "must be greater than 0"},
	{"timeout seconds over 7 days", exec(`"timeout":604801`), "execution.timeout", "must be at most 604800"},
	{"timeout seconds below a nanosecond", exec(`"timeout":1e-10`), "execution.timeout", "must be longer than zero"},
	{"timeout boolean", exec(`"timeout":true`), "execution.timeout", "must be a number or a string, not true or false"},

	// execution.retry.
	{"retry not an object", exec(`"retry":3`), "execution.retry", "must be an object, not a number"},
	{"max_attempts zero", retry(`"max_attempts":0`), "execution.retry.max_attempts", "must be at least 1"},
	{"max_attempts over 100", retry(`"max_attempts":101`), "execution.retry.max_attempts", "must be at most 100"},
	{"max_attempts fraction", retry(`"max_attempts":1.5`), "execution.retry.max_attempts", "must be a whole number, not a number"},
	{"max_attempts string", retry(`"max_attempts":"3"`), "execution.retry.max_attempts", "must be a whole number, not a string"},
	{"max_attempts float form", retry(`"max_attempts":2.0`), "execution.retry.max_attempts", "cannot hold number 2.0; use a whole number in range"},
	{"backoff unknown", retry(`"backoff":"expo"`), "execution.retry.backoff", "must be one of fixed, linear, exp"},
	{"initial_interval_sec negative", retry(`"initial_interval_sec":-1`), "execution.retry.initial_interval_sec", "must be at least 0"},
	{"initial_interval_sec string", retry(`"initial_interval_sec":"30s"`), "execution.retry.initial_interval_sec", "must be a number, not a string"},
	{"initial_interval_sec over a week", retry(`"initial_interval_sec":604801,"max_interval_sec":604800`), "execution.retry.initial_interval_sec", "must be at most 604800"},
	{"max_interval_sec zero", retry(`"max_interval_sec":0`), "execution.retry.max_interval_sec", "must be greater than 0"},
	{"max_interval_sec underflows", retry(`"initial_interval_sec":0,"max_interval_sec":1e-400`), "execution.retry.max_interval_sec", "must be greater than 0"},
	{"max_interval_sec below initial", retry(`"initial_interval_sec":60,"max_interval_sec":10`), "execution.retry.max_interval_sec", "must be at least initial_interval_sec (60)"},
	{"initial_interval_sec above default max", retry(`"initial_interval_sec":3600`), "execution.retry.initial_interval_sec", "must not exceed max_interval_sec, which defaults to 1800"},
	{"retry unknown field", retry(`"jitter":true`), "execution.retry", `unknown field "jitter"; remove it (allowed: backoff, initial_interval_sec, max_attempts, max_interval_sec)`},

	// concurrency.
	{"concurrency not an object", root(`"concurrency":1`), "concurrency", "must be an object"},
	{"max_running_instances negative", root(`"concurrency":{"max_running_instances":-1}`), "concurrency.max_running_instances", "must be at least 0"},
	{"max_running_instances huge", root(`"concurrency":{"max_running_instances":1e30}`), "concurrency.max_running_instances", "must be at most 1000000"},
	{"blocking_strategy unknown", root(`"concurrency":{"blocking_strategy":"queue"}`), "concurrency.blocking_strategy", "must be one of serial, discard, cancel_other, buffer_one"},
	{"concurrency unknown field", root(`"concurrency":{"limit":1}`), "concurrency", `unknown field "limit"; remove it (allowed: blocking_strategy, max_running_instances, mutex_key)`},

	// dispatch.
	{"dispatch not an object", root(`"dispatch":"pull"`), "dispatch", "must be an object, not a string"},
	{"dispatch strategy unknown", root(`"dispatch":{"strategy":"random"}`), "dispatch.strategy", "must be one of pull, hash, worker, broadcast"},
	{"shards zero", exec(`"shards":0`), "execution.shards", "must be at least 1"},
	{"shards with broadcast", `{"task_name":"t","execution":{"handler":"h","shards":2},"dispatch":{"strategy":"broadcast"}}`, "execution.shards", `cannot be combined with dispatch strategy "broadcast"`},
	{"dispatch tags and tags_all", root(`"dispatch":{"tags":["eu"],"tags_all":["eu","gpu"]}`), "dispatch.tags_all", "cannot be combined with tags"},
	{"dispatch tags_all plus", root(`"dispatch":{"tags_all":["eu+gpu"]}`), "dispatch.tags_all[0]", "must match"},
	{"dispatch hash key without hash", root(`"dispatch":{"hash_key":"{{.a}}"}`), "dispatch.hash_key", `is only allowed with strategy "hash"`},
	{"dispatch hash key malformed", root(`"dispatch":{"strategy":"hash","hash_key":"{{.a"}`), "dispatch.hash_key", "must be a Go text/template over the payload"},
	{"dispatch worker without worker", root(`"dispatch":{"strategy":"worker"}`), "dispatch.worker", `is required with strategy "worker"`},
	{"dispatch worker without strategy", root(`"dispatch":{"worker":"w1"}`), "dispatch.worker", `is only allowed with strategy "worker"`},
	{"dispatch worker malformed", root(`"dispatch":{"strategy":"worker","worker":"w.1"}`), "dispatch.worker", "must be a worker id"},
	{"dispatch tags not a list", root(`"dispatch":{"tags":"gpu"}`), "dispatch.tags", "must be a list, not a string"},
	{"dispatch tag repeated", root(`"dispatch":{"tags":["gpu","eu","gpu"]}`), "dispatch.tags", "must not repeat a value: items 0 and 2 are equal"},
	{"dispatch tag reserved", root(`"dispatch":{"tags":["eu","worker"]}`), "dispatch.tags[1]", `must not be "worker", which is reserved`},
	{"dispatch tag upper case", root(`"dispatch":{"tags":["GPU"]}`), "dispatch.tags[0]", "must match ^[a-z0-9][a-z0-9_-]{0,31}$"},
	{"dispatch tag plus", root(`"dispatch":{"tags":["eu+gpu"]}`), "dispatch.tags[0]", "must match"},
	{"dispatch tag empty", root(`"dispatch":{"tags":[""]}`), "dispatch.tags[0]", "must match"},
	{"dispatch tag 33 chars", root(`"dispatch":{"tags":["` + strings.Repeat("t", 33) + `"]}`), "dispatch.tags[0]", "must match"},
	{"dispatch tag number", root(`"dispatch":{"tags":[1]}`), "dispatch.tags[0]", "must be a string, not a number"},
	{"dispatch nine tags", root(`"dispatch":{"tags":["a","b","c","d","e","f","g","h","i"]}`), "dispatch.tags", "must have at most 8 items (it has 9)"},
	{"dispatch unknown field", root(`"dispatch":{"pool":"gpu"}`), "dispatch", `unknown field "pool"; remove it (allowed: fairness, hash_key, strategy, tags, tags_all, worker)`},

	// priority, min_worker_version, schema_version.
	{"priority unknown", root(`"priority":"high"`), "priority", "must be one of urgent, normal, low"},
	{"priority empty", root(`"priority":""`), "priority", "must be one of urgent, normal, low"},
	{"min_worker_version two parts", root(`"min_worker_version":"1.2"`), "min_worker_version", "must be a semantic version MAJOR.MINOR.PATCH"},
	{"min_worker_version v prefix", root(`"min_worker_version":"v1.2.3"`), "min_worker_version", "must be a semantic version"},
	{"min_worker_version leading zero", root(`"min_worker_version":"01.2.3"`), "min_worker_version", "must be a semantic version"},
	{"min_worker_version empty prerelease", root(`"min_worker_version":"1.2.3-"`), "min_worker_version", "must be a semantic version"},
	{"min_worker_version yaml number", "task_name: demo\nexecution: {handler: h}\nmin_worker_version: 1.2\n", "min_worker_version", "must be a string, not a number; put it in quotes"},
	{"schema_version zero", root(`"schema_version":0`), "schema_version", "must be at least 1"},
	{"schema_version string", root(`"schema_version":"1"`), "schema_version", "must be a whole number, not a string"},
	{"schema_version fraction", root(`"schema_version":1.5`), "schema_version", "must be a whole number"},

	// payload_schema.
	{"payload_schema not an object", root(`"payload_schema":"object"`), "payload_schema", "must be an object, not a string"},
	{"payload_schema boolean", root(`"payload_schema":true`), "payload_schema", "must be an object, not true or false"},
	{"payload_schema bad type", root(`"payload_schema":{"type":"strin"}`), "payload_schema.type", "is not valid in a JSON Schema: it must be one of array, boolean, integer, null, number, object, string"},
	{"payload_schema bad nested keyword", root(`"payload_schema":{"properties":{"id":{"minimum":"1"}}}`), "payload_schema.properties.id.minimum", "is not valid in a JSON Schema: it must be a number, not a string"},
	{"payload_schema bad regex", root(`"payload_schema":{"properties":{"id":{"pattern":"(?=a)"}}}`), "payload_schema.properties.id.pattern", "must be a valid regular expression in RE2 syntax"},
	{"payload_schema file ref", root(`"payload_schema":{"$ref":"file:///etc/passwd"}`), "payload_schema", "refers to file:///etc/passwd, which AX does not load"},
	{"payload_schema http ref", root(`"payload_schema":{"$ref":"https://example.com/order.json"}`), "payload_schema", "which AX does not load"},
	{"payload_schema unknown $schema", root(`"payload_schema":{"$schema":"https://example.com/meta"}`), "payload_schema", "which AX does not load"},
	{"payload_schema dangling ref", root(`"payload_schema":{"$ref":"#/$defs/missing"}`), "payload_schema", `has a $ref to "#/$defs/missing", which payload_schema does not define`},
	{"payload_schema ref cycle", root(`"payload_schema":{"$ref":"#/$defs/a","$defs":{"a":{"$ref":"#/$defs/a"}}}`), "payload_schema", "has a $ref cycle"},

	// Text Go's decoder would alter silently (issue 24, hole 10): a lone
	// surrogate escape, bytes that are not UTF-8, in every string field.
	{"owner lone surrogate", root(`"owner":"a\ud800b"`), "owner", "lone UTF-16 surrogate"},
	{"owner not UTF-8", root("\"owner\":\"a\xffb\""), "owner", "is not valid UTF-8"},
	{"description not UTF-8", root("\"description\":\"\xc3\""), "description", "is not valid UTF-8"},
	{"task_type lone surrogate", root(`"task_type":"\udc00"`), "task_type", "lone UTF-16 surrogate"},
	{"redact not UTF-8", root("\"redact\":[\"payload.a\xfe\"]"), "redact[0]", "is not valid UTF-8"},
	{"hash_key lone surrogate", `{"task_name":"demo","execution":{"handler":"h"},"dispatch":{"strategy":"hash","hash_key":"{{.a}}\ud83d"}}`, "dispatch.hash_key", "lone UTF-16 surrogate"},
	{"mutex_key not UTF-8", "{\"task_name\":\"demo\",\"execution\":{\"handler\":\"h\"},\"concurrency\":{\"mutex_key\":\"k\xff\"}}", "concurrency.mutex_key", "is not valid UTF-8"},
	{"payload_schema lone surrogate", root(`"payload_schema":{"properties":{"a":{"const":"\ud800"}}}`), "payload_schema.properties.a.const", "lone UTF-16 surrogate"},
	{"payload_schema not UTF-8", root("\"payload_schema\":{\"description\":\"\xff\"}"), "payload_schema.description", "is not valid UTF-8"},
	{"payload_schema key not UTF-8", root("\"payload_schema\":{\"properties\":{\"\xff\":{}}}"), "payload_schema.properties.\ufffd", "the key is not valid UTF-8"},

	// Unknown fields at every level.
	{"unknown root field", root(`"colour":"blue"`), "", `unknown field "colour"; remove it (allowed: after, archive, concurrency, deadline, description, dispatch, execution, limits, min_worker_version, owner, payload_schema, priority, redact, retention, schema_version, task_name, task_type, triggers)`},
	{"unknown root field yaml", "task_name: demo\nexecution: {handler: h}\ncron: '* * * * *'\n", "", `unknown field "cron"; remove it`},
	{"unknown field with odd name", root(`"a b":1`), "", `unknown field "a b"; remove it`},
}

func TestParseTaskRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range taskRejects {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			task, err := ParseTask([]byte(tc.in))
			if err == nil {
				t.Fatalf("ParseTask accepted %s as %+v", tc.in, task)
			}
			if task != nil {
				t.Errorf("ParseTask returned a task with its error")
			}
			requireProblem(t, err, "task definition", tc.field, tc.msg)
		})
	}
}

func TestParseTaskReportsEveryProblem(t *testing.T) {
	t.Parallel()
	_, err := ParseTask([]byte(`{"task_name":"demo","execution":{},"priority":"high"}`))
	want := "invalid task definition: execution.handler: is required; priority: must be one of urgent, normal, low"
	if err == nil || err.Error() != want {
		t.Fatalf("ParseTask error = %v, want %s", err, want)
	}
	var verr *schemas.ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("error %T is not a *ValidationError", err)
	}
	wantProblems := []schemas.Problem{
		{Field: "execution.handler", Message: "is required"},
		{Field: "priority", Message: "must be one of urgent, normal, low"},
	}
	if !slices.Equal(verr.Problems, wantProblems) {
		t.Errorf("Problems = %q, want %q", verr.Problems, wantProblems)
	}
}

func TestParseTaskMessagesAreReadable(t *testing.T) {
	t.Parallel()
	// jsonschema's own wording ("got", "want", keyword locations) must not leak.
	for _, tc := range taskRejects {
		_, err := ParseTask([]byte(tc.in))
		for _, bad := range []string{"jsonschema", "got ", "want ", "validation failed", "ax.invalid", "github.com"} {
			if err != nil && strings.Contains(err.Error(), bad) && !strings.Contains(tc.in, bad) {
				t.Errorf("%s: error %q holds %q", tc.name, err, bad)
			}
		}
	}
}

func TestParseTaskJSONAndYAMLAgree(t *testing.T) {
	t.Parallel()
	yamlDoc := `
task_name: etl
execution:
  handler: etl.load
  timeout: 90s
  retry:
    max_attempts: 4
    backoff: linear
    initial_interval_sec: 2.5
    max_interval_sec: 20
dispatch:
  tags: [eu]
payload_schema:
  type: object
  required: [day]
  properties:
    day: {type: string, format: date}
`
	jsonDoc := `{
  "task_name": "etl",
  "execution": {
    "handler": "etl.load",
    "timeout": "90s",
    "retry": {"max_attempts": 4, "backoff": "linear", "initial_interval_sec": 2.5, "max_interval_sec": 20}
  },
  "dispatch": {"tags": ["eu"]},
  "payload_schema": {"type": "object", "required": ["day"], "properties": {"day": {"type": "string", "format": "date"}}}
}`
	fromYAML, err := ParseTask([]byte(yamlDoc))
	if err != nil {
		t.Fatalf("ParseTask(yaml): %v", err)
	}
	fromJSON, err := ParseTask([]byte(jsonDoc))
	if err != nil {
		t.Fatalf("ParseTask(json): %v", err)
	}
	// The payload schemas differ in key order only.
	var a, b any
	if err := json.Unmarshal(fromYAML.PayloadSchema, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(fromJSON.PayloadSchema, &b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("payload schemas differ: %s and %s", fromYAML.PayloadSchema, fromJSON.PayloadSchema)
	}
	fromYAML.PayloadSchema, fromJSON.PayloadSchema = nil, nil
	if !reflect.DeepEqual(fromYAML, fromJSON) {
		t.Errorf("YAML gives %+v, JSON gives %+v", fromYAML, fromJSON)
	}
}

func TestParseTaskConcurrently(t *testing.T) {
	t.Parallel()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for _, tc := range taskAccepts[i%4 : i%4+4] {
				if _, err := ParseTask([]byte(tc.in)); err != nil {
					t.Errorf("ParseTask(%s): %v", tc.name, err)
				}
			}
			if err := ValidatePayload(json.RawMessage(`{"type":"integer"}`), json.RawMessage(`"x"`)); err == nil {
				t.Error("ValidatePayload accepted a string for an integer")
			}
		})
	}
	wg.Wait()
}

func TestExampleHello(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../examples/hello.yaml")
	if err != nil {
		t.Fatal(err)
	}
	task, err := ParseTask(data)
	if err != nil {
		t.Fatalf("ParseTask(examples/hello.yaml): %v", err)
	}
	d := task.WithDefaults()
	if d.TaskName != "hello" || d.Execution.Handler != "builtin.echo" {
		t.Errorf("task %q runs %q, want hello running builtin.echo", d.TaskName, d.Execution.Handler)
	}
	r := d.Execution.Retry
	if r.MaxAttempts != 3 || r.Backoff != schemas.BackoffFixed || r.Initial() != time.Second {
		t.Errorf("retry = %d attempts, %s backoff, %v initial; want 3, fixed, 1s", r.MaxAttempts, r.Backoff, r.Initial())
	}
	if err := ValidatePayload(d.PayloadSchema, json.RawMessage(`{"name":"world"}`)); err != nil {
		t.Errorf("the example's payload schema rejects its documented payload: %v", err)
	}
}

func TestWithDefaults(t *testing.T) {
	t.Parallel()
	got := minimal().WithDefaults()
	want := &schemas.Task{
		TaskName: "demo",
		Execution: schemas.Execution{Handler: "builtin.echo", Timeout: "1h", Retry: schemas.Retry{
			MaxAttempts: 1, Backoff: schemas.BackoffFixed, InitialIntervalSec: ptr(30.0), MaxIntervalSec: ptr(1800.0),
		}},
		Concurrency:   schemas.Concurrency{BlockingStrategy: schemas.BlockSerial},
		Dispatch:      schemas.DispatchPolicy{Strategy: schemas.DispatchPull},
		Priority:      schemas.PriorityNormal,
		SchemaVersion: 1,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("WithDefaults =\n%+v\nwant\n%+v", got, want)
	}
	if d, err := time.ParseDuration(string(got.Execution.Timeout)); err != nil || d != schemas.DefaultTimeout {
		t.Errorf("default timeout %q is not DefaultTimeout", got.Execution.Timeout)
	}

	// Set values stay, and the copy shares nothing with the original.
	orig := &schemas.Task{
		TaskName:    "demo",
		Triggers:    []schemas.Trigger{{Type: schemas.TriggerTypeEvent}},
		Execution:   schemas.Execution{Handler: "h", Timeout: "5m", Retry: schemas.Retry{MaxAttempts: 3, Backoff: schemas.BackoffExponential, InitialIntervalSec: ptr(0.0), MaxIntervalSec: ptr(9.0)}},
		Concurrency: schemas.Concurrency{MaxRunningInstances: 2, BlockingStrategy: schemas.BlockDiscard},
		Dispatch:    schemas.DispatchPolicy{Strategy: schemas.DispatchPull, Tags: []string{"gpu"}},
		Priority:    schemas.PriorityLow, SchemaVersion: 4, PayloadSchema: json.RawMessage(`{}`),
	}
	c := orig.WithDefaults()
	if !reflect.DeepEqual(c, orig) {
		t.Errorf("WithDefaults changed set values:\n%+v\nfrom\n%+v", c, orig)
	}
	*c.Execution.Retry.InitialIntervalSec = 7
	*c.Execution.Retry.MaxIntervalSec = 7
	c.Triggers[0].Type = schemas.TriggerTypeManual
	c.Dispatch.Tags[0] = "cpu"
	c.PayloadSchema[0] = '['
	if *orig.Execution.Retry.InitialIntervalSec != 0 || *orig.Execution.Retry.MaxIntervalSec != 9 ||
		orig.Triggers[0].Type != schemas.TriggerTypeEvent || orig.Dispatch.Tags[0] != "gpu" || string(orig.PayloadSchema) != "{}" {
		t.Errorf("changing the copy changed the original: %+v", orig)
	}
}

func TestDurations(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		timeout string
		want    time.Duration
	}{
		{"", schemas.DefaultTimeout},
		{"90s", 90 * time.Second},
		{"1h30m", 90 * time.Minute},
		{"garbage", schemas.DefaultTimeout},
		{"-5s", schemas.DefaultTimeout},
		{"0s", schemas.DefaultTimeout},
	} {
		task := &schemas.Task{Execution: schemas.Execution{Timeout: schemas.Duration(tc.timeout)}}
		if got := task.TimeoutDuration(); got != tc.want {
			t.Errorf("TimeoutDuration(%q) = %v, want %v", tc.timeout, got, tc.want)
		}
	}
	for _, tc := range []struct {
		r            schemas.Retry
		initial, max time.Duration
	}{
		{schemas.Retry{}, schemas.DefaultInitialInterval, schemas.DefaultMaxInterval},
		{schemas.Retry{InitialIntervalSec: ptr(0.0), MaxIntervalSec: ptr(60.0)}, 0, time.Minute},
		{schemas.Retry{InitialIntervalSec: ptr(1.5), MaxIntervalSec: ptr(0.25)}, 1500 * time.Millisecond, 250 * time.Millisecond},
		{schemas.Retry{InitialIntervalSec: ptr(-1.0), MaxIntervalSec: ptr(0.0)}, 0, schemas.DefaultMaxInterval},
		{schemas.Retry{InitialIntervalSec: ptr(1e300), MaxIntervalSec: ptr(1e300)}, time.Duration(1<<63 - 1), time.Duration(1<<63 - 1)},
	} {
		if got := tc.r.Initial(); got != tc.initial {
			t.Errorf("%+v.Initial() = %v, want %v", tc.r, got, tc.initial)
		}
		if got := tc.r.Max(); got != tc.max {
			t.Errorf("%+v.Max() = %v, want %v", tc.r, got, tc.max)
		}
	}
}
