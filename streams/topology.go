package streams

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/ax-scheduler/ax/schemas"
)

// DefaultPrefix is the subject prefix of a default installation.
const DefaultPrefix = "ax"

var prefixRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// Topology names every subject, stream, consumer and bucket of one
// installation. The zero value is not usable; make one with [NewTopology].
type Topology struct {
	prefix string
}

// NewTopology returns the topology for prefix; "" means [DefaultPrefix].
// A prefix is 1–32 lower-case letters, digits, '_' or '-', starting with a letter.
func NewTopology(prefix string) (Topology, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !prefixRE.MatchString(prefix) {
		return Topology{}, fmt.Errorf("subject prefix %q: use 1-32 lower-case letters, digits, '_' or '-', starting with a letter", prefix)
	}
	return Topology{prefix: prefix}, nil
}

// Default is the topology of [DefaultPrefix].
func Default() Topology { return Topology{prefix: DefaultPrefix} }

// Prefix returns the subject prefix.
func (t Topology) Prefix() string { return t.prefix }

// IsZero reports whether t is the zero Topology, which names nothing: an
// Options field left zero, which its service fills with [Default].
func (t Topology) IsZero() bool { return t.prefix == "" }

// subject joins the prefix and parts with dots in one allocation: it names
// a subject or two for every message of the hot path, where fmt or
// strings.Join cost two or three.
func (t Topology) subject(parts ...string) string {
	n := len(t.prefix) + len(parts)
	for _, p := range parts {
		n += len(p)
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(t.prefix)
	for _, p := range parts {
		b.WriteByte('.')
		b.WriteString(p)
	}
	return b.String()
}

// Trigger is the subject an outside publisher fires task on:
// ax.trigger.<task>, in AX_TRIGGERS. A firing there is taken as an event
// of operator "nats": it may not name an operator, a manual source or one
// of AX's own kinds (chain, retry, cancel, shard), and a cron firing counts
// only when its tick is one of the task's cron schedule (see
// [Topology.TriggersStream]).
func (t Topology) Trigger(task string) string { return t.subject("trigger", task) }

// Origin says who may have published a firing, by its subject.
type Origin uint8

// The origins of firings.
const (
	// FromOutside is a firing on ax.trigger.<task>: any NATS user allowed
	// to fire (the trigger service's cron firings too).
	FromOutside Origin = iota
	// FromAPI is a firing or cancel order on ax.fire.<task>.api: the api's
	// (or the dispatcher's) NATS user.
	FromAPI
	// FromAX is a firing on ax.fire.<task>.ax: the dispatcher's own chain
	// firings, retries, reroutes and the delayed firings it scheduled.
	FromAX
)

// The last tokens of the internal firing subjects.
const (
	apiTrigger = "api"
	axTrigger  = "ax"
)

// APITrigger is the subject of the firings and cancel orders of task that
// the API publishes: ax.fire.<task>.api, in AX_FIRINGS. Only the api's
// (and the dispatcher's) NATS users may publish there, so a firing on it
// may state its source (manual) and operator; the dispatcher records every
// firing on [Topology.Trigger] as an event of operator "nats", whatever it says.
func (t Topology) APITrigger(task string) string { return t.subject("fire", task, apiTrigger) }

// AXTrigger is the subject of the dispatcher's own firings of task:
// ax.fire.<task>.ax, in AX_FIRINGS, which only the dispatcher's NATS user
// may publish to. Chain firings, retries and reroutes are taken from here
// only.
func (t Topology) AXTrigger(task string) string { return t.subject("fire", task, axTrigger) }

// TriggerTask returns the task named by a firing subject, of
// [Topology.Trigger]'s, [Topology.APITrigger]'s or [Topology.AXTrigger]'s form.
func (t Topology) TriggerTask(subject string) (string, bool) {
	task, _, ok := t.TriggerFrom(subject)
	return task, ok
}

// TriggerFrom returns the task named by a firing subject and who may have
// published it. A subject of more tokens than its form is none.
func (t Topology) TriggerFrom(subject string) (task string, from Origin, ok bool) {
	if rest, ok := strings.CutPrefix(subject, t.prefix+".trigger."); ok {
		return rest, FromOutside, rest != "" && !strings.Contains(rest, ".")
	}
	rest, ok := strings.CutPrefix(subject, t.prefix+".fire.")
	if !ok {
		return "", 0, false
	}
	task, kind, ok := strings.Cut(rest, ".")
	switch {
	case !ok || task == "":
		return "", 0, false
	case kind == apiTrigger:
		return task, FromAPI, true
	case kind == axTrigger:
		return task, FromAX, true
	}
	return "", 0, false
}

// Sched is the subject of a one-shot schedule that publishes a firing later.
func (t Topology) Sched(eventID string) string { return t.subject("sched", eventID) }

// SchedFiring is the subject of the one-shot schedule that publishes the
// firing eventID of task at its due time: ax.sched.<task>.<event_id>. A new
// schedule on a subject replaces the one there, so each (task, event id) has
// its own subject. An event id that is not a run of valid subject tokens
// (an empty token, or a token "*" or ">") is replaced by the hex SHA-256 of it.
func (t Topology) SchedFiring(task, eventID string) string {
	token := eventID
	for tok := range strings.SplitSeq(eventID, ".") {
		if tok == "" || tok == "*" || tok == ">" {
			sum := sha256.Sum256([]byte(eventID))
			token = hex.EncodeToString(sum[:])
			break
		}
	}
	return t.subject("sched", task, token)
}

// IsSchedFiring reports whether subject is of [Topology.SchedFiring]'s
// form (ax.sched.<task>.<event_id>), the schedules the api may write too,
// rather than [Topology.Sched]'s of one token, which only the dispatcher
// writes.
func (t Topology) IsSchedFiring(subject string) bool {
	rest, ok := strings.CutPrefix(subject, t.prefix+".sched.")
	return ok && strings.Contains(rest, ".")
}

// Dispatch is the subject of a pool's work at one priority for one
// handler: ax.dispatch.<pool>.<priority>.<handler>. The handler token (a
// handler name may hold dots, so it may be several subject tokens) makes
// capability-aware routing a matter of subjects: only the executors that
// registered the handler pull the consumer of that subject (see
// [Topology.PoolConsumer]), so an executor never receives an attempt it
// cannot run, and an attempt that no live executor can run waits in the
// stream until one comes.
func (t Topology) Dispatch(pool string, p schemas.Priority, handler string) string {
	return t.subject("dispatch", pool, string(p), handler)
}

// WorkerPool is the reserved pool name whose dispatch and ready subjects
// address one executor: no task's tags may name it.
const WorkerPool = "worker"

// DispatchWorker is the subject of the work routed to one executor, by its
// worker id: ax.dispatch.worker.<worker_id>. The dispatcher publishes there
// the attempts that strategies "hash" and "worker", and min_worker_version,
// route to that executor.
func (t Topology) DispatchWorker(workerID string) string {
	return t.subject("dispatch", WorkerPool, workerID)
}

// Report is the subject of the reports of worker workerID on an attempt of
// instanceID, an instance of pool: ax.report.<pool>.<worker_id>.<instance>.
// The pool and the worker are in the subject so that NATS permissions can
// bind them to the credential that publishes (an executor's user may
// publish only on its pools' report subjects, and only its own worker's
// when it is pinned to one), and the dispatcher applies a report only when
// they are the attempt's (see [Topology.ReportFrom]).
func (t Topology) Report(pool, workerID string, instanceID int64) string {
	return t.subject("report", pool, workerID, strconv.FormatInt(instanceID, 10))
}

// reportBatch is the last token of [Topology.ReportBatch]'s subjects.
const reportBatch = "batch"

// ReportBatch is the subject of worker workerID's report batches
// ([schemas.ReportBatch]) on attempts of pool: ax.report.<pool>.<worker_id>.batch.
// Scoped like [Topology.Report], so that NATS permissions bind the pool
// and the worker to the publisher, and inside [Topology.Reports]'s
// pattern, so that an executor's user may publish there exactly when it
// may publish that worker's single reports.
func (t Topology) ReportBatch(pool, workerID string) string {
	return t.subject("report", pool, workerID, reportBatch)
}

// AllReportBatches is the subject pattern of every report batch, of any
// pool and worker: what the reaper reads when it looks for an attempt's
// final report.
func (t Topology) AllReportBatches() string { return t.subject("report", "*", "*", reportBatch) }

// ReportBatchFrom returns the pool and the worker id a report batch's
// subject names, false when subject is no subject of [Topology.ReportBatch]'s form.
func (t Topology) ReportBatchFrom(subject string) (pool, workerID string, ok bool) {
	rest, found := strings.CutPrefix(subject, t.prefix+".report.")
	if !found {
		return "", "", false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] != reportBatch {
		return "", "", false
	}
	return parts[0], parts[1], true
}

// Reports is the subject pattern of the reports of worker workerID ("*":
// any worker) of pool: what an executor's user may publish.
func (t Topology) Reports(pool, workerID string) string {
	return t.subject("report", pool, workerID, "*")
}

// InstanceReports is the subject pattern of every report on instanceID.
func (t Topology) InstanceReports(instanceID int64) string {
	return t.subject("report", "*", "*", strconv.FormatInt(instanceID, 10))
}

// ReportFrom returns the pool and the worker id a report's subject names,
// false when subject is no report subject of [Topology.Report]'s form.
func (t Topology) ReportFrom(subject string) (pool, workerID string, ok bool) {
	rest, found := strings.CutPrefix(subject, t.prefix+".report.")
	if !found {
		return "", "", false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return "", "", false
	}
	if _, err := strconv.ParseInt(parts[2], 10, 64); err != nil {
		return "", "", false
	}
	return parts[0], parts[1], true
}

// Fence is the core NATS subject on which worker workerID of pool asks
// the dispatchers whether a redelivered attempt of instanceID may start:
// ax.fence.<pool>.<worker_id>.<instance>. Scoped like [Topology.Report],
// so that NATS permissions bind the pool and the worker to the asker's
// credential, and the dispatcher answers only about the pool's attempts.
func (t Topology) Fence(pool, workerID string, instanceID int64) string {
	return t.subject("fence", pool, workerID, strconv.FormatInt(instanceID, 10))
}

// Fences is the subject pattern of the fence questions of worker workerID
// ("*": any worker) of pool: what an executor's user may publish.
func (t Topology) Fences(pool, workerID string) string {
	return t.subject("fence", pool, workerID, "*")
}

// AllFences is the subject pattern of every fence question, the one the
// dispatchers answer (as one queue group).
func (t Topology) AllFences() string { return t.subject("fence", ">") }

// FenceFrom returns the pool, the worker id and the instance a fence
// question's subject names, false when subject is no subject of
// [Topology.Fence]'s form.
func (t Topology) FenceFrom(subject string) (pool, workerID string, instanceID int64, ok bool) {
	rest, found := strings.CutPrefix(subject, t.prefix+".fence.")
	if !found {
		return "", "", 0, false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return "", "", 0, false
	}
	id, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil || id <= 0 {
		return "", "", 0, false
	}
	return parts[0], parts[1], id, true
}

// Audit is the subject of a task's audit records.
func (t Topology) Audit(task string) string { return t.subject("audit", task) }

// Log is the subject of the task log lines that worker workerID ships for
// instance instanceID: ax.log.<instance_id>.<worker_id>. The worker is in
// the subject so that NATS permissions bind it to the credential that
// publishes (an executor's user may publish only its own worker's lines),
// and a reader can tell whose lines they are (see [Topology.LogFrom]).
func (t Topology) Log(instanceID int64, workerID string) string {
	return t.subject("log", strconv.FormatInt(instanceID, 10), workerID)
}

// InstanceLogs are the subject patterns of every task log line of
// instanceID: each worker's ([Topology.Log]), and the lines of executors
// older than the worker token, on ax.log.<instance_id>.
func (t Topology) InstanceLogs(instanceID int64) []string {
	id := strconv.FormatInt(instanceID, 10)
	return []string{t.subject("log", id), t.subject("log", id, "*")}
}

// Logs is the subject pattern of the task log lines of worker workerID
// ("*": any worker), of any instance: what an executor's user may publish.
func (t Topology) Logs(workerID string) string { return t.subject("log", "*", workerID) }

// LogFrom returns the worker id a task log line's subject names, "" for a
// line of an executor older than the worker token (ax.log.<instance_id>);
// false when subject is no log subject.
func (t Topology) LogFrom(subject string) (workerID string, ok bool) {
	rest, found := strings.CutPrefix(subject, t.prefix+".log.")
	if !found {
		return "", false
	}
	id, worker, _ := strings.Cut(rest, ".")
	if n, err := strconv.ParseInt(id, 10, 64); err != nil || n <= 0 || strings.Contains(worker, ".") {
		return "", false
	}
	return worker, true
}

// GrantKey is the key in the workers bucket that shows that worker
// workerID's credential grants it handler in pool:
// <worker_id>.<pool>.<handler>. NATS permissions let an executor's user
// write only the grant keys of its own scope (its worker, each pool and
// handler it names), so the dispatcher believes a worker serves a pool and
// a handler only when the worker's heartbeat says so and that key is
// there. A worker id and a pool are one subject token and a handler may
// have dots, so the handler comes last and the key parses one way (see
// [ParseGrantKey]). A pool may hold '+', which nats.go's key check
// refuses: write the key by publishing on [Topology.GrantSubject].
func GrantKey(workerID, pool, handler string) string {
	return workerID + "." + pool + "." + handler
}

// GrantSubject is the subject that writes [GrantKey] in the workers bucket.
func (t Topology) GrantSubject(workerID, pool, handler string) string {
	return "$KV." + t.WorkersBucket() + "." + GrantKey(workerID, pool, handler)
}

// ParseGrantKey returns the worker, pool and handler of a grant key of the
// workers bucket; false for any other key (a worker's heartbeat, whose key
// is its id, has no dot).
func ParseGrantKey(key string) (workerID, pool, handler string, ok bool) {
	workerID, rest, ok1 := strings.Cut(key, ".")
	pool, handler, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || workerID == "" || pool == "" || handler == "" {
		return "", "", "", false
	}
	return workerID, pool, handler, true
}

// Control is the core NATS subject a worker listens on for orders (cancel now).
func (t Topology) Control(workerID string) string { return t.subject("control", workerID) }

// Ready is the core NATS subject the dispatcher rings once per batch that
// routes work to a pool's subject for one priority and handler:
// ax.ready.<pool>.<priority>.<handler>, so that idle executors fetch at
// once, and only the consumer that has the work, instead of polling.
func (t Topology) Ready(pool string, p schemas.Priority, handler string) string {
	return t.subject("ready", pool, string(p), handler)
}

// ReadyPool is the wildcard of every doorbell of a pool's queues
// (ax.ready.<pool>.>), the one subscription an executor makes per pool.
func (t Topology) ReadyPool(pool string) string { return t.subject("ready", pool, ">") }

// ReadyQueue returns the priority and handler that a doorbell subject of
// pool (see [Topology.Ready]) names.
func (t Topology) ReadyQueue(pool, subject string) (schemas.Priority, string, bool) {
	rest, ok := strings.CutPrefix(subject, t.subject("ready", pool)+".")
	if !ok {
		return "", "", false
	}
	p, handler, ok := strings.Cut(rest, ".")
	return schemas.Priority(p), handler, ok && handler != ""
}

// ReadyWorker is the core NATS subject the dispatcher rings once per batch
// that routes work to one executor's own subject.
func (t Topology) ReadyWorker(workerID string) string {
	return t.subject("ready", WorkerPool, workerID)
}

func (t Topology) stream(name string) string { return strings.ToUpper(t.prefix) + "_" + name }

// Keeper is the subject of the keeper of stream (AX_DISPATCH or
// AX_REPORTS; see [Keeper]): ax.keep.<stream>, a subject of that stream
// that no consumer filters.
func (t Topology) Keeper(stream string) string { return t.subject("keep", stream) }

// TriggersStream is the stream of outside publishers' firings
// (ax.trigger.<task>): no message schedules, no rollups, so no header of
// a message there acts beyond that message.
func (t Topology) TriggersStream() string { return t.stream("TRIGGERS") }

// FiringsStream is the stream of the firings AX's own services publish
// (ax.fire.<task>.api|ax) and of the one-shot schedules of later firings
// (ax.sched.>): only the api's and the dispatcher's users write there.
func (t Topology) FiringsStream() string { return t.stream("FIRINGS") }

// Stream names.
func (t Topology) DispatchStream() string { return t.stream("DISPATCH") }
func (t Topology) ReportsStream() string  { return t.stream("REPORTS") }
func (t Topology) AuditStream() string    { return t.stream("AUDIT") }
func (t Topology) LogsStream() string     { return t.stream("LOGS") }

// Bucket names.
func (t Topology) WorkersBucket() string { return t.prefix + "-workers" }
func (t Topology) LeasesBucket() string  { return t.prefix + "-leases" }
func (t Topology) MutexBucket() string   { return t.prefix + "-mutex" }
func (t Topology) OnceBucket() string    { return t.prefix + "-once" }
func (t Topology) TasksBucket() string   { return t.prefix + "-tasks" }

// LeaseKey is the ax-leases key of one attempt of an instance. A key per
// attempt makes creation a plain create-if-absent and lets an expiry name the
// attempt it fences out.
func LeaseKey(instanceID int64, attempt int) string {
	var b [41]byte
	return string(appendLeaseKey(b[:0], instanceID, attempt))
}

func appendLeaseKey(b []byte, instanceID int64, attempt int) []byte {
	return strconv.AppendInt(append(strconv.AppendInt(b, instanceID, 10), '.'), int64(attempt), 10)
}

// leaseKeyIs reports whether key is LeaseKey(instanceID, attempt),
// without making that string.
func leaseKeyIs(key string, instanceID int64, attempt int) bool {
	var b [41]byte
	return string(appendLeaseKey(b[:0], instanceID, attempt)) == key
}

// ParseLeaseKey is the inverse of [LeaseKey]: it accepts only the keys
// LeaseKey makes, for a positive instance id and attempt. Another spelling
// of the same numbers ("01.1", "+1.1") is not that attempt's lease, so its
// expiry must not fence the attempt out.
func ParseLeaseKey(key string) (instanceID int64, attempt int, ok bool) {
	id, att, found := strings.Cut(key, ".")
	if !found {
		return 0, 0, false
	}
	i, err1 := strconv.ParseInt(id, 10, 64)
	a, err2 := strconv.Atoi(att)
	if err1 != nil || err2 != nil || i <= 0 || a <= 0 || !leaseKeyIs(key, i, a) {
		return 0, 0, false
	}
	return i, a, true
}
