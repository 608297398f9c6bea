package monitor

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/internal/wait"
	"github.com/ax-scheduler/ax/internal/wait/waittest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

// newMonitorEnv is an env on a topology sized by cfg.
func newMonitorEnv(t *testing.T, cfg streams.Config) *env {
	t.Helper()
	srv := streamstest.NewServer(t, cfg)
	_, js := srv.Connect()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	if os.Getenv("AX_TEST_LOG") != "" {
		log = log.Level(zerolog.DebugLevel)
	}
	return &env{t: t, srv: srv, js: js, st: store.New(storetest.NewDB(t)), log: log}
}

// clock is a test's time: real time plus an offset the test moves.
type clock struct{ offset atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) advance(d time.Duration) { c.offset.Add(int64(d)) }

// monitored starts an auditor that refreshes often, with its own metrics
// registry and clock, and waits until it monitors.
func (e *env) monitored(c *clock) *auditor {
	e.t.Helper()
	a := e.start(context.Background(), 100, func(s *Service) {
		s.opts.RefreshInterval = 20 * time.Millisecond
		s.opts.ConsoleURL = "http://console.test/"
		allowLoopback(e.t, s)
		if c != nil {
			s.now = c.now
		}
	})
	waitUntil(e.t, "the auditor to monitor", a.Monitoring)
	return a
}

// waitUntil polls cond until it holds, for up to a minute.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waittest.ForTrue(t, what, time.Minute, cond)
}

// apply applies a task definition given as YAML.
func (e *env) apply(def string) {
	e.t.Helper()
	task, err := taskdef.ParseTask([]byte(def))
	if err != nil {
		e.t.Fatal(err)
	}
	if _, _, err := e.st.ApplyTask(context.Background(), task, "alice"); err != nil {
		e.t.Fatal(err)
	}
}

// tr is one transition for (*env).instance.
type tr struct {
	from, to schemas.State
	attempt  int
	operator string
	reason   string
	at       time.Time
}

// instance writes an instance of task fired at firedAt, in the last state
// of trs, with trs as its transitions, in one statement as the dispatcher
// writes them. started and finished are set from the RUNNING and the
// terminal transitions.
func (e *env) instance(task string, firedAt time.Time, trs ...tr) int64 {
	e.t.Helper()
	ctx := context.Background()
	last := trs[len(trs)-1]
	var started, finished *time.Time
	for _, t := range trs {
		if t.to == schemas.StateRunning {
			started = &t.at
		}
		if t.to.Terminal() {
			finished = &t.at
		}
	}
	var id int64
	err := e.st.Pool().QueryRow(ctx, `
		INSERT INTO instances (task, task_version, event_id, source, state, attempt, max_attempts, priority, pool, handler,
			timeout_ms, fired_at, started_at, finished_at, error)
		VALUES ($1, 1, gen_random_uuid()::text, 'event', $2, $3, 3, 'normal', 'default', 'h', 1000, $4, $5, $6, $7)
		RETURNING id`, task, string(last.to), last.attempt, firedAt, started, finished, last.reason).Scan(&id)
	if err != nil {
		e.t.Fatal(err)
	}
	e.transitions(id, task, trs...)
	return id
}

// transitions writes trs as transitions of instance id of task.
func (e *env) transitions(id int64, task string, trs ...tr) {
	e.t.Helper()
	for _, t := range trs {
		_, err := e.st.Pool().Exec(context.Background(), `
			INSERT INTO instance_transitions (instance_id, task, from_state, to_state, attempt, operator, reason, at)
			VALUES ($1, $2, NULLIF($3, ''), $4, $5, $6, $7, $8)`, id, task, string(t.from), string(t.to), t.attempt, t.operator, t.reason, t.at)
		if err != nil {
			e.t.Fatal(err)
		}
	}
}

