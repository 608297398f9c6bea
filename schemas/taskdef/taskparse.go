package taskdef

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/ax-scheduler/ax/schemas"
)

// MaxTimeout is the longest execution.timeout a task may declare (168h).
// The schema cannot compare durations; [ParseTask] checks it.
const MaxTimeout = 7 * 24 * time.Hour

// ParseTask reads a task definition in JSON (when its first non-space byte is
// '{') or YAML, checks it against task.schema.json and the rules the schema
// cannot express (timeout at most [MaxTimeout], max_interval_sec not below
// initial_interval_sec, a payload_schema that compiles, a cron schedule and
// time zone that [ParseCronSchedule] accepts, after entries that name each
// parent once and never the task itself, text that is UTF-8 without lone
// surrogate escapes in every string, payload_schema's included: see
// [schemas.TextProblems]), and returns it as
// written: defaults are not filled in (see [schemas.Task.WithDefaults]), empty lists
// are nil and payload_schema is compacted, so that the task's JSON encoding
// parses to an equal task. Any
// rejection is a *[schemas.ValidationError] listing every problem found. It is safe
// for concurrent use.
func ParseTask(data []byte) (*schemas.Task, error) {
	const what = "task definition"
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, newValidationError(what, []schemas.Problem{{Message: "is empty; write a task definition in JSON or YAML with at least task_name and execution.handler"}})
	}
	jsonData := data
	if trimmed[0] != '{' {
		var err error
		if jsonData, err = yaml.YAMLToJSONStrict(data); err != nil {
			return nil, newValidationError(what, []schemas.Problem{{Message: yamlMessage(err)}})
		}
		jsonData = restoreOnKeys(jsonData)
	}
	// Deep nesting makes decoding slow before anything else would refuse
	// it: only payload_schema may nest, MaxPayloadSchemaDepth deep.
	if d, key := maxNesting(jsonData); d > 1+MaxPayloadSchemaDepth {
		return nil, newValidationError(what, []schemas.Problem{{Field: key, Message: fmt.Sprintf("nests objects and arrays more than %d deep; flatten it, or move repeated parts of a payload_schema under $defs and $ref them", MaxPayloadSchemaDepth)}})
	}
	doc, problem := decodeJSON(jsonData)
	if problem != nil {
		if trimmed[0] == '{' && problem.Field == "" {
			problem.Message += " (a definition that starts with '{' is read as JSON; for YAML, start with a key)"
		}
		return nil, newValidationError(what, []schemas.Problem{*problem})
	}
	if m, ok := doc.(map[string]any); ok {
		if problem := payloadSchemaBounds(m["payload_schema"]); problem != nil {
			return nil, newValidationError(what, []schemas.Problem{*problem})
		}
	}
	// Go's decoder turned bytes that are not UTF-8 and lone surrogate
	// escapes into U+FFFD already: the bytes tell, as a firing's do.
	if problems := schemas.TextProblems(jsonData); len(problems) > 0 {
		return nil, newValidationError(what, problems)
	}
	if problems := nulProblems(doc, ""); len(problems) > 0 {
		return nil, newValidationError(what, problems)
	}
	s, err := compiledSchemas()
	if err != nil {
		return nil, err
	}
	if err := s.task.Validate(doc); err != nil {
		return nil, newValidationError(what, s.problems(err, doc, ""))
	}
	jsonData, viaCron := cronAsSchedule(jsonData)

	var t schemas.Task
	dec := json.NewDecoder(bytes.NewReader(jsonData))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return nil, newValidationError(what, []schemas.Problem{decodeProblem(err)})
	}
	if problems := semanticProblems(&t); len(problems) > 0 {
		// A schedule the definition named cron is called so.
		for i, p := range problems {
			if viaCron[p.Field] {
				problems[i].Field = strings.TrimSuffix(p.Field, "schedule") + "cron"
			}
		}
		return nil, newValidationError(what, problems)
	}
	normalize(&t)
	return &t, nil
}

