package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/drill/system/systemtest"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/importer/importertest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/trigger/triggertest"
)

// TestShadowRecordsAndCutsOver imports XXL-JOB's sample jobs, puts two in
// shadow mode and runs their triggers over a simulated Monday, with the
// trigger down over one tick: every tick fired is recorded as a SHADOW
// instance and nothing runs (the handlers, served by a live worker of the
// jobs' pool, are never called, AX_DISPATCH never holds a message, the
// settle job's children are not chained). The ledger marks the ticks;
// ax shadow report compares the recorded instances with an xxl_job_log
// holding a missing scheduled run and an extra unscheduled one, and
// reports exactly those and the tick the trigger missed (which computed
// ticks would not show). After the cut-over the next tick runs.
func TestShadowRecordsAndCutsOver(t *testing.T) {
	t.Parallel()
	m := importertest.StartMariaDB(t)
	m.Exec(t, "../../importer/testdata/xxl-job/tables_xxl_job.sql")
	m.Exec(t, "../../importer/testdata/xxl-job/jobs.sql")
	dsn := "mysql://root@" + m.Addr + "/xxl_job"

	s := newSystem(t)
	var runs atomic.Int64
	mux := executor.NewMux()
	for _, h := range []string{"settleHandler", "invoiceHandler", "ledgerHandler"} {
		mux.HandleFunc(h, func(context.Context, *executor.Job) (any, error) {
			runs.Add(1)
			return nil, nil
		})
	}
	s.worker(executor.Options{WorkerID: "w1", Mux: mux, Pools: []string{"billing"}})
	bin := systemtest.BuildAX(t)
	ax := func(args ...string) (int, string) {
		cmd := exec.Command(bin, append(args, "--api", s.apiURL, "--token", s.admin)...)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		} else if err != nil {
			t.Fatalf("ax %s: %v", strings.Join(args, " "), err)
		}
		return 0, string(out)
	}
	mustAx := func(args ...string) string {
		code, out := ax(args...)
		if code != 0 {
			t.Fatalf("ax %s: exit %d\n%s", strings.Join(args, " "), code, out)
		}
		return out
	}
	mustAx("import", "xxl-job", "--dsn", dsn, "--timezone", "Asia/Shanghai", "--apply", "--disabled", "--out", t.TempDir())
	mustAx("shadow", "start", "xxl-10-settlehandler", "xxl-12-ledgerhandler")

	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	at := func(d, h, mi int) time.Time { return time.Date(2026, 3, d, h, mi, 0, 0, shanghai) }
	const ledgerTask = "xxl-12-ledgerhandler"
	clock := triggertest.NewClock(at(2, 2, 0))
	trig := clockTrigger{s: s, clock: clock}
	stepTo := func(last time.Time) { trig.stepTo(ledgerTask, last) }
	count := func(where string) int {
		var n int
		if err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM instances WHERE `+where).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// Monday 2 March 2026: the trigger is down from 10:50 to 11:05 (the
	// ledger job's misfire is skip: its 11:00 tick is missed).
	stop := trig.start()
	stepTo(at(2, 10, 45))
	stop()
	clock.Set(at(2, 11, 5))
	trig.start() // stopped at the test's end
	stepTo(at(2, 17, 45))
	waitFor(t, "36 SHADOW instances", time.Minute, func() (bool, error) { return count(`state = 'SHADOW'`) == 36, nil })
	s.drained(s.srv.Topology.FiringsStream(), s.srv.Topology.FiringsConsumer().Durable)
	if n, all := count(`task = 'xxl-10-settlehandler' AND state = 'SHADOW'`), count(`true`); n != 1 || all != 36 {
		t.Errorf("%d SHADOW instances of settle and %d instances in all, want 1 and 36 (nothing chained after a SHADOW)", n, all)
	}
	if n := runs.Load(); n != 0 {
		t.Errorf("handlers ran %d times in shadow mode, want 0", n)
	}
	// Nothing dispatched: AX_DISPATCH holds no attempt (its keeper aside)
	// and none of its consumers was given one.
	dispatch, err := s.js.Stream(context.Background(), s.srv.Topology.DispatchStream())
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.srv.Topology.Held(context.Background(), dispatch); err != nil || n != 0 {
		t.Errorf("AX_DISPATCH holds %d attempts (%v): a SHADOW instance was dispatched", n, err)
	}
	for c := range dispatch.ListConsumers(context.Background()).Info() {
		if c.Delivered.Consumer != 0 {
			t.Errorf("consumer %s of AX_DISPATCH was given %d messages: a SHADOW instance was dispatched", c.Name, c.Delivered.Consumer)
		}
	}

	// The ledger marks the recorded ticks.
	var ledger schemas.Ledger
	if err := json.Unmarshal([]byte(mustAx("ledger", ledgerTask, "--from", at(2, 0, 0).Format(time.RFC3339),
		"--to", at(3, 0, 0).Format(time.RFC3339), "--format", "json")), &ledger); err != nil {
		t.Fatal(err)
	}
	if want := "36 ticks, 35 instances, 1 missed, 0 doubled, 0 retried, 35 in shadow (recorded, not run)"; ledger.Line != want {
		t.Errorf("ledger summary %q, want %q", ledger.Line, want)
	}

	if out := mustAx("explain", fmt.Sprint(ledgerInstance(t, ledger, at(2, 9, 0)))); !strings.Contains(out, "recorded, not run: instance") ||
		!strings.Contains(out, "recorded in shadow mode, never run: task is in shadow mode") {
		t.Errorf("ax explain of a SHADOW instance:\n%s", out)
	}

	// XXL-JOB ran every tick a second late but 10:30, and an unscheduled
	// run at 12:07 (a manual one at 13:05 does not count).
	var rows []string
	for h := 9; h <= 17; h++ {
		for _, mi := range []int{0, 15, 30, 45} {
			if h != 10 || mi != 30 {
				rows = append(rows, fmt.Sprintf("(3, 12, '2026-03-02 %02d:%02d:01', 200, '任务触发类型：Cron触发', 200)", h, mi))
			}
		}
	}
	rows = append(rows,
		"(3, 12, '2026-03-02 12:07:00', 200, '任务触发类型：Cron触发', 200)",
		"(3, 12, '2026-03-02 13:05:00', 200, '任务触发类型：手动触发', 200)",
		"(3, 10, '2026-03-02 02:30:00', 200, '任务触发类型：Cron触发', 200)")
	if _, err := m.Root.ExecContext(t.Context(), "INSERT INTO xxl_job.xxl_job_log (job_group, job_id, trigger_time, trigger_code, trigger_msg, handle_code) VALUES "+
		strings.Join(rows, ",\n")); err != nil {
		t.Fatal(err)
	}
	code, out := ax("shadow", "report", "xxl-10-settlehandler", ledgerTask, "--against", "xxl-job", "--dsn", dsn,
		"--timezone", "Asia/Shanghai", "--from", at(2, 0, 0).Format(time.RFC3339), "--to", at(3, 0, 0).Format(time.RFC3339))
	extraID := ledgerInstance(t, ledger, at(2, 10, 30))
	for _, w := range []string{
		"xxl-10-settlehandler (xxl_job_info id=10; AX's recorded instances): 1 ticks, 1 runs, 0 differences",
		"xxl-12-ledgerhandler (xxl_job_info id=12; AX's recorded instances): 35 ticks, 36 runs, 3 differences",
		fmt.Sprintf("extra    tick 2026-03-02 10:30:00: AX fires it, the old scheduler did not run it (instance %d)", extraID),
		"missing  run  2026-03-02 11:00:01",
		"missing  run  2026-03-02 12:07:00",
		"1 extra, 2 missing, 0 late",
		"shadow report: 3 differences",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("report lacks %q:\n%s", w, out)
		}
	}
	if code != 1 || strings.Count(out, "extra ") != 1 || strings.Count(out, "missing ") != 2 || strings.Contains(out, "late ") {
		t.Errorf("exit %d; want 1 and only the planted differences:\n%s", code, out)
	}

	// Cut-over: the next tick, Tuesday 09:00, runs.
	mustAx("shadow", "stop", ledgerTask, "--cut-over")
	stepTo(at(3, 9, 0))
	id := s.awaitEvent(ledgerTask, schemas.CronEventID(ledgerTask, 0, at(3, 9, 0))).ID
	s.waitState(id, schemas.StateSucceeded, time.Minute)
	if n := runs.Load(); n != 1 {
		t.Errorf("after the cut-over the handlers ran %d times, want 1 (the 09:00 tick's broadcast on the one worker)", n)
	}
}

// ledgerInstance returns the instance recorded on the ledger's tick at.
func ledgerInstance(t *testing.T, l schemas.Ledger, at time.Time) int64 {
	t.Helper()
	for _, tk := range l.Ticks {
		if tk.Tick.Equal(at) {
			return tk.InstanceID
		}
	}
	t.Fatalf("the ledger has no tick at %v", at)
	return 0
}
