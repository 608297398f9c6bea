package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/devstack"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/internal/cpustat"
	"github.com/ax-scheduler/ax/internal/gctune"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
)

// The pipeline benchmarks run with production settings unless told
// otherwise: the PostgreSQL they are given (make bench-pipeline starts one
// with fsync on; they print what the server says), the production lease TTL
// (AX_BENCH_LEASE_TTL overrides it) and JetStream on file storage, as ax dev
// runs it. Every run prints these settings beside its figures.

// benchSystem starts a system with one executor of 1,000 slots (as
// bench/peers' River runs 1,000 workers) serving the no-op task "noop",
// with leases of AX_BENCH_LEASE_TTL (default: the production 30 s).
func benchSystem(b *testing.B) *benchRig {
	ttl := envDuration(b, "AX_BENCH_LEASE_TTL", streams.DefaultLeaseTTL)
	benchGC.Do(func() { benchGCSetting = gctune.Apply() })
	hops := newHopTrace()
	mux := executor.NewMux()
	mux.HandleFunc("bench.noop", func(_ context.Context, j *executor.Job) (any, error) {
		hops.handlerStarted(j.InstanceID)
		return nil, nil
	})
	s := &benchRig{system: newSystemWith(b, ttl, devstack.Executor{
		Options: executor.Options{WorkerID: "bench", Mux: mux, Slots: 1000, Logger: slog.New(slog.DiscardHandler)}}), hops: hops}
	s.log = zerolog.Nop()
	if os.Getenv("AX_BENCH_AUDITOR") == "1" {
		// The auditor as a deployment runs it: its relay publishes every
		// transition to AX_AUDIT, its monitor reads them back.
		s.audited = true
		serviceLabel("auditor")
		s.startStack(devstack.Options{NATSURL: s.srv.URL, Streams: streams.Config{LeaseTTL: ttl},
			Services: []natsauth.Role{natsauth.Auditor}, ProfileLabels: true})
	}
	s.benchConns = map[string]*nats.Conn{"dispatcher": s.dispatchConn, "executor": s.stack.Conn("executor"), "firing": s.js.Conn()}
	s.apply(`
task_name: noop
execution:
  handler: bench.noop
`)
	benchf(b, "settings: %s", s.benchSettings(b, ttl))
	return s
}

// benchGCSetting is the garbage collector's setting the benchmarks run
// with: ax's (gctune.Apply), set once per test binary.
var (
	benchGC        sync.Once
	benchGCSetting gctune.Setting
)

// benchRig is a system under a benchmark.
type benchRig struct {
	*system
	// benchConns are the NATS connections whose messages a costMeter
	// counts, by who uses them.
	benchConns map[string]*nats.Conn
	// hops follows the instances hop by hop once started.
	hops *hopTrace
	// audited is set when the auditor runs beside the pipeline
	// (AX_BENCH_AUDITOR=1).
	audited bool
}

// waitAudited waits until AX_AUDIT holds every record of the outbox: each
// transition and operator action written so far (call it once nothing
// writes any more), and returns how many and when the stream stored the
// message that completed them (the server's timestamp): the moment AX_AUDIT
// held them, not the moment this reader, which begins only now, had read
// and decoded them all.
func (s *benchRig) waitAudited(b *testing.B) (uint64, time.Time) {
	ctx := context.Background()
	var want uint64
	if err := s.pool.QueryRow(ctx, `/* bench */ SELECT (SELECT count(*) FROM instance_transition_log)
		+ (SELECT count(*) FROM operator_actions)`).Scan(&want); err != nil {
		b.Fatal(err)
	}
	// AX_AUDIT's messages carry one record (version 1 of the audit
	// protocol) or a task's records of a relay page (version 2): count the
	// records, reading each message once as it comes.
	cons, err := s.js.OrderedConsumer(ctx, s.srv.Topology.AuditStream(), jetstream.OrderedConsumerConfig{})
	if err != nil {
		b.Fatal(err)
	}
	var have uint64
	var held time.Time
	deadline := time.Now().Add(envDuration(b, "AX_BENCH_TIMEOUT", 10*time.Minute))
	for have < want {
		if time.Now().After(deadline) {
			b.Fatalf("AX_AUDIT holds %d of the outbox's %d records", have, want)
		}
		msgs, err := cons.Fetch(1000, jetstream.FetchMaxWait(50*time.Millisecond))
		if err != nil {
			b.Fatal(err)
		}
		for m := range msgs.Messages() {
			recs, err := schemas.DecodeAuditMessage(m.Data())
			if err != nil {
				b.Fatal(err)
			}
			if have += uint64(len(recs)); have >= want && held.IsZero() {
				meta, err := m.Metadata()
				if err != nil {
					b.Fatal(err)
				}
				held = meta.Timestamp
			}
		}
		if err := msgs.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			b.Fatal(err)
		}
	}
	return want, held
}

