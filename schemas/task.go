package schemas

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Task is a task definition as a user applies it (JSON or YAML; see
// task.schema.json for the authoritative rules and [github.com/ax-scheduler/ax/schemas/taskdef.ParseTask] to read one).
// Zero values mean "use the default" where a default is stated.
type Task struct {
	// TaskName names the task. Lower-case letters, digits, '_' and '-', 1–64
	// characters, starting with a letter or digit: it becomes a NATS subject token.
	TaskName string `json:"task_name"`
	// TaskType is a free label for grouping tasks (e.g. "report", "etl").
	TaskType string `json:"task_type,omitempty"`
	// Owner is who answers for the task (a person, a team, an email).
	Owner       string `json:"owner,omitempty"`
	Description string `json:"description,omitempty"`
	// Triggers says how the task fires. Every task may be fired manually and
	// by an event whatever this list says.
	Triggers []Trigger `json:"triggers,omitempty"`
	// Execution says what runs and how often it is tried.
	Execution Execution `json:"execution"`
	// Concurrency limits how many instances of the task run at once.
	Concurrency Concurrency `json:"concurrency,omitzero"`
	// Limits names the limits (see [Limit]) that every attempt of the task
	// must be admitted by before it starts, each at most once.
	Limits []string `json:"limits,omitempty"`
	// Dispatch says which executors may run the task.
	Dispatch DispatchPolicy `json:"dispatch,omitzero"`
	// Priority is the default priority of the task's instances: "urgent",
	// "normal" (default) or "low".
	Priority Priority `json:"priority,omitempty"`
	// MinWorkerVersion keeps executors older than this semantic version off the task.
	MinWorkerVersion string `json:"min_worker_version,omitempty"`
	// SchemaVersion is the version of the task's payload (default 1). A trigger
	// event whose payload_version differs is refused.
	SchemaVersion int `json:"schema_version,omitempty"`
	// PayloadSchema, when set, is a JSON Schema that every event payload must satisfy.
	PayloadSchema json.RawMessage `json:"payload_schema,omitempty"`
	// After chains the task to others: once every task it names has ended
	// in a run, the task fires in that run when each parent's On condition
	// holds, and is SKIPPED with the reason when one does not. At most 32
	// parents, each named once, never the task itself; a definition that
	// would close a cycle is refused when it is applied.
	After []After `json:"after,omitempty"`
	// Deadline is when a run must have finished: a local time "06:00" (the
	// first such time after the run's tick, in the task's zone: its first
	// cron trigger's) or a Go duration after the tick ("90m"). A run not
	// done by then fires the deadline_missed alert.
	Deadline string `json:"deadline,omitempty"`
	// Retention is how long the task's ended instances are kept after they
	// fired: a number of days ("90d") or a Go duration ("720h"), at least
	// 1h. Empty keeps them as long as the installation's retention (the
	// dispatcher's --history-retention). See [ParseRetention].
	Retention string `json:"retention,omitempty"`
	// Archive says what becomes of the task's instances when they expire:
	// true moves them to the archive tables, false drops them (the audit
	// stream keeps their record either way); nil follows the
	// installation's --history-archive.
	Archive *bool `json:"archive,omitempty"`
	// Redact lists the fields of the task's payloads and outputs that the
	// API and the console never show, to anyone: JSON pointers
	// ("/card/number") or dotted paths ("card.number"), "*" for every
	// member or element (see [ParseRedactPath]); each shows as
	// [RedactedMarker]. At most [MaxRedactPaths]. Handlers still get them.
	Redact []string `json:"redact,omitempty"`
}

// Retention bounds of a task's retention.
const (
	MinRetention = time.Hour
	MaxRetention = 100 * 365 * 24 * time.Hour
)

// ParseRetention reads a retention: a whole number of days ("90d") or a Go
// duration ("720h"), between [MinRetention] and [MaxRetention].
func ParseRetention(s string) (time.Duration, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || days == "" || days[0] == '+' {
			return 0, fmt.Errorf("retention %q: want a whole number of days such as \"90d\" or a Go duration such as \"720h\"", s)
		}
		if n > int(MaxRetention/(24*time.Hour)) {
			return 0, fmt.Errorf("retention %q: at most %dd", s, int(MaxRetention/(24*time.Hour)))
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("retention %q: want a whole number of days such as \"90d\" or a Go duration such as \"720h\"", s)
		}
	}
	switch {
	case d < MinRetention:
		return 0, fmt.Errorf("retention %q: at least 1h", s)
	case d > MaxRetention:
		return 0, fmt.Errorf("retention %q: at most %dd", s, int(MaxRetention/(24*time.Hour)))
	}
	return d, nil
}

