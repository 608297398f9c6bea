// Package conformance checks that an executor worker — in any language —
// speaks AX's executor protocol (docs/executor-protocol.md): [Executor]
// applies a fixed set of tasks whose handlers the worker implements (the
// conformance handlers of the protocol's page), fires them at the worker's
// pool through a running AX, watches the pool's reports and the leases and
// workers buckets on the wire, and returns a verdict of one check per rule.
// ax conformance executor is its command.
package conformance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/drill"
	"github.com/ax-scheduler/ax/internal/wait"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// DefaultHandlerPrefix is the prefix of the conformance handlers' names.
const DefaultHandlerPrefix = "conformance."

// The conformance handlers, without their prefix: the worker registers
// the first five and must not register Missing.
const (
	Echo      = "echo"
	Fail      = "fail"
	Permanent = "permanent"
	Sleep     = "sleep"
	Log       = "log"
	Missing   = "missing"
)

// Handlers are the handlers a worker must register, without their prefix.
var Handlers = []string{Echo, Fail, Permanent, Sleep, Log}

// TaskType is the task type of the tasks the kit applies.
const TaskType = schemas.ConformanceTaskType

// Options configures [Executor]. Zero fields take the stated defaults.
type Options struct {
	// Pool is the pool the worker under test serves. Required.
	Pool string
	// HandlerPrefix prefixes the conformance handlers' names (default
	// [DefaultHandlerPrefix]).
	HandlerPrefix string
	// Client talks to the AX API with a token that may apply tasks, fire
	// and cancel (operator or admin). Required.
	Client *apiclient.Client
	// Conn is a NATS connection that may subscribe to the pool's report
	// subjects, the leases and workers buckets' subjects and the workers'
	// control subjects, and read the workers bucket: the dispatcher's user
	// has these rights. Required.
	Conn *nats.Conn
	// Topology names the subjects (default streams.Default()).
	Topology streams.Topology
	// Drain asks the worker to shut down (SIGTERM to its process, say),
	// for the drain check; nil leaves the check "not checked". It is
	// called last: the worker is gone afterwards.
	Drain func() error
	// Grace is how soon after a cancel's delivery on ax.control.<worker>,
	// or after its deadline, an attempt must be reported (default 5 s, the
	// dispatcher's timeout grace).
	Grace time.Duration
	// Wait bounds each wait for an instance or a report (default 2 min).
	Wait time.Duration
	// Logger receives the kit's progress (default: none).
	Logger zerolog.Logger
	// Keep leaves the kit's tasks in place when it ends, to inspect them;
	// by default it cancels what of theirs still runs or waits and
	// deletes them (see [drill.RemoveTasks]).
	Keep bool
}

// The timings of the tasks the kit applies.
const (
	// deadlineTimeout is the timeout of the deadline task, whose attempt
	// sleeps far longer.
	deadlineTimeout = 2 * time.Second
	// longSleep is how long the cancel and deadline attempts would sleep.
	longSleep = time.Minute
	// drainSleep is how long the attempt running through the drain sleeps.
	drainSleep = 3 * time.Second
	// failures is how many attempts the fail task fails, of maxAttempts.
	failures    = 2
	maxAttempts = 3
	// logLines is how many lines the log task writes.
	logLines = 3
	// registrationWait is how long the kit waits for a worker of the
	// pool to register before it gives up.
	registrationWait = 30 * time.Second
	// signalSlack is how long the kit lets a worker take to notice its
	// SIGTERM before it fires work the worker must no longer take.
	signalSlack = 500 * time.Millisecond
)

// kit is one run of the conformance kit.
type kit struct {
	opts   Options
	obs    *observer
	report drill.Report
	names  map[string]string // task by kind
	start  time.Time
	keys   map[string]bool // the keys of the workers bucket at the start
}