// benchSettings describes what the benchmark runs on: PostgreSQL's
// durability as the server reports it, the lease TTL, JetStream's storage,
// and the machine.
func (s *system) benchSettings(b *testing.B, ttl time.Duration) string {
	ctx := context.Background()
	var fsync, syncCommit, fullPages, version string
	err := s.pool.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('synchronous_commit'),
       current_setting('full_page_writes'), current_setting('server_version')`).Scan(&fsync, &syncCommit, &fullPages, &version)
	if err != nil {
		b.Fatal(err)
	}
	st, err := s.js.Stream(ctx, s.srv.Topology.DispatchStream())
	if err != nil {
		b.Fatal(err)
	}
	return fmt.Sprintf("postgres %s fsync=%s synchronous_commit=%s full_page_writes=%s; lease TTL %s; JetStream %s storage (nats-server %s embedded); %s; %d CPUs, load average %s, %s",
		version, fsync, syncCommit, fullPages, ttl, st.CachedInfo().Config.Storage, server.VERSION, benchGCSetting, cpustat.Cores(), cpustat.LoadAverage(), faultCost(b))
}

// faultCost says what a page fault and a system call cost this machine
// (cpustat.FaultCost, cpustat.SyscallCost): figures to compare machines
// by, and to read the page faults a benchmark prints with.
func faultCost(b *testing.B) string {
	d, err := cpustat.FaultCost(1024)
	if err != nil {
		b.Fatal(err)
	}
	return fmt.Sprintf("a page fault %.1f µs, a system call %.2f µs", float64(d.Nanoseconds())/1e3,
		float64(cpustat.SyscallCost(100000).Nanoseconds())/1e3)
}

// fireNoop publishes one firing of "noop", asynchronously into batch.
func (s *system) fireNoop(b *testing.B, batch *streams.AsyncBatch, eventID string) {
	ev := schemas.TriggerEvent{EventID: eventID, FiredAt: time.Now()}
	m, err := streams.NewMsg(s.srv.Topology.Trigger("noop"), eventID, ev)
	if err != nil {
		b.Fatal(err)
	}
	batch.Add(m)
}

// fireNoopBatch publishes the firings of "noop" named eventIDs as one
// batch (a trigger message that carries them all), asynchronously into
// batch, with the message id noop/<batchID>.
func (s *system) fireNoopBatch(b *testing.B, batch *streams.AsyncBatch, batchID string, eventIDs []string) {
	evs := make([]schemas.TriggerEvent, len(eventIDs))
	now := time.Now()
	for i, id := range eventIDs {
		evs[i] = schemas.TriggerEvent{EventID: id, FiredAt: now}
	}
	data, err := schemas.MarshalTriggerBatch(evs)
	if err != nil {
		b.Fatal(err)
	}
	m := nats.NewMsg(s.srv.Topology.Trigger("noop"))
	m.Data = data
	m.Header.Set(nats.MsgIdHdr, streams.TriggerMsgID("noop", batchID))
	batch.Add(m)
}

// firePaced fires perTick no-op firings every tick for seconds, named
// paced-<from>, paced-<from+1>…, awaiting each tick's acknowledgements in
// batch before the next tick, and returns how many it fired.
func (s *system) firePaced(b *testing.B, batch *streams.AsyncBatch, tick time.Duration, perTick, seconds, from int) int {
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	fired := 0
	for range seconds * int(time.Second/tick) {
		<-ticker.C
		for range perTick {
			s.fireNoop(b, batch, fmt.Sprintf("paced-%d", from+fired))
			fired++
		}
		if err := batch.Wait(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	return fired
}

// waitEnded waits until want instances of "noop" have ended (SUCCEEDED,
// FAILED, SKIPPED or CANCELLED) and returns how many ended in each state.
// It fails the benchmark after AX_BENCH_TIMEOUT (default 10 minutes), saying
// how far they got.
func (s *system) waitEnded(b *testing.B, want int) map[schemas.State]int {
	timeout := envDuration(b, "AX_BENCH_TIMEOUT", 10*time.Minute)
	var states map[schemas.State]int
	deadline := time.Now().Add(timeout)
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		var err error
		states, err = s.countStates()
		if err != nil {
			b.Fatal(err)
		}
		ended := 0
		for st, n := range states {
			if st.Terminal() {
				ended += n
			}
		}
		if ended >= want {
			return states
		}
		if time.Now().After(deadline) {
			b.Fatalf("after %v, %d of %d instances ended; states: %v", timeout, ended, want, states)
		}
		time.Sleep(wait)
	}
}

// countStates counts the instances of "noop" by state.
func (s *system) countStates() (map[schemas.State]int, error) {
	rows, err := s.pool.Query(context.Background(), `/* bench */ SELECT state, count(*) FROM instances WHERE task = 'noop' GROUP BY state`)
	if err != nil {
		return nil, err
	}
	states := map[schemas.State]int{}
	var st string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&st, &n}, func() error {
		states[schemas.State(st)] = n
		return nil
	})
	return states, err
}

// reportStartLatency reports the p50, p99 and p99.9 of firing → handler
// start over every instance of "noop".
func (s *system) reportStartLatency(b *testing.B) (p50, p99, p999 float64) {
	err := s.pool.QueryRow(context.Background(), `
SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), percentile_cont(0.99) WITHIN GROUP (ORDER BY ms),
	percentile_cont(0.999) WITHIN GROUP (ORDER BY ms)
