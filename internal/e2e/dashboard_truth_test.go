package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/api/apitest"
	"github.com/ax-scheduler/ax/auditor"
	"github.com/ax-scheduler/ax/devstack"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/executortest"
	"github.com/ax-scheduler/ax/internal/metrics"
	"github.com/ax-scheduler/ax/internal/natsembed"
	"github.com/ax-scheduler/ax/internal/servicetest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
	"sigs.k8s.io/yaml"
)

// prometheusBinary is the Prometheus the dashboard test runs: AX_PROMETHEUS,
// else Debian's (make prometheus installs it).
func prometheusBinary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("AX_PROMETHEUS")
	if bin == "" {
		bin = "/usr/bin/prometheus"
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the dashboard test needs Prometheus at %s: run 'make prometheus' (Debian's prometheus package) or set AX_PROMETHEUS", bin)
	}
	return bin
}

// dashWorker is a worker of the dashboard test: its pool and slots.
type dashWorker struct {
	id, pool string
	slots    int
}

// dashWorkers: pool alpha has 2 slots, pool beta 3 on two workers.
var dashWorkers = []dashWorker{{"a1", "alpha", 2}, {"b1", "beta", 2}, {"b2", "beta", 1}}

// dashTasks are the tasks of the dashboard test and their pools.
var dashTasks = []struct{ name, def string }{
	{"quick", "execution: {handler: dash.run}\ndispatch: {tags: [alpha]}\n"},
	{"retry", "execution: {handler: dash.retry, retry: {max_attempts: 2, initial_interval_sec: 0}}\ndispatch: {tags: [alpha]}\n"},
	{"fail", "execution: {handler: dash.fail, retry: {max_attempts: 1}}\ndispatch: {tags: [beta]}\n"},
	{"hang", "execution: {handler: dash.hang, timeout: 1s, retry: {max_attempts: 1}}\ndispatch: {tags: [beta]}\n"},
	{"alpha-block", "execution: {handler: dash.run}\ndispatch: {tags: [alpha]}\n"},
	{"beta-urgent", "execution: {handler: dash.run}\ndispatch: {tags: [beta]}\npriority: urgent\n"},
	{"beta-low", "execution: {handler: dash.run}\ndispatch: {tags: [beta]}\npriority: low\n"},
	{"limited", "execution: {handler: dash.run}\ndispatch: {tags: [beta]}\nlimits: [" + dashLimit.Name + "]\n"},
}

// dashLimit is the named limit of the task limited: one attempt at a time
// per key k of the payload.
var dashLimit = schemas.Limit{Name: "dash-limit", Concurrency: 1, Key: "{{.k}}"}

// handlerRun is one run of a handler as the handler saw it.
type handlerRun struct {
	instance   int64
	attempt    int
	worker     string
	start, end time.Time
}

// dashHandlers are the handlers of the dashboard test. dash.run sleeps
// runFor and, when its payload says {"block": true}, holds its slot until
// release is closed; every run is recorded with the times the handler
// itself saw.
type dashHandlers struct {
	runFor  time.Duration
	release chan struct{}
	mu      sync.Mutex
	runs    []handlerRun
	blocked map[string]int // by worker
}

func (h *dashHandlers) record(job *executor.Job, start time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.runs = append(h.runs, handlerRun{job.InstanceID, job.Attempt, job.WorkerID, start, time.Now()})
}

func (h *dashHandlers) mux() *executor.Mux {
	mux := executor.NewMux()
	mux.HandleFunc("dash.run", func(ctx context.Context, job *executor.Job) (any, error) {
		start := time.Now()
		var p struct{ Block bool }
		_ = json.Unmarshal(job.Payload, &p)
		if p.Block {
			// A run holding its slot counts from its start: its end is zero.
			h.mu.Lock()
			h.blocked[job.WorkerID]++
			h.runs = append(h.runs, handlerRun{instance: job.InstanceID, attempt: job.Attempt, worker: job.WorkerID, start: start})
			h.mu.Unlock()
			defer func() {
				h.mu.Lock()
				h.blocked[job.WorkerID]--
				h.mu.Unlock()
			}()
			select {
			case <-h.release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return "released", nil
		}
		defer h.record(job, start)
		time.Sleep(h.runFor)
		return "ok", nil
	})
	mux.HandleFunc("dash.retry", func(_ context.Context, job *executor.Job) (any, error) {
		defer h.record(job, time.Now())
		time.Sleep(h.runFor)
		if job.Attempt == 1 {
			return nil, errors.New("not yet")
		}
		return "ok", nil
	})
	mux.HandleFunc("dash.fail", func(_ context.Context, job *executor.Job) (any, error) {
		defer h.record(job, time.Now())
		return nil, executor.Permanent(errors.New("no"))
	})
	mux.HandleFunc("dash.hang", func(ctx context.Context, job *executor.Job) (any, error) {
		defer h.record(job, time.Now())
		<-ctx.Done()
		return nil, ctx.Err()
	})
	return mux
}

// blockedBy returns the handlers holding a slot, by worker.
func (h *dashHandlers) blockedBy() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for w, n := range h.blocked {
		out[w] = n
	}
	return out
}

