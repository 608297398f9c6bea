package schemas

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"sigs.k8s.io/yaml"
)

// JSONSchemas holds AX's JSON Schemas (draft 2020-12): task.schema.json (the
// task definition), trigger.schema.json (the trigger event) and, under
// "json/", one schema for each of the other wire messages (and the instance
// the API shows). Keywords named "x-message" are AX annotations: the message,
// in plain words, that a [Problem] carries when the schema's "pattern" (or
// the schema a "not" holds) rejects a value.
//
//go:embed task.schema.json trigger.schema.json json/*.schema.json
var JSONSchemas embed.FS

// The $id of the embedded schemas; a schema under json/ has the id
// schemaBaseURL + "json/<name>.schema.json".
const (
	schemaBaseURL    = "https://github.com/ax-scheduler/ax/schemas/"
	taskSchemaURL    = schemaBaseURL + "task.schema.json"
	triggerSchemaURL = schemaBaseURL + "trigger.schema.json"
	// payloadSchemaURL is where a task's payload_schema is compiled. The
	// .invalid domain never resolves, and no loader is installed anyway.
	payloadSchemaURL = "https://ax.invalid/payload.schema.json"
)

// Bounds of a task's payload_schema. Compiling a schema and checking the
// metaschema against it take time and memory that grow faster than its
// nesting (5,000 nested "items" kept a core busy for minutes), so a schema
// deeper or larger than these is refused before it is compiled.
const (
	// MaxPayloadSchemaDepth is the deepest nesting of objects and arrays
	// inside payload_schema.
	MaxPayloadSchemaDepth = 64
	// MaxPayloadSchemaBytes is the largest payload_schema, compacted.
	MaxPayloadSchemaBytes = 64 << 10
)

// MaxTimeout is the longest execution.timeout a task may declare (168h).
// The schema cannot compare durations; [ParseTask] checks it.
const MaxTimeout = 7 * 24 * time.Hour

// Problem is one thing wrong with a document.
type Problem struct {
	// Field is the dotted path of the offending value from the document's
	// root ("execution.retry.max_attempts", "triggers[0].type"); empty for
	// the root itself.
	Field string `json:"field"`
	// Message says what is wrong and how to fix it, in plain words.
	Message string `json:"message"`
}

// String returns "field: message", or the message alone for the root.
func (p Problem) String() string {
	if p.Field == "" {
		return p.Message
	}
	return p.Field + ": " + p.Message
}

// ValidationError is the error of [ParseTask], [ParseTriggerEvent] and
// [ValidatePayload] when the input is rejected: every problem found, sorted
// by field. A caller that shows errors to users (the API, the CLI) can list
// Problems one by one.
type ValidationError struct {
	// What names the rejected document ("task definition", "trigger event",
	// "payload"); empty reads as "input".
	What string
	// Problems lists what is wrong, at least one.
	Problems []Problem
}

// Error joins the problems: "invalid task definition: execution.handler: is
// required; priority: must be one of urgent, normal, low".
func (e *ValidationError) Error() string {
	what := e.What
	if what == "" {
		what = "input"
	}
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.String()
	}
	return "invalid " + what + ": " + strings.Join(parts, "; ")
}

// newValidationError sorts and de-duplicates problems into a ValidationError.
func newValidationError(what string, problems []Problem) *ValidationError {
	slices.SortFunc(problems, func(a, b Problem) int {
		if c := strings.Compare(a.Field, b.Field); c != 0 {
			return c
		}
		return strings.Compare(a.Message, b.Message)
	})
	return &ValidationError{What: what, Problems: slices.Compact(problems)}
}

// ParseTask reads a task definition in JSON (when its first non-space byte is
// '{') or YAML, checks it against task.schema.json and the rules the schema
// cannot express (timeout at most [MaxTimeout], max_interval_sec not below
// initial_interval_sec, a payload_schema that compiles, a cron schedule and
// time zone that [ParseCronSchedule] accepts, after entries that name each
// parent once and never the task itself), and returns it as
// written: defaults are not filled in (see [Task.WithDefaults]), empty lists
// are nil and payload_schema is compacted, so that the task's JSON encoding
// parses to an equal task. Any
// rejection is a *[ValidationError] listing every problem found. It is safe
// for concurrent use.
func ParseTask(data []byte) (*Task, error) {
	const what = "task definition"
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, newValidationError(what, []Problem{{Message: "is empty; write a task definition in JSON or YAML with at least task_name and execution.handler"}})
	}
	jsonData := data
	if trimmed[0] != '{' {
		var err error
		if jsonData, err = yaml.YAMLToJSONStrict(data); err != nil {
			return nil, newValidationError(what, []Problem{{Message: yamlMessage(err)}})
		}
		jsonData = restoreOnKeys(jsonData)
	}
	// Deep nesting makes decoding slow before anything else would refuse
	// it: only payload_schema may nest, MaxPayloadSchemaDepth deep.
	if d, key := maxNesting(jsonData); d > 1+MaxPayloadSchemaDepth {
		return nil, newValidationError(what, []Problem{{key, fmt.Sprintf("nests objects and arrays more than %d deep; flatten it, or move repeated parts of a payload_schema under $defs and $ref them", MaxPayloadSchemaDepth)}})
	}
	doc, problem := decodeJSON(jsonData)
	if problem != nil {
		if trimmed[0] == '{' && problem.Field == "" {
			problem.Message += " (a definition that starts with '{' is read as JSON; for YAML, start with a key)"
		}
		return nil, newValidationError(what, []Problem{*problem})
	}
	if m, ok := doc.(map[string]any); ok {
		if problem := payloadSchemaBounds(m["payload_schema"]); problem != nil {
			return nil, newValidationError(what, []Problem{*problem})
		}
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

	var t Task
	dec := json.NewDecoder(bytes.NewReader(jsonData))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return nil, newValidationError(what, []Problem{decodeProblem(err)})
	}
	if problems := t.semanticProblems(); len(problems) > 0 {
		// A schedule the definition named cron is called so.
		for i, p := range problems {
			if viaCron[p.Field] {
				problems[i].Field = strings.TrimSuffix(p.Field, "schedule") + "cron"
			}
		}
		return nil, newValidationError(what, problems)
	}
	t.normalize()
	return &t, nil
}

