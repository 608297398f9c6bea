package e2e_test

import (
	"context"
	"log/slog"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/drill/system/systemtest"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/executortest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

// TestFiringOrphanedByAKilledDispatcherRunsOnce is issue 25's first case:
// the only dispatcher, a real `ax dispatcher` process, is killed with
// kill -9 while its statement creating an instance waits on a lock the
// test holds in PostgreSQL (the firing's key, inserted in a transaction
// left open); the lock is released, the orphaned statement
// commits the instance DISPATCHED, and its dispatch message is never
// published. A new dispatcher starts; the firing comes back after the
// trigger consumer's ack wait, finds its instance DISPATCHED and
// publishes the attempt again, marked republished, and the worker asks the
// fence. The attempt never ran (no lease of it was ever put, which the
// new dispatcher reads from the leases bucket's history) so the fence
// says start: with max_attempts 1 the instance SUCCEEDED after exactly
// one run of its handler by the ledger's count. Before, the fence knew
// no lease of an attempt dispatched before its own watch began and
// failed it as lost: FAILED, 0 runs.
func TestFiringOrphanedByAKilledDispatcherRunsOnce(t *testing.T) {
	t.Parallel()
	const ttl = 10 * time.Second // the fence reads 2×TTL−2 s = 18 s of history
	bin := systemtest.BuildAX(t)
	ctx := context.Background()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)

	dbURL := storetest.URL(t)
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st := store.New(pool)
	def, err := taskdef.ParseTask([]byte(`{"task_name": "orphan", "execution": {"handler": "ledger", "retry": {"max_attempts": 1}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.ApplyTask(ctx, def, "test"); err != nil {
		t.Fatal(err)
	}

	srv := streamstest.NewServer(t, streams.Config{LeaseTTL: ttl})
	_, js := srv.Connect()
	top := srv.Topology
	dispatcher := func() *exec.Cmd { return startDispatcher(t, bin, srv.URL, dbURL, ttl, "info") }
	ledger := filepath.Join(t.TempDir(), "ledger")
	execConn, _ := srv.Connect()
	executortest.Run(t, executor.Options{Conn: execConn, WorkerID: "steady", Mux: ledgerMux(ledger, 0), Slots: 4, Logger: slog.New(zerolog.NewSlogHandler(log))})

	state := func(eventID string) (id int64, s string, attempt int) {
		err := pool.QueryRow(ctx, `SELECT id, state, attempt FROM instances WHERE task = 'orphan' AND event_id = $1`, eventID).
			Scan(&id, &s, &attempt)
		if err != nil {
			return 0, "", 0
		}
		return id, s, attempt
	}
	fire := func(eventID string) {
		t.Helper()
		if _, err := streams.Publish(ctx, js, top.Trigger("orphan"), eventID, schemas.TriggerEvent{EventID: eventID}); err != nil {
			t.Fatal(err)
		}
	}

	// The first dispatcher works: a firing runs.
	first := dispatcher()
	fire("warm-up")
	waitFor(t, "the warm-up firing to succeed", 60*time.Second, func() (bool, error) {
		_, s, _ := state("warm-up")
		return s == string(schemas.StateSucceeded), nil
	})

	// The test holds the firing's key in an open transaction: the
	// dispatcher's creation statement waits for it at its execution (a
	// lock on the whole table would stop it earlier, at parse, where a
	// dead client's statement never runs).
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `INSERT INTO instances (task, task_version, event_id, source, state, max_attempts, priority, pool, handler, timeout_ms, fired_at)
		VALUES ('orphan', 1, 'orphan', 'api', 'CREATED', 1, 'normal', 'default', 'ledger', 1000, now())`); err != nil {
		t.Fatal(err)
	}
	fire("orphan")
	var holder int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&holder); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the dispatcher's creation statement to wait on the lock", 30*time.Second, func() (bool, error) {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND $1 = ANY(pg_blocking_pids(pid))`, holder).Scan(&n)
		return n > 0, err
	})
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// The dead dispatcher's statement commits the instance DISPATCHED; its
	// dispatch message was never published.
	waitFor(t, "the orphaned statement to commit", 30*time.Second, func() (bool, error) {
		_, s, _ := state("orphan")
		return s == string(schemas.StateDispatched), nil
	})

	dispatcher()
	// The firing comes back after the trigger consumer's ack wait (30 s).
	waitFor(t, "the orphaned firing to end", 2*time.Minute, func() (bool, error) {
		_, s, _ := state("orphan")
		return s == string(schemas.StateSucceeded) || s == string(schemas.StateFailed), nil
	})
	id, s, attempt := state("orphan")
	runs := ledgerRuns(t, ledger)[id]
	t.Logf("instance %d: %s at attempt %d, ledger runs %v", id, s, attempt, runs)
	if s != string(schemas.StateSucceeded) || !slices.Equal(runs, []int{1}) {
		inst, err := st.GetInstance(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		t.Errorf("the orphaned firing ended %s at attempt %d after runs %v of its handler, want SUCCEEDED after one run of attempt 1: %v",
			s, attempt, runs, path(inst))
	}
}