// Executor runs the conformance kit against the worker(s) serving
// opts.Pool and returns the verdict. It returns an error only when the kit
// could not run: bad options, the API or NATS not there, no worker that
// registered the conformance handlers in the pool.
func Executor(ctx context.Context, opts Options) (*drill.Report, error) {
	if opts.Pool == "" {
		return nil, errors.New("conformance: name the pool the worker serves (--pool)")
	}
	if opts.Client == nil || opts.Conn == nil {
		return nil, errors.New("conformance: Options.Client and Options.Conn are required")
	}
	if opts.HandlerPrefix == "" {
		opts.HandlerPrefix = DefaultHandlerPrefix
	}
	if !regexp.MustCompile(`^[A-Za-z0-9._-]{0,100}$`).MatchString(opts.HandlerPrefix) {
		return nil, fmt.Errorf("conformance: handler prefix %q: use letters, digits, '.', '_' and '-' only", opts.HandlerPrefix)
	}
	if opts.Topology.IsZero() {
		opts.Topology = streams.Default()
	}
	if opts.Grace <= 0 {
		opts.Grace = 5 * time.Second
	}
	if opts.Wait <= 0 {
		opts.Wait = 2 * time.Minute
	}
	tags, err := poolTags(opts.Pool)
	if err != nil {
		return nil, err
	}
	k := &kit{opts: opts, names: map[string]string{}, start: time.Now()}
	k.report.Title = "ax conformance executor --pool " + opts.Pool
	// A worker started a moment before the kit (worker & ax conformance
	// executor …) may not have registered yet: the kit waits for it, up
	// to registrationWait.
	workers, err := k.workers(ctx)
	for deadline := time.Now().Add(min(registrationWait, opts.Wait)); err == nil && len(workers) == 0 && time.Now().Before(deadline); {
		if !wait.Sleep(ctx, 250*time.Millisecond) {
			return nil, ctx.Err()
		}
		workers, err = k.workers(ctx)
	}
	if err != nil {
		return nil, err
	}
	if len(workers) == 0 {
		return nil, fmt.Errorf("conformance: no worker in bucket %s serves pool %s with handler %s: start the worker under test first (it registers %s)",
			opts.Topology.WorkersBucket(), opts.Pool, opts.HandlerPrefix+Echo, strings.Join(k.handlerNames(), ", "))
	}
	if k.obs, err = observe(opts.Conn, opts.Topology, opts.Pool); err != nil {
		return nil, fmt.Errorf("conformance: %w", err)
	}
	defer k.obs.stop()
	defer k.end(ctx)
	for _, kind := range []string{Echo, Fail, Permanent, Sleep, "deadline", Log, Missing} {
		if err := k.apply(ctx, kind, tags); err != nil {
			return nil, err
		}
	}
	k.registration(workers)
	if err := k.run(ctx); err != nil {
		return nil, err
	}
	return &k.report, nil
}

// end removes the kit's tasks unless Keep: it cancels what of theirs has
// not ended (the unknown handler's attempt waits for ever), deletes them,
// and purges that attempt from AX_DISPATCH, where no consumer takes it.
// The worker under test keeps its queues: they are its own. What it did
// goes into the report as the fact "clean-up".
func (k *kit) end(ctx context.Context) {
	if k.opts.Keep {
		k.report.Fact("clean-up", "kept (--keep): the conformance tasks")
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	var tasks []string
	for _, kind := range []string{Echo, Fail, Permanent, Sleep, "deadline", Log, Missing} {
		if name, ok := k.names[kind]; ok {
			tasks = append(tasks, name)
		}
	}
	err := drill.RemoveTasks(ctx, k.opts.Client, tasks)
	if js, jerr := jetstream.New(k.opts.Conn); jerr == nil {
		subject := k.opts.Topology.Dispatch(k.opts.Pool, "*", k.opts.HandlerPrefix+Missing)
		if s, serr := js.Stream(ctx, k.opts.Topology.DispatchStream()); serr == nil {
			serr = s.Purge(ctx, jetstream.WithPurgeSubject(subject))
			err = errors.Join(err, serr)
		} else {
			err = errors.Join(err, serr)
		}
	}
	if err != nil {
		k.report.Fact("clean-up", "incomplete: "+err.Error())
		return
	}
	k.report.Fact("clean-up", fmt.Sprintf("deleted the %d conformance tasks (--keep leaves them)", len(tasks)))
}

func (k *kit) handlerNames() []string {
	var out []string
	for _, h := range Handlers {
		out = append(out, k.opts.HandlerPrefix+h)
	}
	return out
}

// poolTags returns the tags of the tasks that go to pool.
func poolTags(pool string) ([]string, error) {
	if pool == schemas.DefaultPool {
		return nil, nil
	}
	tags := strings.Split(pool, "+")
	if (schemas.DispatchPolicy{TagsAll: tags}).Pool() != pool {
		return nil, fmt.Errorf("conformance: pool %q is no pool of tags: tags sorted and joined with '+' (\"eu+gpu\"), or %q", pool, schemas.DefaultPool)
	}
	return tags, nil
}

// taskName is the name of the kit's task of kind for pool.
func taskName(pool, kind string) string {
	name := "conformance-" + kind + "-" + strings.ReplaceAll(pool, "+", "-")
	if len(name) <= 64 {
		return name
	}
	sum := sha256.Sum256([]byte(pool))
	return "conformance-" + kind + "-" + hex.EncodeToString(sum[:8])
}

// apply applies the kit's task of kind.
func (k *kit) apply(ctx context.Context, kind string, tags []string) error {
	handler, timeout, retry := kind, "30s", schemas.Retry{MaxAttempts: 1}
	switch kind {
	case Fail, Permanent:
		second := 1.0
		retry = schemas.Retry{MaxAttempts: maxAttempts, Backoff: schemas.BackoffFixed, InitialIntervalSec: &second, MaxIntervalSec: &second}
	case Sleep:
		timeout = "2m"
	case "deadline":
		handler, timeout = Sleep, deadlineTimeout.String()
	}
	name := taskName(k.opts.Pool, kind)
	def := map[string]any{
		"task_name":   name,
		"task_type":   TaskType,
		"description": "ax conformance executor: the " + kind + " check of pool " + k.opts.Pool + " (safe to delete)",
		"triggers":    []any{map[string]string{"type": "manual"}},
		"execution":   map[string]any{"handler": k.opts.HandlerPrefix + handler, "timeout": timeout, "retry": retry},
	}
	if len(tags) > 0 {
		// tags_all names the one pool of the tags joined with '+': the
		// pool under test, and none other.
		def["dispatch"] = map[string]any{"tags_all": tags}
	}
	body, err := json.Marshal(def)
	if err != nil {
		return err
	}
	if _, err := k.opts.Client.ApplyTask(ctx, body, "application/json"); err != nil {
		return fmt.Errorf("conformance: apply task %s: %w", name, err)
	}
	k.names[kind] = name
	return nil
}

// workers returns the records in the workers bucket of the workers that
// serve the pool and registered the echo handler, by id, raw.
func (k *kit) workers(ctx context.Context) (map[string]json.RawMessage, error) {
	js, err := jetstream.New(k.opts.Conn)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, k.opts.Topology.WorkersBucket())
	if err != nil {
		return nil, fmt.Errorf("conformance: look up bucket %s: %w", k.opts.Topology.WorkersBucket(), err)
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("conformance: list bucket %s: %w", k.opts.Topology.WorkersBucket(), err)
	}
	out := map[string]json.RawMessage{}
	k.keys = map[string]bool{}
	for key := range keys.Keys() {
		k.keys[key] = true
		e, err := kv.Get(ctx, key)
		if err != nil {
			continue
		}
		var w schemas.Worker
		if json.Unmarshal(e.Value(), &w) == nil && slices.Contains(w.Pools, k.opts.Pool) && slices.Contains(w.Handlers, k.opts.HandlerPrefix+Echo) {
			out[key] = e.Value()
		}
	}
	return out, nil
}