// run writes an instance of task that ran once, for d, and ended in state.
func (e *env) run(task string, state schemas.State, d time.Duration, reason string) int64 {
	e.t.Helper()
	end := time.Now()
	start := end.Add(-d)
	return e.instance(task, start.Add(-time.Second),
		tr{"", schemas.StateCreated, 1, "event", "", start.Add(-900 * time.Millisecond)},
		tr{schemas.StateCreated, schemas.StateDispatched, 1, "dispatcher", "", start.Add(-900 * time.Millisecond)},
		tr{schemas.StateDispatched, schemas.StateRunning, 1, "worker:w1", "", start},
		tr{schemas.StateRunning, state, 1, "worker:w1", reason, end})
}

func TestMonitorCountsTransitions(t *testing.T) {
	t.Parallel()
	e := newMonitorEnv(t, streams.Config{})
	e.apply("task_name: etl\nexecution: {handler: h}\n")
	a := e.monitored(nil)
	m := a.metrics

	now := time.Now()
	fired := now.Add(-10 * time.Second)
	// A firing created 2 s late, started 1 s later, that timed out, was
	// retried, lost its lease on the second attempt, and failed on the third.
	e.instance("etl", fired,
		tr{"", schemas.StateCreated, 1, "cron", "", fired.Add(2 * time.Second)},
		tr{schemas.StateCreated, schemas.StateDispatched, 1, "dispatcher", "", fired.Add(2 * time.Second)},
		tr{schemas.StateDispatched, schemas.StateRunning, 1, "worker:w1", "", fired.Add(3 * time.Second)},
		tr{schemas.StateRunning, schemas.StateRetrying, 1, "worker:w1", "timeout after 1s", fired.Add(4 * time.Second)},
		tr{schemas.StateRetrying, schemas.StateDispatched, 2, "dispatcher", "", fired.Add(5 * time.Second)},
		tr{schemas.StateDispatched, schemas.StateRunning, 2, "worker:w2", "", fired.Add(6 * time.Second)},
		tr{schemas.StateRunning, schemas.StateRetrying, 2, store.OperatorReaper, "lease expired: the worker stopped renewing it", fired.Add(8 * time.Second)},
		tr{schemas.StateRetrying, schemas.StateDispatched, 3, "dispatcher", "", fired.Add(8 * time.Second)},
		tr{schemas.StateDispatched, schemas.StateRunning, 3, "worker:w1", "", fired.Add(9 * time.Second)},
		tr{schemas.StateRunning, schemas.StateFailed, 3, "worker:w1", "boom", fired.Add(10 * time.Second)})
	e.run("etl", schemas.StateSucceeded, 3*time.Second, "")

	waitUntil(t, "both instances counted", func() bool {
		return testutil.ToFloat64(m.instancesEnded.WithLabelValues("etl", "FAILED")) == 1 &&
			testutil.ToFloat64(m.instancesEnded.WithLabelValues("etl", "SUCCEEDED")) == 1
	})
	for name, tt := range map[string]struct {
		c    prometheus.Collector
		want float64
	}{
		"attempts failed":    {m.attempts.WithLabelValues("etl", "failed"), 3},
		"attempts succeeded": {m.attempts.WithLabelValues("etl", "succeeded"), 1},
		"timeouts":           {m.timeouts.WithLabelValues("etl"), 1},
		"lease expiries":     {m.leaseExpiries.WithLabelValues("etl"), 1},
		"retries":            {m.retries.WithLabelValues("etl"), 2},
	} {
		if got := testutil.ToFloat64(tt.c); got != tt.want {
			t.Errorf("%s = %v, want %v", name, got, tt.want)
		}
	}
	// The task's apply may be relayed before or after the consumer began.
	if got := testutil.ToFloat64(m.recordsSeen); got != 14 && got != 15 {
		t.Errorf("records monitored = %v, want the 14 transitions (and the apply)", got)
	}
	for name, tt := range map[string]struct {
		h          *prometheus.HistogramVec
		count      uint64
		sumAtLeast float64
		sumBelow   float64
	}{
		"scheduling delay": {m.schedulingDelay, 2, 2.1, 2.2},
		"trigger to start": {m.triggerToStart, 2, 4, 4.1},
		"start to end":     {m.startToEnd, 4, 1 + 2 + 1 + 3, 7.1},
	} {
		count, sum := histogram(t, tt.h, "etl")
		if count != tt.count || sum < tt.sumAtLeast || sum >= tt.sumBelow {
			t.Errorf("%s: %d observations summing to %v, want %d in [%v, %v)", name, count, sum, tt.count, tt.sumAtLeast, tt.sumBelow)
		}
	}
}

