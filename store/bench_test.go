package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ax-scheduler/ax/internal/cpustat"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
)

// BenchmarkCreateInstances creates 20,000 instances in batches of 250, as
// the dispatcher does under a burst, on one connection, and reports per
// instance the CPU of this process (encoding the batches, decoding the
// attempts), that of the PostgreSQL backend that ran the statements, and
// the WAL bytes written: the cost of CreateInstances alone, which moves less
// with the machine's other load than the pipeline's rates.
func BenchmarkCreateInstances(b *testing.B) {
	const n, batch = 20000, 250
	pool, st, pid := benchStore(b)
	ctx := context.Background()
	wal := func() (lsn int64) {
		if err := pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn`).Scan(&lsn); err != nil {
			b.Fatal(err)
		}
		return lsn
	}
	var own, backend time.Duration
	var walBytes int64
	// As the dispatcher makes them: from the task's record, its stamp
	// checked by the statement.
	recs, err := st.GetTasks(ctx, []string{"burst"})
	if err != nil {
		b.Fatal(err)
	}
	for round := 0; b.Loop(); round++ {
		in := burstFirings(round, n)
		for i := range in {
			in[i].TaskStamp = recs["burst"].Stamp
		}
		w0 := wal()
		o0, b0 := cpuTimes(b, pid)
		for i := 0; i < n; i += batch {
			if _, err := st.CreateInstances(ctx, in[i:i+batch]); err != nil {
				b.Fatal(err)
			}
		}
		o1, b1 := cpuTimes(b, pid)
		own, backend, walBytes = own+o1-o0, backend+b1-b0, walBytes+wal()-w0
	}
	total := float64(b.N * n)
	b.ReportMetric(float64(own.Microseconds())/total, "process_cpu_us/inst")
	b.ReportMetric(float64(backend.Microseconds())/total, "backend_cpu_us/inst")
	b.ReportMetric(float64(walBytes)/total, "wal_bytes/inst")
	b.Logf("settings: %s; load average %s", pgSettings(b, pool), cpustat.LoadAverage())
}

// benchStore returns a store on a fresh database over one connection, with
// task "burst" applied, and the process id of that connection's PostgreSQL
// backend, whose CPU time the benchmarks read from /proc.
func benchStore(b *testing.B) (*pgxpool.Pool, *store.Store, int) {
	pool := storetest.NewOneConn(b)
	st := store.New(pool)
	if _, _, err := st.ApplyTask(b.Context(), parseTask(b, "task_name: burst\nexecution: {handler: builtin.echo}\n"), ""); err != nil {
		b.Fatal(err)
	}
	var pid int
	if err := pool.QueryRow(b.Context(), `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		b.Fatal(err)
	}
	if _, comm, err := cpustat.Parent(pid); err != nil || comm != "postgres" {
		b.Fatalf("the benchmark reads the CPU time of its PostgreSQL backend from /proc: the server must run on this machine (%v)", err)
	}
	return pool, st, pid
}

// burstFirings returns n firings of task "burst", their event ids new in round.
func burstFirings(round, n int) []store.NewInstance {
	in := make([]store.NewInstance, n)
	for i := range in {
		in[i] = store.NewInstance{
			Task: "burst", TaskVersion: 1, EventID: fmt.Sprintf("r%d-%d", round, i), Source: schemas.SourceEvent,
			Priority: schemas.PriorityNormal, Pool: "default", Handler: "builtin.echo", TimeoutMS: 60000,
			MaxAttempts: 1, Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), FiredAt: time.Now(),
			State: schemas.StateDispatched,
		}
	}
	return in
}

// cpuTimes returns the CPU time of this process and of the PostgreSQL backend pid.
func cpuTimes(b *testing.B, pid int) (self, backend time.Duration) {
	tree, err := cpustat.Tree(pid)
	if err != nil {
		b.Fatal(err)
	}
	own, err := cpustat.Self()
	if err != nil {
		b.Fatal(err)
	}
	return own.CPU, tree.CPU
}

// pgSettings names the server's durability settings.
func pgSettings(b *testing.B, pool *pgxpool.Pool) string {
	var fsync, sync string
	if err := pool.QueryRow(context.Background(),
		`SELECT current_setting('fsync'), current_setting('synchronous_commit')`).Scan(&fsync, &sync); err != nil {
		b.Fatal(err)
	}
	return "fsync=" + fsync + " synchronous_commit=" + sync
}