// registration checks the worker records found at the start.
func (k *kit) registration(workers map[string]json.RawMessage) {
	var bad, protoBad, protoMissing []string
	for id, raw := range workers {
		var w schemas.Worker
		_ = json.Unmarshal(raw, &w)
		var fields map[string]json.RawMessage
		_ = json.Unmarshal(raw, &fields)
		var missing []string
		for _, h := range k.handlerNames() {
			if !slices.Contains(w.Handlers, h) {
				missing = append(missing, h)
			}
		}
		switch {
		case w.ID != id:
			bad = append(bad, fmt.Sprintf("%s: record id %q", id, w.ID))
		case len(missing) > 0:
			bad = append(bad, fmt.Sprintf("%s: lacks %s", id, strings.Join(missing, ", ")))
		case slices.Contains(w.Handlers, k.opts.HandlerPrefix+Missing):
			bad = append(bad, fmt.Sprintf("%s: registers %s, which it must not", id, k.opts.HandlerPrefix+Missing))
		case w.Slots < 1 || w.StartedAt.IsZero() || w.HeartbeatAt.IsZero():
			bad = append(bad, fmt.Sprintf("%s: slots %d, started_at %s, heartbeat_at %s", id, w.Slots, w.StartedAt, w.HeartbeatAt))
		}
		switch _, ok := fields["protocol"]; {
		case !ok:
			protoMissing = append(protoMissing, id)
		case w.Protocol < 1:
			protoBad = append(protoBad, fmt.Sprintf("%s: %d", id, w.Protocol))
		}
	}
	ids := sortedKeys(workers)
	k.report.Expect("registration: worker record",
		"a record per worker in "+k.opts.Topology.WorkersBucket()+": its pools, the conformance handlers but not "+k.opts.HandlerPrefix+Missing+", slots, started_at, heartbeat_at",
		orOK(bad, "workers "+strings.Join(ids, ", ")), len(bad) == 0)
	var ungranted []string
	for _, id := range ids {
		for _, h := range k.handlerNames() {
			if key := streams.GrantKey(id, k.opts.Pool, h); !k.keys[key] {
				ungranted = append(ungranted, key)
			}
		}
	}
	k.report.Expect("registration: grant keys",
		"a grant key <worker_id>.<pool>.<handler> per conformance handler beside each record, renewed with it: the dispatcher routes to a worker only what these keys back",
		orOK(ungranted, "present for "+strings.Join(ids, ", ")), len(ungranted) == 0)
	c := drill.Check{Name: "registration: protocol version", Expected: fmt.Sprintf("protocol %d or later in the record", schemas.ExecutorProtocol),
		Observed: orOK(protoBad, "declared by "+strings.Join(ids, ", ")), Pass: len(protoBad) == 0}
	if len(protoMissing) > 0 && len(protoBad) == 0 {
		c.Warn, c.Observed = true, "left out by "+strings.Join(protoMissing, ", ")+": counts as 1; declare it"
	}
	k.report.Add(c)
}

