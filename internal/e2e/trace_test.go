package e2e_test

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/receiver/receivertest"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/auditor"
	"github.com/ax-scheduler/ax/devstack"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/internal/metrics"
	"github.com/ax-scheduler/ax/internal/telemetry"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

// One firing is one trace across the services, as an OTLP receiver (the
// OpenTelemetry Collector's) gets it from the exporters that the OTEL_*
// variables configure: a firing by HTTP keeps the caller's trace id and
// hangs under its span, one published to NATS with a traceparent header
// hangs under the publisher's span, a cron firing starts its trace in the
// trigger service; each goes create → dispatch → run → report, each span
// the parent of the next, and a retry's second attempt continues the
// firing's trace from the instance's row.
func TestOneFiringIsOneTrace(t *testing.T) {
	// Not parallel: the exporters read the OTEL_* variables it sets.
	ts := newTracedSystem(t)
	ts.s.apply(`
task_name: traced
execution:
  handler: test.trace
  retry:
    max_attempts: 2
    initial_interval_sec: 0.2
`)

	t.Run("http", func(t *testing.T) {
		tid, parent := "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
		id := ts.fireHTTP("traced", "00-"+tid+"-"+parent+"-01", `{}`)
		spans := ts.trace(tid, "ax.dispatcher.report", id, 1)
		api := one(t, spans, "POST /v1/tasks/{name}/runs", 0)
		if api.parent != parent || api.service != "ax-api" {
			t.Errorf("the API's span has parent %q in %s, want the request's span %s in ax-api", api.parent, api.service, parent)
		}
		ts.checkAttempts(spans, api.id, id, 1, schemas.ReportSucceeded)
		wantServices(t, spans, "ax-api", "ax-dispatcher", "ax-executor")
	})

	t.Run("nats", func(t *testing.T) {
		tid, parent := "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
		m := nats.NewMsg(ts.s.srv.Topology.Trigger("traced"))
		m.Data = []byte(`{"event_id": "published-1"}`)
		m.Header.Set("traceparent", "00-"+tid+"-"+parent+"-01")
		if _, err := ts.s.js.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		inst, err := ts.s.client.WaitFiring(ts.ctx(t), "traced", "published-1")
		if err != nil {
			t.Fatal(err)
		}
		spans := ts.trace(tid, "ax.dispatcher.report", inst.ID, 1)
		ts.checkAttempts(spans, parent, inst.ID, 1, schemas.ReportSucceeded)
		wantServices(t, spans, "ax-dispatcher", "ax-executor")
	})

	t.Run("retry", func(t *testing.T) {
		tid, parent := "5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174"
		id := ts.fireHTTP("traced", "00-"+tid+"-"+parent+"-01", `{"payload": {"fail_first": true}}`)
		ts.s.waitState(id, schemas.StateSucceeded, 60*time.Second)
		spans := ts.trace(tid, "ax.dispatcher.report", id, 2)
		api := one(t, spans, "POST /v1/tasks/{name}/runs", 0)
		create := ts.checkAttempts(spans, api.id, id, 2, schemas.ReportSucceeded)
		// The first attempt failed: its run and report say so, and the
		// report's span has the retry's as its child.
		run1 := one(t, spans, "ax.executor.run", 1)
		if run1.status != ptrace.StatusCodeError || !strings.Contains(run1.message, "first attempt fails") {
			t.Errorf("attempt 1's run span: status %v %q, want an error with the handler's", run1.status, run1.message)
		}
		report1 := one(t, spans, "ax.dispatcher.report", 1)
		if report1.attrs["ax.outcome"] != string(schemas.ReportFailed) {
			t.Errorf("attempt 1's report span: outcome %v, want failed", report1.attrs["ax.outcome"])
		}
		retry := one(t, spans, "ax.dispatcher.retry", 2)
		if retry.parent != report1.id {
			t.Errorf("the retry's span has parent %s, want attempt 1's report span %s", retry.parent, report1.id)
		}
		// Both attempts are dispatched under the instance's creation.
		if d := one(t, spans, "ax.dispatcher.dispatch", 2); d.parent != create.id {
			t.Errorf("attempt 2's dispatch span has parent %s, want the instance's creation %s", d.parent, create.id)
		}
		// The handler's context held its attempt's span.
		for attempt := 1; attempt <= 2; attempt++ {
			if got, want := ts.handlerSpan(id, attempt), one(t, spans, "ax.executor.run", attempt).id; got != want {
				t.Errorf("attempt %d's handler saw span %q, want its run span %s", attempt, got, want)
			}
		}
	})

	t.Run("delayed", func(t *testing.T) {
		// Further off than the API publishes at once: a message schedule,
		// which the server publishes with the schedule's headers.
		tid, parent := "6c3d6f1a2b3c4d5e6f708192a3b4c5d6", "445566778899aabb"
		res := ts.post("traced", "00-"+tid+"-"+parent+"-01", `{"delay": "2s"}`)
		if res.InstanceID != 0 || res.RunAt.IsZero() {
			t.Fatalf("a firing delayed by 2 s: %+v, want it accepted for later", res)
		}
		inst, err := ts.s.client.WaitFiring(ts.ctx(t), "traced", res.EventID)
		if err != nil {
			t.Fatal(err)
		}
		spans := ts.trace(tid, "ax.dispatcher.report", inst.ID, 1)
		ts.checkAttempts(spans, one(t, spans, "POST /v1/tasks/{name}/runs", 0).id, inst.ID, 1, schemas.ReportSucceeded)
	})

	t.Run("fair", func(t *testing.T) {
		// A task with a fairness key has its attempts held back in
		// PostgreSQL and let in later: the released message carries the
		// traceparent of the span that routed it.
		ts.s.apply("task_name: traced-fair\nexecution:\n  handler: test.trace\ndispatch:\n  fairness:\n    key: \"{{.tenant}}\"\n")
		tid, parent := "8e1f6f1a2b3c4d5e6f708192a3b4c5d6", "2233445566778899"
		id := ts.fireHTTP("traced-fair", "00-"+tid+"-"+parent+"-01", `{"payload": {"tenant": "a"}}`)
		spans := ts.trace(tid, "ax.dispatcher.report", id, 1)
		ts.checkAttempts(spans, one(t, spans, "POST /v1/tasks/{name}/runs", 0).id, id, 1, schemas.ReportSucceeded)
	})

	t.Run("lost", func(t *testing.T) {
		// Attempt 1's worker dies: the reaper fails it when its lease
		// expires and starts attempt 2, under a retry span of its own.
		ts.s.apply("task_name: traced-lost\nexecution:\n  handler: test.lost\n  retry: {max_attempts: 2}\ndispatch: {tags: [lost]}\n")
		victimConn, _ := ts.s.srv.Connect()
		mux := executor.NewMux()
		mux.HandleFunc("test.lost", func(ctx context.Context, _ *executor.Job) (any, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		})
		victim, err := executor.New(executor.Options{Conn: victimConn, WorkerID: "victim", Pools: []string{"lost"}, Mux: mux,
			Slots: 1, Logger: slog.New(zerolog.NewSlogHandler(ts.s.log)), ShutdownTimeout: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = victim.Run(ctx) // it fails once its connection is closed
		}()
		t.Cleanup(func() { stop(); <-done })

		tid, parent := "9f2a6f1a2b3c4d5e6f708192a3b4c5d6", "33445566778899aa"
		id := ts.fireHTTP("traced-lost", "00-"+tid+"-"+parent+"-01", `{}`)
		ts.s.waitState(id, schemas.StateRunning, 60*time.Second)
		victimConn.Close() // nothing renews its lease
		rescuer := executor.NewMux()
		rescuer.HandleFunc("test.lost", func(context.Context, *executor.Job) (any, error) { return "ok", nil })
		defer ts.s.worker(executor.Options{WorkerID: "rescuer", Pools: []string{"lost"}, Mux: rescuer, TracerProvider: ts.executorTP})()
		spans := ts.trace(tid, "ax.dispatcher.report", id, 2)
		create := one(t, spans, "ax.dispatcher.create", 0)
		retry := one(t, spans, "ax.dispatcher.retry", 2)
		if retry.parent != create.id || retry.attrs["ax.cause"] != "lease expired" || retry.attrs["ax.instance_id"] != id {
			t.Errorf("the reaper's retry span: parent %s, cause %v, instance %v; want the instance's creation %s, lease expired, %d",
				retry.parent, retry.attrs["ax.cause"], retry.attrs["ax.instance_id"], create.id, id)
		}
		dispatch := one(t, spans, "ax.dispatcher.dispatch", 2)
		run := one(t, spans, "ax.executor.run", 2)
		if dispatch.parent != create.id || run.parent != dispatch.id || run.attrs["ax.worker_id"] != "rescuer" {
			t.Errorf("attempt 2: dispatch under %s, run under %s on %v; want under %s, under %s, on rescuer",
				dispatch.parent, run.parent, run.attrs["ax.worker_id"], create.id, dispatch.id)
		}
	})

	t.Run("exemplar", func(t *testing.T) {
		ts.s.apply("task_name: exemplified\nexecution:\n  handler: test.trace\n")
		tid, parent := "7d4e6f1a2b3c4d5e6f708192a3b4c5d6", "1122334455667788"
		id := ts.fireHTTP("exemplified", "00-"+tid+"-"+parent+"-01", `{}`)
		ts.s.waitState(id, schemas.StateSucceeded, 60*time.Second)
		create := one(t, ts.trace(tid, "ax.dispatcher.report", id, 1), "ax.dispatcher.create", 0)
		// The auditor observes each latency from the audit trail, whose
		// records carry the instance's trace context: the exemplar names
		// the firing's trace and the instance's creation in it.
		for _, name := range []string{"ax_scheduling_delay_seconds", "ax_trigger_to_start_seconds", "ax_start_to_end_seconds"} {
			var got map[string]string
			waitFor(t, "an exemplar of "+name, 60*time.Second, func() (bool, error) {
				got = ts.exemplar(name, "exemplified")
				return got != nil, nil
			})
			if got["trace_id"] != tid || got["span_id"] != create.id {
				t.Errorf("%s's exemplar = %v, want trace_id %s, span_id %s (the instance's creation)", name, got, tid, create.id)
			}
		}
	})

	t.Run("cron", func(t *testing.T) {
		ts.s.apply(`
task_name: traced-cron
execution:
  handler: test.trace
triggers:
  - type: cron
    schedule: "* * * * * *"
`)
		var fire gotSpan
		waitFor(t, "a cron firing's span", 60*time.Second, func() (bool, error) {
			for _, sp := range ts.spans() {
				if sp.name == "ax.trigger.fire" && sp.attrs["ax.task"] == "traced-cron" {
					fire = sp
					return true, nil
				}
			}
			return false, nil
		})
		if fire.parent != "" || fire.service != "ax-trigger" {
			t.Errorf("the cron firing's span has parent %q in %s, want a root span in ax-trigger", fire.parent, fire.service)
		}
		spans := ts.trace(fire.trace, "ax.dispatcher.report", 0, 1)
		create := one(t, spans, "ax.dispatcher.create", 0)
		id, _ := create.attrs["ax.instance_id"].(int64)
		ts.checkAttempts(spans, fire.id, id, 1, schemas.ReportSucceeded)
		wantServices(t, spans, "ax-trigger", "ax-dispatcher", "ax-executor")
	})
}

// A backfill's firing starts its trace in the trigger service, as a cron
// firing does, and the instance it makes continues it.
func TestBackfillFiringIsOneTrace(t *testing.T) {
	// Not parallel: the exporters read the OTEL_* variables it sets.
	ts := newTracedSystem(t)
	ts.s.apply("task_name: traced-daily\nexecution:\n  handler: test.trace\ntriggers:\n  - type: cron\n    schedule: \"0 0 3 * * *\"\n")
	day := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	b, err := ts.s.client.Backfill(ts.ctx(t), "traced-daily", wire.BackfillRequest{From: day, To: day.Add(23 * time.Hour)})
	if err != nil || b.Total != 1 {
		t.Fatalf("backfill = %+v, %v; want one tick", b, err)
	}
	var fire gotSpan
	waitFor(t, "the backfill's firing's span", 60*time.Second, func() (bool, error) {
		for _, sp := range ts.spans() {
			if sp.name == "ax.trigger.fire" && sp.attrs["ax.backfill"] == b.ID {
				fire = sp
				return true, nil
			}
		}
		return false, nil
	})
	if fire.parent != "" || fire.service != "ax-trigger" || fire.attrs["ax.task"] != "traced-daily" {
		t.Errorf("the backfill's firing's span: parent %q in %s, task %v; want a root span of traced-daily in ax-trigger",
			fire.parent, fire.service, fire.attrs["ax.task"])
	}
	spans := ts.trace(fire.trace, "ax.dispatcher.report", 0, 1)
	create := one(t, spans, "ax.dispatcher.create", 0)
	id, _ := create.attrs["ax.instance_id"].(int64)
	ts.checkAttempts(spans, fire.id, id, 1, schemas.ReportSucceeded)
	if create.attrs["ax.event_id"] != schemas.CronEventID("traced-daily", 0, day.Add(3*time.Hour)) {
		t.Errorf("the instance's event id is %v, want the backfilled tick's", create.attrs["ax.event_id"])
	}
}

// tracedSystem is a system whose services export their spans, each under
// its own service name, to an OTLP receiver.
type tracedSystem struct {
	t         *testing.T
	s         *system
	sink      *consumertest.TracesSink
	providers []*sdktrace.TracerProvider

	mu sync.Mutex
	// handlerSpans holds the span id each handler call found in its
	// context, by instance and attempt.
	handlerSpans map[[2]int64]string
	// metrics serves the dispatcher's and the auditor's metrics.
	metrics *httptest.Server
	// executorTP is the executors' provider.
	executorTP *sdktrace.TracerProvider
}

func newTracedSystem(t *testing.T) *tracedSystem {
	endpoint, sink := startOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
	t.Setenv("OTEL_TRACES_SAMPLER", "always_on")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	ts := &tracedSystem{t: t, sink: sink, handlerSpans: make(map[[2]int64]string)}
	provider := func(service string) *sdktrace.TracerProvider {
		tp, err := telemetry.Setup(context.Background(), service)
		if err != nil || tp == nil {
			t.Fatalf("telemetry.Setup(%s) = %v, %v; want an exporter to %s", service, tp, err, endpoint)
		}
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		ts.providers = append(ts.providers, tp)
		return tp
	}
	mux := executor.NewMux()
	mux.HandleFunc("test.trace", func(ctx context.Context, job *executor.Job) (any, error) {
		ts.mu.Lock()
		ts.handlerSpans[[2]int64{job.InstanceID, int64(job.Attempt)}] = trace.SpanContextFromContext(ctx).SpanID().String()
		ts.mu.Unlock()
		var p struct {
			FailFirst bool `json:"fail_first"`
		}
		_ = json.Unmarshal(job.Payload, &p)
		if p.FailFirst && job.Attempt == 1 {
			return nil, errors.New("the first attempt fails")
		}
		return "ok", nil
	})

	ts.executorTP = provider("ax-executor")
	srv := streamstest.NewServer(t, streams.Config{LeaseTTL: leaseTTL})
	_, js := srv.Connect()
	pool := storetest.NewDB(t)
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	s := &system{t: t, srv: srv, js: js, store: store.New(pool), pool: pool, log: log}
	opts := devstack.Options{NATSURL: srv.URL, Streams: streams.Config{LeaseTTL: leaseTTL},
		Services: []natsauth.Role{natsauth.Dispatcher, natsauth.Trigger, natsauth.API},
		Executors: []devstack.Executor{{Options: executor.Options{WorkerID: "w1", Mux: mux, Slots: 4,
			Logger: slog.New(zerolog.NewSlogHandler(log)), TracerProvider: ts.executorTP}}}}
	opts.Dispatcher.TracerProvider = provider("ax-dispatcher")
	opts.Trigger.TracerProvider = provider("ax-trigger")
	opts.API.TracerProvider = provider("ax-api")
	opts.Services = append(opts.Services, natsauth.Auditor)
	opts.Metrics = metrics.NewRegistry()
	opts.Auditor = auditor.Options{PollInterval: 10 * time.Millisecond, RetryInterval: 100 * time.Millisecond,
		RefreshInterval: 50 * time.Millisecond}
	ts.metrics = httptest.NewServer(metrics.Handler(opts.Metrics))
	t.Cleanup(ts.metrics.Close)
	s.stack, _ = s.startStack(opts)
	s.dispatcher, s.dispatchConn = s.stack.Dispatcher, s.stack.Conn("dispatcher")
	s.serveAPI(s.stack.API)
	ts.s = s
	return ts
}

// startOTLPReceiver starts the OpenTelemetry Collector's OTLP receiver,
// OTLP/HTTP only, on a free loopback port, and returns its URL and the
// sink of the traces it receives.
func startOTLPReceiver(t *testing.T) (string, *consumertest.TracesSink) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	f := otlpreceiver.NewFactory()
	cfg := f.CreateDefaultConfig().(*otlpreceiver.Config)
	cfg.Protocols.HTTP.GetOrInsertDefault().ServerConfig.NetAddr.Endpoint = addr
	sink := new(consumertest.TracesSink)
	r, err := f.CreateTraces(context.Background(), receivertest.NewNopSettings(f.Type()), cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Shutdown(context.Background()) })
	return "http://" + addr, sink
}