// semanticProblems checks what task.schema.json cannot express.
func (t *Task) semanticProblems() []Problem {
	var problems []Problem
	if s := t.Execution.Timeout; s != "" {
		d, err := time.ParseDuration(string(s))
		switch {
		case err != nil:
			problems = append(problems, Problem{"execution.timeout", `must be a Go duration such as "90s", "10m" or "1h30m", or a number of seconds such as 1800`})
		case d <= 0:
			problems = append(problems, Problem{"execution.timeout", `must be longer than zero, e.g. "90s"; leave it out for the default of 1h`})
		case d > MaxTimeout:
			problems = append(problems, Problem{"execution.timeout", "must be at most 168h (7 days); split longer work into several tasks"})
		}
	}
	if t.Retention != "" {
		if _, err := ParseRetention(t.Retention); err != nil {
			problems = append(problems, Problem{"retention", strings.TrimPrefix(err.Error(), "retention "+strconv.Quote(t.Retention)+": ") +
				`, e.g. "90d"; leave it out to keep the installation's retention`})
		}
	}
	r := t.Execution.Retry
	initial, maxi := DefaultInitialInterval.Seconds(), DefaultMaxInterval.Seconds()
	if r.InitialIntervalSec != nil {
		initial = *r.InitialIntervalSec
	}
	if r.MaxIntervalSec != nil {
		maxi = *r.MaxIntervalSec
	}
	switch {
	case maxi <= 0:
		// The schema saw a positive number too small for a float64 (1e-400).
		problems = append(problems, Problem{"execution.retry.max_interval_sec", "must be greater than 0"})
	case maxi < initial:
		if r.MaxIntervalSec != nil {
			problems = append(problems, Problem{"execution.retry.max_interval_sec",
				fmt.Sprintf("must be at least initial_interval_sec (%s); raise it or lower initial_interval_sec", formatFloat(initial))})
		} else {
			problems = append(problems, Problem{"execution.retry.initial_interval_sec",
				fmt.Sprintf("must not exceed max_interval_sec, which defaults to %s; lower it or set max_interval_sec", formatFloat(maxi))})
		}
	}
	for i, tr := range t.Triggers {
		problems = append(problems, tr.problems(fmt.Sprintf("triggers[%d]", i))...)
	}
	problems = append(problems, t.afterProblems()...)
	problems = append(problems, redactProblems(t.Redact)...)
	if k := t.Concurrency.MutexKey; k != "" {
		if _, err := ParseMutexKey(k); err != nil {
			problems = append(problems, Problem{"concurrency.mutex_key", mutexKeyMessage(err)})
		}
	}
	problems = append(problems, t.Dispatch.problems()...)
	if t.Execution.Shards > 0 && t.Dispatch.Strategy == DispatchBroadcast {
		problems = append(problems, Problem{"execution.shards", `cannot be combined with dispatch strategy "broadcast", which makes one child per live executor; remove one of them`})
	}
	if len(t.PayloadSchema) > 0 {
		sch, err := compilePayloadSchema(t.PayloadSchema)
		switch {
		case err != nil:
			problems = append(problems, payloadSchemaProblems(err, t.PayloadSchema)...)
		case hasRefCycle(sch.Validate(nil)):
			// A cycle on the path every value takes rejects every payload.
			problems = append(problems, Problem{"payload_schema", "has a $ref cycle that no payload can pass; make every $ref lead to a schema"})
		}
	}
	return problems
}

