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
	db := storetest.New(b)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(b.Context(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	st := store.New(pool)
	if _, _, err := st.ApplyTask(b.Context(), parseTask(b, "task_name: burst\nexecution: {handler: builtin.echo}\n"), ""); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var pid int
	if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		b.Fatal(err)
	}
	if _, comm, err := cpustat.Parent(pid); err != nil || comm != "postgres" {
		b.Fatalf("the benchmark reads the CPU time of its PostgreSQL backend from /proc: the server must run on this machine (%v)", err)
	}
	wal := func() (lsn int64) {
		if err := pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn`).Scan(&lsn); err != nil {
			b.Fatal(err)
		}
		return lsn
	}
	var own, backend time.Duration
	var walBytes int64
	for round := 0; b.Loop(); round++ {
		in := make([]store.NewInstance, n)
		for i := range in {
			in[i] = store.NewInstance{
				Task: "burst", TaskVersion: 1, EventID: fmt.Sprintf("r%d-%d", round, i), Source: schemas.SourceEvent,
				Priority: schemas.PriorityNormal, Pool: "default", Handler: "builtin.echo", TimeoutMS: 60000,
				MaxAttempts: 1, Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), FiredAt: time.Now(),
				State: schemas.StateDispatched,
			}
		}
		w0 := wal()
		b0, err := cpustat.Tree(pid)
		if err != nil {
			b.Fatal(err)
		}
		o0, err := cpustat.Self()
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < n; i += batch {
			if _, err := st.CreateInstances(ctx, in[i:i+batch]); err != nil {
				b.Fatal(err)
			}
		}
		o1, err := cpustat.Self()
		if err != nil {
			b.Fatal(err)
		}
		b1, err := cpustat.Tree(pid)
		if err != nil {
			b.Fatal(err)
		}
		own, backend, walBytes = own+o1-o0, backend+b1-b0, walBytes+wal()-w0
	}
	total := float64(b.N * n)
	b.ReportMetric(float64(own.Microseconds())/total, "process_cpu_us/inst")
	b.ReportMetric(float64(backend.Microseconds())/total, "backend_cpu_us/inst")
	b.ReportMetric(float64(walBytes)/total, "wal_bytes/inst")
	b.Logf("settings: %s; load average %s", pgSettings(b, pool), cpustat.LoadAverage())
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