// histogram returns the count and sum of one task's histogram.
func histogram(t *testing.T, h *prometheus.HistogramVec, task string) (uint64, float64) {
	t.Helper()
	var pb dto.Metric
	if err := h.WithLabelValues(task).(prometheus.Metric).Write(&pb); err != nil {
		t.Fatal(err)
	}
	return pb.GetHistogram().GetSampleCount(), pb.GetHistogram().GetSampleSum()
}

// heartbeat puts w in the workers bucket every 200 ms, as an executor
// does, until stop is called or the test ends.
func (e *env) heartbeat(w schemas.Worker) (stop func()) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	kv, err := e.js.KeyValue(ctx, e.srv.Topology.WorkersBucket())
	if err != nil {
		e.t.Fatal(err)
	}
	data, _ := json.Marshal(w)
	if _, err := kv.Put(ctx, w.ID, data); err != nil {
		e.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for wait.Sleep(ctx, 200*time.Millisecond) {
			_, _ = kv.Put(ctx, w.ID, data)
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	e.t.Cleanup(stop)
	return stop
}

func TestMonitorGauges(t *testing.T) {
	t.Parallel()
	e := newMonitorEnv(t, streams.Config{WorkerTTL: time.Second})
	e.apply("task_name: etl\nexecution: {handler: h}\n")
	e.apply("task_name: train\nexecution: {handler: h}\ndispatch: {tags: [gpu]}\n")
	kv, err := e.js.KeyValue(context.Background(), e.srv.Topology.WorkersBucket())
	if err != nil {
		t.Fatal(err)
	}
	put := func(w schemas.Worker) {
		t.Helper()
		data, _ := json.Marshal(w)
		if _, err := kv.Put(context.Background(), w.ID, data); err != nil {
			t.Fatal(err)
		}
	}
	// A key deleted before the monitor starts ages into a marker later:
	// it must not count as a lost heartbeat.
	put(schemas.Worker{ID: "gone", Pools: []string{"default"}, Slots: 1})
	if err := kv.Delete(context.Background(), "gone"); err != nil {
		t.Fatal(err)
	}
	waiting := e.run("etl", schemas.StateSucceeded, time.Second, "")
	if _, err := e.st.Pool().Exec(context.Background(), `
		UPDATE instances SET state = 'DISPATCHED', updated_at = now() - interval '6 minutes' WHERE id = $1`, waiting); err != nil {
		t.Fatal(err)
	}
	e.run("etl", schemas.StateSucceeded, time.Second, "")
	if _, err := e.st.Pool().Exec(context.Background(), `UPDATE instances SET state = 'RUNNING' WHERE id = $1`, waiting+1); err != nil {
		t.Fatal(err)
	}

	a := e.monitored(nil)
	m := a.metrics
	stopW1 := e.heartbeat(schemas.Worker{ID: "w1", Pools: []string{"default"}, Slots: 4, Busy: 1})
	stopW2 := e.heartbeat(schemas.Worker{ID: "w2", Pools: []string{"default", "gpu"}, Slots: 4, Busy: 3})
	waitUntil(t, "the pools' gauges", func() bool {
		return testutil.ToFloat64(m.workers.WithLabelValues("default")) == 2 &&
			testutil.ToFloat64(m.slotsBusy.WithLabelValues("default")) == 4 &&
			testutil.ToFloat64(m.backlog.WithLabelValues("etl", "DISPATCHED")) == 1
	})
	for name, tt := range map[string]struct {
		g    prometheus.Collector
		want float64
	}{
		"slots default":       {m.slots.WithLabelValues("default"), 8},
		"utilization default": {m.slotUtilization.WithLabelValues("default"), 0.5},
		"utilization gpu":     {m.slotUtilization.WithLabelValues("gpu"), 0.75},
		"worker w1":           {m.workerSlotUtil.WithLabelValues("w1"), 0.25},
		"running":             {m.instances.WithLabelValues("etl", "RUNNING"), 1},
		"dispatched":          {m.instances.WithLabelValues("etl", "DISPATCHED"), 1},
	} {
		if got := testutil.ToFloat64(tt.g); got != tt.want {
			t.Errorf("%s = %v, want %v", name, got, tt.want)
		}
	}

	// w1 stops cleanly; w2's heartbeats stop and its key expires.
	stopW1()
	if err := kv.Delete(context.Background(), "w1"); err != nil {
		t.Fatal(err)
	}
	stopW2()
	waitUntil(t, "w2 to be lost", func() bool {
		return testutil.ToFloat64(m.heartbeatsLost.WithLabelValues("gpu")) == 1
	})
	if got := testutil.ToFloat64(m.heartbeatsLost.WithLabelValues("default")); got != 1 {
		t.Errorf("heartbeats lost in default = %v, want 1 (w2; not the worker deleted before)", got)
	}
	if got := testutil.ToFloat64(m.workersStopped.WithLabelValues("default")); got != 1 {
		t.Errorf("workers stopped = %v, want 1", got)
	}
	waitUntil(t, "the pools to empty", func() bool {
		return testutil.ToFloat64(m.workers.WithLabelValues("gpu")) == 0 && testutil.CollectAndCount(m.workerSlotUtil) == 0
	})
	// Give the marker of w1's delete time to age out: it counts nothing.
	time.Sleep(1500 * time.Millisecond)
	if got := testutil.ToFloat64(m.heartbeatsLost.WithLabelValues("default")); got != 1 {
		t.Errorf("heartbeats lost in default = %v after w1's marker aged, want still 1", got)
	}
}

func TestOneAuditorMonitors(t *testing.T) {
	t.Parallel()
	e := newMonitorEnv(t, streams.Config{})
	a, b := e.monitoredOrNot(), e.monitoredOrNot()
	waitUntil(t, "one auditor to monitor", func() bool { return a.Monitoring() || b.Monitoring() })
	leader, other := a, b
	if b.Monitoring() {
		leader, other = b, a
	}
	if other.Monitoring() {
		t.Fatal("both auditors monitor")
	}
	leader.stop()
	waitUntil(t, "the other auditor to take over", other.Monitoring)
	if got := testutil.ToFloat64(other.metrics.monitorLeader); got != 1 {
		t.Errorf("ax_monitor_leader = %v, want 1", got)
	}
}

// monitoredOrNot starts an auditor without waiting for it to monitor.
func (e *env) monitoredOrNot() *auditor {
	return e.start(context.Background(), 100, func(s *Service) { s.opts.RefreshInterval = 20 * time.Millisecond })
}

// receiver is an HTTP server that keeps what it is sent.
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	bodies [][]byte
	// answer is what it answers (default {"errcode":0,"errmsg":"ok"}).
	answer string
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{answer: `{"errcode":0,"errmsg":"ok"}`}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body json.RawMessage
		if err := json.NewDecoder(req.Body).Decode(&body); err != nil || req.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "not JSON", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.bodies = append(r.bodies, body)
		answer := r.answer
		r.mu.Unlock()
		fmt.Fprint(w, answer)
	}))
	t.Cleanup(r.Close)
	return r
}