// problems checks what the schema cannot say of a dispatch policy: each
// strategy's own field is present, and only with its strategy.
func (d DispatchPolicy) problems() []Problem {
	var problems []Problem
	switch {
	case d.Strategy == DispatchHash && d.HashKey == "":
		problems = append(problems, Problem{"dispatch.hash_key", `is required with strategy "hash": name the payload field to pin on, e.g. "{{.customer_id}}"`})
	case d.Strategy != DispatchHash && d.HashKey != "":
		problems = append(problems, Problem{"dispatch.hash_key", `is only allowed with strategy "hash"; set strategy: hash or remove hash_key`})
	case d.HashKey != "":
		if _, err := ParseHashKey(d.HashKey); err != nil {
			problems = append(problems, Problem{"dispatch.hash_key", `must be a Go text/template over the payload, such as "{{.customer_id}}": ` +
				strings.TrimPrefix(err.Error(), "template: ")})
		}
	}
	switch {
	case d.Strategy == DispatchWorker && d.Worker == "":
		problems = append(problems, Problem{"dispatch.worker", `is required with strategy "worker": name the worker id to run on`})
	case d.Strategy != DispatchWorker && d.Worker != "":
		problems = append(problems, Problem{"dispatch.worker", `is only allowed with strategy "worker"; set strategy: worker or remove worker`})
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
// model names a cron trigger's schedule "cron", the Go type [Trigger] holds
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
func (t *Task) afterProblems() []Problem {
	var problems []Problem
	seen := make(map[string]int, len(t.After))
	for i, a := range t.After {
		field := fmt.Sprintf("after[%d].task", i)
		if a.Task == t.TaskName {
			problems = append(problems, Problem{field, fmt.Sprintf("must not name the task itself: %q cannot run after its own end; remove the entry", a.Task)})
		}
		if j, ok := seen[a.Task]; ok {
			problems = append(problems, Problem{field, fmt.Sprintf("names %q again (after[%d] names it already); name each parent once, with one on condition", a.Task, j)})
			continue
		}
		seen[a.Task] = i
	}
	return problems
}

// hasRefCycle reports whether a validation error's tree holds a $ref cycle.
func hasRefCycle(err error) bool {
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return false
	}
	if _, ok := verr.ErrorKind.(*kind.RefCycle); ok {
		return true
	}
	return slices.ContainsFunc(verr.Causes, func(c *jsonschema.ValidationError) bool { return hasRefCycle(c) })
}

// normalize makes a parsed task equal to the task its JSON encoding parses
// to: empty lists become nil (they are omitted when encoded) and the payload
// schema is compacted the way encoding/json writes it.
func (t *Task) normalize() {
	if len(t.Triggers) == 0 {
		t.Triggers = nil
	}
	if len(t.Dispatch.Tags) == 0 {
		t.Dispatch.Tags = nil
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

// WithDefaults returns a copy of t (which must not be nil) with every default
// filled in: timeout "1h" ([DefaultTimeout]), max_attempts 1, backoff
// "fixed", intervals 30 s and 1800 s, priority "normal", schema_version 1,
// dispatch strategy "pull", blocking strategy "serial", for each cron
// trigger timezone "UTC", misfire "skip" and, with "catch_up", max_catch_up
// 10, and on "success" for each after entry. The copy shares no memory with t.
func (t *Task) WithDefaults() *Task {
	c := *t
	c.Triggers = slices.Clone(t.Triggers)
	c.Dispatch.Tags = slices.Clone(t.Dispatch.Tags)
	c.PayloadSchema = slices.Clone(t.PayloadSchema)
	c.After = slices.Clone(t.After)

	if c.Execution.Timeout == "" {
		c.Execution.Timeout = "1h"
	}
	r := &c.Execution.Retry
	if r.MaxAttempts == 0 {
		r.MaxAttempts = DefaultMaxAttempts
	}
	if r.Backoff == "" {
		r.Backoff = BackoffFixed
	}
	r.InitialIntervalSec = floatOr(r.InitialIntervalSec, DefaultInitialInterval.Seconds())
	r.MaxIntervalSec = floatOr(r.MaxIntervalSec, DefaultMaxInterval.Seconds())
	if c.Priority == "" {
		c.Priority = PriorityNormal
	}
	if c.SchemaVersion == 0 {
		c.SchemaVersion = DefaultSchemaVersion
	}
	if c.Dispatch.Strategy == "" {
		c.Dispatch.Strategy = DispatchPull
	}
	if c.Concurrency.BlockingStrategy == "" {
		c.Concurrency.BlockingStrategy = DefaultBlockingStrategy
	}
	for i := range c.Triggers {
		c.Triggers[i] = c.Triggers[i].WithDefaults()
	}
	for i := range c.After {
		if c.After[i].On == "" {
			c.After[i].On = DefaultAfterCondition
		}
	}
	return &c
}

// floatOr returns a new pointer to *p, or to def when p is nil.
func floatOr(p *float64, def float64) *float64 {
	if p != nil {
		def = *p
	}
	return &def
}

// TimeoutDuration returns how long one attempt may run: execution.timeout,
// or [DefaultTimeout] when it is empty, not a duration or not positive.
func (t *Task) TimeoutDuration() time.Duration {
	d, err := time.ParseDuration(string(t.Execution.Timeout))
	if err != nil || d <= 0 {
		return DefaultTimeout
	}
	return d
}

// Initial returns the wait before the second attempt: initial_interval_sec,
// or [DefaultInitialInterval] when unset. A negative value counts as zero.
func (r Retry) Initial() time.Duration {
	if r.InitialIntervalSec == nil {
		return DefaultInitialInterval
	}
	return seconds(*r.InitialIntervalSec)
}

// Max returns the cap on the wait between attempts: max_interval_sec, or
// [DefaultMaxInterval] when unset or not positive.
func (r Retry) Max() time.Duration {
	if r.MaxIntervalSec == nil || *r.MaxIntervalSec <= 0 {
		return DefaultMaxInterval
	}
	return seconds(*r.MaxIntervalSec)
}

// seconds converts s seconds to a duration, clamped to [0, math.MaxInt64].
func seconds(s float64) time.Duration {
	ns := s * float64(time.Second)
	switch {
	case !(ns > 0): // negative, zero or NaN
		return 0
	case ns >= math.MaxInt64:
		return math.MaxInt64
	}
	return time.Duration(ns)
}

// ParseTriggerEvent reads a trigger event (JSON) strictly: it must satisfy
// trigger.schema.json, and a field the event does not know is rejected by
// name. It also checks what the schema leaves to code: delay is a duration
// Go can hold, and run_at and delay, like event_id and idempotency_key, are
// alternatives (a golden message sets every field, so the schema cannot
// forbid the pairs), and no string, the payload's included, holds text
// PostgreSQL cannot store (see [TextProblems]). Every field is optional, so
// an empty body and "{}" are valid events. Any rejection is a
// *[ValidationError]. It is safe for concurrent use. The events AX encodes
// itself take a fast path that reads them the same (see
// parseCanonicalTriggerEvent).
func ParseTriggerEvent(data []byte) (TriggerEvent, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return TriggerEvent{}, nil
	}
	if ev, ok := parseCanonicalTriggerEvent(data); ok {
		return ev, nil
	}
	return parseTriggerEventBySchema(data)
}

// parseTriggerEventBySchema is [ParseTriggerEvent]'s full path, for any
// non-empty data: the generic decode, the schema, then the typed decode.
func parseTriggerEventBySchema(data []byte) (TriggerEvent, error) {
	const what = "trigger event"
	doc, problem := decodeJSON(data)
	if problem != nil {
		return TriggerEvent{}, newValidationError(what, []Problem{*problem})
	}
	if problems := TextProblems(data); len(problems) > 0 {
		// PostgreSQL would refuse the instance; Go would alter the text.
		return TriggerEvent{}, newValidationError(what, problems)
	}
	s, err := compiledSchemas()
	if err != nil {
		return TriggerEvent{}, err
	}
	if err := s.trigger.Validate(doc); err != nil {
		return TriggerEvent{}, newValidationError(what, s.problems(err, doc, ""))
	}
	var ev TriggerEvent
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ev); err != nil {
		var perr *time.ParseError
		if errors.As(err, &perr) {
			// The schema's date-time accepts a few RFC 3339 forms Go does not
			// (a leap second, a lower-case 't').
			return TriggerEvent{}, newValidationError(what, timeProblems(doc, "fired_at", "run_at"))
		}
		return TriggerEvent{}, newValidationError(what, []Problem{decodeProblem(err)})
	}
	if problems := ev.problems(); len(problems) > 0 {
		return TriggerEvent{}, newValidationError(what, problems)
	}
	if len(ev.Parents) == 0 {
		// An empty object is no parents, as its encoding (omitted) says.
		ev.Parents = nil
	}
	return ev, nil
}

// problems checks the rules of a trigger event that its schema leaves to code.
func (ev *TriggerEvent) problems() []Problem {
	var out []Problem
	if ev.Delay != "" {
		if _, err := time.ParseDuration(ev.Delay); err != nil {
			out = append(out, Problem{"delay", "must be a duration Go can hold, such as 90s, 15m or 2h (at most about 290 years)"})
		}
		if !ev.RunAt.IsZero() {
			out = append(out, Problem{"delay", "must be left out when run_at is set: give run_at (a time) or delay (a duration), not both"})
		}
	}
	out = append(out, ev.timeBoundProblems()...)
	if ev.IdempotencyKey != "" && ev.EventID != "" {
		out = append(out, Problem{"event_id", "must be left out when idempotency_key is set: the firing's event id is then " +
			IdempotencyEventIDPrefix + "<idempotency_key>; give one of them, not both"})
	}
	return out
}

// timeProblems names the fields of doc, among names, whose value Go cannot
// read as an RFC 3339 time.
func timeProblems(doc any, names ...string) []Problem {
	obj, _ := doc.(map[string]any)
	var out []Problem
	for _, name := range names {
		if v, ok := obj[name].(string); ok {
			if _, err := time.Parse(time.RFC3339, v); err != nil {
				out = append(out, Problem{name, "must be an RFC 3339 time such as 2024-05-01T12:00:00Z"})
			}
		}
	}
	if len(out) == 0 {
		out = append(out, Problem{"", "holds a time that is not RFC 3339; write times such as 2024-05-01T12:00:00Z"})
	}
	return out
}

// ValidatePayload checks payload against a task's payload_schema. An empty
// (or null) schema accepts everything; an empty payload is checked as JSON
// null. A payload that does not satisfy the schema is a *[ValidationError]
// whose fields are paths inside the payload ("payload.order.id"); a schema
// that does not compile (ParseTask rejects those) is a plain error. Formats
// ("date-time", "email", …) are asserted, and a $ref may only point inside
// the schema. Compiled schemas are cached; it is safe for concurrent use.
func ValidatePayload(schema, payload json.RawMessage) error {
	const what = "payload"
	if s := bytes.TrimSpace(schema); len(s) == 0 || bytes.Equal(s, []byte("null")) {
		return nil
	}
	sch, err := payloadSchemas.get(schema)
	if err != nil {
		return fmt.Errorf("compile payload schema: %w", err)
	}
	if len(bytes.TrimSpace(payload)) == 0 {
		payload = json.RawMessage("null")
	}
	doc, problem := decodeJSON(payload)
	if problem != nil {
		problem.Field = strings.TrimSuffix("payload."+problem.Field, ".")
		return newValidationError(what, []Problem{*problem})
	}
	if err := sch.Validate(doc); err != nil {
		t := translator{docs: map[string]any{payloadSchemaURL: sch.doc}}
		return newValidationError(what, t.problems(err, doc, "payload"))
	}
	return nil
}

// compiledPayload is a compiled payload schema and its document, where the
// error messages look up x-message annotations.
type compiledPayload struct {
	*jsonschema.Schema
	doc any
}

// payloadCache holds compiled payload schemas by their bytes. A task has one
// schema per version, so the cache stays small; past maxEntries it restarts.
type payloadCache struct {
	mu      sync.Mutex
	entries map[string]compiledPayload
}

const payloadCacheMaxEntries = 512

var payloadSchemas payloadCache

func (c *payloadCache) get(schema []byte) (compiledPayload, error) {
	c.mu.Lock()
	p, ok := c.entries[string(schema)]
	c.mu.Unlock()
	if ok {
		return p, nil
	}
	p, err := compilePayloadSchema(schema)
	if err != nil {
		return compiledPayload{}, err
	}
	c.mu.Lock()
	if c.entries == nil || len(c.entries) >= payloadCacheMaxEntries {
		c.entries = make(map[string]compiledPayload)
	}
	c.entries[string(schema)] = p
	c.mu.Unlock()
	return p, nil
}

// payloadSchemaBounds refuses a payload_schema deeper than
// MaxPayloadSchemaDepth or larger than MaxPayloadSchemaBytes. It takes
// time linear in the schema's size.
func payloadSchemaBounds(schema any) *Problem {
	if schema == nil {
		return nil
	}
	if jsonDepth(schema, 0) > MaxPayloadSchemaDepth {
		return &Problem{"payload_schema", fmt.Sprintf("nests objects and arrays more than %d deep; flatten it, or move repeated parts under $defs and $ref them", MaxPayloadSchemaDepth)}
	}
	b, err := json.Marshal(schema)
	if err == nil && len(b) > MaxPayloadSchemaBytes {
		return &Problem{"payload_schema", fmt.Sprintf("is %d bytes long; keep it to %d (64 KiB), e.g. by checking the details in the handler", len(b), MaxPayloadSchemaBytes)}
	}
	return nil
}

// jsonDepth returns the nesting of objects and arrays in v, a decoded JSON
// value, at most one past MaxPayloadSchemaDepth.
func jsonDepth(v any, d int) int {
	if d > MaxPayloadSchemaDepth {
		return d
	}
	deepest := d
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			deepest = max(deepest, jsonDepth(e, d+1))
		}
	case []any:
		for _, e := range v {
			deepest = max(deepest, jsonDepth(e, d+1))
		}
	}
	return deepest
}

