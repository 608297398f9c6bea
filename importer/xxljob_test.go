package importer_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/importer"
	"github.com/ax-scheduler/ax/importer/importertest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
)

// loadXXLJob starts a MariaDB with XXL-JOB's published schema and sample
// rows, and the jobs of testdata/xxl-job/jobs.sql.
func loadXXLJob(t *testing.T) *importertest.MariaDB {
	t.Helper()
	m := importertest.StartMariaDB(t)
	m.Exec(t, "testdata/xxl-job/tables_xxl_job.sql")
	m.Exec(t, "testdata/xxl-job/jobs.sql")
	return m
}

// TestXXLJobImport reads a real XXL-JOB schema in MariaDB: each job's
// fate and mapping, and each cron task's next 20 ticks against Quartz's
// rules.
func TestXXLJobImport(t *testing.T) {
	t.Parallel()
	m := loadXXLJob(t)
	db, err := importer.OpenMySQL("mysql://root@" + m.Addr + "/xxl_job")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rep, err := importer.XXLJob(t.Context(), db, importer.XXLJobOptions{Timezone: "Asia/Shanghai"})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	rep.Print(&b)
	byID := map[int]importer.Entry{}
	for _, e := range rep.Entries {
		id, _ := strconv.Atoi(strings.TrimPrefix(e.Source, "xxl_job_info id="))
		byID[id] = e
	}
	want := map[int]importer.Outcome{1: importer.Changed, 2: importer.Changed, 10: importer.Changed, 11: importer.Changed,
		12: importer.Changed, 13: importer.Imported, 14: importer.Changed, 15: importer.Imported, 16: importer.Changed,
		17: importer.Refused, 18: importer.Refused, 19: importer.Refused, 20: importer.Refused, 21: importer.Refused,
		22: importer.Changed, 23: importer.Refused, 24: importer.Refused}
	for id, outcome := range want {
		if got := byID[id].Outcome; got != outcome {
			t.Errorf("job %d: %s, want %s", id, got, outcome)
		}
	}
	if len(rep.Entries) != len(want) || t.Failed() {
		t.Fatalf("report:\n%s", b.String())
	}
	reasons := map[int]string{17: "L, W or #", 18: "L, W or #", 19: "L, W or #", 20: "year field", 21: "one of them must be '?'",
		23: "GLUE_GROOVY job keeps its code", 24: "GLUE_SHELL job keeps its code"}
	for id, r := range reasons {
		if !strings.Contains(byID[id].Notes[0], r) {
			t.Errorf("job %d refused with %q, want %q", id, byID[id].Notes[0], r)
		}
	}

	// The mapping.
	settle := byID[10].Task
	if settle.TaskName != "xxl-10-settlehandler" || settle.Owner != "ann <ann@example.com>" || settle.Execution.Handler != "settleHandler" ||
		settle.Execution.Timeout != "600s" || settle.Execution.Retry.MaxAttempts != 3 || settle.Triggers[0].Misfire != schemas.MisfireFireOnce ||
		string(settle.Triggers[0].Payload) != `"region=eu"` || settle.Dispatch.Pool() != "billing" ||
		settle.Concurrency.BlockingStrategy != schemas.BlockSerial || settle.Concurrency.MaxRunningInstances != 1 {
		t.Errorf("settle: %+v", settle)
	}
	invoice := byID[11].Task
	if len(invoice.Triggers) != 0 || invoice.Dispatch.Strategy != schemas.DispatchHash || invoice.Concurrency.BlockingStrategy != schemas.BlockDiscard ||
		len(invoice.After) != 1 || invoice.After[0].Task != settle.TaskName {
		t.Errorf("invoice: %+v", invoice)
	}
	ledger := byID[12].Task
	if ledger.Dispatch.Strategy != schemas.DispatchBroadcast || len(ledger.After) != 1 {
		t.Errorf("ledger: %+v", ledger)
	}
	if !byID[13].Disabled || byID[10].Disabled || byID[13].Task.TaskType != importer.StoppedXXLJobType {
		t.Errorf("trigger_status 0 not kept as disabled")
	}
	if rate := byID[22].Task; rate.Triggers[0].Schedule != "@every 90s" {
		t.Errorf("FIX_RATE: %+v", rate.Triggers)
	}
	sample := byID[1].Task
	if sample.Dispatch.Pool() != "xxl-job-executor-sample" || sample.Execution.Handler != "demoJobHandler" || sample.Description != "示例任务01" {
		t.Errorf("XXL-JOB's sample job: %+v", sample)
	}

	// Each cron task ticks as Quartz would.
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	loc, _ := time.LoadLocation("Asia/Shanghai")
	crons := map[int]string{1: "0 0 0 * * ? *", 10: "0 30 2 * * ?", 12: "0 0/15 9-17 ? * MON-FRI", 13: "15 10 8 ? * 1,7",
		14: "0 0 6 1 JAN,APR,JUL,OCT ? *", 15: "5/20 */7 1-23/4 1,15 * ?", 16: "0 0 22-2 ? * *"}
	for id, expr := range crons {
		task := byID[id].Task
		got, err := taskdef.NextFireTimes(task.Triggers[0], start, 20)
		if err != nil {
			t.Fatalf("job %d: %v", id, err)
		}
		wantTicks := refQuartz(t, expr, loc, start, 20)
		for i := range wantTicks {
			if i >= len(got) || !got[i].Equal(wantTicks[i]) {
				t.Errorf("job %d (%s as %s): tick %d is %v, Quartz says %s", id, expr, task.Triggers[0].Schedule, i, got[min(i, len(got)-1)], wantTicks[i])
				break
			}
		}
	}
}

