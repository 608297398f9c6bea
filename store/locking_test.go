package store_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
)

// lockRounds bounds how often each pair of batches is raced: on code that
// locks in input order, the first rounds already deadlock.
const (
	lockRounds = 8
	lockRows   = 400
)

// makeBatch creates n instances of task in state, at attempt 1, and returns
// their ids in ascending order.
func makeBatch(t *testing.T, pool *pgxpool.Pool, st *store.Store, task string, round, n int, state schemas.State) []int64 {
	t.Helper()
	in := make([]store.NewInstance, n)
	for i := range in {
		in[i] = store.NewInstance{
			Task: task, TaskVersion: 1, EventID: fmt.Sprintf("r%d-%d", round, i), Source: schemas.SourceEvent,
			Priority: schemas.PriorityNormal, Pool: "default", Handler: "builtin.echo", TimeoutMS: 60000,
			MaxAttempts: 3, FiredAt: time.Now(), State: schemas.StateDispatched,
		}
	}
	made, err := st.CreateInstances(t.Context(), in)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, len(made))
	for i, a := range made {
		ids[i] = a.ID
	}
	slices.Sort(ids)
	if state != schemas.StateDispatched {
		if _, err := pool.Exec(t.Context(), `UPDATE instances SET state = $2 WHERE id = ANY($1)`, ids, state); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// race runs a and b at once and returns their errors.
func race(a, b func() error) []error {
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make([]error, 2)
	for i, f := range []func() error{a, b} {
		wg.Go(func() {
			<-start
			errs[i] = f()
		})
	}
	close(start)
	wg.Wait()
	return errs
}

func isDeadlock(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "40P01"
}

// checkRace fails the test on any error of errs, naming a deadlock as such.
func checkRace(t *testing.T, round int, errs []error) {
	t.Helper()
	for _, err := range errs {
		switch {
		case isDeadlock(err):
			t.Fatalf("round %d: deadlock between two batches over the same rows: %v", round, err)
		case err != nil:
			t.Fatalf("round %d: %v", round, err)
		}
	}
}

func reversed(ids []int64) []int64 {
	out := slices.Clone(ids)
	slices.Reverse(out)
	return out
}

// TestBatchStatementsLockInOneOrder races pairs of batch statements over
// the same instances, given in opposite orders: each statement, and each
// transaction of several, locks its rows by id, so they wait for each
// other and never deadlock.
func TestBatchStatementsLockInOneOrder(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	applyTasks(t, st, "locks")
	ctx := t.Context()
	cases := []struct {
		name  string
		state schemas.State
		a, b  func(ids []int64) error
	}{{
		// One transaction of two statements each: started reports of one
		// half and final reports of the other, crosswise.
		name: "reports", state: schemas.StateDispatched,
		a: func(ids []int64) error {
			lo, hi := ids[:len(ids)/2], ids[len(ids)/2:]
			_, err := st.ApplyReports(ctx, reports(schemas.ReportStarted, lo), reports(schemas.ReportSucceeded, hi))
			return err
		},
		b: func(ids []int64) error {
			lo, hi := ids[:len(ids)/2], ids[len(ids)/2:]
			_, err := st.ApplyReports(ctx, reports(schemas.ReportStarted, reversed(hi)), reports(schemas.ReportSucceeded, reversed(lo)))
			return err
		},
	}, {
		name: "final reports", state: schemas.StateRunning,
		a: func(ids []int64) error {
			_, err := st.ApplyReports(ctx, nil, reports(schemas.ReportSucceeded, ids))
			return err
		},
		b: func(ids []int64) error {
			_, err := st.FailAttempts(ctx, failures(reversed(ids)))
			return err
		},
	}, {
		name: "retries", state: schemas.StateRetrying,
		a: func(ids []int64) error { _, err := st.StartRetries(ctx, retryStarts(ids)); return err },
		b: func(ids []int64) error { _, err := st.StartRetries(ctx, retryStarts(reversed(ids))); return err },
	}, {
		name: "cancels", state: schemas.StateRunning,
		a: func(ids []int64) error { _, err := st.CancelInstances(ctx, cancels(ids)); return err },
		b: func(ids []int64) error { _, err := st.CancelInstances(ctx, cancels(reversed(ids))); return err },
	}, {
		name: "parents", state: schemas.StateDispatched,
		a: func(ids []int64) error { _, err := st.StartParents(ctx, parentStarts(ids)); return err },
		b: func(ids []int64) error { _, err := st.StartParents(ctx, parentStarts(reversed(ids))); return err },
	}}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for round := range lockRounds {
				ids := makeBatch(t, pool, st, "locks", i*lockRounds+round, lockRows, c.state)
				checkRace(t, round, race(func() error { return c.a(ids) }, func() error { return c.b(ids) }))
				var left int
				if err := pool.QueryRow(ctx, `SELECT count(*) FROM instances WHERE id = ANY($1) AND state = $2`,
					ids, c.state).Scan(&left); err != nil {
					t.Fatal(err)
				}
				if left != 0 {
					t.Fatalf("round %d: %d of %d instances still %s; want every one moved", round, left, len(ids), c.state)
				}
			}
		})
	}
}