// dashEnv is the installation of the dashboard test: a three-node
// cluster, PostgreSQL, two replicas of the dispatcher and of the auditor
// (as the Helm chart runs them), the trigger and the API, the executors,
// and a Prometheus scraping them with a configuration made from
// deploy/prometheus/prometheus.yml — all but prometheus-nats-exporter
// (see notRun).
type dashEnv struct {
	t        *testing.T
	cluster  *natsCluster
	store    *store.Store
	client   *apiclient.Client
	handlers *dashHandlers
	promURL  string
	// registries are the services' own, read directly to know when they
	// have caught up.
	registries []*prometheus.Registry
	// unmonitored is how many audit records PostgreSQL held when the
	// monitor's consumer was created: it starts at the records published
	// after (auditor/monitor.MonitorConsumer), so it may never see them.
	unmonitored float64
}

// notRun are the targets of deploy/prometheus/prometheus.yml the test does
// not run, and why.
var notRun = map[string]string{
	"nats-exporter": "prometheus-nats-exporter: the Go module proxy refuses its module, so make test cannot build it; " +
		"the dashboard's exporter halves are not evaluated (see exporterHalf)",
}

// jsTimeout bounds the test's own JetStream API requests: on a loaded
// machine a three-node cluster answers slowly, during an election for
// seconds.
const jsTimeout = 30 * time.Second

// serveRegistry serves a registry's /metrics on a loopback port and
// returns its host:port.
func serveRegistry(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func startDashEnv(t *testing.T) *dashEnv {
	t.Helper()
	if testing.Short() {
		t.Skip("a three-node NATS cluster and Prometheus: skipped with -short; make test-dashboard runs it")
	}
	promBin := prometheusBinary(t)
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	c, err := natsembed.StartCluster(natsembed.ClusterOptions{Size: 3, Dir: t.TempDir(), MonitorPort: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	cluster := &natsCluster{Cluster: c, t: t, top: streams.Default()}
	conn, _ := cluster.connect("test")
	if cluster.js, err = jetstream.New(conn, jetstream.WithDefaultTimeout(jsTimeout)); err != nil {
		t.Fatal(err)
	}
	pool := storetest.NewDB(t)
	t.Cleanup(func() {
		if t.Failed() {
			cluster.dump(pool)
		}
	})
	env := &dashEnv{t: t, cluster: cluster, store: store.New(pool),
		handlers: &dashHandlers{runFor: 700 * time.Millisecond, release: make(chan struct{}), blocked: map[string]int{}}}
	t.Cleanup(func() { close(env.handlers.release) })

	// Each replica has a registry of its own, as each pod has.
	targets := map[string][]string{} // compose host → the test's host:port
	cfg := streams.Config{Replicas: 3, LeaseTTL: clusterLeaseTTL}
	for i, role := range []natsauth.Role{natsauth.Dispatcher, natsauth.Dispatcher, natsauth.Auditor, natsauth.Auditor, natsauth.Trigger} {
		reg := metrics.NewRegistry()
		opts := devstack.Options{NATSURL: c.URL(), Store: env.store, Streams: cfg, Ensure: i == 0, Logger: log,
			Services: []natsauth.Role{role}, Metrics: reg,
			Auditor: auditor.Options{PollInterval: 50 * time.Millisecond, RetryInterval: 500 * time.Millisecond,
				RefreshInterval: 500 * time.Millisecond, LagInterval: 500 * time.Millisecond}}
		if role == natsauth.Trigger {
			opts.Services = append(opts.Services, natsauth.API)
		}
		stack := env.startStack(opts)
		env.registries = append(env.registries, reg)
		addr := serveRegistry(t, metrics.Handler(reg))
		targets[string(role)] = append(targets[string(role)], addr)
		if stack.API != nil {
			hs := httptest.NewServer(stack.API.Handler())
			t.Cleanup(hs.Close)
			env.client = apiclient.NewClient(hs.URL, hs.Client())
			env.client.Token = apitest.Admin(t, env.store)
		}
	}
	cluster.waitHealthy("the topology in three replicas")
	for _, w := range dashWorkers {
		conn, _ := cluster.connect(w.id)
		executortest.Run(t, executor.Options{Conn: conn, WorkerID: w.id, Pools: []string{w.pool}, Slots: w.slots,
			Mux: env.handlers.mux(), HeartbeatInterval: 500 * time.Millisecond, Logger: slog.New(zerolog.NewSlogHandler(log))})
	}
	env.promURL = startPrometheus(t, promBin, targets)
	env.waitMonitorConsumer()
	if _, err := env.client.ApplyLimit(context.Background(), dashLimit); err != nil {
		t.Fatalf("apply limit %s: %v", dashLimit.Name, err)
	}
	for _, task := range dashTasks {
		if _, err := env.client.ApplyTask(context.Background(), []byte("task_name: "+task.name+"\n"+task.def), "application/yaml"); err != nil {
			t.Fatalf("apply %s: %v", task.name, err)
		}
	}
	return env
}

// startStack starts a devstack and stops it when the test ends.
func (e *dashEnv) startStack(opts devstack.Options) *devstack.Stack {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*servicetest.ReadyTimeout)
	defer cancel()
	stack, err := devstack.Start(ctx, opts)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), servicetest.StopTimeout)
		defer cancel()
		if err := stack.Stop(ctx); err != nil {
			e.t.Errorf("%v", err)
		}
	})
	return stack
}