// BenchmarkInstanceLife runs the PostgreSQL side of a burst's instances on
// one connection: it creates 20,000 instances in batches of 250, then ends
// each with a final report (no started report before it, as the executor
// sends for a short attempt) in batches of 250, and reports per instance the
// WAL records and bytes written (pg_stat_wal, the whole server's), the
// transitions recorded and the instance_transitions rows that hold them, and the CPU of the PostgreSQL backend and of this
// process. The counts do not move with the machine's other load; the CPU
// times do.
func BenchmarkInstanceLife(b *testing.B) {
	const n, batch = 20000, 250
	pool, st, pid := benchStore(b)
	ctx := context.Background()
	// wal returns the server's WAL records and insert position, once this
	// backend has flushed its counts to the statistics.
	wal := func() (records, lsn int64) {
		if _, err := pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			b.Fatal(err)
		}
		if err := pool.QueryRow(ctx, `SELECT wal_records, pg_current_wal_insert_lsn() - '0/0'::pg_lsn FROM pg_stat_wal`).Scan(&records, &lsn); err != nil {
			b.Fatal(err)
		}
		return records, lsn
	}
	// count returns the transitions recorded and the rows that hold them.
	count := func() (c, rows int64) {
		if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM instance_transition_log),
			(SELECT count(*) FROM instance_transitions)`).Scan(&c, &rows); err != nil {
			b.Fatal(err)
		}
		return c, rows
	}
	var own, backend time.Duration
	var walRecords, walBytes, transitions, transitionRows int64
	for round := 0; b.Loop(); round++ {
		in := burstFirings(round, n)
		t0, tr0 := count()
		r0, w0 := wal()
		o0, b0 := cpuTimes(b, pid)
		var reports []schemas.Report
		for i := 0; i < n; i += batch {
			made, err := st.CreateInstances(ctx, in[i:i+batch])
			if err != nil {
				b.Fatal(err)
			}
			for _, a := range made {
				now := time.Now()
				reports = append(reports, schemas.Report{InstanceID: a.ID, Attempt: a.Attempt, WorkerID: "w1",
					Kind: schemas.ReportSucceeded, At: now, StartedAt: now, Output: json.RawMessage(`{}`), Pool: "default", Handlers: []string{"builtin.echo"}})
			}
		}
		for i := 0; i < len(reports); i += batch {
			out, err := st.ApplyReports(ctx, nil, reports[i:min(i+batch, len(reports))])
			if err != nil {
				b.Fatal(err)
			}
			for _, o := range out {
				if !o.Applied || o.State != schemas.StateSucceeded {
					b.Fatalf("instance %d: applied %v, state %s", o.InstanceID, o.Applied, o.State)
				}
			}
		}
		o1, b1 := cpuTimes(b, pid)
		r1, w1 := wal()
		own, backend = own+o1-o0, backend+b1-b0
		t1, tr1 := count()
		walRecords, walBytes, transitions, transitionRows = walRecords+r1-r0, walBytes+w1-w0, transitions+t1-t0, transitionRows+tr1-tr0
	}
	total := float64(b.N * n)
	b.ReportMetric(float64(own.Microseconds())/total, "process_cpu_us/inst")
	b.ReportMetric(float64(backend.Microseconds())/total, "backend_cpu_us/inst")
	b.ReportMetric(float64(walRecords)/total, "wal_records/inst")
	b.ReportMetric(float64(walBytes)/total, "wal_bytes/inst")
	b.ReportMetric(float64(transitions)/total, "transitions/inst")
	b.ReportMetric(float64(transitionRows)/total, "transition_rows/inst")
	b.Logf("settings: %s; load average %s", pgSettings(b, pool), cpustat.LoadAverage())
}

// BenchmarkReportBatch ends 10,000 instances with final reports (started
// report and final report of each attempt in one batch, as the dispatcher
// gathers them under load) in batches of 100, 250 and 1,000 on one
// connection, and reports per report the time the statements took and the
// PostgreSQL backend's CPU: the cost of one report must not grow with the
// batch it comes in (a batch grows when the dispatcher falls behind), nor
// that of the same reports delivered again (none applies).
func BenchmarkReportBatch(b *testing.B) {
	const n = 10000
	for _, batch := range []int{100, 250, 1000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			pool, st, pid := benchStore(b)
			ctx := context.Background()
			var took, backend, again, againBackend time.Duration
			for round := 0; b.Loop(); round++ {
				in := burstFirings(round, n)
				var started, final []schemas.Report
				for i := 0; i < n; i += 250 {
					made, err := st.CreateInstances(ctx, in[i:i+250])
					if err != nil {
						b.Fatal(err)
					}
					for _, a := range made {
						now := time.Now()
						started = append(started, schemas.Report{InstanceID: a.ID, Attempt: a.Attempt, WorkerID: "w1",
							Kind: schemas.ReportStarted, At: now, StartedAt: now, Pool: "default", Handlers: []string{"builtin.echo"}})
						final = append(final, schemas.Report{InstanceID: a.ID, Attempt: a.Attempt, WorkerID: "w1",
							Kind: schemas.ReportSucceeded, At: now, StartedAt: now, Output: json.RawMessage(`{}`), Pool: "default", Handlers: []string{"builtin.echo"}})
					}
				}
				_, b0 := cpuTimes(b, pid)
				t0 := time.Now()
				for i := 0; i < n; i += batch {
					j := min(i+batch, n)
					out, err := st.ApplyReports(ctx, started[i:j], final[i:j])
					if err != nil {
						b.Fatal(err)
					}
					for _, o := range out[j-i:] {
						if !o.Applied || o.State != schemas.StateSucceeded {
							b.Fatalf("instance %d: applied %v, state %s", o.InstanceID, o.Applied, o.State)
						}
					}
				}
				took += time.Since(t0)
				_, b1 := cpuTimes(b, pid)
				backend += b1 - b0
				// The same batches again, as redelivered reports: none
				// applies, each is answered with its instance as it is.
				t0 = time.Now()
				for i := 0; i < n; i += batch {
					j := min(i+batch, n)
					if _, err := st.ApplyReports(ctx, started[i:j], final[i:j]); err != nil {
						b.Fatal(err)
					}
				}
				again += time.Since(t0)
				_, b2 := cpuTimes(b, pid)
				againBackend += b2 - b1
			}
			total := float64(b.N * n)
			b.ReportMetric(float64(took.Microseconds())/total, "statement_us/report")
			b.ReportMetric(float64(backend.Microseconds())/total, "backend_cpu_us/report")
			b.ReportMetric(float64(again.Microseconds())/total, "redelivered_us/report")
			b.ReportMetric(float64(againBackend.Microseconds())/total, "redelivered_cpu_us/report")
			b.Logf("settings: %s; load average %s", pgSettings(b, pool), cpustat.LoadAverage())
		})
	}
}