// compilePayloadSchema compiles a task's payload_schema without touching the
// file system or the network.
func compilePayloadSchema(schema []byte) (compiledPayload, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return compiledPayload{}, err
	}
	c := newCompiler()
	if err := c.AddResource(payloadSchemaURL, doc); err != nil {
		return compiledPayload{}, err
	}
	sch, err := c.Compile(payloadSchemaURL)
	if err != nil {
		return compiledPayload{}, err
	}
	return compiledPayload{Schema: sch, doc: doc}, nil
}

// payloadSchemaProblems explains why payload_schema (schema) does not compile.
func payloadSchemaProblems(err error, schema []byte) []Problem {
	const field = "payload_schema"
	var (
		verr *jsonschema.SchemaValidationError
		rerr *jsonschema.InvalidRegexError
		lerr *jsonschema.LoadURLError
		perr *jsonschema.JSONPointerNotFoundError
	)
	switch {
	case errors.As(err, &verr):
		var inner *jsonschema.ValidationError
		if errors.As(verr.Err, &inner) {
			// The metaschema rejected it: say where inside payload_schema.
			doc, _ := decodeJSON(schema)
			problems := translator{}.problems(inner, doc, field)
			for i := range problems {
				problems[i].Message = "is not valid in a JSON Schema: it " + problems[i].Message
			}
			return problems
		}
	case errors.As(err, &rerr):
		return []Problem{{field, fmt.Sprintf("has a pattern %q that is not a valid regular expression; use RE2 syntax (no look-around, no back-references)", rerr.Regex)}}
	case errors.As(err, &perr):
		ref := strings.TrimPrefix(perr.URL, payloadSchemaURL)
		return []Problem{{field, fmt.Sprintf("has a $ref to %q, which payload_schema does not define; add it under $defs or fix the $ref", ref)}}
	case errors.As(err, &lerr):
		return []Problem{{field, fmt.Sprintf("refers to %s, which AX does not load; keep every $ref inside payload_schema (e.g. \"#/$defs/order\") and leave $schema out or name a standard draft", lerr.URL)}}
	}
	return []Problem{{field, "is not a valid JSON Schema: " + err.Error()}}
}