// TestCreateInstancesInOneOrder races two batches that create the same
// firings in opposite orders: an insert that meets a key another batch
// inserted waits for it, so both insert in one order and never deadlock.
func TestCreateInstancesInOneOrder(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	applyTasks(t, st, "a", "b")
	for round := range lockRounds {
		var in []store.NewInstance
		for i := range lockRows {
			in = append(in, store.NewInstance{
				Task: []string{"a", "b"}[i%2], TaskVersion: 1, EventID: fmt.Sprintf("r%d-%d", round, i),
				Source: schemas.SourceEvent, Priority: schemas.PriorityNormal, Pool: "default", Handler: "builtin.echo",
				TimeoutMS: 60000, MaxAttempts: 1, FiredAt: time.Now(), State: schemas.StateDispatched,
			})
		}
		rev := slices.Clone(in)
		slices.Reverse(rev)
		create := func(in []store.NewInstance) func() error {
			return func() error { _, err := st.CreateInstances(t.Context(), in); return err }
		}
		checkRace(t, round, race(create(in), create(rev)))
		var n int
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM instances WHERE event_id LIKE $1`,
			fmt.Sprintf("r%d-%%", round)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != lockRows {
			t.Fatalf("round %d: %d instances, want %d", round, n, lockRows)
		}
	}
}

// reports are reports of kind from worker w on attempt 1 of each instance.
func reports(kind schemas.ReportKind, ids []int64) []schemas.Report {
	out := make([]schemas.Report, len(ids))
	for i, id := range ids {
		out[i] = schemas.Report{InstanceID: id, Attempt: 1, WorkerID: "w", Kind: kind, StartedAt: time.Now(), At: time.Now()}
	}
	return out
}

// failures fail attempt 1 of each instance.
func failures(ids []int64) []store.Failure {
	out := make([]store.Failure, len(ids))
	for i, id := range ids {
		out[i] = store.Failure{InstanceID: id, Attempt: 1, Reason: "lease expired", At: time.Now()}
	}
	return out
}

// TestBatchStatementsFindTheirInstancesByKey runs each batch statement
// that locks instances (store's lockedInstances) with plans made while the
// table was small, as a connection keeps a generic plan made before a
// burst (after a quiet spell, or once the history mover emptied the
// table), on a table grown since without new statistics: each finds its
// instances by the primary key and scans none of the table. A join of the
// table with the batch was planned then as a scan of every instance for
// each batch (a steady 500 firings/s spent ~1 ms a report statement of a
// few reports so). A cancel, an operator's statement, locks the same way
// but is left out: its update joins its requests (a JSON document the
// planner counts as a hundred rows) to the table, which such statistics
// still have it hash whole.
func TestBatchStatementsFindTheirInstancesByKey(t *testing.T) {
	t.Parallel()
	pool := storetest.NewOneConn(t)
	st := store.New(pool)
	applyTasks(t, st, "keys")
	ctx := t.Context()
	// Every plan generic, as the server chooses for a statement run often,
	// and no statistics but those taken while the table is small.
	if _, err := pool.Exec(ctx, `ALTER TABLE instances SET (autovacuum_enabled = false);
		DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET plan_cache_mode = force_generic_plan', current_database()); END $$`); err != nil {
		t.Fatal(err)
	}
	pool.Reset()
	progress := func(ids []int64) []schemas.Report {
		out := reports(schemas.ReportProgress, ids)
		for i := range out {
			out[i].Progress = &schemas.Progress{Done: 1, Total: 2}
		}
		return out
	}
	cases := []struct {
		name  string
		state schemas.State
		run   func(ids []int64) error
	}{
		{"started reports", schemas.StateDispatched, func(ids []int64) error {
			_, err := st.ApplyReports(ctx, reports(schemas.ReportStarted, ids), nil)
			return err
		}},
		{"final reports", schemas.StateRunning, func(ids []int64) error {
			_, err := st.ApplyReports(ctx, nil, reports(schemas.ReportSucceeded, ids))
			return err
		}},
		{"failures", schemas.StateRunning, func(ids []int64) error { _, err := st.FailAttempts(ctx, failures(ids)); return err }},
		{"deaths", schemas.StateRunning, func(ids []int64) error { _, err := st.CountDeaths(ctx, failures(ids)); return err }},
		{"progress", schemas.StateRunning, func(ids []int64) error { _, err := st.ApplyProgress(ctx, progress(ids)); return err }},
		{"retries", schemas.StateRetrying, func(ids []int64) error { _, err := st.StartRetries(ctx, retryStarts(ids)); return err }},
		{"parents", schemas.StateDispatched, func(ids []int64) error { _, err := st.StartParents(ctx, parentStarts(ids)); return err }},
	}
	small := make([][]int64, len(cases))
	for i, c := range cases {
		small[i] = makeBatch(t, pool, st, "keys", i, 5, c.state)
	}
	// 40 instances: the statistics of a new installation's table, or of
	// one the history mover emptied.
	if _, err := pool.Exec(ctx, `ANALYZE instances`); err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		if err := c.run(small[i]); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO instances (task, task_version, event_id, source, state, max_attempts, priority, pool, handler, timeout_ms, fired_at)
		SELECT 'keys', 1, 'grown-' || g, 'event', 'RUNNING', 3, 'normal', 'default', 'builtin.echo', 60000, now()
		FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	// rowsRead returns the rows of instances read so far, by any scan.
	rowsRead := func() (n int64) {
		t.Helper()
		if _, err := pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		if err := pool.QueryRow(ctx, `SELECT COALESCE(seq_tup_read, 0) + COALESCE(idx_tup_fetch, 0)
			FROM pg_stat_user_tables WHERE relname = 'instances'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	const n = 5
	for i, c := range cases {
		ids := makeBatch(t, pool, st, "keys", len(cases)+i, n, c.state)
		before := rowsRead()
		if err := c.run(ids); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		// Each instance looked up to lock it, to update it, and once
		// more by some (the retries' answer, a parent's children).
		read := rowsRead() - before
		t.Logf("%s of %d instances in a table of 20,000: %d rows of instances read", c.name, n, read)
		if read > 4*n {
			t.Errorf("%s of %d instances in a table of 20,000 read %d rows of instances, want at most %d",
				c.name, n, read, 4*n)
		}
	}
}

func retryStarts(ids []int64) []store.RetryStart {
	out := make([]store.RetryStart, len(ids))
	for i, id := range ids {
		out[i] = store.RetryStart{InstanceID: id, Attempt: 2}
	}
	return out
}

func cancels(ids []int64) []store.CancelRequest {
	out := make([]store.CancelRequest, len(ids))
	for i, id := range ids {
		out[i] = store.CancelRequest{InstanceID: id, Operator: "alice", Reason: "test"}
	}
	return out
}

func parentStarts(ids []int64) []store.ParentStart {
	out := make([]store.ParentStart, len(ids))
	for i, id := range ids {
		out[i] = store.ParentStart{InstanceID: id, ShardCount: 2}
	}
	return out
}
