package e2e_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	drillsys "github.com/ax-scheduler/ax/drill/system"
	"github.com/ax-scheduler/ax/drill/system/systemtest"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/executortest"
	"github.com/ax-scheduler/ax/internal/pgcluster"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

// TestExactlyOnceThroughADispatcherKillAndAPostgresOutage is the promise
// under faults: under a steady load, PostgreSQL (the test's own cluster)
// hangs; while it does, the only dispatcher, a real `ax dispatcher`
// process holding final reports it could not record, is killed with
// kill -9 (its reports come back only after the consumer's ack wait);
// PostgreSQL is stopped and stays down for three lease TTLs, so every lease the executor
// retired meanwhile has aged into an expiry marker before a new dispatcher
// starts. Afterwards every firing has one instance, every instance
// SUCCEEDED, and the ledger the handler appends to (O_APPEND) holds exactly
// one run per instance.
func TestExactlyOnceThroughADispatcherKillAndAPostgresOutage(t *testing.T) {
	t.Parallel()
	bin := systemtest.BuildAX(t)
	ctx := context.Background()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)

	// PostgreSQL of its own, to stop and start. The folder is short: the
	// server's unix socket lives inside it.
	pgDir, err := os.MkdirTemp("", "ax-faults-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(pgDir) })
	if err := os.Chmod(pgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	pg, err := pgcluster.Start(ctx, pgcluster.Options{Dir: filepath.Join(pgDir, "pg"), Fast: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop(context.Background()) })
	dbURL := pg.URL("postgres")
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := store.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	st := store.New(pool)
	applyLedgerTask(t, st)

	srv := streamstest.NewServer(t, streams.Config{LeaseTTL: leaseTTL})
	_, js := srv.Connect()
	top := srv.Topology

	dispatcher := func(string) *exec.Cmd { return startDispatcher(t, bin, srv.URL, dbURL, leaseTTL, "warn") }

	// The handler works a little so that attempts are in flight at every fault.
	ledger := filepath.Join(t.TempDir(), "ledger")
	mux := ledgerMux(ledger, 200*time.Millisecond)
	execConn, _ := srv.Connect()
	steady := executortest.Run(t, executor.Options{Conn: execConn, WorkerID: "steady", Mux: mux, Slots: 16, Logger: slog.New(zerolog.NewSlogHandler(log))})

	first := dispatcher("the first dispatcher")

	// Load: 50 firings a second, straight to AX_TRIGGERS, until stopped.
	stopLoad := startLoad(t, js, top.Trigger("ledger"), 20*time.Millisecond, false)

	// Steady state first: instances succeed.
	waitFor(t, "the first successes", 30*time.Second, func() (bool, error) {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM instances WHERE state = 'SUCCEEDED'`).Scan(&n)
		return n >= 20, err
	})

	// PostgreSQL hangs (SIGSTOP: the dispatcher's statements wait, holding
	// their reports un-acknowledged), the dispatcher is killed while it
	// holds final reports, and PostgreSQL is then stopped for good.
	pgProcs, err := drillsys.PostgresProcesses(pg.DataDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := drillsys.SignalAll(pgProcs, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, pid := range pgProcs {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	})
	outage := time.Now()
	recorder, err := js.Consumer(ctx, top.ReportsStream(), top.RecorderConsumer().Durable)
	if err != nil {
		t.Fatal(err)
	}
	// The attempts in flight at the hang end and report (nothing new is
	// dispatched while PostgreSQL hangs), and the dispatcher holds their
	// reports: as few as one message, since the executor sends the reports
	// of attempts that end together in one report batch.
	waitFor(t, "the attempts in flight to end and the dispatcher to hold their reports", 30*time.Second, func() (bool, error) {
		info, err := recorder.Info(ctx)
		return err == nil && steady.Busy() == 0 && info.NumPending == 0 && info.NumAckPending >= 1, nil
	})
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	info, err := recorder.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed the dispatcher holding %d reports", info.NumAckPending)
	if err := drillsys.SignalAll(pgProcs, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := pg.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	// The outage lasts three lease TTLs: the leases the executor retired
	// after its final reports were stored age into expiry markers. (A
	// duration, not a condition: the length of the fault is the test.)
	time.Sleep(time.Until(outage.Add(3 * leaseTTL)))
	pg, err = pgcluster.Start(ctx, pgcluster.Options{Dir: filepath.Join(pgDir, "pg"), Port: pg.Port(), Fast: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("PostgreSQL was down for %v", time.Since(outage).Round(time.Millisecond))
	dispatcher("the second dispatcher")

	// Some more load after the faults, then let everything end. The reports
	// the killed dispatcher held come back after the consumer's ack wait.
	waitFor(t, "instances after the outage", 60*time.Second, func() (bool, error) {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM instances WHERE created_at > now() - interval '1 second'`).Scan(&n)
		return err == nil && n > 0, nil // an error: the pool reconnects
	})
	fired, _ := stopLoad()
	waitLedgerEnded(t, pool, fired)

	checkExactlyOnce(t, pool, fired, ledger)
}