// ourSchemas holds the embedded schemas compiled, by file name
// ("task.schema.json", "json/dispatch.schema.json"), and their documents for
// the x-message annotations.
type ourSchemas struct {
	translator
	task, trigger *jsonschema.Schema
	byName        map[string]*jsonschema.Schema
}

// compiledSchemas compiles the embedded schemas once, on first use.
var compiledSchemas = sync.OnceValues(func() (*ourSchemas, error) {
	names := []string{"task.schema.json", "trigger.schema.json"}
	more, err := JSONSchemas.ReadDir("json")
	if err != nil {
		return nil, fmt.Errorf("compile schemas: %w", err)
	}
	for _, e := range more {
		names = append(names, "json/"+e.Name())
	}
	c := newCompiler()
	s := &ourSchemas{translator: translator{docs: make(map[string]any)}, byName: make(map[string]*jsonschema.Schema)}
	for _, name := range names {
		data, err := JSONSchemas.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("compile schemas: %w", err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("compile schemas: read %s: %w", name, err)
		}
		s.docs[schemaBaseURL+name] = doc
		if err := c.AddResource(schemaBaseURL+name, doc); err != nil {
			return nil, fmt.Errorf("compile schemas: add %s: %w", name, err)
		}
	}
	for _, name := range names {
		if s.byName[name], err = c.Compile(schemaBaseURL + name); err != nil {
			return nil, fmt.Errorf("compile schemas: %s: %w", name, err)
		}
	}
	s.task, s.trigger = s.byName["task.schema.json"], s.byName["trigger.schema.json"]
	return s, nil
})

