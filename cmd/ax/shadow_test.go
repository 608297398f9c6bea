package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/importer/importertest"
)

// TestShadowAgainstXXLJob imports XXL-JOB's jobs disabled and puts them in
// shadow mode (enabled, shadow, audited), then compares a day of their
// ticks — computed, as AX recorded no instance of that day — with an
// xxl_job_log in which one scheduled run is missing and one unscheduled run
// was added (and a manual run, which does not count): the report names
// exactly those two. Stopping without a cut-over disables a task; the
// cut-over makes the tasks live. (internal/e2e's TestShadowRecordsAndCutsOver
// runs the tasks' triggers and compares the recorded SHADOW instances.)
func TestShadowAgainstXXLJob(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	m := importertest.StartMariaDB(t)
	m.Exec(t, "../../importer/testdata/xxl-job/tables_xxl_job.sql")
	m.Exec(t, "../../importer/testdata/xxl-job/jobs.sql")
	dsn := "mysql://root@" + m.Addr + "/xxl_job"
	e.mustAx("import", "xxl-job", "--dsn", dsn, "--timezone", "Asia/Shanghai", "--apply", "--disabled", "--out", t.TempDir())
	if out := e.mustAx("shadow", "start", "--imported"); strings.Count(out, "in shadow") != 7 {
		t.Errorf("shadow start printed\n%s", out)
	}
	info := taskInfo(t, e, "xxl-12-ledgerhandler")
	if !info.Shadow || !info.Enabled || info.ShadowSince == nil {
		t.Errorf("after shadow start: shadow %v, enabled %v, since %v; want shadow and enabled", info.Shadow, info.Enabled, info.ShadowSince)
	}

	// Monday 2 March 2026 in Shanghai: ledger (job 12) ran every 15
	// minutes from 09:00 to 17:45, a second late, but not at 10:30; an
	// unscheduled run at 12:07 and a manual one at 13:05 were logged too.
	// settle (job 10) ran at 02:30.
	var rows []string
	for h := 9; h <= 17; h++ {
		for _, mi := range []int{0, 15, 30, 45} {
			if h == 10 && mi == 30 {
				continue
			}
			rows = append(rows, fmt.Sprintf("(3, 12, '2026-03-02 %02d:%02d:01', 200, '任务触发类型：Cron触发', 200)", h, mi))
		}
	}
	rows = append(rows,
		"(3, 12, '2026-03-02 12:07:00', 200, '任务触发类型：Cron触发', 200)",
		"(3, 12, '2026-03-02 13:05:00', 200, '任务触发类型：手动触发', 200)",
		"(3, 10, '2026-03-02 02:30:00', 200, '任务触发类型：Cron触发', 200)",
		"(3, 10, '2026-03-03 02:30:00', 200, '任务触发类型：Cron触发', 200)")
	if _, err := m.Root.ExecContext(t.Context(), "INSERT INTO xxl_job.xxl_job_log (job_group, job_id, trigger_time, trigger_code, trigger_msg, handle_code) VALUES "+
		strings.Join(rows, ",\n")); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := e.ax("", "shadow", "report", "xxl-10-settlehandler", "xxl-12-ledgerhandler", "--against", "xxl-job", "--dsn", dsn,
		"--timezone", "Asia/Shanghai", "--from", "2026-03-02T00:00:00+08:00", "--to", "2026-03-03T00:00:00+08:00")
	if code != 1 || !strings.Contains(errOut, "2 differences") {
		t.Errorf("exit %d, stderr %q; want 1 and the count", code, errOut)
	}
	want := []string{
		"xxl-10-settlehandler (xxl_job_info id=10; AX's ticks computed: it recorded none in the window): 1 ticks, 1 runs, 0 differences",
		"xxl-12-ledgerhandler (xxl_job_info id=12; AX's ticks computed: it recorded none in the window): 36 ticks, 36 runs, 2 differences",
		"extra    tick 2026-03-02 10:30:00",
		"missing  run  2026-03-02 12:07:00",
		"1 extra, 1 missing, 0 late",
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("report lacks %q:\n%s", w, out)
		}
	}
	if strings.Count(out, "extra ") != 1 || strings.Count(out, "missing ") != 1 || strings.Contains(out, "late ") {
		t.Errorf("report has more than the planted differences:\n%s", out)
	}

	// Stopped without a cut-over: out of shadow, disabled.
	if out := e.mustAx("shadow", "stop", "xxl-14-quarterhandler"); !strings.Contains(out, "out of shadow: disabled") {
		t.Errorf("shadow stop printed\n%s", out)
	}
	if info := taskInfo(t, e, "xxl-14-quarterhandler"); info.Shadow || info.Enabled {
		t.Errorf("after shadow stop: shadow %v, enabled %v; want neither", info.Shadow, info.Enabled)
	}

	// Cut-over: the tasks are enabled, out of shadow.
	if out := e.mustAx("shadow", "stop", "--imported", "--cut-over"); strings.Count(out, "cut over") != 7 {
		t.Errorf("shadow stop printed\n%s", out)
	}
	for name, enabled := range map[string]bool{"xxl-12-ledgerhandler": true, "xxl-14-quarterhandler": true, "xxl-13-weekendhandler": false} {
		if info := taskInfo(t, e, name); info.Enabled != enabled || info.Shadow || info.ShadowSince != nil {
			t.Errorf("after cut-over, %s enabled %v shadow %v, want enabled %v, not in shadow (job 13 was stopped in XXL-JOB)", name, info.Enabled, info.Shadow, enabled)
		}
	}
	// The audit trail: each change once, as the operator who made it.
	acts, err := e.pool.Query(t.Context(), `SELECT action FROM operator_actions WHERE task = 'xxl-14-quarterhandler' AND action <> 'apply' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	actions, err := pgx.CollectRows(acts, pgx.RowTo[string])
	if want := []string{"disable", "enable", "shadow_start", "shadow_stop", "disable", "enable"}; err != nil || !slices.Equal(actions, want) {
		t.Errorf("operator actions on xxl-14: %v (%v), want %v", actions, err, want)
	}
}

// taskInfo reads a task with ax task get.
func taskInfo(t *testing.T, e *cliEnv, name string) wire.TaskInfo {
	t.Helper()
	var info wire.TaskInfo
	if err := json.Unmarshal([]byte(e.mustAx("task", "get", name, "-o", "json")), &info); err != nil {
		t.Fatal(err)
	}
	return info
}