// AfterCondition says which end of a parent lets a chained task run.
type AfterCondition string

// The after conditions.
const (
	// OnSuccess runs the child after its parent SUCCEEDED (the default).
	OnSuccess AfterCondition = "success"
	// OnFailure runs the child after its parent FAILED.
	OnFailure AfterCondition = "failure"
	// OnAlways runs the child after its parent ended in any way:
	// SUCCEEDED, FAILED, SKIPPED or CANCELLED.
	OnAlways AfterCondition = "always"
)

// Holds reports whether a parent that ended in state s lets the child run.
// An empty condition is [OnSuccess].
func (c AfterCondition) Holds(s State) bool {
	switch c {
	case OnFailure:
		return s == StateFailed
	case OnAlways:
		return s.Terminal()
	}
	return s == StateSucceeded
}

// After names a parent of a chained task (see [Task.After]).
type After struct {
	// Task names the parent task. It need not exist when the child is applied.
	Task string `json:"task"`
	// On is the parent's end that lets the child run: "success" (default),
	// "failure" or "always".
	On AfterCondition `json:"on,omitempty"`
	// Window, when set, makes the entry a calendar-aligned dependency
	// instead of a chain: a firing of the task waits until the parent's
	// cron ticks in this window (previous_hour, previous_day or same_day,
	// around the firing's tick in the task's zone) have succeeded, counted
	// by each tick's identity. It never fires the task.
	Window AfterWindow `json:"window,omitempty"`
	// Require is how many of the window's ticks must succeed: "all" (the
	// default, and the only one so far).
	Require string `json:"require,omitempty"`
	// Timeout bounds the wait after the firing's tick (a Go duration,
	// default 24h); then OnTimeout decides.
	Timeout string `json:"timeout,omitempty"`
	// OnTimeout is what a firing whose parents never arrived does at its
	// timeout: "fail" (the default), "skip" or "run".
	OnTimeout string `json:"on_timeout,omitempty"`
}

// AfterWindow is the span of a calendar-aligned dependency's parent ticks,
// relative to the dependent firing's tick in the task's zone.
type AfterWindow string

// The after windows.
const (
	WindowPreviousHour AfterWindow = "previous_hour" // the clock hour before the tick's
	WindowPreviousDay  AfterWindow = "previous_day"  // the calendar day before the tick's
	WindowSameDay      AfterWindow = "same_day"      // the tick's calendar day, up to the tick
)

// TriggerType is the kind of a trigger in a task definition.
type TriggerType string

// The trigger types.
const (
	TriggerTypeEvent  TriggerType = "event"
	TriggerTypeManual TriggerType = "manual"
	// TriggerTypeCron fires the task on a schedule (see [github.com/ax-scheduler/ax/schemas/taskdef.CronSchedule]).
	TriggerTypeCron TriggerType = "cron"
)

// Misfire is what a cron trigger does with the ticks it missed: those the
// trigger service saw more than a grace (1 s by default) after their time,
// because no trigger service ran, the task was disabled, or the service stalled.
type Misfire string

// The misfire policies.
const (
	// MisfireSkip fires none of the missed ticks (the default).
	MisfireSkip Misfire = "skip"
	// MisfireFireOnce fires the latest missed tick once, for all of them.
	MisfireFireOnce Misfire = "fire_once"
	// MisfireCatchUp fires every missed tick, oldest first, at most
	// max_catch_up of them: the latest ones; older ones are skipped.
	MisfireCatchUp Misfire = "catch_up"
)

// Trigger is one way a task fires. Schedule, Timezone, Misfire and
// MaxCatchUp belong to cron triggers only.
type Trigger struct {
	Type TriggerType `json:"type"`
	// Schedule is a cron trigger's schedule: 5 fields ("0 2 * * *"), 6 with
	// seconds first ("*/10 * * * * *"), or a descriptor (@yearly, @monthly,
	// @weekly, @daily, @hourly, @every 30s). See [github.com/ax-scheduler/ax/schemas/taskdef.ParseCronSchedule]. A
	// definition may name it "cron" instead, as the design's task model
	// does; [github.com/ax-scheduler/ax/schemas/taskdef.ParseTask] reads that as schedule and refuses both at once.
	// It is always encoded as "schedule".
	Schedule string `json:"schedule,omitempty"`
	// Timezone is the IANA time zone the schedule is read in (default "UTC").
	Timezone string `json:"timezone,omitempty"`
	// Misfire says what happens to missed ticks (default "skip").
	Misfire Misfire `json:"misfire,omitempty"`
	// MaxCatchUp bounds how many missed ticks "catch_up" fires (default 10,
	// at most 1000); it is only allowed with misfire "catch_up".
	MaxCatchUp int `json:"max_catch_up,omitempty"`
	// Payload is the payload of a cron trigger's firings (none when
	// empty), checked against the task's payload_schema as any firing's
	// is. The dispatcher takes it from the definition, never from the
	// firing: a scheduled task's arguments, such as an imported crontab
	// line's command for [HandlerShell].
	Payload json.RawMessage `json:"payload,omitempty"`
}