// semanticProblems checks what task.schema.json cannot express.
func semanticProblems(t *schemas.Task) []schemas.Problem {
	var problems []schemas.Problem
	if s := t.Execution.Timeout; s != "" {
		d, err := time.ParseDuration(string(s))
		switch {
		case err != nil:
			problems = append(problems, schemas.Problem{Field: "execution.timeout", Message: `must be a Go duration such as "90s", "10m" or "1h30m", or a number of seconds such as 1800`})
		case d <= 0:
			problems = append(problems, schemas.Problem{Field: "execution.timeout", Message: `must be longer than zero, e.g. "90s"; leave it out for the default of 1h`})
		case d > MaxTimeout:
			problems = append(problems, schemas.Problem{Field: "execution.timeout", Message: "must be at most 168h (7 days); split longer work into several tasks"})
		}
	}
	if t.Retention != "" {
		if _, err := schemas.ParseRetention(t.Retention); err != nil {
			problems = append(problems, schemas.Problem{Field: "retention", Message: strings.TrimPrefix(err.Error(), "retention "+strconv.Quote(t.Retention)+": ") +
				`, e.g. "90d"; leave it out to keep the installation's retention`})
		}
	}
	r := t.Execution.Retry
	initial, maxi := schemas.DefaultInitialInterval.Seconds(), schemas.DefaultMaxInterval.Seconds()
	if r.InitialIntervalSec != nil {
		initial = *r.InitialIntervalSec
	}
	if r.MaxIntervalSec != nil {
		maxi = *r.MaxIntervalSec
	}
	switch {
	case maxi <= 0:
		// The schema saw a positive number too small for a float64 (1e-400).
		problems = append(problems, schemas.Problem{Field: "execution.retry.max_interval_sec", Message: "must be greater than 0"})
	case maxi < initial:
		if r.MaxIntervalSec != nil {
			problems = append(problems, schemas.Problem{Field: "execution.retry.max_interval_sec",
				Message: fmt.Sprintf("must be at least initial_interval_sec (%s); raise it or lower initial_interval_sec", formatFloat(initial))})
		} else {
			problems = append(problems, schemas.Problem{Field: "execution.retry.initial_interval_sec",
				Message: fmt.Sprintf("must not exceed max_interval_sec, which defaults to %s; lower it or set max_interval_sec", formatFloat(maxi))})
		}
	}
	for i, tr := range t.Triggers {
		problems = append(problems, triggerProblems(tr, fmt.Sprintf("triggers[%d]", i))...)
	}
	problems = append(problems, afterProblems(t)...)
	problems = append(problems, deadlineProblems(t)...)
	problems = append(problems, redactProblems(t.Redact)...)
	if k := t.Concurrency.MutexKey; k != "" {
		if _, err := schemas.ParseMutexKey(k); err != nil {
			problems = append(problems, schemas.Problem{Field: "concurrency.mutex_key", Message: mutexKeyMessage(err)})
		}
	}
	problems = append(problems, dispatchProblems(t.Dispatch)...)
	problems = append(problems, limitsProblems(t)...)
	problems = append(problems, fairnessProblems(t)...)
	if t.Execution.Shards > 0 && t.Dispatch.Strategy == schemas.DispatchBroadcast {
		problems = append(problems, schemas.Problem{Field: "execution.shards", Message: `cannot be combined with dispatch strategy "broadcast", which makes one child per live executor; remove one of them`})
	}
	if len(t.PayloadSchema) > 0 {
		sch, err := compilePayloadSchema(t.PayloadSchema)
		switch {
		case err != nil:
			problems = append(problems, payloadSchemaProblems(err, t.PayloadSchema)...)
		case hasRefCycle(sch.Validate(nil)):
			// A cycle on the path every value takes rejects every payload.
			problems = append(problems, schemas.Problem{Field: "payload_schema", Message: "has a $ref cycle that no payload can pass; make every $ref lead to a schema"})
		}
	}
	return problems
}

// problems checks what the schema cannot say of a dispatch policy: each
// strategy's own field is present, and only with its strategy.
func dispatchProblems(d schemas.DispatchPolicy) []schemas.Problem {
	var problems []schemas.Problem
	switch {
	case d.Strategy != schemas.DispatchHash && d.HashKey != "":
		problems = append(problems, schemas.Problem{Field: "dispatch.hash_key", Message: `is only allowed with strategy "hash"; set strategy: hash or remove hash_key`})
	case d.HashKey != "":
		if _, err := schemas.ParseHashKey(d.HashKey); err != nil {
			problems = append(problems, schemas.Problem{Field: "dispatch.hash_key", Message: `must be a Go text/template over the payload, such as "{{.customer_id}}": ` +
				strings.TrimPrefix(err.Error(), "template: ")})
		}
	}
	if len(d.Tags) > 0 && len(d.TagsAll) > 0 {
		problems = append(problems, schemas.Problem{Field: "dispatch.tags_all", Message: "cannot be combined with tags: tags lets a worker of any listed pool run the task, tags_all names the one pool of all of them joined with '+'; keep one"})
	}
	switch {
	case d.Strategy == schemas.DispatchWorker && d.Worker == "":
		problems = append(problems, schemas.Problem{Field: "dispatch.worker", Message: `is required with strategy "worker": name the worker id to run on`})
	case d.Strategy != schemas.DispatchWorker && d.Worker != "":
		problems = append(problems, schemas.Problem{Field: "dispatch.worker", Message: `is only allowed with strategy "worker"; set strategy: worker or remove worker`})
	}
	return problems
}

