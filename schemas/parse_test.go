package schemas

import (
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
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
func minimal() *Task {
	return &Task{TaskName: "demo", Execution: Execution{Handler: "builtin.echo"}}
}

// with returns minimal() changed by f.
func with(f func(*Task)) *Task {
	t := minimal()
	f(t)
	return t
}

var taskAccepts = []struct {
	name string
	in   string
	want *Task
}{
	{"minimal json", root(""), minimal()},
	{"minimal yaml", "task_name: demo\nexecution:\n  handler: builtin.echo\n", minimal()},
	{"json after spaces", "\n\t  " + root(""), minimal()},
	{"retention in days, archived", "task_name: demo\nexecution: {handler: builtin.echo}\nretention: 90d\narchive: true\n",
		with(func(t *Task) { t.Retention, t.Archive = "90d", new(true) })},
	{"retention as a duration", root(`"retention":"36h"`), with(func(t *Task) { t.Retention = "36h" })},
	{"yaml flow style", "task_name: demo\nexecution: {handler: builtin.echo}\n", minimal()},
	{"yaml with comments", "# a task\ntask_name: demo # its name\nexecution:\n  handler: builtin.echo\n", minimal()},
	{"task_name one char", `{"task_name":"a","execution":{"handler":"h"}}`, &Task{TaskName: "a", Execution: Execution{Handler: "h"}}},
	{"task_name digits, _ and -", `{"task_name":"0-a_b","execution":{"handler":"h"}}`, &Task{TaskName: "0-a_b", Execution: Execution{Handler: "h"}}},
	{"task_name 64 chars", `{"task_name":"` + strings.Repeat("a", 64) + `","execution":{"handler":"h"}}`, &Task{TaskName: strings.Repeat("a", 64), Execution: Execution{Handler: "h"}}},
	{"task_type", root(`"task_type":"report"`), with(func(t *Task) { t.TaskType = "report" })},
	{"owner", root(`"owner":"Data Team <data@example.com>"`), with(func(t *Task) { t.Owner = "Data Team <data@example.com>" })},
	{"description", root(`"description":"Builds the daily report."`), with(func(t *Task) { t.Description = "Builds the daily report." })},
	{"triggers", root(`"triggers":[{"type":"event"},{"type":"manual"}]`), with(func(t *Task) {
		t.Triggers = []Trigger{{Type: TriggerTypeEvent}, {Type: TriggerTypeManual}}
	})},
	{"empty triggers", root(`"triggers":[]`), minimal()},
	{"handler with dots and dashes", handlerTask(`"handler":"Billing.invoice-v2_x"`), &Task{TaskName: "demo", Execution: Execution{Handler: "Billing.invoice-v2_x"}}},
	{"handler 128 chars", handlerTask(`"handler":"` + strings.Repeat("h", 128) + `"`), &Task{TaskName: "demo", Execution: Execution{Handler: strings.Repeat("h", 128)}}},
	{"timeout 90s", exec(`"timeout":"90s"`), with(func(t *Task) { t.Execution.Timeout = "90s" })},
	{"timeout 1h30m", exec(`"timeout":"1h30m"`), with(func(t *Task) { t.Execution.Timeout = "1h30m" })},
	{"timeout fractional", exec(`"timeout":"1.5h"`), with(func(t *Task) { t.Execution.Timeout = "1.5h" })},
	{"timeout 7 days", exec(`"timeout":"168h"`), with(func(t *Task) { t.Execution.Timeout = "168h" })},
	{"timeout 500ms", exec(`"timeout":"500ms"`), with(func(t *Task) { t.Execution.Timeout = "500ms" })},
	{"timeout seconds", exec(`"timeout":1800`), with(func(t *Task) { t.Execution.Timeout = "1800s" })},
	{"timeout fractional seconds", exec(`"timeout":0.5`), with(func(t *Task) { t.Execution.Timeout = "0.5s" })},
	{"timeout seconds exponent", exec(`"timeout":1e3`), with(func(t *Task) { t.Execution.Timeout = "1000s" })},
	{"timeout 7 days of seconds", exec(`"timeout":604800`), with(func(t *Task) { t.Execution.Timeout = "604800s" })},
	{"timeout seconds yaml", "task_name: demo\nexecution:\n  handler: builtin.echo\n  timeout: 1800\n", with(func(t *Task) { t.Execution.Timeout = "1800s" })},
	{"cron as the schedule's name", root(`"triggers":[{"type":"cron","cron":"0 2 * * *","timezone":"Asia/Shanghai"}]`), with(func(t *Task) {
		t.Triggers = []Trigger{{Type: TriggerTypeCron, Schedule: "0 2 * * *", Timezone: "Asia/Shanghai"}}
	})},
	{"cron and schedule in two triggers", root(`"triggers":[{"type":"cron","schedule":"@daily"},{"type":"cron","cron":"@hourly","misfire":"catch_up","max_catch_up":3}]`), with(func(t *Task) {
		t.Triggers = []Trigger{{Type: TriggerTypeCron, Schedule: "@daily"}, {Type: TriggerTypeCron, Schedule: "@hourly", Misfire: MisfireCatchUp, MaxCatchUp: 3}}
	})},
	{"cron yaml", "task_name: demo\nexecution: {handler: builtin.echo}\ntriggers:\n  - {type: cron, cron: \"*/10 * * * * *\"}\n", with(func(t *Task) {
		t.Triggers = []Trigger{{Type: TriggerTypeCron, Schedule: "*/10 * * * * *"}}
	})},
	{"retry full", retry(`"max_attempts":5,"backoff":"exp","initial_interval_sec":0.5,"max_interval_sec":60`), with(func(t *Task) {
		t.Execution.Retry = Retry{MaxAttempts: 5, Backoff: BackoffExponential, InitialIntervalSec: ptr(0.5), MaxIntervalSec: ptr(60.0)}
	})},
	{"retry linear", retry(`"backoff":"linear"`), with(func(t *Task) { t.Execution.Retry.Backoff = BackoffLinear })},
	{"retry fixed", retry(`"backoff":"fixed"`), with(func(t *Task) { t.Execution.Retry.Backoff = BackoffFixed })},
	{"retry 100 attempts", retry(`"max_attempts":100`), with(func(t *Task) { t.Execution.Retry.MaxAttempts = 100 })},
	{"retry at once", retry(`"initial_interval_sec":0`), with(func(t *Task) { t.Execution.Retry.InitialIntervalSec = ptr(0.0) })},
	{"retry max equals initial", retry(`"initial_interval_sec":5,"max_interval_sec":5`), with(func(t *Task) {
		t.Execution.Retry.InitialIntervalSec, t.Execution.Retry.MaxIntervalSec = ptr(5.0), ptr(5.0)
	})},
	{"retry empty", retry(``), minimal()},
	{"concurrency", root(`"concurrency":{"max_running_instances":2,"blocking_strategy":"buffer_one"}`), with(func(t *Task) {
		t.Concurrency = Concurrency{MaxRunningInstances: 2, BlockingStrategy: BlockBufferOne}
	})},
	{"concurrency no limit", root(`"concurrency":{"max_running_instances":0,"blocking_strategy":"discard"}`), with(func(t *Task) {
		t.Concurrency.BlockingStrategy = BlockDiscard
	})},
	{"concurrency cancel_other", root(`"concurrency":{"blocking_strategy":"cancel_other"}`), with(func(t *Task) { t.Concurrency.BlockingStrategy = BlockCancelOther })},
	{"concurrency serial", root(`"concurrency":{"blocking_strategy":"serial"}`), with(func(t *Task) { t.Concurrency.BlockingStrategy = BlockSerial })},
	{"dispatch", root(`"dispatch":{"strategy":"pull","tags":["gpu","eu-west_1"]}`), with(func(t *Task) {
		t.Dispatch = DispatchPolicy{Strategy: DispatchPull, Tags: []string{"gpu", "eu-west_1"}}
	})},
	{"dispatch eight tags", root(`"dispatch":{"tags":["a","b","c","d","e","f","g","h"]}`), with(func(t *Task) {
		t.Dispatch.Tags = []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	})},
	{"dispatch tag 32 chars", root(`"dispatch":{"tags":["` + strings.Repeat("t", 32) + `"]}`), with(func(t *Task) { t.Dispatch.Tags = []string{strings.Repeat("t", 32)} })},
	{"dispatch tag containing worker", root(`"dispatch":{"tags":["workers"]}`), with(func(t *Task) { t.Dispatch.Tags = []string{"workers"} })},
	{"dispatch empty tags", root(`"dispatch":{"tags":[]}`), minimal()},
	{"dispatch hash", root(`"dispatch":{"strategy":"hash","hash_key":"{{.customer}}"}`), with(func(t *Task) {
		t.Dispatch.Strategy, t.Dispatch.HashKey = DispatchHash, "{{.customer}}"
	})},
	{"dispatch worker", root(`"dispatch":{"strategy":"worker","worker":"box-1"}`), with(func(t *Task) {
		t.Dispatch.Strategy, t.Dispatch.Worker = DispatchWorker, "box-1"
	})},
	{"priority urgent", root(`"priority":"urgent"`), with(func(t *Task) { t.Priority = PriorityUrgent })},
	{"priority low", root(`"priority":"low"`), with(func(t *Task) { t.Priority = PriorityLow })},
	{"min_worker_version", root(`"min_worker_version":"1.4.0"`), with(func(t *Task) { t.MinWorkerVersion = "1.4.0" })},
	{"min_worker_version prerelease", root(`"min_worker_version":"2.0.0-rc.1"`), with(func(t *Task) { t.MinWorkerVersion = "2.0.0-rc.1" })},
	{"schema_version", root(`"schema_version":3`), with(func(t *Task) { t.SchemaVersion = 3 })},
	{"payload_schema compacted", root(`"payload_schema": { "type": "object",  "required": ["id"] }`), with(func(t *Task) {
		t.PayloadSchema = json.RawMessage(`{"type":"object","required":["id"]}`)
	})},
	{"payload_schema draft-07", root(`"payload_schema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"string"}`), with(func(t *Task) {
		t.PayloadSchema = json.RawMessage(`{"$schema":"http://json-schema.org/draft-07/schema#","type":"string"}`)
	})},
	{"payload_schema local ref", root(`"payload_schema":{"$ref":"#/$defs/id","$defs":{"id":{"type":"integer"}}}`), with(func(t *Task) {
		t.PayloadSchema = json.RawMessage(`{"$ref":"#/$defs/id","$defs":{"id":{"type":"integer"}}}`)
	})},
	{"payload_schema yaml", "task_name: demo\nexecution: {handler: builtin.echo}\npayload_schema:\n  type: object\n  properties:\n    id: {type: integer}\n", with(func(t *Task) {
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
`, &Task{
		TaskName: "nightly-report", TaskType: "report", Owner: "data-team", Description: "Builds the nightly report.",
		Triggers: []Trigger{{Type: TriggerTypeEvent}},
		Execution: Execution{Handler: "reports.nightly", Timeout: "10m", Retry: Retry{
			MaxAttempts: 3, Backoff: BackoffExponential, InitialIntervalSec: ptr(10.0), MaxIntervalSec: ptr(600.0)}},
		Concurrency:      Concurrency{MaxRunningInstances: 1, BlockingStrategy: BlockDiscard},
		Dispatch:         DispatchPolicy{Strategy: DispatchPull, Tags: []string{"eu", "gpu"}},
		Priority:         PriorityUrgent,
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
	{"trigger unknown field", root(`"triggers":[{"type":"event","every":"1m"}]`), "triggers[0]", `unknown field "every"; remove it (allowed: cron, max_catch_up, misfire, schedule, timezone, type)`},
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
	{"execution unknown field", exec(`"command":"rm -rf /"`), "execution", `unknown field "command"; remove it (allowed: handler, retry, shards, timeout)`},

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
	{"dispatch hash without key", root(`"dispatch":{"strategy":"hash"}`), "dispatch.hash_key", `is required with strategy "hash"`},
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
	{"dispatch unknown field", root(`"dispatch":{"pool":"gpu"}`), "dispatch", `unknown field "pool"; remove it (allowed: hash_key, strategy, tags, worker)`},

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

	// Unknown fields at every level.
	{"unknown root field", root(`"colour":"blue"`), "", `unknown field "colour"; remove it (allowed: after, archive, concurrency, description, dispatch, execution, min_worker_version, owner, payload_schema, priority, redact, retention, schema_version, task_name, task_type, triggers)`},
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

// requireProblem fails unless err is a *ValidationError of what with a
// problem at field whose message contains msg, and its text names the field.
func requireProblem(t *testing.T, err error, what, field, msg string) {
	t.Helper()
	var verr *ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("error %v (%T) is not a *ValidationError", err, err)
	}
	if verr.What != what {
		t.Errorf("What = %q, want %q", verr.What, what)
	}
	if !strings.HasPrefix(err.Error(), "invalid "+what+": ") {
		t.Errorf("Error() = %q, want the prefix %q", err.Error(), "invalid "+what+": ")
	}
	for _, p := range verr.Problems {
		if p.Field == field && strings.Contains(p.Message, msg) {
			if !strings.Contains(err.Error(), p.String()) {
				t.Errorf("Error() = %q does not hold %q", err.Error(), p.String())
			}
			return
		}
	}
	t.Errorf("no problem {%q, %q…} among %q", field, msg, verr.Problems)
}

func TestParseTaskReportsEveryProblem(t *testing.T) {
	t.Parallel()
	_, err := ParseTask([]byte(`{"task_name":"demo","execution":{},"priority":"high"}`))
	want := "invalid task definition: execution.handler: is required; priority: must be one of urgent, normal, low"
	if err == nil || err.Error() != want {
		t.Fatalf("ParseTask error = %v, want %s", err, want)
	}
	var verr *ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("error %T is not a *ValidationError", err)
	}
	wantProblems := []Problem{
		{"execution.handler", "is required"},
		{"priority", "must be one of urgent, normal, low"},
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
	data, err := os.ReadFile("../examples/hello.yaml")
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
	if r.MaxAttempts != 3 || r.Backoff != BackoffFixed || r.Initial() != time.Second {
		t.Errorf("retry = %d attempts, %s backoff, %v initial; want 3, fixed, 1s", r.MaxAttempts, r.Backoff, r.Initial())
	}
	if err := ValidatePayload(d.PayloadSchema, json.RawMessage(`{"name":"world"}`)); err != nil {
		t.Errorf("the example's payload schema rejects its documented payload: %v", err)
	}
}

func TestWithDefaults(t *testing.T) {
	t.Parallel()
	got := minimal().WithDefaults()
	want := &Task{
		TaskName: "demo",
		Execution: Execution{Handler: "builtin.echo", Timeout: "1h", Retry: Retry{
			MaxAttempts: 1, Backoff: BackoffFixed, InitialIntervalSec: ptr(30.0), MaxIntervalSec: ptr(1800.0),
		}},
		Concurrency:   Concurrency{BlockingStrategy: BlockSerial},
		Dispatch:      DispatchPolicy{Strategy: DispatchPull},
		Priority:      PriorityNormal,
		SchemaVersion: 1,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("WithDefaults =\n%+v\nwant\n%+v", got, want)
	}
	if d, err := time.ParseDuration(string(got.Execution.Timeout)); err != nil || d != DefaultTimeout {
		t.Errorf("default timeout %q is not DefaultTimeout", got.Execution.Timeout)
	}

	// Set values stay, and the copy shares nothing with the original.
	orig := &Task{
		TaskName:    "demo",
		Triggers:    []Trigger{{Type: TriggerTypeEvent}},
		Execution:   Execution{Handler: "h", Timeout: "5m", Retry: Retry{MaxAttempts: 3, Backoff: BackoffExponential, InitialIntervalSec: ptr(0.0), MaxIntervalSec: ptr(9.0)}},
		Concurrency: Concurrency{MaxRunningInstances: 2, BlockingStrategy: BlockDiscard},
		Dispatch:    DispatchPolicy{Strategy: DispatchPull, Tags: []string{"gpu"}},
		Priority:    PriorityLow, SchemaVersion: 4, PayloadSchema: json.RawMessage(`{}`),
	}
	c := orig.WithDefaults()
	if !reflect.DeepEqual(c, orig) {
		t.Errorf("WithDefaults changed set values:\n%+v\nfrom\n%+v", c, orig)
	}
	*c.Execution.Retry.InitialIntervalSec = 7
	*c.Execution.Retry.MaxIntervalSec = 7
	c.Triggers[0].Type = TriggerTypeManual
	c.Dispatch.Tags[0] = "cpu"
	c.PayloadSchema[0] = '['
	if *orig.Execution.Retry.InitialIntervalSec != 0 || *orig.Execution.Retry.MaxIntervalSec != 9 ||
		orig.Triggers[0].Type != TriggerTypeEvent || orig.Dispatch.Tags[0] != "gpu" || string(orig.PayloadSchema) != "{}" {
		t.Errorf("changing the copy changed the original: %+v", orig)
	}
}

func TestDurations(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		timeout string
		want    time.Duration
	}{
		{"", DefaultTimeout},
		{"90s", 90 * time.Second},
		{"1h30m", 90 * time.Minute},
		{"garbage", DefaultTimeout},
		{"-5s", DefaultTimeout},
		{"0s", DefaultTimeout},
	} {
		task := &Task{Execution: Execution{Timeout: Duration(tc.timeout)}}
		if got := task.TimeoutDuration(); got != tc.want {
			t.Errorf("TimeoutDuration(%q) = %v, want %v", tc.timeout, got, tc.want)
		}
	}
	for _, tc := range []struct {
		r            Retry
		initial, max time.Duration
	}{
		{Retry{}, DefaultInitialInterval, DefaultMaxInterval},
		{Retry{InitialIntervalSec: ptr(0.0), MaxIntervalSec: ptr(60.0)}, 0, time.Minute},
		{Retry{InitialIntervalSec: ptr(1.5), MaxIntervalSec: ptr(0.25)}, 1500 * time.Millisecond, 250 * time.Millisecond},
		{Retry{InitialIntervalSec: ptr(-1.0), MaxIntervalSec: ptr(0.0)}, 0, DefaultMaxInterval},
		{Retry{InitialIntervalSec: ptr(1e300), MaxIntervalSec: ptr(1e300)}, time.Duration(1<<63 - 1), time.Duration(1<<63 - 1)},
	} {
		if got := tc.r.Initial(); got != tc.initial {
			t.Errorf("%+v.Initial() = %v, want %v", tc.r, got, tc.initial)
		}
		if got := tc.r.Max(); got != tc.max {
			t.Errorf("%+v.Max() = %v, want %v", tc.r, got, tc.max)
		}
	}
}

var triggerAccepts = []struct {
	name string
	in   string
	want TriggerEvent
}{
	{"empty body", "", TriggerEvent{}},
	{"blank body", " \r\n", TriggerEvent{}},
	{"empty object", "{}", TriggerEvent{}},
	{"full", `{
		"event_id": "order-42",
		"task": "ship-order",
		"source": "manual",
		"operator": "alice@example.com",
		"payload": {"order": 42},
		"payload_version": 2,
		"priority": "urgent",
		"fired_at": "2024-05-01T12:00:00.5Z",
		"retry": {"instance_id": 7, "attempt": 2}
	}`, TriggerEvent{
		EventID: "order-42", Task: "ship-order", Source: SourceManual, Operator: "alice@example.com",
		Payload: json.RawMessage(`{"order": 42}`), PayloadVersion: 2, Priority: PriorityUrgent,
		FiredAt: time.Date(2024, 5, 1, 12, 0, 0, 5e8, time.UTC), Retry: &RetryOf{InstanceID: 7, Attempt: 2},
	}},
	{"payload string", `{"payload":"hello"}`, TriggerEvent{Payload: json.RawMessage(`"hello"`)}},
	{"payload null", `{"payload":null}`, TriggerEvent{Payload: json.RawMessage(`null`)}},
	{"source event", `{"source":"event"}`, TriggerEvent{Source: SourceEvent}},
	{"source retry", `{"source":"retry"}`, TriggerEvent{Source: SourceRetry}},
	{"priority low", `{"priority":"low"}`, TriggerEvent{Priority: PriorityLow}},
	{"event_id 200 chars", `{"event_id":"` + strings.Repeat("e", 200) + `"}`, TriggerEvent{EventID: strings.Repeat("e", 200)}},
	{"event_id with punctuation", `{"event_id":"cron:nightly@2024-05-01T00:00:00Z"}`, TriggerEvent{EventID: "cron:nightly@2024-05-01T00:00:00Z"}},
	{"fired_at with offset", `{"fired_at":"2024-05-01T14:00:00+02:00"}`, TriggerEvent{FiredAt: time.Date(2024, 5, 1, 14, 0, 0, 0, time.FixedZone("", 2*3600))}},
	{"delayed by key", `{"idempotency_key":"order-42","delay":"1h30m","payload":{"order":42}}`,
		TriggerEvent{IdempotencyKey: "order-42", Delay: "1h30m", Payload: json.RawMessage(`{"order":42}`)}},
	{"delay fractions", `{"delay":"1.5s"}`, TriggerEvent{Delay: "1.5s"}},
	{"delay zero", `{"delay":"0"}`, TriggerEvent{Delay: "0"}},
	{"run_at", `{"run_at":"2024-05-01T12:00:00.25Z","reason":"rerun of instance 7"}`,
		TriggerEvent{RunAt: time.Date(2024, 5, 1, 12, 0, 0, 25e7, time.UTC), Reason: "rerun of instance 7"}},
}

func TestParseTriggerEventAccepts(t *testing.T) {
	t.Parallel()
	for _, tc := range triggerAccepts {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseTriggerEvent([]byte(tc.in))
			if err != nil {
				t.Fatalf("ParseTriggerEvent: %v", err)
			}
			if !got.FiredAt.Equal(tc.want.FiredAt) {
				t.Errorf("FiredAt = %v, want %v", got.FiredAt, tc.want.FiredAt)
			}
			got.FiredAt, tc.want.FiredAt = time.Time{}, time.Time{}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseTriggerEvent =\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

var triggerRejects = []struct {
	name, in, field, msg string
}{
	{"not json", `event_id: x`, "", "is not valid JSON: invalid character 'e' looking for beginning of value, at line 1, column 1"},
	{"truncated", `{"event_id":"x"`, "", "is not valid JSON: it ends too early"},
	{"two values", `{} {}`, "", "unexpected data after the top-level value"},
	{"array", `[]`, "", "must be an object, not a list"},
	{"null", `null`, "", "must be an object, not null"},
	{"unknown field", `{"event_id":"x","eventId":"y"}`, "", `unknown field "eventId"; remove it (allowed: cancel, delay, event_id, fired_at, idempotency_key, operator, parents, payload, payload_version, priority, reason, retry, run_at, run_id, source, task)`},
	{"event_id empty", `{"event_id":""}`, "event_id", "must not be empty"},
	{"event_id space", `{"event_id":"a b"}`, "event_id", "must not contain spaces, tabs or line breaks"},
	{"event_id newline", `{"event_id":"a\nb"}`, "event_id", "must not contain spaces"},
	{"event_id 201 chars", `{"event_id":"` + strings.Repeat("e", 201) + `"}`, "event_id", "must be at most 200 characters long (it has 201)"},
	{"event_id number", `{"event_id":42}`, "event_id", "must be a string, not a number"},
	{"task invalid", `{"task":"Ship Order"}`, "task", "must be a task name"},
	{"source unknown", `{"source":"timer"}`, "source", "must be one of event, manual, retry, cron"},
	{"operator too long", `{"operator":"` + strings.Repeat("o", 257) + `"}`, "operator", "must be at most 256 characters long"},
	{"priority unknown", `{"priority":"high"}`, "priority", "must be one of urgent, normal, low"},
	{"payload_version zero", `{"payload_version":0}`, "payload_version", "must be at least 1"},
	{"payload_version string", `{"payload_version":"2"}`, "payload_version", "must be a whole number, not a string"},
	{"fired_at not a time", `{"fired_at":"yesterday"}`, "fired_at", "must be an RFC 3339 time such as 2024-05-01T12:00:00Z"},
	{"fired_at no zone", `{"fired_at":"2024-05-01T12:00:00"}`, "fired_at", "must be an RFC 3339 time"},
	{"fired_at leap second", `{"fired_at":"2024-06-30T23:59:60Z"}`, "fired_at", "must be an RFC 3339 time"},
	{"fired_at unix", `{"fired_at":1714564800}`, "fired_at", "must be a string, not a number"},
	{"retry not an object", `{"retry":2}`, "retry", "must be an object, not a number"},
	{"retry instance missing", `{"retry":{"attempt":2}}`, "retry.instance_id", "is required"},
	{"retry attempt missing", `{"retry":{"instance_id":1}}`, "retry.attempt", "is required"},
	{"retry instance zero", `{"retry":{"instance_id":0,"attempt":2}}`, "retry.instance_id", "must be at least 1"},
	{"retry attempt zero", `{"retry":{"instance_id":1,"attempt":0}}`, "retry.attempt", "must be at least 1"},
	{"retry unknown field", `{"retry":{"instance_id":1,"attempt":2,"reason":"x"}}`, "retry", `unknown field "reason"; remove it (allowed: attempt, instance_id)`},
	{"run_at and delay", `{"run_at":"2024-05-01T12:00:00Z","delay":"90s"}`, "delay", "must be left out when run_at is set: give run_at (a time) or delay (a duration), not both"},
	{"run_at not a time", `{"run_at":"in an hour"}`, "run_at", "must be an RFC 3339 time such as 2024-05-01T12:00:00Z"},
	{"run_at leap second", `{"run_at":"2024-06-30T23:59:60Z"}`, "run_at", "must be an RFC 3339 time"},
	{"delay no unit", `{"delay":"90"}`, "delay", "must be a duration such as 90s, 15m, 1h30m or 250ms"},
	{"delay negative", `{"delay":"-5s"}`, "delay", "must be a duration such as 90s"},
	{"delay words", `{"delay":"2 hours"}`, "delay", "must be a duration such as 90s"},
	{"delay too long", `{"delay":"9999999999h"}`, "delay", "must be a duration Go can hold"},
	{"delay number", `{"delay":90}`, "delay", "must be a string, not a number"},
	{"idempotency_key and event_id", `{"idempotency_key":"k","event_id":"e"}`, "event_id", "must be left out when idempotency_key is set: the firing's event id is then idem-<idempotency_key>"},
	{"idempotency_key empty", `{"idempotency_key":""}`, "idempotency_key", "must not be empty"},
	{"idempotency_key space", `{"idempotency_key":"order 42"}`, "idempotency_key", "must not contain spaces"},
	{"idempotency_key 196 chars", `{"idempotency_key":"` + strings.Repeat("k", 196) + `"}`, "idempotency_key", "must be at most 195 characters long (it has 196)"},
}

func TestParseTriggerEventRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range triggerRejects {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ev, err := ParseTriggerEvent([]byte(tc.in))
			if err == nil {
				t.Fatalf("ParseTriggerEvent accepted %s as %+v", tc.in, ev)
			}
			requireProblem(t, err, "trigger event", tc.field, tc.msg)
		})
	}
}

func TestValidatePayload(t *testing.T) {
	t.Parallel()
	const order = `{
		"type": "object",
		"required": ["order"],
		"properties": {
			"order": {
				"type": "object",
				"additionalProperties": false,
				"required": ["id"],
				"properties": {
					"id": {"type": "integer", "minimum": 1},
					"email": {"type": "string", "format": "email"},
					"lines": {"type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/line"}},
					"ship by": {"type": "string", "format": "date"}
				}
			}
		},
		"$defs": {"line": {"type": "object", "required": ["sku"], "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}$"}}}}
	}`
	for _, tc := range []struct {
		name            string
		schema, payload string
		field, msg      string // empty: the payload is valid
	}{
		{"no schema", ``, `{"anything": true}`, "", ""},
		{"null schema", `null`, `1`, "", ""},
		{"valid", order, `{"order":{"id":1,"email":"a@example.com","lines":[{"sku":"ABC"}],"ship by":"2024-05-01"}}`, "", ""},
		{"true schema", `true`, `[1,2]`, "", ""},
		{"false schema", `false`, `{}`, "payload", "is not allowed here"},
		{"missing payload", order, ``, "payload", "must be an object, not null"},
		{"missing field", order, `{}`, "payload.order", "is required"},
		{"nested missing field", order, `{"order":{}}`, "payload.order.id", "is required"},
		{"nested type", order, `{"order":{"id":"x"}}`, "payload.order.id", "must be a whole number, not a string"},
		{"nested minimum", order, `{"order":{"id":0}}`, "payload.order.id", "must be at least 1"},
		{"format", order, `{"order":{"id":1,"email":"nope"}}`, "payload.order.email", "must be a valid email"},
		{"array item via ref", order, `{"order":{"id":1,"lines":[{"sku":"ABC"},{"sku":"abc"}]}}`, "payload.order.lines[1].sku", "must match ^[A-Z]{3}$"},
		{"array length", order, `{"order":{"id":1,"lines":[{"sku":"ABC"},{"sku":"ABD"},{"sku":"ABE"}]}}`, "payload.order.lines", "must have at most 2 items (it has 3)"},
		{"odd key", order, `{"order":{"id":1,"ship by":"soon"}}`, `payload.order["ship by"]`, "must be a date such as 2024-05-01"},
		{"unknown field", order, `{"order":{"id":1,"colour":"red"}}`, "payload.order", `unknown field "colour"; remove it (allowed: email, id, lines, ship by)`},
		{"malformed payload", order, `{"order":`, "payload", "is not valid JSON: it ends too early"},
		{"one of", `{"oneOf":[{"type":"integer"},{"type":"number"}]}`, `1`, "payload", "matches more than one of the allowed forms"},
		{"any of", `{"anyOf":[{"type":"integer"},{"type":"boolean"}]}`, `"x"`, "payload", "must be a whole number, not a string"},
		{"property names", `{"propertyNames":{"maxLength":2}}`, `{"abc":1}`, "payload", `has a field name "abc" that is not allowed: it must be at most 2 characters long`},
		{"dependent required", `{"dependentRequired":{"a":["b"]}}`, `{"a":1}`, "payload.b", `is required when "a" is set`},
		{"const", `{"const":"x"}`, `"y"`, "payload", "must be x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := ValidatePayload(json.RawMessage(tc.schema), json.RawMessage(tc.payload))
			if tc.msg == "" {
				if err != nil {
					t.Fatalf("ValidatePayload: %v", err)
				}
				return
			}
			requireProblem(t, err, "payload", tc.field, tc.msg)
		})
	}
}

func TestValidatePayloadBadSchema(t *testing.T) {
	t.Parallel()
	err := ValidatePayload(json.RawMessage(`{"type":`), json.RawMessage(`1`))
	var verr *ValidationError
	if err == nil || errors.As(err, &verr) {
		t.Fatalf("ValidatePayload with a broken schema = %v, want a plain error", err)
	}
	if !strings.HasPrefix(err.Error(), "compile payload schema: ") {
		t.Errorf("error %q does not name the operation", err)
	}
}

func TestValidationErrorWithoutWhat(t *testing.T) {
	t.Parallel()
	err := &ValidationError{Problems: []Problem{{"", "is empty"}, {"a.b", "is required"}}}
	if got, want := err.Error(), "invalid input: is empty; a.b: is required"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// TestSchemasMatchGoTypes walks each schema beside the Go type it mirrors:
// every object is closed, has exactly the type's JSON fields, and requires
// exactly those the type always writes (no omitempty or omitzero).
func TestSchemasMatchGoTypes(t *testing.T) {
	t.Parallel()
	s, err := compiledSchemas()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		schema string
		v      any
	}{
		{"task.schema.json", Task{}},
		{"trigger.schema.json", TriggerEvent{}},
		{"json/dispatch.schema.json", Dispatch{}},
		{"json/report.schema.json", Report{}},
		{"json/worker.schema.json", Worker{}},
		{"json/lease.schema.json", Lease{}},
		{"json/control.schema.json", Control{}},
		{"json/transition.schema.json", Transition{}},
		{"json/instance.schema.json", Instance{}},
		{"json/task_entry.schema.json", TaskEntry{}},
	} {
		loc := schemaBaseURL + tc.schema + "#"
		matchType(t, s.translator, loc, reflect.TypeOf(tc.v), tc.schema)
	}
}

var (
	timeType     = reflect.TypeFor[time.Time]()
	rawType      = reflect.TypeFor[json.RawMessage]()
	durationType = reflect.TypeFor[Duration]()
)

func matchType(t *testing.T, tr translator, loc string, typ reflect.Type, path string) {
	t.Helper()
	node, ok := tr.lookup(loc).(map[string]any)
	if !ok {
		t.Errorf("%s: no schema at %s", path, loc)
		return
	}
	if ref, ok := node["$ref"].(string); ok {
		matchType(t, tr, resolveRef(t, loc, ref), typ, path)
		return
	}
	types := schemaTypes(node)
	switch {
	case typ == rawType:
		// Any JSON value fits; the schema may narrow it (payload_schema is an object).
	case typ == durationType:
		if !slices.Equal(types, []string{"string", "number"}) {
			t.Errorf("%s: a Duration wants a string or a number of seconds, the schema has %v", path, types)
		}
	case typ == timeType:
		if !slices.Equal(types, []string{"string"}) || node["format"] != "date-time" {
			t.Errorf("%s: a time.Time wants a date-time string, the schema has %v %v", path, types, node["format"])
		}
	case typ.Kind() == reflect.Pointer:
		matchType(t, tr, loc, typ.Elem(), path)
	case typ.Kind() == reflect.Slice:
		if !slices.Contains(types, "array") {
			t.Errorf("%s: a slice wants an array, the schema has %v", path, types)
		}
		matchType(t, tr, loc+"/items", typ.Elem(), path+"[]")
	case typ.Kind() == reflect.String:
		if _, isEnum := node["enum"]; !isEnum && !slices.Equal(types, []string{"string"}) {
			t.Errorf("%s: a string wants a string or an enum, the schema has %v", path, types)
		}
	case typ.Kind() == reflect.Int || typ.Kind() == reflect.Int64:
		if !slices.Equal(types, []string{"integer"}) {
			t.Errorf("%s: an integer wants an integer, the schema has %v", path, types)
		}
	case typ.Kind() == reflect.Float64:
		if !slices.Equal(types, []string{"number"}) {
			t.Errorf("%s: a float wants a number, the schema has %v", path, types)
		}
	case typ.Kind() == reflect.Bool:
		if !slices.Equal(types, []string{"boolean"}) {
			t.Errorf("%s: a bool wants a boolean, the schema has %v", path, types)
		}
	case typ.Kind() == reflect.Struct:
		matchStruct(t, tr, loc, node, typ, path)
	case typ.Kind() == reflect.Map && typ.Key().Kind() == reflect.String:
		if !slices.Equal(types, []string{"object"}) {
			t.Errorf("%s: a map wants an object, the schema has %v", path, types)
		}
		if _, ok := node["additionalProperties"].(map[string]any); !ok {
			t.Errorf("%s: a map wants additionalProperties to be the schema of its values", path)
			return
		}
		matchType(t, tr, loc+"/additionalProperties", typ.Elem(), path+"{}")
	default:
		t.Errorf("%s: no rule for %v", path, typ)
	}
}

func matchStruct(t *testing.T, tr translator, loc string, node map[string]any, typ reflect.Type, path string) {
	t.Helper()
	if !slices.Equal(schemaTypes(node), []string{"object"}) {
		t.Errorf("%s: a struct wants an object, the schema has %v", path, schemaTypes(node))
	}
	if node["additionalProperties"] != false {
		t.Errorf("%s: the object is not closed (additionalProperties: false)", path)
	}
	props, _ := node["properties"].(map[string]any)
	var names, required []string
	for f := range typ.Fields() {
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		names = append(names, name)
		if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
			required = append(required, name)
		}
		if _, ok := props[name]; !ok {
			t.Errorf("%s: the schema lacks %s", path, name)
			continue
		}
		matchType(t, tr, loc+"/properties/"+name, f.Type, path+"."+name)
	}
	for name, p := range props {
		// A property with x-alias-of is another name of a property the
		// type has, which ParseTask reads as that one.
		if alias, ok := p.(map[string]any)["x-alias-of"].(string); ok {
			if !slices.Contains(names, alias) {
				t.Errorf("%s: the schema's %s is an alias of %s, which %v lacks", path, name, alias, typ)
			}
			continue
		}
		if !slices.Contains(names, name) {
			t.Errorf("%s: the schema has %s, which %v lacks", path, name, typ)
		}
	}
	var schemaRequired []string
	if r, ok := node["required"].([]any); ok {
		for _, v := range r {
			schemaRequired = append(schemaRequired, v.(string))
		}
	}
	slices.Sort(required)
	slices.Sort(schemaRequired)
	if !slices.Equal(required, schemaRequired) {
		t.Errorf("%s: the schema requires %v, the Go type always writes %v", path, schemaRequired, required)
	}
}

func schemaTypes(node map[string]any) []string {
	switch v := node["type"].(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, s := range v {
			if s != "null" { // a nil slice encodes as null
				out = append(out, s.(string))
			}
		}
		return out
	}
	return nil
}

// resolveRef resolves a $ref found at loc, against the document's URL.
func resolveRef(t *testing.T, loc, ref string) string {
	t.Helper()
	base, _, _ := strings.Cut(loc, "#")
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("schema location %s: %v", loc, err)
	}
	r, err := u.Parse(ref)
	if err != nil {
		t.Fatalf("$ref %q at %s: %v", ref, loc, err)
	}
	r.Fragment, r.RawFragment = "", ""
	_, frag, _ := strings.Cut(ref, "#")
	return r.String() + "#" + frag
}

func TestSchemaAnnotations(t *testing.T) {
	t.Parallel()
	// An x-message sits beside a pattern or inside a not: nowhere else is it shown.
	s, err := compiledSchemas()
	if err != nil {
		t.Fatal(err)
	}
	for url, doc := range s.docs {
		var walk func(v any, parentKey string, path string)
		walk = func(v any, parentKey, path string) {
			switch n := v.(type) {
			case map[string]any:
				if msg, ok := n["x-message"].(string); ok {
					_, hasPattern := n["pattern"]
					if !hasPattern && parentKey != "not" {
						t.Errorf("%s%s: x-message %q is never shown", url, path, msg)
					}
					if !strings.HasPrefix(msg, "must ") {
						t.Errorf("%s%s: x-message %q does not say what the value must be", url, path, msg)
					}
				}
				for k, c := range n {
					walk(c, k, path+"/"+k)
				}
			case []any:
				for _, c := range n {
					walk(c, "", path+"/[]")
				}
			}
		}
		walk(doc, "", "#")
	}
}