// newCompiler returns a compiler for draft 2020-12 that asserts formats and
// loads nothing from outside: every $ref must resolve to an added resource.
func newCompiler() *jsonschema.Compiler {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(jsonschema.SchemeURLLoader{})
	return c
}

// decodeJSON decodes one JSON value (numbers as json.Number, as the
// validator wants them), or explains where the syntax is broken.
func decodeJSON(data []byte) (any, *Problem) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		var serr *json.SyntaxError
		switch {
		case errors.As(err, &serr):
			return nil, &Problem{Message: fmt.Sprintf("is not valid JSON: %s, at %s", serr.Error(), position(data, serr.Offset))}
		case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
			return nil, &Problem{Message: fmt.Sprintf("is not valid JSON: it ends too early, at %s; close every string, { and [", position(data, int64(len(data))+1))}
		}
		return nil, &Problem{Message: "is not valid JSON: " + err.Error()}
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &Problem{Message: fmt.Sprintf("is not valid JSON: unexpected data after the top-level value, at %s; send one value only", position(data, dec.InputOffset()+1))}
	}
	if path, ok := DuplicateKey(data); ok {
		return nil, &Problem{path, "appears twice in the same object; keep one (JSON parsers disagree on which wins, and YAML refuses it)"}
	}
	return doc, nil
}

// position describes the byte at offset-1 (json.SyntaxError's Offset counts
// the bytes read, the bad one included) as "line L, column C".
func position(data []byte, offset int64) string {
	pos := int(min(max(offset-1, 0), int64(len(data))))
	line := 1 + bytes.Count(data[:pos], []byte("\n"))
	col := pos - bytes.LastIndexByte(data[:pos], '\n')
	return fmt.Sprintf("line %d, column %d", line, col)
}

// yamlMessage rewords a sigs.k8s.io/yaml error, which names the line, on
// one line.
func yamlMessage(err error) string {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "error converting YAML to JSON: ")
	msg = strings.TrimPrefix(msg, "yaml: ")
	msg = strings.TrimPrefix(msg, "unmarshal errors:")
	msg = strings.Join(strings.Fields(msg), " ")
	return "is not valid YAML: " + msg + "; fix it there (or write JSON starting with '{')"
}