// startLoad fires the task of subject, one firing every every, straight to
// AX_TRIGGERS through js, until the stop it returns, which waits for the
// last firing and returns how many firings the stream acknowledged (each
// must then run) and how many publishes were tried again; the test's end
// stops it too. With retry, a publish that fails (as while a stream leader
// is elected) is tried again, with the same message id, each try given
// 2 s, up to 1,000 retries in all; without, a failed publish fails the test
// and ends the load.
func startLoad(t *testing.T, js jetstream.JetStream, subject string, every time.Duration, retry bool) (stop func() (fired, retries int)) {
	t.Helper()
	// A publish under way when the load stops ends as it would: a firing
	// the stream may have stored is counted once acknowledged.
	pubCtx := context.WithoutCancel(t.Context())
	ctx, cancel := context.WithCancel(pubCtx)
	var wg sync.WaitGroup
	var fired, retries int
	publish := func(ev schemas.TriggerEvent) error {
		if !retry {
			_, err := streams.Publish(pubCtx, js, subject, ev.EventID, ev)
			return err
		}
		for {
			tryCtx, cancel := context.WithTimeout(pubCtx, 2*time.Second)
			_, err := streams.Publish(tryCtx, js, subject, ev.EventID, ev)
			cancel()
			if err == nil {
				return nil
			}
			if retries++; retries > 1000 {
				return fmt.Errorf("%w (after %d retries)", err, retries)
			}
		}
	}
	wg.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			ev := schemas.TriggerEvent{EventID: "load-" + strconv.Itoa(fired)}
			if err := publish(ev); err != nil {
				t.Errorf("fire %s: %v", ev.EventID, err)
				return
			}
			fired++
		}
	})
	stop = func() (int, int) {
		cancel()
		wg.Wait()
		return fired, retries
	}
	t.Cleanup(func() { stop() })
	return stop
}

// checkExactlyOnce checks the promise after a fault test: the task
// "ledger" has fired instances, all SUCCEEDED, each after exactly one run
// of its handler by the ledger's count.
func checkExactlyOnce(t *testing.T, pool *pgxpool.Pool, fired int, ledger string) {
	t.Helper()
	states := make(map[string]int)
	succeeded := make(map[int64]bool)
	rows, err := pool.Query(context.Background(), `SELECT id, state FROM instances WHERE task = 'ledger'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		var state string
		if err := rows.Scan(&id, &state); err != nil {
			t.Fatal(err)
		}
		states[state]++
		if state == string(schemas.StateSucceeded) {
			succeeded[id] = true
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if states[string(schemas.StateSucceeded)] != fired {
		t.Errorf("instances by state %v, want all %d SUCCEEDED", states, fired)
	}

	runs := ledgerRuns(t, ledger)
	again := 0
	for id := range succeeded {
		if len(runs[id]) != 1 {
			again++
			if again <= 10 {
				t.Errorf("instance %d SUCCEEDED after %d runs of its handler (attempts %v), want 1", id, len(runs[id]), runs[id])
			}
		}
	}
	t.Logf("%d firings, %d SUCCEEDED, %d ran other than once", fired, len(succeeded), again)
}

// applyLedgerTask applies the task "ledger" that [ledgerMux] serves: three
// attempts, retried at once.
func applyLedgerTask(t *testing.T, st *store.Store) {
	t.Helper()
	def, err := taskdef.ParseTask([]byte(`{"task_name": "ledger", "execution": {"handler": "ledger", "retry": {"max_attempts": 3, "initial_interval_sec": 0}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.ApplyTask(context.Background(), def, "test"); err != nil {
		t.Fatal(err)
	}
}

// waitLedgerEnded waits until the task "ledger" has fired instances, all ended.
func waitLedgerEnded(t *testing.T, pool *pgxpool.Pool, fired int) {
	t.Helper()
	waitFor(t, "every firing to end", 2*time.Minute, func() (bool, error) {
		var total, ended int
		err := pool.QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE state IN ('SUCCEEDED', 'FAILED', 'SKIPPED', 'CANCELLED'))
			FROM instances WHERE task = 'ledger'`).Scan(&total, &ended)
		if err != nil {
			return false, nil // the pool reconnects
		}
		return total == fired && ended == total, nil
	})
}

// ledgerMux serves the handler "ledger", which appends one line per run
// ("<instance id> <attempt>") to the file ledger with O_APPEND, then works
// for work (or until its context ends, an error).
func ledgerMux(ledger string, work time.Duration) *executor.Mux {
	mux := executor.NewMux()
	mux.HandleFunc("ledger", func(ctx context.Context, task *executor.Job) (any, error) {
		f, err := os.OpenFile(ledger, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, err
		}
		_, err = fmt.Fprintf(f, "%d %d\n", task.InstanceID, task.Attempt)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
		timer := time.NewTimer(work)
		defer timer.Stop()
		select {
		case <-timer.C:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	return mux
}

// ledgerRuns reads the file a [ledgerMux] handler wrote: the number of
// runs of each instance, by attempt.
func ledgerRuns(t *testing.T, ledger string) map[int64][]int {
	t.Helper()
	runs := make(map[int64][]int)
	f, err := os.Open(ledger)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var id int64
		var attempt int
		if _, err := fmt.Sscan(sc.Text(), &id, &attempt); err != nil {
			t.Fatalf("ledger line %q: %v", sc.Text(), err)
		}
		runs[id] = append(runs[id], attempt)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return runs
}

// startDispatcher starts `ax dispatcher` (the binary bin) as a process of
// its own on the NATS server at natsURL and the database at dbURL, with
// lease TTL ttl and log level level, and kills it when the test ends: a
// dispatcher a test can kill -9.
func startDispatcher(t *testing.T, bin, natsURL, dbURL string, ttl time.Duration, level string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, "dispatcher", "--require-nats-auth=false", "--nats-url", natsURL, "--database-url", dbURL,
		"--lease-ttl", ttl.String(), "--log-level", level)
	cmd.Env = append(os.Environ(), "AX_METRICS_ADDR=")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start a dispatcher: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}