// Execution says which handler runs the task, for how long and how often.
type Execution struct {
	// Handler is the name an executor registered the handler under, e.g. "builtin.echo".
	Handler string `json:"handler"`
	// Timeout is how long one attempt may run, as a Go duration ("90s",
	// "10m") or a number of seconds (1800); default "1h". The handler's
	// context ends at the timeout.
	Timeout Duration `json:"timeout,omitempty"`
	// Retry says how failed attempts are retried.
	Retry Retry `json:"retry,omitzero"`
	// Shards, when above 0, fans each firing out into that many child
	// instances, shard 0 to Shards-1, that run (and retry) on their own;
	// the firing's instance ends SUCCEEDED when every child did, FAILED
	// when one did not. Not with dispatch strategy "broadcast".
	Shards int `json:"shards,omitempty"`
	// Slots is how many of a worker's slots one attempt takes (default 1,
	// at most [MaxTaskSlots]): a heavy report declares 4, so a worker with
	// 16 slots runs four of them at once, or sixteen light attempts. A
	// worker with fewer slots than this runs the attempt alone.
	Slots int `json:"slots,omitempty"`
}

// MaxTaskSlots is the most slots one attempt may take.
const MaxTaskSlots = 1024

// Duration is a span of time in a task definition, held as a Go duration
// string ("90s", "1h30m"). It decodes from that string or from a JSON
// number of seconds (1800, 0.5), which becomes the string "1800s" or
// "0.5s", so a definition written either way encodes as a string. It does
// not check the string: [github.com/ax-scheduler/ax/schemas/taskdef.ParseTask] does, with the schema's bounds.
type Duration string

// UnmarshalJSON reads a JSON string as it is and a JSON number as that
// many seconds.
func (d *Duration) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		*d = Duration(s)
		return nil
	}
	if string(data) == "null" {
		return nil
	}
	f, err := strconv.ParseFloat(string(data), 64)
	if err != nil {
		return errors.New("a duration must be a string such as \"90s\" or a number of seconds such as 1800")
	}
	*d = Duration(strconv.FormatFloat(f, 'f', -1, 64) + "s")
	return nil
}

// Backoff is how the interval between attempts grows.
type Backoff string

// The backoff kinds.
const (
	BackoffFixed       Backoff = "fixed"
	BackoffLinear      Backoff = "linear"
	BackoffExponential Backoff = "exp"
)

// Retry is a task's retry policy.
type Retry struct {
	// MaxAttempts counts every attempt, the first included (default 1: no retry).
	MaxAttempts int `json:"max_attempts,omitempty"`
	// Backoff is "fixed" (default), "linear" or "exp".
	Backoff Backoff `json:"backoff,omitempty"`
	// InitialIntervalSec is the wait before the second attempt (default 30; 0 retries at once).
	InitialIntervalSec *float64 `json:"initial_interval_sec,omitempty"`
	// MaxIntervalSec caps the wait between attempts (default 1800).
	MaxIntervalSec *float64 `json:"max_interval_sec,omitempty"`
}

// BlockingStrategy says what happens to a firing when max_running_instances are running.
type BlockingStrategy string

// The blocking strategies.
const (
	BlockSerial      BlockingStrategy = "serial"
	BlockDiscard     BlockingStrategy = "discard"
	BlockCancelOther BlockingStrategy = "cancel_other"
	BlockBufferOne   BlockingStrategy = "buffer_one"
)