FROM (SELECT extract(epoch FROM started_at - fired_at) * 1000 AS ms FROM instances WHERE task = 'noop') t`).Scan(&p50, &p99, &p999)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(p50, "p50_start_ms")
	b.ReportMetric(p99, "p99_start_ms")
	b.ReportMetric(p999, "p999_start_ms")
	return p50, p99, p999
}

// benchf prints one line of a benchmark's report on standard output,
// prefixed with the benchmark's name: testing keeps only the first ten lines
// of a benchmark's log.
func benchf(b *testing.B, format string, args ...any) {
	fmt.Printf("%s: %s\n", b.Name(), fmt.Sprintf(format, args...))
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

func envDuration(b *testing.B, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		b.Fatalf("%s=%q: want a positive duration such as 30s", name, v)
	}
	return d
}

// BenchmarkPipelineThroughput fires AX_BENCH_N (default 20000) no-op
// instances at once — in bulk, AX_BENCH_FIRE_BATCH (default 1000, as River's
// InsertMany) firings a trigger message, or with 1 a message a firing —
// through the real pipeline — trigger stream, dispatcher,
// PostgreSQL, dispatch stream, executor, reports, dispatcher — and reports
// end-to-end instances/s, from the first firing until every instance has
// ended, with how many ended SUCCEEDED and FAILED, the CPU spent per
// instance, and where the round trips went (see [costMeter]). Its start
// latencies are those of a backlog: they measure queueing.
//
// With AX_BENCH_CPUPROFILE set to a file, it writes a CPU profile of the
// burst alone there, its samples labelled by service
// (go tool pprof -tags FILE). With AX_BENCH_MEMPROFILE set to a file, it
// writes the allocation profile before the burst to FILE.base and after it
// to FILE (go tool pprof -sample_index=alloc_objects -base FILE.base FILE).
func BenchmarkPipelineThroughput(b *testing.B) {
	n := envInt(b, "AX_BENCH_N", 20000)
	s := benchSystem(b)
	ctx := context.Background()
	meter := s.newCostMeter(b)
	startCPUProfile(b)
	if path := os.Getenv("AX_BENCH_MEMPROFILE"); path != "" {
		writeAllocs(b, path+".base")
		defer writeAllocs(b, path)
	}
	serviceLabel("bench")
	defer pprof.SetGoroutineLabels(context.Background())
	fireBatch := envInt(b, "AX_BENCH_FIRE_BATCH", 1000)
	if fireBatch < 1 || fireBatch > schemas.MaxTriggerBatch {
		b.Fatalf("AX_BENCH_FIRE_BATCH=%d: give 1 (a message a firing) to %d (firings a message)", fireBatch, schemas.MaxTriggerBatch)
	}
	var total, audited, read time.Duration
	var records uint64
	var states map[schemas.State]int
	meter.start()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		batch := streams.NewAsyncBatch(s.js)
		ids := make([]string, 0, fireBatch)
		for j := range n {
			id := fmt.Sprintf("burst-%d-%d", i, j)
			if fireBatch == 1 {
				s.fireNoop(b, batch, id)
			} else if ids = append(ids, id); len(ids) == fireBatch || j == n-1 {
				s.fireNoopBatch(b, batch, fmt.Sprintf("burst-%d-batch-%d", i, j/fireBatch), ids)
				ids = ids[:0]
			}
			if batch.Len() == max(1000/fireBatch, 1) {
				if err := batch.Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := batch.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		states = s.waitEnded(b, (i+1)*n)
		ended := time.Since(start)
		total += ended
		if s.audited {
			// Never less than the poll that saw every instance ended,
			// as River's burst ends at the poll that sees its last job.
			var held time.Time
			records, held = s.waitAudited(b)
			audited += max(held.Sub(start), ended)
			read += time.Since(start)
		}
	}
	pprof.StopCPUProfile()
	instances := b.N * n
	rate := float64(instances) / total.Seconds()
	b.ReportMetric(rate, "instances/s")
	if s.audited {
		b.ReportMetric(float64(instances)/audited.Seconds(), "audited_instances/s")
		benchf(b, "audited: the auditor ran beside the pipeline (AX_BENCH_AUDITOR=1); AX_AUDIT held every record of the outbox (%d) %.2f s after the first firing, %.2f s after the last instance ended (the server's time of the last message; this benchmark, reading the stream from its start once the burst ended, had read them all %.2f s after): %.0f instances/s audited",
			records, audited.Seconds(), (audited - total).Seconds(), (read - total).Seconds(), float64(instances)/audited.Seconds())
	}
	b.ReportMetric(float64(states[schemas.StateSucceeded]), "succeeded")
	b.ReportMetric(float64(states[schemas.StateFailed]), "failed")
	cost := meter.stop(instances)
	p50, p99, _ := s.reportStartLatency(b)
	b.ReportMetric(0, "ns/op")
	how := fmt.Sprintf("in bulk, %d firings a trigger message (AX_BENCH_FIRE_BATCH=%d; 1 fires a message a firing)", fireBatch, fireBatch)
	if fireBatch == 1 {
		how = "a trigger message a firing (AX_BENCH_FIRE_BATCH=1; the default fires 1,000 a message)"
	}
	benchf(b, "burst of %d no-op firings, %s: %.0f instances/s (%.2f s); %d SUCCEEDED, %d FAILED, states %v; start latency of the backlog p50 %.0f ms, p99 %.0f ms",
		instances, how, rate, total.Seconds(), states[schemas.StateSucceeded], states[schemas.StateFailed], states, p50, p99)
	cost.log(b)
}

// startCPUProfile writes a CPU profile of the rest of the benchmark to
// AX_BENCH_CPUPROFILE, when it is set.
func startCPUProfile(b *testing.B) {
	path := os.Getenv("AX_BENCH_CPUPROFILE")
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Error(err)
		}
	})
}

// startTrace writes an execution trace of the rest of the benchmark to
// AX_BENCH_TRACE, when it is set (go tool trace FILE): where a slow start's
// time went — GC, a batch's timer, a goroutine waiting on the file store or
// on PostgreSQL — beside the hops BenchmarkPipelineLatency prints.
func startTrace(b *testing.B) {
	path := os.Getenv("AX_BENCH_TRACE")
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := trace.Start(f); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		trace.Stop()
		if err := f.Close(); err != nil {
			b.Error(err)
		}
	})
}

// writeAllocs writes the allocation profile of the process so far to path:
// a profile taken before the burst is the base (go tool pprof -base) that
// leaves the set-up out of one taken after it.
func writeAllocs(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	// The profile holds what was allocated up to the last completed
	// collection: at GOGC=400 a burst runs a few, and most of its
	// allocations would be missing without one now.
	runtime.GC()
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPipelineLatency fires no-op instances at a steady AX_BENCH_RATE per
// second (default 1000) for AX_BENCH_SECONDS (default 5) and reports the p50
// and p99 latency from firing to handler start: the pipeline's latency when
// it keeps up, without a backlog, and where it goes hop by hop (see
// [hopTrace]: a listener of its own on the subjects the hops cross, whose
// CPU and deliveries count in the run's; AX_BENCH_HOPS=0 leaves it out, as
// a deployment has none).
func BenchmarkPipelineLatency(b *testing.B) {
	rate := envInt(b, "AX_BENCH_RATE", 1000)
	seconds := envInt(b, "AX_BENCH_SECONDS", 5)
	listen := true
	switch v := os.Getenv("AX_BENCH_HOPS"); v {
	case "", "1":
	case "0":
		listen = false
	default:
		b.Fatalf("AX_BENCH_HOPS=%q: want 1 (trace the hops, the default) or 0 (no listener)", v)
	}
	s := benchSystem(b)
	const tick = 10 * time.Millisecond
	perTick := max(rate/int(time.Second/tick), 1)
	meter := s.newCostMeter(b)
	startCPUProfile(b)
	startTrace(b)
	s.hops.start(b, s, listen)
	meter.start()
	fired := 0
	var states map[schemas.State]int
	for i := 0; i < b.N; i++ {
		fired += s.firePaced(b, streams.NewAsyncBatch(s.js), tick, perTick, seconds, fired)
		states = s.waitEnded(b, fired)
	}
	cost := meter.stop(fired)
	firedPerSecond := float64(perTick) * float64(time.Second/tick)
	b.ReportMetric(firedPerSecond, "fired/s")
	b.ReportMetric(float64(states[schemas.StateSucceeded]), "succeeded")
	b.ReportMetric(float64(states[schemas.StateFailed]), "failed")
	p50, p99, p999 := s.reportStartLatency(b)
	b.ReportMetric(0, "ns/op")
	audited := "the auditor off (AX_BENCH_AUDITOR=1 runs it)"
	if s.audited {
		audited = "the auditor on"
	}
	hops := "the hop listener on (its CPU counted below; AX_BENCH_HOPS=0 leaves it out)"
	if !listen {
		hops = "no hop listener (AX_BENCH_HOPS=0)"
	}
	benchf(b, "steady %.0f firings/s for %d s, %s, %s: firing → handler start p50 %.1f ms, p99 %.1f ms, p99.9 %.1f ms; %d SUCCEEDED, %d FAILED",
		firedPerSecond, seconds*b.N, audited, hops, p50, p99, p999, states[schemas.StateSucceeded], states[schemas.StateFailed])
	s.hops.report(b, s)
	cost.log(b)
}

// costMeter measures what a stretch of a benchmark cost: CPU (the whole
// machine's, from /proc/stat, and the benchmark's own: this process and its
// PostgreSQL server's processes), NATS messages and JetStream API requests
// (from the embedded server's counters), messages stored per stream,
// PostgreSQL transactions, WAL flushes, deadlocks and statements (with
// pg_stat_statements when the server preloads it).
type costMeter struct {
	b *testing.B
	s *benchRig
	// postmaster is the PostgreSQL server's pid when it runs on this
	// machine, else 0.
	postmaster int
	// statements says whether pg_stat_statements is there.
	statements bool
	// logFile is the server's log (TEST_DATABASE_LOG), or "".
	logFile string
	before  costSample
	began   time.Time
}

// costSample is one reading of every counter a costMeter follows.
type costSample struct {
	machineBusy, machineTotal float64 // seconds of CPU, summed over cores
	own, postgres             float64 // seconds of CPU
	// ownFaults and postgresFaults are the minor page faults of this
	// process and of the PostgreSQL server's processes.
	ownFaults, postgresFaults int64
	// mallocs, allocBytes and gcs are this process's heap allocations,
	// bytes allocated and completed collections (runtime.MemStats).
	mallocs, allocBytes, gcs uint64
	natsIn                   int64
	jsAPI, jsAPIErrors       uint64
	streams                  map[string]uint64 // last sequence by stream
	commits, rollbacks       int64
	deadlocks                int64
	walRecords, walSyncs     int64
	logBytes                 int64
	// sent and received are the messages each connection of
	// benchRig.benchConns sent and received, by its name.
	sent, received map[string]uint64
}

// cost is what a costMeter measured over n instances.
type cost struct {
	n                         int
	elapsed                   time.Duration
	d                         costSample // differences
	statements                []statementCost
	deadlockLines             int
	haveLog, havePG, haveStmt bool
}

type statementCost struct {
	calls   int64
	totalMS float64 // executing and planning
	planMS  float64 // planning: 0 unless pg_stat_statements.track_planning is on
	rows    int64
	wal     int64 // WAL records the statement wrote
	query   string
}

func (s *benchRig) newCostMeter(b *testing.B) *costMeter {
	ctx := context.Background()
	m := &costMeter{b: b, s: s, logFile: os.Getenv("TEST_DATABASE_LOG")}
	var pid int
	if err := s.pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		b.Fatal(err)
	}
	// A backend's parent is the postmaster, when the server runs here.
	if ppid, comm, err := cpustat.Parent(pid); err == nil && comm == "postgres" {
		m.postmaster = ppid
	}
	var preload string
	if err := s.pool.QueryRow(ctx, `SELECT current_setting('shared_preload_libraries')`).Scan(&preload); err != nil {
		b.Fatal(err)
	}
	if strings.Contains(preload, "pg_stat_statements") {
		if _, err := s.pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
			b.Fatal(err)
		}
		m.statements = true
	}
	return m
}

// start takes the first reading and resets the statement statistics.
func (m *costMeter) start() {
	if m.statements {
		if _, err := m.s.pool.Exec(context.Background(), `/* bench */ SELECT pg_stat_statements_reset()`); err != nil {
			m.b.Fatal(err)
		}
	}
	m.before = m.sample()
	m.began = time.Now()
}

// stop takes the second reading and returns the differences over n
// instances.
func (m *costMeter) stop(n int) cost {
	elapsed := time.Since(m.began)
	after := m.sample()
	// A PostgreSQL backend publishes its statistics (commits, WAL,
	// deadlocks) at most once a second: read them again once they are in.
	time.Sleep(1500 * time.Millisecond)
	settled := m.sample()
	after.commits, after.rollbacks, after.deadlocks = settled.commits, settled.rollbacks, settled.deadlocks
	after.walRecords, after.walSyncs = settled.walRecords, settled.walSyncs
	c := cost{n: n, elapsed: elapsed, havePG: m.postmaster != 0, haveStmt: m.statements, haveLog: m.logFile != ""}
	b := m.before
	c.d = costSample{
		machineBusy: after.machineBusy - b.machineBusy, machineTotal: after.machineTotal - b.machineTotal,
		own: after.own - b.own, postgres: after.postgres - b.postgres,
		ownFaults: after.ownFaults - b.ownFaults, postgresFaults: after.postgresFaults - b.postgresFaults,
		mallocs: after.mallocs - b.mallocs, allocBytes: after.allocBytes - b.allocBytes, gcs: after.gcs - b.gcs,
		natsIn: after.natsIn - b.natsIn, jsAPI: after.jsAPI - b.jsAPI, jsAPIErrors: after.jsAPIErrors - b.jsAPIErrors,
		streams: map[string]uint64{}, commits: after.commits - b.commits, rollbacks: after.rollbacks - b.rollbacks,
		deadlocks: after.deadlocks - b.deadlocks, walRecords: after.walRecords - b.walRecords, walSyncs: after.walSyncs - b.walSyncs,
	}
	c.d.sent, c.d.received = map[string]uint64{}, map[string]uint64{}
	for name := range after.sent {
		c.d.sent[name], c.d.received[name] = after.sent[name]-b.sent[name], after.received[name]-b.received[name]
	}
	for name, seq := range after.streams {
		if d := seq - b.streams[name]; d > 0 {
			c.d.streams[name] = d
		}
	}
	if m.logFile != "" {
		c.deadlockLines = countInFile(m.b, m.logFile, b.logBytes, "deadlock detected")
	}
	if m.statements {
		c.statements = m.topStatements()
	}
	m.b.ReportMetric(c.d.machineBusy/float64(n)*1e6, "machine_cpu_us/inst")
	m.b.ReportMetric((c.d.own+c.d.postgres)/float64(n)*1e6, "own_cpu_us/inst")
	m.b.ReportMetric(float64(c.d.ownFaults+c.d.postgresFaults)/float64(n), "faults/inst")
	m.b.ReportMetric(float64(c.d.mallocs)/float64(n), "allocs/inst")
	m.b.ReportMetric(float64(c.d.jsAPI)/float64(n), "js_api/inst")
	m.b.ReportMetric(float64(c.deadlockLines), "deadlock_lines")
	return c
}

func (m *costMeter) sample() costSample {
	ctx := context.Background()
	var c costSample
	machine, err := cpustat.ReadMachine()
	if err != nil {
		m.b.Fatal(err)
	}
	c.machineBusy, c.machineTotal = machine.Busy.Seconds(), machine.Total.Seconds()
	own, err := cpustat.Self()
	if err != nil {
		m.b.Fatal(err)
	}
	c.own, c.ownFaults = own.CPU.Seconds(), own.Faults
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	c.mallocs, c.allocBytes, c.gcs = mem.Mallocs, mem.TotalAlloc, uint64(mem.NumGC)
	if m.postmaster != 0 {
		pg, err := cpustat.Tree(m.postmaster)
		if err != nil {
			m.b.Fatal(err)
		}
		c.postgres, c.postgresFaults = pg.CPU.Seconds(), pg.Faults
	}
	v, err := m.s.srv.Varz(nil)
	if err != nil {
		m.b.Fatal(err)
	}
	c.natsIn = v.InMsgs
	c.sent, c.received = map[string]uint64{}, map[string]uint64{}
	for name, nc := range m.s.benchConns {
		st := nc.Stats()
		c.sent[name], c.received[name] = st.OutMsgs, st.InMsgs
	}
	js, err := m.s.srv.Jsz(nil)
	if err != nil {
		m.b.Fatal(err)
	}
	c.jsAPI, c.jsAPIErrors = js.API.Total, js.API.Errors
	c.streams = map[string]uint64{}
	names := m.s.js.StreamNames(ctx)
	for name := range names.Name() {
		st, err := m.s.js.Stream(ctx, name)
		if err != nil {
			m.b.Fatal(err)
		}
		c.streams[name] = st.CachedInfo().State.LastSeq
	}
	if err := names.Err(); err != nil {
		m.b.Fatal(err)
	}
	// The statistics of other sessions reach the views at most a second
	// late; a fresh snapshot is taken for each query.
	if _, err := m.s.pool.Exec(ctx, `/* bench */ SELECT pg_stat_clear_snapshot()`); err != nil {
		m.b.Fatal(err)
	}
	err = m.s.pool.QueryRow(ctx, `/* bench */ SELECT xact_commit, xact_rollback, deadlocks FROM pg_stat_database WHERE datname = current_database()`).
		Scan(&c.commits, &c.rollbacks, &c.deadlocks)
	if err != nil {
		m.b.Fatal(err)
	}
	if err := m.s.pool.QueryRow(ctx, `/* bench */ SELECT wal_records, wal_sync FROM pg_stat_wal`).Scan(&c.walRecords, &c.walSyncs); err != nil {
		m.b.Fatal(err)
	}
	if m.logFile != "" {
		if fi, err := os.Stat(m.logFile); err == nil {
			c.logBytes = fi.Size()
		}
	}
	return c
}

// topStatements returns the statements of this benchmark's database by
// total time, executing and planning (planning is counted when the server
// runs with pg_stat_statements.track_planning on), the costliest first,
// leaving out the benchmark's own (marked with a leading comment): the
// first 12, or AX_BENCH_STATEMENTS.
func (m *costMeter) topStatements() []statementCost {
	rows, err := m.s.pool.Query(context.Background(), `/* bench */