// refQuartz is Quartz's CronExpression read from its documentation, apart
// from the importer: seconds minutes hours day-of-month month day-of-week
// [year]; '?' leaves the day to the other field; day-of-week 1 is SUN;
// "a/n" is a, a+n, … to the field's end; a range may wrap (22-2).
func refQuartz(t *testing.T, expr string, loc *time.Location, start time.Time, n int) []time.Time {
	t.Helper()
	f := strings.Fields(expr)
	months := []string{"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}
	days := []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}
	match := func(field string, v, lo, hi int, names []string) bool {
		num := func(s string) int {
			for i, x := range names {
				if s == x {
					return i + 1
				}
			}
			k, err := strconv.Atoi(s)
			if err != nil {
				t.Fatalf("reference: %q in %q", s, expr)
			}
			return k
		}
		for _, el := range strings.Split(field, ",") {
			r, st, hasStep := strings.Cut(el, "/")
			step := 1
			if hasStep {
				step, _ = strconv.Atoi(st)
			}
			a, b := lo, hi
			if r != "*" && r != "?" {
				x, y, isRange := strings.Cut(r, "-")
				a = num(x)
				b = a
				if isRange {
					b = num(y)
				} else if hasStep {
					b = hi
				}
			}
			span := hi - lo + 1
			for k := 0; ; k += step {
				w := a + k
				if b >= a && w > b || b < a && w > b+span {
					break
				}
				if (w-lo)%span+lo == v {
					return true
				}
			}
		}
		return false
	}
	var out []time.Time
	for d := 0; len(out) < n && d < 20*366; d++ {
		day := time.Date(start.In(loc).Year(), start.In(loc).Month(), start.In(loc).Day()+d, 0, 0, 0, 0, loc)
		if !match(f[4], int(day.Month()), 1, 12, months) {
			continue
		}
		if f[3] == "?" && !match(f[5], int(day.Weekday())+1, 1, 7, days) || f[3] != "?" && !match(f[3], day.Day(), 1, 31, nil) {
			continue
		}
		for h := 0; h < 24; h++ {
			for mi := 0; mi < 60; mi++ {
				for s := 0; s < 60; s++ {
					if match(f[2], h, 0, 23, nil) && match(f[1], mi, 0, 59, nil) && match(f[0], s, 0, 59, nil) {
						if at := time.Date(day.Year(), day.Month(), day.Day(), h, mi, s, 0, loc); at.After(start) && len(out) < n {
							out = append(out, at)
						}
					}
				}
			}
		}
	}
	return out
}