func (ts *tracedSystem) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// fireHTTP fires task by POST /v1/tasks/{name}/runs with the traceparent
// header and returns the instance made.
func (ts *tracedSystem) fireHTTP(task, traceparent, body string) int64 {
	res := ts.post(task, traceparent, body)
	if res.InstanceID == 0 {
		ts.t.Fatalf("fire %s: no instance made: %+v", task, res)
	}
	return res.InstanceID
}

// post fires task by POST /v1/tasks/{name}/runs with the traceparent
// header and returns the answer, 201 or 202.
func (ts *tracedSystem) post(task, traceparent, body string) wire.FireResult {
	t := ts.t
	req, err := http.NewRequest(http.MethodPost, ts.s.apiURL+"/v1/tasks/"+task+"/runs", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+ts.s.admin)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", traceparent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var res wire.FireResult
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil ||
		(resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusAccepted) {
		t.Fatalf("fire %s: %s, %v", task, resp.Status, err)
	}
	return res
}

// exemplarRE matches an OpenMetrics histogram bucket with an exemplar:
// the metric's name, its labels and the exemplar's labels.
var exemplarRE = regexp.MustCompile(`^([a-z_]+)_bucket\{([^}]*)\} \S+ # \{([^}]*)\} \S+`)

// exemplar scrapes the metrics as Prometheus does, asking for
// OpenMetrics, and returns the labels of an exemplar of histogram name
// for task, nil when it has none.
func (ts *tracedSystem) exemplar(name, task string) map[string]string {
	t := ts.t
	req, err := http.NewRequest(http.MethodGet, ts.metrics.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5")
	resp, err := ts.metrics.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/openmetrics-text") {
		t.Fatalf("the metrics came as %s, want OpenMetrics", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		m := exemplarRE.FindStringSubmatch(sc.Text())
		if m == nil || m[1] != name || !strings.Contains(m[2], `task="`+task+`"`) {
			continue
		}
		labels := map[string]string{}
		for _, kv := range strings.Split(m[3], ",") {
			k, v, _ := strings.Cut(kv, "=")
			labels[k] = strings.Trim(v, `"`)
		}
		return labels
	}
	return nil
}

func (ts *tracedSystem) handlerSpan(id int64, attempt int) string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.handlerSpans[[2]int64{id, int64(attempt)}]
}