// Concurrency limits a task's parallel instances.
type Concurrency struct {
	// MaxRunningInstances is the most instances running at once; 0 means no limit.
	MaxRunningInstances int `json:"max_running_instances,omitempty"`
	// BlockingStrategy applies when the limit is reached (default "serial").
	BlockingStrategy BlockingStrategy `json:"blocking_strategy,omitempty"`
	// MutexKey, when set, keeps two attempts whose keys are equal from
	// running at once, on any executors: a Go text/template rendered over
	// the payload ("order-{{.shop_id}}"; see [ParseMutexKey]). A constant
	// key ("nightly-report") makes the task's attempts run one at a time.
	MutexKey string `json:"mutex_key,omitempty"`
}

// DispatchStrategy says how an instance is routed to an executor.
type DispatchStrategy string

// The dispatch strategies.
const (
	// DispatchPull lets the executors of the pool pull the attempts when
	// they have free slots: the least loaded take the most.
	DispatchPull DispatchStrategy = "pull"
	// DispatchHash pins the attempts whose hash_key renders the same to
	// one live executor of the pool, by rendezvous hashing: when executors
	// join or leave, only the keys they win or lose move.
	DispatchHash DispatchStrategy = "hash"
	// DispatchWorker sends every attempt to the executor named by worker.
	DispatchWorker DispatchStrategy = "worker"
	// DispatchBroadcast fans each firing out into one child instance per
	// live executor of the pool, each sent to its executor, like shards.
	DispatchBroadcast DispatchStrategy = "broadcast"
)

// DispatchPolicy routes a task's instances.
type DispatchPolicy struct {
	// Strategy is "pull" (default), "hash", "worker" or "broadcast" (see
	// [DispatchPull], [DispatchHash], [DispatchWorker], [DispatchBroadcast]).
	Strategy DispatchStrategy `json:"strategy,omitempty"`
	// HashKey is the key that strategy "hash" pins to an executor: a Go
	// text/template rendered over the payload ("{{.customer_id}}"; see
	// [ParseHashKey]). With "hash" and no hash_key the key is the task's
	// name, so every firing of the task runs on one node; refused with
	// another strategy.
	HashKey string `json:"hash_key,omitempty"`
	// Worker is the worker id that strategy "worker" sends the attempts
	// to. Required with "worker", refused otherwise.
	Worker string `json:"worker,omitempty"`
	// Tags name the executor pools that may run the task, as a set: a
	// worker that serves any one of them may take the work ([eu, us]: a
	// worker of pool eu or of pool us). No tags (and no TagsAll) is the
	// pool "default".
	Tags []string `json:"tags,omitempty"`
	// TagsAll is the explicit AND form: the one pool named by the tags
	// sorted and joined with "+" ([gpu, eu]: the pool "eu+gpu", which
	// workers started with --pool eu+gpu serve). Refused with Tags.
	TagsAll []string `json:"tags_all,omitempty"`
	// Fairness, when its key is set, shares the pool's queue round-robin
	// between the keys of the task's attempts (see [Fairness]).
	Fairness Fairness `json:"fairness,omitzero"`
}

// Fairness shares a pool's queue between the keys of a task's attempts:
// the dispatcher holds the attempts of a task with a fairness key back in
// PostgreSQL and lets them into the pool's queue a few at a time,
// round-robin over the keys, so that one key's backlog of 10,000 does not
// delay another key's single firing behind it. Only attempts the pool's
// workers pull (strategy "pull") are shared so.
type Fairness struct {
	// Key is a Go text/template rendered over the payload ("{{.tenant}}";
	// see [ParseMutexKey] for the rules); a payload that does not render
	// it goes under the key "" with the others that do not.
	Key string `json:"key"`
	// Weights gives some keys more turns per round (default 1 each, at
	// most [MaxFairnessWeight]): {"big": 3} lets three attempts of key big
	// in for each one of every other key.
	Weights map[string]int `json:"weights,omitempty"`
}

// MaxFairnessWeight is the largest weight of a fairness key.
const MaxFairnessWeight = 1000

// Weight returns the weight of key: its entry in Weights, or 1.
func (f Fairness) Weight(key string) int {
	if w := f.Weights[key]; w > 0 {
		return w
	}
	return 1
}

// PoolSep separates the pools of an instance that any of several pools
// may run ("data-node-a|data-node-b"; see [DispatchPolicy.Pool]). No pool
// name contains it: a tag is lower-case letters, digits, '_' and '-'.
const PoolSep = "|"

// PoolMembers returns the pools of an instance's pool: the pools of a set
// ("a|b" is [a b]), or the pool itself.
func PoolMembers(pool string) []string { return strings.Split(pool, PoolSep) }