// decodeProblem explains an error of decoding a document the schema accepted
// into its Go type: a number out of the Go type's range, a time Go cannot
// parse, or a field the schema and the type disagree on.
func decodeProblem(err error) Problem {
	var terr *json.UnmarshalTypeError
	if errors.As(err, &terr) {
		return Problem{terr.Field, fmt.Sprintf("cannot hold %s; use a %s", terr.Value, goTypeName(terr.Type.Kind().String()))}
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return Problem{"", fmt.Sprintf("unknown field %s; remove it", name)}
	}
	return Problem{"", "cannot be read: " + err.Error()}
}

func goTypeName(kind string) string {
	switch {
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"):
		return "whole number in range"
	case strings.HasPrefix(kind, "float"):
		return "number"
	}
	return kind
}

// translator turns jsonschema's error tree into flat problems. docs holds
// the schema documents by URL, where x-message annotations and the allowed
// properties of an object are looked up.
type translator struct {
	docs map[string]any
}

// problems returns a problem for each leaf of err's tree; doc is the
// validated instance (to tell array indices from keys) and prefix the path of
// its root.
func (t translator) problems(err error, doc any, prefix string) []Problem {
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return []Problem{{prefix, err.Error()}}
	}
	var out []Problem
	t.walk(verr, doc, prefix, &out)
	return out
}

func (t translator) walk(e *jsonschema.ValidationError, doc any, prefix string, out *[]Problem) {
	if _, ok := e.ErrorKind.(*kind.PropertyNames); !ok && len(e.Causes) > 0 {
		for _, c := range e.Causes {
			t.walk(c, doc, prefix, out)
		}
		return
	}
	field := fieldPath(prefix, doc, e.InstanceLocation)
	add := func(f, msg string) { *out = append(*out, Problem{f, msg}) }
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		for _, m := range k.Missing {
			add(joinField(field, m), "is required")
		}
	case *kind.AdditionalProperties:
		allowed := t.propertyNames(e.SchemaURL)
		for _, p := range k.Properties {
			msg := fmt.Sprintf("unknown field %q; remove it", p)
			if len(allowed) > 0 {
				msg += " (allowed: " + strings.Join(allowed, ", ") + ")"
			}
			add(field, msg)
		}
	case *kind.Dependency:
		for _, m := range k.Missing {
			add(joinField(field, m), fmt.Sprintf("is required when %q is set", k.Prop))
		}
	case *kind.DependentRequired:
		for _, m := range k.Missing {
			add(joinField(field, m), fmt.Sprintf("is required when %q is set", k.Prop))
		}
	case *kind.PropertyNames:
		msg := fmt.Sprintf("has a field name %q that is not allowed", k.Property)
		var inner []Problem
		for _, c := range e.Causes {
			t.walk(c, k.Property, "", &inner)
		}
		if len(inner) > 0 {
			msg += ": it " + inner[0].Message
		}
		add(field, msg)
	default:
		add(field, t.message(e))
	}
}