// gotSpan is a span as the receiver got it, ids in hex.
type gotSpan struct {
	service, name, trace, id, parent string
	attrs                            map[string]any
	status                           ptrace.StatusCode
	message                          string
}

// spans flushes every provider and returns every span received so far.
func (ts *tracedSystem) spans() []gotSpan {
	for _, tp := range ts.providers {
		_ = tp.ForceFlush(context.Background())
	}
	var out []gotSpan
	for _, td := range ts.sink.AllTraces() {
		for _, rs := range td.ResourceSpans().All() {
			service, _ := rs.Resource().Attributes().Get("service.name")
			for _, ss := range rs.ScopeSpans().All() {
				for _, sp := range ss.Spans().All() {
					tid, sid := sp.TraceID(), sp.SpanID()
					g := gotSpan{service: service.Str(), name: sp.Name(), trace: hex.EncodeToString(tid[:]),
						id: hex.EncodeToString(sid[:]), attrs: sp.Attributes().AsRaw(),
						status: sp.Status().Code(), message: sp.Status().Message()}
					if p := sp.ParentSpanID(); !p.IsEmpty() {
						g.parent = hex.EncodeToString(p[:])
					}
					out = append(out, g)
				}
			}
		}
	}
	return out
}

// trace waits until trace tid holds a span called last of attempt of
// instance id (any instance for 0), and returns its spans.
func (ts *tracedSystem) trace(tid, last string, id int64, attempt int) []gotSpan {
	t := ts.t
	t.Helper()
	var spans []gotSpan
	waitFor(t, fmt.Sprintf("span %s of attempt %d in trace %s", last, attempt, tid), 60*time.Second, func() (bool, error) {
		spans = spans[:0]
		found, ran := false, false
		for _, sp := range ts.spans() {
			if sp.trace != tid {
				continue
			}
			spans = append(spans, sp)
			found = found || (sp.name == last && sp.attrs["ax.attempt"] == int64(attempt) &&
				(id == 0 || sp.attrs["ax.instance_id"] == id))
			// Each service exports its spans in batches of its own: the
			// executor's run span may come after the dispatcher's report.
			ran = ran || (sp.name == "ax.executor.run" && sp.attrs["ax.attempt"] == int64(attempt))
		}
		return found && (ran || last != "ax.dispatcher.report"), nil
	})
	return spans
}

