package importer_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/ax-scheduler/ax/importer"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
	"github.com/ax-scheduler/ax/store/storetest"
)

// TestQuartzImport loads Quartz's published PostgreSQL schema and jobs of
// each trigger kind into PostgreSQL: each job's fate, its data map as
// payload, paused state and misfire, and each task's next 20 ticks
// against Quartz's rules.
func TestQuartzImport(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	for _, f := range []string{"testdata/quartz/tables_postgres.sql", "testdata/quartz/jobs.sql"} {
		sqlText, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(t.Context(), string(sqlText)); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	rep, err := importer.Quartz(t.Context(), db, importer.QuartzOptions{Timezone: "Asia/Tokyo"})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	rep.Print(&b)
	by := map[string]importer.Entry{}
	for _, e := range rep.Entries {
		by[strings.TrimPrefix(e.Source, "qrtz_job_details ")] = e
	}
	want := map[string]importer.Outcome{"reports.nightly": importer.Imported, "sync.pull": importer.Imported, "ops.paused": importer.Imported,
		"ops.once": importer.Refused, "ops.serial": importer.Refused, "ops.month-end": importer.Refused, "ops.tokyo": importer.Changed}
	for k, o := range want {
		if by[k].Outcome != o {
			t.Errorf("%s: %s, want %s", k, by[k].Outcome, o)
		}
	}
	if len(rep.Entries) != len(want) || t.Failed() {
		t.Fatalf("report:\n%s", b.String())
	}
	for k, reason := range map[string]string{"ops.once": "fires 1 times and stops", "ops.serial": "Java-serialized JobDataMap", "ops.month-end": "L, W or #"} {
		if !strings.Contains(by[k].Notes[0], reason) {
			t.Errorf("%s refused with %q, want %q", k, by[k].Notes[0], reason)
		}
	}
	nightly := by["reports.nightly"].Task
	if nightly.TaskName != "quartz-reports-nightly" || nightly.Execution.Handler != "com.example.NightlyReport" ||
		nightly.Concurrency.MaxRunningInstances != 1 || nightly.Triggers[0].Misfire != schemas.MisfireSkip ||
		string(nightly.Triggers[0].Payload) != `{"owner name":"anné","region":"eu"}` || nightly.Triggers[0].Timezone != "Europe/Berlin" {
		t.Errorf("nightly: %+v, payload %s", nightly, nightly.Triggers[0].Payload)
	}
	pull := by["sync.pull"].Task
	if pull.Triggers[0].Schedule != "@every 60s" || string(pull.Triggers[0].Payload) != `{"batch":"50","source":"crm"}` {
		t.Errorf("pull: %+v, payload %s", pull.Triggers, pull.Triggers[0].Payload)
	}
	if !by["ops.paused"].Disabled || by["ops.paused"].Task.Triggers[0].Misfire != schemas.MisfireFireOnce {
		t.Errorf("paused: %+v", by["ops.paused"])
	}
	if tok := by["ops.tokyo"].Task.Triggers[0]; tok.Timezone != "Asia/Tokyo" || tok.Misfire != schemas.MisfireCatchUp {
		t.Errorf("tokyo: %+v", tok)
	}

	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for k, expr := range map[string]string{"reports.nightly": "0 30 2 ? * MON-FRI", "ops.paused": "0 0 * * * ?", "ops.tokyo": "0 0/5 14,18 * * ?"} {
		tr := by[k].Task.Triggers[0]
		loc, _ := time.LoadLocation(tr.Timezone)
		got, err := taskdef.NextFireTimes(tr, start, 20)
		if err != nil {
			t.Fatal(err)
		}
		for i, w := range refQuartz(t, expr, loc, start, 20) {
			if !got[i].Equal(w) {
				t.Errorf("%s (%s as %s): tick %d is %s, Quartz says %s", k, expr, tr.Schedule, i, got[i], w)
				break
			}
		}
	}
	// A simple trigger repeating forever every 60 s from its start time.
	got, _ := taskdef.NextFireTimes(pull.Triggers[0], start, 20)
	for i := range got {
		if w := time.UnixMilli(1767225600000).Add(time.Duration(int64(start.Sub(time.UnixMilli(1767225600000))/time.Minute)+int64(i)+1) * time.Minute); !got[i].Equal(w) {
			t.Errorf("pull tick %d is %s, Quartz says %s", i, got[i], w)
			break
		}
	}
}