// run fires the tasks and makes the checks.
func (k *kit) run(ctx context.Context) error {
	echoPayload := json.RawMessage(`{"conformance":"echo","n":[1,2.5,"x"],"nested":{"a":null,"b":true}}`)
	fire := func(kind string, payload string) (int64, error) {
		return k.fire(ctx, kind, json.RawMessage(payload))
	}
	ids := map[string]int64{}
	for _, f := range []struct{ kind, payload string }{
		{Echo, string(echoPayload)},
		{Fail, fmt.Sprintf(`{"failures":%d}`, failures)},
		{Permanent, `{}`},
		{Log, fmt.Sprintf(`{"lines":%d}`, logLines)},
		{"deadline", fmt.Sprintf(`{"ms":%d}`, longSleep.Milliseconds())},
		{Missing, `{}`},
		{Sleep, fmt.Sprintf(`{"ms":%d}`, longSleep.Milliseconds())},
	} {
		id, err := fire(f.kind, f.payload)
		if err != nil {
			return err
		}
		ids[f.kind] = id
		k.report.Fact("instance "+f.kind, id)
	}

	// Cancel: the long sleep, once it is reported started.
	k.cancel(ctx, ids[Sleep])

	ended, err := k.waitEnds(ctx, ids, []string{Echo, Fail, Permanent, Log, "deadline", Sleep})
	if err != nil {
		return err
	}
	k.checkEcho(ended[Echo], echoPayload)
	k.checkFail(ended[Fail])
	k.checkPermanent(ended[Permanent])
	k.checkDeadline(ended["deadline"])
	k.checkLogs(ctx, ended[Log])
	k.checkMissing(ctx, ids[Missing])
	all := []int64{ids[Echo], ids[Fail], ids[Permanent], ids[Log], ids["deadline"], ids[Sleep]}
	k.checkReports(ctx, all)
	k.checkLeases(all)
	k.checkCreateOnly(all)
	k.checkAcksConfirmed()
	k.checkLogsBeforeFinal(ended[Log])
	if err := k.checkFence(ctx); err != nil {
		return err
	}
	k.checkHeartbeats(ctx, all)
	return k.drain(ctx)
}

// fire fires the kit's task of kind and returns its instance id, waiting
// up to the kit's wait for the dispatcher to create it.
func (k *kit) fire(ctx context.Context, kind string, payload json.RawMessage) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, k.opts.Wait)
	defer cancel()
	id, err := k.opts.Client.FireInstance(ctx, k.names[kind], wire.FireRequest{Payload: payload, Operator: "ax conformance"})
	if err != nil {
		return 0, fmt.Errorf("conformance: %w", err)
	}
	return id, nil
}

// waitEnds waits for the instances of kinds to end and returns them as
// they are. An instance that does not end within the kit's wait (a worker
// that runs nothing, or never reports) fails the check "ends: every
// instance ends", and the kit goes on with the instances as they are, no
// longer waiting for the rest: their own checks then fail with what they
// show. It returns an error only when ctx ends.
func (k *kit) waitEnds(ctx context.Context, ids map[string]int64, kinds []string) (map[string]schemas.Instance, error) {
	ended := map[string]schemas.Instance{}
	var late []string
	for _, kind := range kinds {
		if len(late) > 0 {
			inst, err := k.opts.Client.GetInstance(ctx, ids[kind])
			if err != nil {
				return nil, fmt.Errorf("conformance: %w", err)
			}
			if !inst.State.Terminal() {
				late = append(late, fmt.Sprintf("%d (%s) %s", inst.ID, inst.Task, inst.State))
			}
			ended[kind] = inst
			continue
		}
		inst, err := k.waitEnd(ctx, ids[kind])
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			late = append(late, fmt.Sprintf("%d (%s) %s", ids[kind], inst.Task, inst.State))
		}
		ended[kind] = inst
	}
	k.report.Expect("ends: every instance ends", "each conformance instance ends within "+k.opts.Wait.String(),
		orOK(late, "all ended"), len(late) == 0)
	return ended, nil
}