SELECT calls, total_exec_time + total_plan_time, total_plan_time, rows, wal_records, regexp_replace(query, '\s+', ' ', 'g')
FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND query NOT LIKE '/* bench */%'
ORDER BY total_exec_time + total_plan_time DESC LIMIT $1`, envInt(m.b, "AX_BENCH_STATEMENTS", 12))
	if err != nil {
		m.b.Fatal(err)
	}
	var out []statementCost
	var sc statementCost
	_, err = pgx.ForEachRow(rows, []any{&sc.calls, &sc.totalMS, &sc.planMS, &sc.rows, &sc.wal, &sc.query}, func() error {
		out = append(out, sc)
		return nil
	})
	if err != nil {
		m.b.Fatal(err)
	}
	return out
}

// log prints the cost, per instance where that is the figure that holds
// from one run to another.
func (c cost) log(b *testing.B) {
	n := float64(c.n)
	us := func(seconds float64) float64 { return seconds / n * 1e6 }
	benchf(b, "CPU over %.2f s: machine %.2f of %.0f cores busy = %.0f µs per instance (every process on the machine, /proc/stat)",
		c.elapsed.Seconds(), c.d.machineBusy/c.elapsed.Seconds(), c.d.machineTotal/c.elapsed.Seconds(), us(c.d.machineBusy))
	if c.havePG {
		benchf(b, "CPU of the benchmark itself: %.0f µs per instance = %.0f in this process (NATS server, dispatcher, executor, firing) + %.0f in PostgreSQL",
			us(c.d.own+c.d.postgres), us(c.d.own), us(c.d.postgres))
	} else {
		benchf(b, "CPU of this process (NATS server, dispatcher, executor, firing): %.0f µs per instance; PostgreSQL's is not on this machine or not visible", us(c.d.own))
	}
	if c.havePG {
		benchf(b, "page faults per instance: %.1f in this process + %.1f in PostgreSQL (memory touched for the first time; the settings line says what one costs here)",
			float64(c.d.ownFaults)/n, float64(c.d.postgresFaults)/n)
	} else {
		benchf(b, "page faults per instance: %.1f in this process (memory touched for the first time; the settings line says what one costs here)", float64(c.d.ownFaults)/n)
	}
	benchf(b, "allocations of this process (NATS server, dispatcher, executor, firing): %.0f per instance, %.0f bytes per instance; %d collections (%.1f per 1,000 instances)",
		float64(c.d.mallocs)/n, float64(c.d.allocBytes)/n, c.d.gcs, float64(c.d.gcs)/n*1000)
	benchf(b, "NATS: %.1f messages into the server per instance, %.2f JetStream API requests per instance (%d errors)",
		float64(c.d.natsIn)/n, float64(c.d.jsAPI)/n, c.d.jsAPIErrors)
	var parts []string
	for name, d := range c.d.sent {
		parts = append(parts, fmt.Sprintf("%s sent %.2f and received %.2f", name, float64(d)/n, float64(c.d.received[name])/n))
	}
	slices.Sort(parts)
	benchf(b, "NATS messages per instance, by connection (publishes, acks, pull requests and KV operations sent; deliveries and replies received): %s", strings.Join(parts, "; "))
	parts = nil
	for name, d := range c.d.streams {
		parts = append(parts, fmt.Sprintf("%s %.2f", name, float64(d)/n))
	}
	slices.Sort(parts)
	benchf(b, "messages stored per instance: %s", strings.Join(parts, ", "))
	benchf(b, "PostgreSQL: %.3f commits and %.3f rollbacks per instance, %.1f WAL records and %.3f WAL syncs per instance, %d deadlocks (pg_stat_database)",
		float64(c.d.commits)/n, float64(c.d.rollbacks)/n, float64(c.d.walRecords)/n, float64(c.d.walSyncs)/n, c.d.deadlocks)
	if c.haveLog {
		benchf(b, "PostgreSQL log: %d lines with \"deadlock detected\"", c.deadlockLines)
	} else {
		benchf(b, "PostgreSQL log: not counted (TEST_DATABASE_LOG unset; withpg sets it)")
	}
	if !c.haveStmt {
		benchf(b, "statements: not measured (start PostgreSQL with shared_preload_libraries=pg_stat_statements, as make bench-pipeline does)")
		return
	}
	var calls int64
	var totalMS, planMS float64
	for _, sc := range c.statements {
		calls += sc.calls
		totalMS += sc.totalMS
		planMS += sc.planMS
	}
	planned := "planning not counted: pg_stat_statements.track_planning is off"
	if planMS > 0 {
		planned = fmt.Sprintf("%.0f µs of it planning", planMS*1e3/n)
	}
	benchf(b, "statements by total time (pg_stat_statements, top %d: %.3f calls and %.0f µs per instance, %s):",
		len(c.statements), float64(calls)/n, totalMS*1e3/n, planned)
	for _, sc := range c.statements {
		q := sc.query
		if len(q) > 110 {
			q = q[:110] + "…"
		}
		plan := ""
		if planMS > 0 {
			plan = fmt.Sprintf(" (plan %.1f ms)", sc.planMS)
		}
		benchf(b, "  %7d calls %9.1f ms%s %6.1f µs/inst %8d rows %5.1f WAL/inst  %s", sc.calls, sc.totalMS, plan, sc.totalMS*1e3/n, sc.rows, float64(sc.wal)/n, q)
	}
}

// countInFile counts the lines holding text in the file at path after its
// first offset bytes.
func countInFile(b *testing.B, path string, offset int64, text string) int {
	f, err := os.Open(path)
	if err != nil {
		b.Fatalf("count %q in the PostgreSQL log: %v", text, err)
	}
	defer f.Close()
	if _, err := f.Seek(offset, 0); err != nil {
		b.Fatal(err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		b.Fatal(err)
	}
	return strings.Count(string(data), text)
}