// startPrometheus runs Prometheus on deploy/prometheus/prometheus.yml with
// its rules, each target's host replaced by the test's servers of that
// service (both replicas where the chart runs two), every job scraped
// each second, and returns its URL once it is ready.
func startPrometheus(t *testing.T, bin string, targets map[string][]string) string {
	t.Helper()
	var cfg map[string]any
	readYAML(t, "deploy/prometheus/prometheus.yml", &cfg)
	dir := t.TempDir()
	cfg["global"] = map[string]any{"scrape_interval": "1s", "evaluation_interval": "1s"}
	var rules []any
	for _, f := range cfg["rule_files"].([]any) {
		data, err := os.ReadFile(filepath.Join("../../deploy/prometheus", f.(string)))
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Join(dir, filepath.Base(f.(string)))
		if err := os.WriteFile(name, data, 0o600); err != nil {
			t.Fatal(err)
		}
		rules = append(rules, name)
	}
	cfg["rule_files"] = rules
	scraped := map[string]bool{}
	for _, sc := range cfg["scrape_configs"].([]any) {
		for _, st := range sc.(map[string]any)["static_configs"].([]any) {
			mapped := []any{}
			for _, target := range st.(map[string]any)["targets"].([]any) {
				host, _, err := net.SplitHostPort(target.(string))
				if notRun[host] != "" {
					continue
				}
				if err != nil || len(targets[host]) == 0 {
					t.Fatalf("deploy/prometheus/prometheus.yml scrapes %v, which the test does not run", target)
				}
				for _, addr := range targets[host] {
					mapped = append(mapped, addr)
				}
				scraped[host] = true
			}
			st.(map[string]any)["targets"] = mapped
		}
	}
	// The chart's ServiceMonitor scrapes every AX pod: the services compose
	// leaves out join the job "ax".
	for host, addrs := range targets {
		if scraped[host] {
			continue
		}
		job := map[string]any{"job_name": "helm-" + host, "static_configs": []any{map[string]any{"targets": addrs}}}
		cfg["scrape_configs"] = append(cfg["scrape_configs"].([]any), job)
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	logFile, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			if out, err := os.ReadFile(logFile.Name()); err == nil {
				t.Logf("prometheus log:\n%s", out)
			}
		}
		logFile.Close()
	})
	base := "http://" + addr
	waitFor(t, "Prometheus to be ready", 60*time.Second, func() (bool, error) {
		select {
		case err := <-exited:
			out, _ := os.ReadFile(logFile.Name())
			return false, fmt.Errorf("prometheus exited: %v\n%s", err, out)
		default:
		}
		resp, err := http.Get(base + "/-/ready")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	return base
}

// promSample is one series of an instant query's answer.
type promSample struct {
	labels map[string]string
	value  float64
}

// query evaluates expr at now in Prometheus.
func (e *dashEnv) query(expr string) ([]promSample, error) {
	resp, err := http.Get(e.promURL + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", expr, body.Error)
	}
	var out []promSample
	parse := func(v [2]any) (float64, error) {
		s, _ := v[1].(string)
		return strconv.ParseFloat(s, 64)
	}
	switch body.Data.ResultType {
	case "vector":
		var vec []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(body.Data.Result, &vec); err != nil {
			return nil, err
		}
		for _, s := range vec {
			v, err := parse(s.Value)
			if err != nil {
				return nil, err
			}
			delete(s.Metric, "__name__")
			out = append(out, promSample{s.Metric, v})
		}
	case "scalar":
		var s [2]any
		if err := json.Unmarshal(body.Data.Result, &s); err != nil {
			return nil, err
		}
		v, err := parse(s)
		if err != nil {
			return nil, err
		}
		out = append(out, promSample{map[string]string{}, v})
	default:
		return nil, fmt.Errorf("query %s: a %s, not a vector", expr, body.Data.ResultType)
	}
	return out, nil
}