// waitEnd waits for instance id to end and returns it.
func (k *kit) waitEnd(ctx context.Context, id int64) (schemas.Instance, error) {
	var inst schemas.Instance
	err := k.until(ctx, func() (bool, error) {
		var err error
		inst, err = k.opts.Client.GetInstance(ctx, id)
		return err == nil && inst.State.Terminal(), nil
	})
	if err != nil {
		return inst, fmt.Errorf("conformance: instance %d (%s) did not end within %s: it is %s", id, inst.Task, k.opts.Wait, inst.State)
	}
	return inst, nil
}

// until polls cond every 50 ms until it holds, up to the kit's wait. It
// returns an error when the wait ran out or ctx ended.
func (k *kit) until(ctx context.Context, cond func() (bool, error)) error {
	return k.within(ctx, k.opts.Wait, cond)
}

func (k *kit) within(ctx context.Context, d time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(d)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", d)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// finals returns the final reports seen on instance id, by attempt.
func (k *kit) finals(id int64) map[int]wireReport {
	out := map[int]wireReport{}
	for _, w := range k.obs.reports(id) {
		if w.err == nil && w.r.Kind.IsFinal() {
			if _, ok := out[w.r.Attempt]; !ok {
				out[w.r.Attempt] = w
			}
		}
	}
	return out
}

// startedOf returns the first started report of an attempt, if seen.
func (k *kit) startedOf(id int64, attempt int) (wireReport, bool) {
	for _, w := range k.obs.reports(id) {
		if w.err == nil && w.r.Kind == schemas.ReportStarted && w.r.Attempt == attempt {
			return w, true
		}
	}
	return wireReport{}, false
}

// cancel waits for the long sleep's attempt to be RUNNING at its worker,
// cancels the instance and checks that the worker reported the attempt
// failed within the grace of the cancel's delivery on
// ax.control.<worker>. The grace measures the worker alone: how long the
// API and the dispatcher take to send the cancel, and how long the
// dispatcher takes to record the started report first, are waited for
// (up to the kit's wait), not timed.
func (k *kit) cancel(ctx context.Context, id int64) {
	const name = "cancel: honoured within the grace"
	expected := fmt.Sprintf("after a cancel of the attempt RUNNING at the worker, the attempt's final report (failed) within %s of the cancel's delivery on %s",
		k.opts.Grace, k.opts.Topology.Control("<worker>"))
	var started wireReport
	err := k.until(ctx, func() (bool, error) {
		var ok bool
		started, ok = k.startedOf(id, 1)
		return ok, nil
	})
	k.report.Expect("started: reported for a long attempt",
		fmt.Sprintf("a started report of an attempt that runs longer than %s, after its lease", time.Second),
		fmt.Sprintf("%v", orErr(err, "seen")), err == nil)
	if err != nil {
		k.report.Expect(name, expected, "no started report of the attempt to cancel: not cancelled", false)
		return
	}
	// The cancel goes to the worker that AX records as the attempt's
	// holder: wait for the started report to be recorded.
	worker := started.r.WorkerID
	var inst schemas.Instance
	err = k.until(ctx, func() (bool, error) {
		var err error
		inst, err = k.opts.Client.GetInstance(ctx, id)
		return err == nil && inst.State == schemas.StateRunning && inst.Attempt == 1 && inst.WorkerID == worker, nil
	})
	if err != nil {
		k.report.Expect(name, expected, fmt.Sprintf("the attempt to cancel was never recorded RUNNING at %s (it is %s at attempt %d, worker %q): not cancelled",
			worker, inst.State, inst.Attempt, inst.WorkerID), false)
		return
	}
	sent := time.Now()
	if _, err := k.opts.Client.Cancel(ctx, id, "ax conformance: the cancel check"); err != nil {
		k.report.Expect(name, expected, "cancel refused: "+err.Error(), false)
		return
	}
	var order seen
	err = k.until(ctx, func() (bool, error) {
		var ok bool
		order, ok = k.obs.cancelOrder(worker, id, 1)
		return ok, nil
	})
	if err != nil {
		k.report.Expect(name, expected, fmt.Sprintf("no cancel of the attempt on %s within %s of the API's cancel", k.opts.Topology.Control(worker), k.opts.Wait), false)
		return
	}
	// The attempt would sleep for longSleep: a worker that does not honour
	// the cancel reports it succeeded then, well past the grace.
	var final wireReport
	err = k.until(ctx, func() (bool, error) {
		var ok bool
		final, ok = k.finals(id)[1]
		return ok, nil
	})
	if err != nil {
		k.report.Expect(name, expected, fmt.Sprintf("no final report from %s within %s of the cancel's delivery", worker, k.opts.Wait), false)
		return
	}
	observed, pass := cancelVerdict(sent, order, final, k.opts.Grace)
	k.report.Expect(name, expected, observed, pass)
}

func (k *kit) checkEcho(inst schemas.Instance, payload json.RawMessage) {
	k.report.Expect("echo: output recorded", "SUCCEEDED at attempt 1, output = the payload "+string(payload),
		fmt.Sprintf("%s at attempt %d, output %s", inst.State, inst.Attempt, inst.Output),
		inst.State == schemas.StateSucceeded && inst.Attempt == 1 && sameJSON(inst.Output, payload))
}

func (k *kit) checkFail(inst schemas.Instance) {
	want := fmt.Sprintf(`{"attempt":%d}`, failures+1)
	finals := k.finals(inst.ID)
	var problems []string
	for a := 1; a <= failures; a++ {
		if f, ok := finals[a]; !ok || f.r.Kind != schemas.ReportFailed || f.r.Permanent || f.r.Error == "" {
			problems = append(problems, fmt.Sprintf("attempt %d not reported failed (retryable, with its error)", a))
		}
	}
	k.report.Expect("retries: failed attempts retried",
		fmt.Sprintf("attempts 1-%d failed (retryable), attempt %d SUCCEEDED with output %s", failures, failures+1, want),
		orOK(problems, fmt.Sprintf("%s at attempt %d, output %s", inst.State, inst.Attempt, inst.Output)),
		len(problems) == 0 && inst.State == schemas.StateSucceeded && inst.Attempt == failures+1 && sameJSON(inst.Output, json.RawMessage(want)))
}

func (k *kit) checkPermanent(inst schemas.Instance) {
	f, ok := k.finals(inst.ID)[1]
	k.report.Expect("permanent: failed without retry",
		fmt.Sprintf("FAILED at attempt 1 of %d, the report permanent with its error", maxAttempts),
		fmt.Sprintf("%s at attempt %d, permanent %v: %s", inst.State, inst.Attempt, ok && f.r.Permanent, inst.Error),
		inst.State == schemas.StateFailed && inst.Attempt == 1 && ok && f.r.Permanent && f.r.Error != "")
}

func (k *kit) checkDeadline(inst schemas.Instance) {
	f, ok := k.finals(inst.ID)[1]
	expected := fmt.Sprintf("the worker stops the attempt at its deadline (timeout %s) and reports it failed within %s", deadlineTimeout, k.opts.Grace)
	if !ok {
		k.report.Expect("deadline: honoured", expected, fmt.Sprintf("no final report; the instance %s: %s", inst.State, inst.Error), false)
		return
	}
	ran := f.r.At.Sub(f.r.StartedAt)
	k.report.Expect("deadline: honoured", expected, fmt.Sprintf("%s report after %s of run: %s", f.r.Kind, ran.Round(time.Millisecond), f.r.Error),
		f.r.Kind == schemas.ReportFailed && ran <= deadlineTimeout+k.opts.Grace && ran >= deadlineTimeout-100*time.Millisecond)
}

func (k *kit) checkLogs(ctx context.Context, inst schemas.Instance) {
	var lines []schemas.LogLine
	_ = k.within(ctx, 15*time.Second, func() (bool, error) {
		page, err := k.opts.Client.Logs(ctx, inst.ID, apiclient.LogQuery{})
		if err == nil {
			lines = page.Lines
		}
		return len(lines) >= logLines, nil
	})
	var problems []string
	for i := 1; i <= logLines; i++ {
		want := fmt.Sprintf("conformance line %d of %d", i, logLines)
		if !slices.ContainsFunc(lines, func(l schemas.LogLine) bool {
			return l.Message == want && l.Level == "info" && l.InstanceID == inst.ID && l.Attempt == 1 && l.WorkerID == inst.WorkerID && l.Task == inst.Task && !l.Time.IsZero()
		}) {
			problems = append(problems, fmt.Sprintf("no line %q (level info, instance %d, attempt 1, worker %s)", want, inst.ID, inst.WorkerID))
		}
	}
	k.report.Expect("logs: shipped",
		fmt.Sprintf("%d lines on %s in %s, readable through the API", logLines, k.opts.Topology.Log(inst.ID, inst.WorkerID), k.opts.Topology.LogsStream()),
		orOK(problems, fmt.Sprintf("%d lines; instance %s", len(lines), inst.State)), len(problems) == 0 && inst.State == schemas.StateSucceeded)
}

// checkMissing checks that the attempt of the handler no worker has was
// left alone, then cancels it.
func (k *kit) checkMissing(ctx context.Context, id int64) {
	inst, err := k.opts.Client.GetInstance(ctx, id)
	_, leases := k.obs.leaseWrites(id, 1)
	reports := k.obs.reports(id)
	observed := fmt.Sprintf("%s after %s; %d lease writes, %d reports", inst.State, time.Since(k.start).Round(time.Second), len(leases), len(reports))
	if err != nil {
		observed = err.Error()
	}
	k.report.Expect("unknown handler: left alone",
		"an attempt of "+k.opts.HandlerPrefix+Missing+", which no worker registers, stays DISPATCHED: no lease, no report",
		observed, err == nil && inst.State == schemas.StateDispatched && len(leases) == 0 && len(reports) == 0)
	_, _ = k.opts.Client.Cancel(ctx, id, "ax conformance: done")
}

// checkReports checks every report seen on the instances: subject, body,
// Nats-Msg-Id, one final report per attempt, none refused.
func (k *kit) checkReports(ctx context.Context, ids []int64) {
	var problems []string
	n := 0
	for _, id := range ids {
		finals := map[int]int{}
		for _, w := range k.obs.reports(id) {
			n++
			if p := k.obs.checkReport(w, id); p != "" {
				problems = append(problems, p)
				continue
			}
			if w.r.Kind.IsFinal() {
				finals[w.r.Attempt]++
			}
		}
		for a, c := range finals {
			if c > 1 {
				problems = append(problems, fmt.Sprintf("instance %d attempt %d: %d final reports", id, a, c))
			}
		}
		inst, err := k.opts.Client.GetInstance(ctx, id)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		for _, e := range inst.Events {
			if strings.HasPrefix(e.Kind, "refused_") {
				problems = append(problems, fmt.Sprintf("instance %d: %s", id, e.Reason))
			}
		}
	}
	k.report.Expect("reports: subjects, bodies and ids",
		fmt.Sprintf("on %[1]s.report.%[2]s.<worker>.<instance>, worker_id = the subject's worker, Nats-Msg-Id <instance>-<attempt>-<started|final>-<nonce> (final reports may come in batches on %[1]s.report.%[2]s.<worker>.batch, Nats-Msg-Id batch-<n>-<nonce>), one final report per attempt, none refused",
			k.opts.Topology.Prefix(), k.opts.Pool),
		orOK(problems, fmt.Sprintf("%d reports", n)), len(problems) == 0 && n > 0)
}

// checkLeases checks that every attempt reported had its lease created,
// by the reporting worker, before its first report.
func (k *kit) checkLeases(ids []int64) {
	var problems []string
	n := 0
	for _, id := range ids {
		byAttempt := map[int]wireReport{}
		for _, w := range k.obs.reports(id) {
			if _, ok := byAttempt[w.r.Attempt]; w.err == nil && !ok {
				byAttempt[w.r.Attempt] = w
			}
		}
		for a, first := range byAttempt {
			n++
			idx, writes := k.obs.leaseWrites(id, a)
			ok := false
			for i, s := range writes {
				var l schemas.Lease
				if idx[i] < first.idx && s.op == "" && json.Unmarshal(s.data, &l) == nil && l.WorkerID == first.r.WorkerID && l.InstanceID == id && l.Attempt == a {
					ok = true
					break
				}
			}
			if !ok {
				problems = append(problems, fmt.Sprintf("instance %d attempt %d: no lease %s of worker %s before its %s report",
					id, a, streams.LeaseKey(id, a), first.r.WorkerID, first.r.Kind))
			}
		}
	}
	k.report.Expect("lease: taken before the first report",
		"a lease <instance>.<attempt> in "+k.opts.Topology.LeasesBucket()+" naming the worker, created before any report of the attempt",
		orOK(problems, fmt.Sprintf("%d attempts", n)), len(problems) == 0 && n > 0)
}

// checkHeartbeats checks that each worker that ran an attempt put its
// record again during the run, at intervals shorter than the workers
// bucket's TTL, with heartbeat_at moving on.
func (k *kit) checkHeartbeats(ctx context.Context, ids []int64) {
	ttl := streams.DefaultWorkerTTL
	if js, err := jetstream.New(k.opts.Conn); err == nil {
		if kv, err := js.KeyValue(ctx, k.opts.Topology.WorkersBucket()); err == nil {
			if st, err := kv.Status(ctx); err == nil && st.TTL() > 0 {
				ttl = st.TTL()
			}
		}
	}
	ran := map[string]bool{}
	for _, id := range ids {
		for _, w := range k.obs.reports(id) {
			if w.err == nil {
				ran[w.r.WorkerID] = true
			}
		}
	}
	var problems, seenText []string
	for _, id := range sortedKeys(ran) {
		var puts []seen
		_ = k.within(ctx, ttl, func() (bool, error) {
			puts = nil
			for _, s := range k.obs.workerWrites(id) {
				if s.op == "" {
					puts = append(puts, s)
				}
			}
			return len(puts) >= 2, nil
		})
		if len(puts) < 2 {
			problems = append(problems, fmt.Sprintf("%s: %d heartbeats in %s", id, len(puts), time.Since(k.start).Round(time.Second)))
			continue
		}
		last := k.start
		var prevAt time.Time
		for _, p := range puts {
			var w schemas.Worker
			if err := json.Unmarshal(p.data, &w); err != nil {
				problems = append(problems, fmt.Sprintf("%s: heartbeat does not decode: %v", id, err))
				break
			}
			if gap := p.at.Sub(last); gap > ttl {
				problems = append(problems, fmt.Sprintf("%s: %s between heartbeats, longer than the TTL %s", id, gap.Round(time.Millisecond), ttl))
			}
			if !w.HeartbeatAt.After(prevAt) {
				problems = append(problems, fmt.Sprintf("%s: heartbeat_at %s did not move on", id, w.HeartbeatAt))
			}
			last, prevAt = p.at, w.HeartbeatAt
		}
		seenText = append(seenText, fmt.Sprintf("%s: %d", id, len(puts)))
	}
	k.report.Expect("heartbeats: fresh",
		fmt.Sprintf("each worker puts its record in %s again and again, at intervals under the bucket's TTL %s", k.opts.Topology.WorkersBucket(), ttl),
		orOK(problems, "heartbeats "+strings.Join(seenText, ", ")), len(problems) == 0 && len(ran) > 0)
}

// drain asks the worker to shut down while an attempt runs and checks
// that it finished the attempt, took no new one and left the workers
// bucket.
func (k *kit) drain(ctx context.Context) error {
	const name = "drain: on SIGTERM"
	expected := fmt.Sprintf("a running attempt (%s) finishes SUCCEEDED and is reported; no attempt is taken after the signal; the record leaves %s",
		drainSleep, k.opts.Topology.WorkersBucket())
	if k.opts.Drain == nil {
		k.report.Add(drill.Check{Name: name, Expected: expected, Observed: "not checked: give the worker's process id (--worker-pid)", Info: true})
		return nil
	}
	id, err := k.fire(ctx, Sleep, json.RawMessage(fmt.Sprintf(`{"ms":%d}`, drainSleep.Milliseconds())))
	if err != nil {
		return err
	}
	var started wireReport
	if err := k.until(ctx, func() (bool, error) {
		var ok bool
		started, ok = k.startedOf(id, 1)
		return ok, nil
	}); err != nil {
		k.report.Expect(name, expected, "the attempt to drain was not reported started", false)
		return nil
	}
	worker := started.r.WorkerID
	if err := k.opts.Drain(); err != nil {
		k.report.Expect(name, expected, "could not signal the worker: "+err.Error(), false)
		return nil
	}
	signalled := time.Now()
	if err := sleep(ctx, signalSlack); err != nil {
		return err
	}
	after, err := k.fire(ctx, Echo, json.RawMessage(`"after the signal"`))
	if err != nil {
		return err
	}
	inst, err := k.waitEnd(ctx, id)
	if err != nil {
		return err
	}
	var gone bool
	_ = k.within(ctx, k.opts.Wait, func() (bool, error) {
		for _, s := range k.obs.workerWrites(worker) {
			if s.op != "" && s.at.After(signalled) {
				gone = true
			}
		}
		return gone, nil
	})
	_, leases := k.obs.leaseWrites(after, 1)
	took := false
	for _, s := range leases {
		var l schemas.Lease
		if json.Unmarshal(s.data, &l) == nil && l.WorkerID == worker {
			took = true
		}
	}
	k.report.Fact("instance drain", id)
	k.report.Expect(name, expected,
		fmt.Sprintf("the attempt %s on %s; the record left: %v; the attempt fired after the signal taken by it: %v", inst.State, inst.WorkerID, gone, took),
		inst.State == schemas.StateSucceeded && inst.WorkerID == worker && gone && !took)
	_, _ = k.opts.Client.Cancel(ctx, after, "ax conformance: done")
	return nil
}

// sameJSON reports whether a and b hold the same JSON value.
func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return bytes.Equal(ja, jb)
}

func orOK(problems []string, ok string) string {
	if len(problems) == 0 {
		return ok
	}
	return strings.Join(problems, "; ")
}

func orErr(err error, ok string) string {
	if err != nil {
		return err.Error()
	}
	return ok
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