// restoreOnKeys gives the after entries of a task definition converted from
// YAML their key "on" back. The YAML reader follows YAML 1.1, where a bare
// on is the boolean true, so `on: failure` arrives as {"true": "failure"}.
// Anything it does not recognise it leaves for the schema to judge.
func restoreOnKeys(data []byte) []byte {
	if !bytes.Contains(data, []byte(`"true":`)) {
		return data
	}
	var doc map[string]json.RawMessage
	var after []map[string]json.RawMessage
	if json.Unmarshal(data, &doc) != nil || json.Unmarshal(doc["after"], &after) != nil {
		return data
	}
	changed := false
	for _, entry := range after {
		if v, ok := entry["true"]; ok {
			if _, taken := entry["on"]; !taken {
				entry["on"] = v
				delete(entry, "true")
				changed = true
			}
		}
	}
	if !changed {
		return data
	}
	var err error
	if doc["after"], err = json.Marshal(after); err != nil {
		return data
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return data
	}
	return out
}

// cronAsSchedule renames the key "cron" of each trigger of a task
// definition that the schema accepted to "schedule": the design's task
// model names a cron trigger's schedule "cron", the Go type [schemas.Trigger] holds
// it as Schedule. The schema has refused a trigger with both. viaCron holds
// the field "triggers[i].schedule" of each renamed trigger, so that
// problems found later name the field as written. Anything it does not
// recognise it leaves as it is.
func cronAsSchedule(data []byte) (out []byte, viaCron map[string]bool) {
	if !bytes.Contains(data, []byte(`"cron"`)) {
		return data, nil
	}
	var doc map[string]json.RawMessage
	var triggers []map[string]json.RawMessage
	if json.Unmarshal(data, &doc) != nil || json.Unmarshal(doc["triggers"], &triggers) != nil {
		return data, nil
	}
	viaCron = map[string]bool{}
	for i, tr := range triggers {
		if v, ok := tr["cron"]; ok {
			if _, taken := tr["schedule"]; !taken {
				tr["schedule"] = v
				delete(tr, "cron")
				viaCron[fmt.Sprintf("triggers[%d].schedule", i)] = true
			}
		}
	}
	if len(viaCron) == 0 {
		return data, nil
	}
	var err error
	if doc["triggers"], err = json.Marshal(triggers); err != nil {
		return data, nil
	}
	if out, err = json.Marshal(doc); err != nil {
		return data, nil
	}
	return out, viaCron
}

// afterProblems checks what the schema cannot say of after: no parent twice,
// not the task itself. Cycles through other tasks need the stored tasks;
// the store refuses them when the task is applied.
func afterProblems(t *schemas.Task) []schemas.Problem {
	var problems []schemas.Problem
	seen := make(map[string]int, len(t.After))
	for i, a := range t.After {
		field := fmt.Sprintf("after[%d].task", i)
		if a.Task == t.TaskName {
			problems = append(problems, schemas.Problem{Field: field, Message: fmt.Sprintf("must not name the task itself: %q cannot run after its own end; remove the entry", a.Task)})
		}
		problems = append(problems, windowProblems(t, i, a)...)
		if j, ok := seen[a.Task]; ok {
			problems = append(problems, schemas.Problem{Field: field, Message: fmt.Sprintf("names %q again (after[%d] names it already); name each parent once, with one on condition", a.Task, j)})
			continue
		}
		seen[a.Task] = i
	}
	return problems
}

// normalize makes a parsed task equal to the task its JSON encoding parses
// to: empty lists become nil (they are omitted when encoded) and the payload
// schema is compacted the way encoding/json writes it.
func normalize(t *schemas.Task) {
	if len(t.Triggers) == 0 {
		t.Triggers = nil
	}
	if len(t.Dispatch.Tags) == 0 {
		t.Dispatch.Tags = nil
	}
	if len(t.Dispatch.TagsAll) == 0 {
		t.Dispatch.TagsAll = nil
	}
	if len(t.After) == 0 {
		t.After = nil
	}
	if len(t.PayloadSchema) > 0 {
		if b, err := json.Marshal(t.PayloadSchema); err == nil {
			t.PayloadSchema = b
		}
	}
}

// mutexKeyMessage turns a template parse error into a Problem's message.
func mutexKeyMessage(err error) string {
	msg := strings.TrimPrefix(err.Error(), "template: ")
	return `must be a Go text/template over the payload, such as "order-{{.shop_id}}": ` + msg
}