// checkAttempts checks that spans, one trace, hold instance id's creation
// as a child of span root, and for each of its attempts up to last, the
// dispatch under the creation, the run under the dispatch and the report
// under the run; the last attempt's report says outcome. It returns the
// creation's span.
func (ts *tracedSystem) checkAttempts(spans []gotSpan, root string, id int64, last int, outcome schemas.ReportKind) gotSpan {
	t := ts.t
	t.Helper()
	create := one(t, spans, "ax.dispatcher.create", 0)
	if create.parent != root || create.attrs["ax.instance_id"] != id || create.service != "ax-dispatcher" {
		t.Errorf("creation span: parent %s, instance %v, service %s; want parent %s, instance %d, ax-dispatcher",
			create.parent, create.attrs["ax.instance_id"], create.service, root, id)
	}
	for attempt := 1; attempt <= last; attempt++ {
		dispatch := one(t, spans, "ax.dispatcher.dispatch", attempt)
		run := one(t, spans, "ax.executor.run", attempt)
		report := one(t, spans, "ax.dispatcher.report", attempt)
		for _, link := range []struct {
			child, parent gotSpan
			service       string
		}{{dispatch, create, "ax-dispatcher"}, {run, dispatch, "ax-executor"}, {report, run, "ax-dispatcher"}} {
			if link.child.parent != link.parent.id || link.child.service != link.service {
				t.Errorf("attempt %d: span %s (%s) has parent %s, want %s's %s in %s",
					attempt, link.child.name, link.child.service, link.child.parent, link.parent.name, link.parent.id, link.service)
			}
			if link.child.attrs["ax.instance_id"] != id {
				t.Errorf("attempt %d: span %s names instance %v, want %d", attempt, link.child.name, link.child.attrs["ax.instance_id"], id)
			}
		}
		if run.attrs["ax.worker_id"] != "w1" || run.attrs["ax.pool"] != schemas.DefaultPool {
			t.Errorf("attempt %d's run span: worker %v, pool %v; want w1 of %s", attempt, run.attrs["ax.worker_id"], run.attrs["ax.pool"], schemas.DefaultPool)
		}
		if attempt == last && (report.attrs["ax.outcome"] != string(outcome) || run.attrs["ax.outcome"] != string(outcome)) {
			t.Errorf("attempt %d: report says %v, run %v; want %s", attempt, report.attrs["ax.outcome"], run.attrs["ax.outcome"], outcome)
		}
	}
	return create
}

// one returns the one span called name of attempt (0: any) in spans.
func one(t *testing.T, spans []gotSpan, name string, attempt int) gotSpan {
	t.Helper()
	var found []gotSpan
	for _, sp := range spans {
		if sp.name == name && (attempt == 0 || sp.attrs["ax.attempt"] == int64(attempt)) {
			found = append(found, sp)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans %s of attempt %d in the trace, want 1; the trace: %v", len(found), name, attempt, spans)
	}
	return found[0]
}

// wantServices checks that spans come from each of services.
func wantServices(t *testing.T, spans []gotSpan, services ...string) {
	t.Helper()
	seen := map[string]bool{}
	for _, sp := range spans {
		seen[sp.service] = true
	}
	for _, s := range services {
		if !seen[s] {
			t.Errorf("no span of %s in the trace (services: %v)", s, seen)
		}
	}
}