// received returns what it was sent so far.
func (r *receiver) received() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.bodies...)
}

// wait waits until it was sent n bodies and returns them.
func (r *receiver) wait(t *testing.T, n int) [][]byte {
	t.Helper()
	waitUntil(t, fmt.Sprintf("%d notifications", n), func() bool { return len(r.received()) >= n })
	return r.received()
}

func decodeNotification(t *testing.T, body []byte) Notification {
	t.Helper()
	var n Notification
	if err := json.Unmarshal(body, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (e *env) channel(kind schemas.AlertChannelKind, url string) {
	e.t.Helper()
	if _, err := e.st.AddAlertChannel(context.Background(), kind, url, "test"); err != nil {
		e.t.Fatal(err)
	}
}

func TestConsecutiveFailuresFireGroupAndResolve(t *testing.T) {
	t.Parallel()
	e := newMonitorEnv(t, streams.Config{})
	e.apply("task_name: etl\nexecution: {handler: h}\n")
	hook, wecom, slack := newReceiver(t), newReceiver(t), newReceiver(t)
	e.channel(schemas.ChannelWebhook, hook.URL)
	e.channel(schemas.ChannelWeCom, wecom.URL+"/cgi-bin/webhook/send?key=k")
	e.channel(schemas.ChannelSlack, slack.URL)
	c := &clock{}
	e.monitored(c)
	e.heartbeat(schemas.Worker{ID: "w1", Pools: []string{"default"}, Slots: 1})

	e.run("etl", schemas.StateFailed, time.Second, "first")
	e.run("etl", schemas.StateFailed, time.Second, "second")
	third := e.run("etl", schemas.StateFailed, time.Second, "third")
	n := decodeNotification(t, hook.wait(t, 1)[0])
	if n.Status != StatusFiring || n.Rule != "consecutive_failures" || n.Level != schemas.AlertP1 || n.Task != "etl" ||
		n.InstanceID != third || n.Link != fmt.Sprintf("http://console.test/#/instances/%d/logs", third) ||
		!strings.Contains(n.Reason, "failed 3 times in a row; the last error: third") || n.Count != 3 || n.Repeats != 3 {
		t.Errorf("firing notification = %+v", n)
	}
	var wc struct {
		MsgType  string            `json:"msgtype"`
		Markdown map[string]string `json:"markdown"`
	}
	if err := json.Unmarshal(wecom.wait(t, 1)[0], &wc); err != nil || wc.MsgType != "markdown" ||
		!strings.Contains(wc.Markdown["content"], "[P1] FIRING consecutive_failures: etl") ||
		!strings.Contains(wc.Markdown["content"], fmt.Sprintf("Instance: %d ([logs](http://console.test/#/instances/%d/logs))", third, third)) {
		t.Errorf("WeCom message = %+v, %v", wc, err)
	}
	var sl struct{ Text string }
	if err := json.Unmarshal(slack.wait(t, 1)[0], &sl); err != nil || !strings.HasPrefix(sl.Text, "*[P1] FIRING consecutive_failures: etl*\n") ||
		!strings.Contains(sl.Text, fmt.Sprintf("<http://console.test/#/instances/%d/logs|logs>", third)) ||
		!strings.Contains(sl.Text, "Reason: task etl failed 3 times in a row") {
		t.Errorf("Slack message = %+v, %v", sl, err)
	}

	// Two more failures within the throttle: counted (the count is the
	// streak), not sent.
	e.run("etl", schemas.StateFailed, time.Second, "fourth")
	fifth := e.run("etl", schemas.StateFailed, time.Second, "fifth")
	waitUntil(t, "the repeats to be counted", func() bool {
		open, err := e.st.OpenAlerts(context.Background())
		return err == nil && len(open) == 1 && open[0].Count == 5
	})
	if got := len(hook.received()); got != 1 {
		t.Fatalf("%d notifications within the throttle, want 1", got)
	}
	// Past the throttle the repeats go out together.
	c.advance(11 * time.Minute)
	n = decodeNotification(t, hook.wait(t, 2)[1])
	if n.Status != StatusFiring || n.Count != 5 || n.Repeats != 2 || n.InstanceID != fifth ||
		!strings.Contains(n.Reason, "failed 5 times in a row; the last error: fifth") {
		t.Errorf("grouped notification = %+v", n)
	}
	if !strings.Contains(string(slack.wait(t, 2)[1]), "Seen 5 times since") ||
		!strings.Contains(string(slack.received()[1]), "(2 since the last notification)") {
		t.Errorf("grouped Slack message = %s", slack.received()[1])
	}

	e.run("etl", schemas.StateSucceeded, time.Second, "")
	n = decodeNotification(t, hook.wait(t, 3)[2])
	if n.Status != StatusResolved || n.AlertID == 0 || n.ResolvedAt == nil || n.Task != "etl" {
		t.Errorf("resolution = %+v", n)
	}
	if !strings.Contains(string(wecom.wait(t, 3)[2]), "RESOLVED consecutive_failures: etl") {
		t.Errorf("WeCom resolution = %s", wecom.received()[2])
	}
	// Resolution is notified once, and nothing else follows.
	time.Sleep(200 * time.Millisecond)
	if got := len(hook.received()); got != 3 {
		t.Errorf("%d notifications in all, want 3", got)
	}
}

func TestStateRules(t *testing.T) {
	t.Parallel()
	e := newMonitorEnv(t, streams.Config{WorkerTTL: time.Second})
	ctx := context.Background()
	e.apply("task_name: etl\nexecution: {handler: h}\n")
	e.apply("task_name: slow\nexecution: {handler: h}\n")
	e.apply("task_name: train\nexecution: {handler: h}\ndispatch: {tags: [gpu]}\n")
	put := func(name, kind string, params string) {
		t.Helper()
		if _, err := e.st.PutAlertRule(ctx, schemas.AlertRule{Name: name, Kind: schemas.AlertKind(kind), Level: schemas.AlertP1,
			Params: json.RawMessage(params), Enabled: true}, "test"); err != nil {
			t.Fatal(err)
		}
	}
	put("backlog", "backlog", `{"instances": 1, "age": "1m"}`)
	put("timeout_rate", "timeout_rate", `{"min_attempts": 2, "rate": 0.5}`)
	put("failing_tasks", "failing_tasks", `{"tasks": 2}`)
	hook := newReceiver(t)
	e.channel(schemas.ChannelWebhook, hook.URL)

	queued := e.run("etl", schemas.StateSucceeded, time.Second, "")
	if _, err := e.st.Pool().Exec(ctx, `
		UPDATE instances SET state = 'DISPATCHED', updated_at = now() - interval '2 minutes' WHERE id = $1`, queued); err != nil {
		t.Fatal(err)
	}
	e.run("slow", schemas.StateFailed, time.Second, "timeout after 1s")
	timedOut := e.run("slow", schemas.StateFailed, time.Second, "timeout: the attempt outlived its timeout of 1s")
	// The default rule quarantined (migration 00020) fires on its own.
	poison := e.run("etl", schemas.StateFailed, time.Second, store.QuarantinedReasonPrefix+": 3 workers died while running this instance")
	failed := e.run("etl", schemas.StateFailed, time.Second, "boom")

	e.monitored(nil)
	e.heartbeat(schemas.Worker{ID: "w1", Pools: []string{"default"}, Slots: 2})
	// Notifications are told apart by rule, key and status: a heartbeat of
	// w1 that comes late on a busy machine fires (and resolves) a
	// no_live_executor alert of pool default beside the one of pool gpu,
	// so the test waits for the alerts it means, never for a count.
	byAlert := func() map[string]Notification {
		out := map[string]Notification{}
		for _, b := range hook.received() {
			n := decodeNotification(t, b)
			out[n.Rule+"/"+n.Key+"/"+n.Status] = n
		}
		return out
	}
	alerts := []string{"backlog/etl", "timeout_rate/slow", "failing_tasks/", "no_live_executor/gpu", "quarantined/etl"}
	received := func(status string) func() bool {
		return func() bool {
			got := byAlert()
			for _, a := range alerts {
				if _, ok := got[a+"/"+status]; !ok {
					return false
				}
			}
			return true
		}
	}
	waitUntil(t, "the five alerts to fire", received("firing"))
	got := byAlert()
	if n := got["backlog/etl/firing"]; n.Task != "etl" || n.InstanceID != queued || !strings.Contains(n.Reason, "1 DISPATCHED in pool default") {
		t.Errorf("backlog = %+v", n)
	}
	if n := got["timeout_rate/slow/firing"]; n.Task != "slow" || n.InstanceID != timedOut || !strings.Contains(n.Reason, "2 of the 2 attempts") {
		t.Errorf("timeout rate = %+v", n)
	}
	if n := got["failing_tasks//firing"]; n.Key != "" || n.InstanceID != failed || !strings.Contains(n.Reason, "2 tasks had instances FAILED") {
		t.Errorf("failing tasks = %+v", n)
	}
	if n := got["quarantined/etl/firing"]; n.Task != "etl" || n.InstanceID != poison || n.Level != schemas.AlertP1 ||
		!strings.Contains(n.Reason, "1 instances of task etl were quarantined") {
		t.Errorf("quarantined = %+v", n)
	}
	if n := got["no_live_executor/gpu/firing"]; n.Key != "gpu" || n.Level != schemas.AlertP0 || !strings.Contains(n.Reason, "tasks wait: train") {
		t.Errorf("no live executor = %+v", n)
	}

	// Everything recovers: the backlog runs, a gpu worker comes, the rules
	// about failures are switched off (their windows would take long).
	if _, err := e.st.Pool().Exec(ctx, `UPDATE instances SET state = 'SUCCEEDED', updated_at = now() WHERE id = $1`, queued); err != nil {
		t.Fatal(err)
	}
	e.heartbeat(schemas.Worker{ID: "w2", Pools: []string{"gpu"}, Slots: 2})
	if _, err := e.st.Pool().Exec(ctx, `UPDATE alert_rules SET enabled = false WHERE name IN ('timeout_rate', 'failing_tasks', 'quarantined')`); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the five alerts to resolve", received("resolved"))
	// A late heartbeat's alert resolves too, once the heartbeat comes.
	var open []schemas.Alert
	var err error
	waitUntil(t, "no open alert", func() bool {
		open, err = e.st.OpenAlerts(ctx)
		return err != nil || len(open) == 0
	})
	if err != nil {
		t.Errorf("open alerts = %+v, %v", open, err)
	}
}

// TestMonitorReadsBothAuditVersions: the monitor counts the records of a
// relay that publishes a record a message (version 1) and of one that
// publishes a task's records of a page in one message (version 2), alike.
func TestMonitorReadsBothAuditVersions(t *testing.T) {
	t.Parallel()
	for _, version := range []int{1, 2} {
		t.Run(fmt.Sprintf("version %d", version), func(t *testing.T) {
			t.Parallel()
			e := newMonitorEnv(t, streams.Config{})
			e.auditVersion = version
			e.apply("task_name: etl\nexecution: {handler: h}\n")
			m := e.monitored(nil).metrics
			for range 3 {
				e.run("etl", schemas.StateSucceeded, time.Second, "")
			}
			e.run("etl", schemas.StateFailed, time.Second, "boom")
			waitUntil(t, "every instance counted", func() bool {
				return testutil.ToFloat64(m.instancesEnded.WithLabelValues("etl", "SUCCEEDED")) == 3 &&
					testutil.ToFloat64(m.instancesEnded.WithLabelValues("etl", "FAILED")) == 1
			})
			// The task's apply may be relayed before or after the consumer began.
			if got := testutil.ToFloat64(m.recordsSeen); got != 16 && got != 17 {
				t.Errorf("records monitored = %v, want the 16 transitions (and the apply)", got)
			}
		})
	}
}

// TestDurationJitterFloor pins the absolute floor of duration_jitter: a
// run of 9 ms after runs of 3 ms is three times their p95 and still no
// alert, while a run over the floor (1s by default) raises one that
// names the floor.
func TestDurationJitterFloor(t *testing.T) {
	t.Parallel()
	e := newMonitorEnv(t, streams.Config{})
	e.apply("task_name: hello\nexecution: {handler: h}\n")
	e.apply("task_name: report\nexecution: {handler: h}\n")
	for range 5 {
		e.run("hello", schemas.StateSucceeded, 3*time.Millisecond, "")
		e.run("report", schemas.StateSucceeded, 3*time.Millisecond, "")
	}
	e.monitored(nil)
	e.run("hello", schemas.StateSucceeded, 9*time.Millisecond, "")
	slow := e.run("report", schemas.StateSucceeded, 1500*time.Millisecond, "")
	// The audit records come in order: once report's alert is open,
	// hello's latest run has been judged.
	var open []schemas.Alert
	waitUntil(t, "report's duration_jitter alert", func() bool {
		var err error
		open, err = e.st.OpenAlerts(context.Background())
		return err == nil && slices.ContainsFunc(open, func(a schemas.Alert) bool { return a.Key == "report" })
	})
	for _, a := range open {
		if a.Rule != "duration_jitter" {
			continue
		}
		if a.Key != "report" || a.InstanceID != slow ||
			!strings.Contains(a.Reason, "more than the rule's floor of 1s (params.min_duration)") {
			t.Errorf("open duration_jitter alert %+v; want only report's, naming the floor", a)
		}
	}
}

// TestRecordRulesReadOnlyWhatMayChange: the rules fed by records
// (consecutive_failures, duration_jitter) read a task's failure streak only
// when its records hold a failure or its alert is open, and resolve only
// open alerts: a healthy task's successes cost the monitor no read of its
// streak and no resolving statement. The alerts still fire and resolve,
// also one another auditor raised (a leader deposed while it raised),
// once a refresh has read it.
func TestRecordRulesReadOnlyWhatMayChange(t *testing.T) {
	t.Parallel()
	const (
		streakRead = "state IN ('SUCCEEDED', 'FAILED')"
		resolve    = "key = ANY($2) AND state <> 'resolved'"
	)
	pool, counter := storetest.NewCounted(t)
	e := newMonitorEnv(t, streams.Config{})
	e.st = store.New(pool)
	e.apply("task_name: etl\nexecution: {handler: h}\n")
	e.apply("task_name: mail\nexecution: {handler: h}\n")
	a := e.monitored(nil)
	seen := func(n float64) {
		t.Helper()
		waitUntil(t, fmt.Sprintf("the monitor to see %v records", n), func() bool {
			return testutil.ToFloat64(a.metrics.recordsSeen) >= n
		})
	}
	records := 0.0
	for range 5 {
		e.run("etl", schemas.StateSucceeded, time.Second, "")
		records += 4
	}
	seen(records)
	if n, r := counter.Count(streakRead), counter.Count(resolve); n != 0 || r != 0 {
		t.Errorf("5 successes and no open alert: %d reads of a failure streak and %d resolving statements, want none", n, r)
	}

	for range 3 {
		e.run("etl", schemas.StateFailed, time.Second, "boom")
		records += 4
	}
	waitUntil(t, "consecutive_failures to fire for etl", func() bool {
		open, err := e.st.OpenAlerts(context.Background())
		return err == nil && len(open) == 1 && open[0].Rule == "consecutive_failures" && open[0].Key == "etl"
	})
	if n := counter.Count(streakRead); n == 0 {
		t.Error("the failures were evaluated without reading the streak")
	}
	e.run("etl", schemas.StateSucceeded, time.Second, "")
	waitUntil(t, "the success to resolve etl's alert", func() bool {
		open, err := e.st.OpenAlerts(context.Background())
		return err == nil && len(open) == 0
	})

	// Raised by another auditor: resolved by a success once a refresh
	// (every 20 ms here) has read it.
	if _, err := e.st.RaiseAlert(context.Background(), store.AlertSignal{Rule: "consecutive_failures", Level: schemas.AlertP1,
		Key: "mail", Task: "mail", Reason: "raised elsewhere", At: time.Now(), Count: 3}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a success of mail to resolve the alert raised elsewhere", func() bool {
		e.run("mail", schemas.StateSucceeded, time.Second, "")
		open, err := e.st.OpenAlerts(context.Background())
		return err == nil && len(open) == 0
	})
}