// message says in plain words what a leaf error wants.
func (t translator) message(e *jsonschema.ValidationError) string {
	switch k := e.ErrorKind.(type) {
	case *kind.Type:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = typeName(w)
		}
		msg := fmt.Sprintf("must be %s, not %s", strings.Join(want, " or "), typeName(k.Got))
		if slices.Contains(k.Want, "string") && (k.Got == "number" || k.Got == "integer" || k.Got == "boolean") {
			msg += "; put it in quotes"
		}
		return msg
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = display(w)
		}
		if len(want) == 1 {
			return "must be " + want[0]
		}
		return "must be one of " + strings.Join(want, ", ")
	case *kind.Const:
		return "must be " + display(k.Want)
	case *kind.Pattern:
		if msg := t.annotation(e.SchemaURL); msg != "" {
			return msg
		}
		return "must match " + k.Want
	case *kind.Not:
		if msg := t.annotation(e.SchemaURL + "/not"); msg != "" {
			return msg
		}
		return "is a value that is not allowed here"
	case *kind.FalseSchema:
		return "is not allowed here; remove it"
	case *kind.Format:
		switch k.Want {
		case "date-time":
			return "must be an RFC 3339 time such as 2024-05-01T12:00:00Z"
		case "date":
			return "must be a date such as 2024-05-01"
		case "time":
			return "must be a time such as 12:00:00Z"
		case "duration":
			return "must be an ISO 8601 duration such as P1DT2H"
		case "regex":
			return "must be a valid regular expression in RE2 syntax (no look-around, no back-references)"
		}
		return "must be a valid " + k.Want
	case *kind.MinLength:
		if k.Want == 1 {
			return "must not be empty"
		}
		return fmt.Sprintf("must be at least %d characters long", k.Want)
	case *kind.MaxLength:
		return fmt.Sprintf("must be at most %d characters long (it has %d)", k.Want, k.Got)
	case *kind.Minimum:
		return "must be at least " + ratString(k.Want)
	case *kind.Maximum:
		return "must be at most " + ratString(k.Want)
	case *kind.ExclusiveMinimum:
		return "must be greater than " + ratString(k.Want)
	case *kind.ExclusiveMaximum:
		return "must be less than " + ratString(k.Want)
	case *kind.MultipleOf:
		return "must be a multiple of " + ratString(k.Want)
	case *kind.MinItems:
		return fmt.Sprintf("must have at least %d %s", k.Want, plural(k.Want, "item"))
	case *kind.MaxItems:
		return fmt.Sprintf("must have at most %d %s (it has %d)", k.Want, plural(k.Want, "item"), k.Got)
	case *kind.AdditionalItems:
		return fmt.Sprintf("has %d more %s than allowed; remove them", k.Count, plural(k.Count, "item"))
	case *kind.UniqueItems:
		return fmt.Sprintf("must not repeat a value: items %d and %d are equal", k.Duplicates[0], k.Duplicates[1])
	case *kind.Contains:
		return "must contain at least one item that matches"
	case *kind.MinContains:
		return fmt.Sprintf("must contain at least %d matching %s", k.Want, plural(k.Want, "item"))
	case *kind.MaxContains:
		return fmt.Sprintf("must contain at most %d matching %s", k.Want, plural(k.Want, "item"))
	case *kind.MinProperties:
		return fmt.Sprintf("must have at least %d %s", k.Want, plural(k.Want, "field"))
	case *kind.MaxProperties:
		return fmt.Sprintf("must have at most %d %s (it has %d)", k.Want, plural(k.Want, "field"), k.Got)
	case *kind.OneOf:
		return "matches more than one of the allowed forms; it must match exactly one"
	case *kind.AnyOf, *kind.AllOf:
		return "does not match the allowed forms"
	case *kind.ContentEncoding:
		return "must be encoded as " + k.Want
	case *kind.ContentMediaType:
		return "must be a valid " + k.Want + " document"
	case *kind.RefCycle:
		return "cannot be checked: the schema has a $ref cycle"
	}
	return "is invalid (" + e.ErrorKind.LocalizedString(nil) + ")"
}

// annotation returns the x-message annotation of the schema at loc (an
// absolute schema location, "<document URL>#<JSON pointer>"), or "".
func (t translator) annotation(loc string) string {
	node, _ := t.lookup(loc).(map[string]any)
	msg, _ := node["x-message"].(string)
	return msg
}

// propertyNames returns the sorted names in the "properties" of the schema at loc.
func (t translator) propertyNames(loc string) []string {
	node, _ := t.lookup(loc).(map[string]any)
	props, _ := node["properties"].(map[string]any)
	names := make([]string, 0, len(props))
	for name := range props {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// lookup resolves an absolute schema location in t.docs, or returns nil.
func (t translator) lookup(loc string) any {
	base, frag, _ := strings.Cut(loc, "#")
	node := t.docs[base]
	if frag == "" {
		return node
	}
	for _, tok := range strings.Split(strings.TrimPrefix(frag, "/"), "/") {
		tok, err := url.PathUnescape(tok)
		if err != nil {
			return nil
		}
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		switch n := node.(type) {
		case map[string]any:
			node = n[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(n) {
				return nil
			}
			node = n[i]
		default:
			return nil
		}
	}
	return node
}

// plainKey matches the object keys written as ".key" in a field path; others
// are written as ["key"].
var plainKey = regexp.MustCompile(`^[A-Za-z0-9_$-]+$`)

// fieldPath writes the instance location tokens as a dotted path after
// prefix: keys as ".key", array indices as "[i]". doc tells which is which.
func fieldPath(prefix string, doc any, tokens []string) string {
	var sb strings.Builder
	sb.WriteString(prefix)
	v := doc
	for _, tok := range tokens {
		if arr, ok := v.([]any); ok {
			sb.WriteString("[" + tok + "]")
			if i, err := strconv.Atoi(tok); err == nil && i >= 0 && i < len(arr) {
				v = arr[i]
			} else {
				v = nil
			}
			continue
		}
		if m, ok := v.(map[string]any); ok {
			v = m[tok]
		} else {
			v = nil
		}
		switch {
		case !plainKey.MatchString(tok):
			sb.WriteString("[" + strconv.Quote(tok) + "]")
		case sb.Len() > 0:
			sb.WriteString("." + tok)
		default:
			sb.WriteString(tok)
		}
	}
	return sb.String()
}

// joinField appends an object key to a field path.
func joinField(field, key string) string {
	switch {
	case !plainKey.MatchString(key):
		return field + "[" + strconv.Quote(key) + "]"
	case field == "":
		return key
	}
	return field + "." + key
}

func typeName(t string) string {
	switch t {
	case "object":
		return "an object"
	case "array":
		return "a list"
	case "string":
		return "a string"
	case "integer":
		return "a whole number"
	case "number":
		return "a number"
	case "boolean":
		return "true or false"
	}
	return t
}

// display writes an enum or const value: strings bare, others as JSON.
func display(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func ratString(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return formatFloat(f)
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