// PoolIncludes reports whether member is one of the pools of an
// instance's pool (see [PoolMembers]).
func PoolIncludes(pool, member string) bool {
	return pool == member || slices.Contains(PoolMembers(pool), member)
}

// Priority orders the work inside a pool.
type Priority string

// The priorities, highest first.
const (
	PriorityUrgent Priority = "urgent"
	PriorityNormal Priority = "normal"
	PriorityLow    Priority = "low"
)

// Priorities lists the priorities from the highest to the lowest.
var Priorities = []Priority{PriorityUrgent, PriorityNormal, PriorityLow}

// Valid reports whether p is one of the priorities.
func (p Priority) Valid() bool {
	return p == PriorityUrgent || p == PriorityNormal || p == PriorityLow
}

// Defaults of a task definition.
const (
	DefaultTimeout          = time.Hour
	DefaultMaxAttempts      = 1
	DefaultInitialInterval  = 30 * time.Second
	DefaultMaxInterval      = 30 * time.Minute
	DefaultPool             = "default"
	DefaultSchemaVersion    = 1
	DefaultBlockingStrategy = BlockSerial
	DefaultTimezone         = "UTC"
	DefaultMisfire          = MisfireSkip
	DefaultMaxCatchUp       = 10
	DefaultAfterCondition   = OnSuccess
	// MaxMaxCatchUp is the largest max_catch_up a cron trigger may declare.
	MaxMaxCatchUp = 1000
	// MaxAfter is the most parents a task may name in after.
	MaxAfter = 32
)

// Pool returns the pool of the instances of a task of this policy: for
// TagsAll, the one pool named by the tags sorted, without repeats, joined
// with "+" ("eu+gpu"); for Tags, the tags sorted, without repeats, joined
// with [PoolSep] ("eu|us": a worker of any of them may take the work);
// neither is [DefaultPool].
func (d DispatchPolicy) Pool() string {
	tags, sep := d.Tags, PoolSep
	if len(d.TagsAll) > 0 {
		tags, sep = d.TagsAll, "+"
	}
	if len(tags) == 0 {
		return DefaultPool
	}
	s := slices.Clone(tags)
	slices.Sort(s)
	return strings.Join(slices.Compact(s), sep)
}

// Pools returns the pools any of whose workers may run a task of this
// policy (see [DispatchPolicy.Pool]).
func (d DispatchPolicy) Pools() []string { return PoolMembers(d.Pool()) }

// RouteKey returns the hash_key an instance of task routes by: the
// policy's, or with strategy "hash" and none, the task's name, so that
// the same task keeps to the same node. A task name has no "{{".
func (d DispatchPolicy) RouteKey(task string) string {
	if d.Strategy == DispatchHash && d.HashKey == "" {
		return task
	}
	return d.HashKey
}

// The task types that mark a drill's tasks (see package drill): ax drill
// applies a copy of the task it rehearses under one of these, so that
// metrics, alerts and reports can tell drill work from real work.
// Task definitions reach PostgreSQL only through the API, under an
// operator's token: no NATS publisher can make a task a drill task.
const (
	// DrillTaskType marks a drill's copy of a task.
	DrillTaskType = "drill"
	// DrillJitterTaskType marks a drill's copy whose reports a dispatcher
	// run with drill faults on records late: it refuses the first
	// [DrillReportFaults] deliveries of each report, as a database that
	// fails transactions would.
	DrillJitterTaskType = "drill-jitter"
)

// DrillReportFaults is how many deliveries of each report of a
// [DrillJitterTaskType] task a dispatcher with drill faults on refuses
// before it records the report.
const DrillReportFaults = 2

// IsDrillTaskType reports whether a task of type t is a drill's.
func IsDrillTaskType(t string) bool { return t == DrillTaskType || t == DrillJitterTaskType }

// ConformanceTaskType marks the tasks of ax conformance executor, which
// fail, time out and are cancelled on purpose.
const ConformanceTaskType = "conformance"

// RehearsalTaskTypes are the task types of rehearsals: a drill's copies
// and the conformance kit's tasks. Their failures are meant: the alert
// rules, the health report and the dashboard's summary leave them out,
// and a rehearsal deletes its tasks when it ends.
var RehearsalTaskTypes = []string{DrillTaskType, DrillJitterTaskType, ConformanceTaskType}

// IsRehearsalTaskType reports whether a task of type t is a rehearsal's
// (see [RehearsalTaskTypes]).
func IsRehearsalTaskType(t string) bool { return slices.Contains(RehearsalTaskTypes, t) }
