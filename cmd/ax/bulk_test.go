package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/schemas"
)

// TestInstanceWhereAndDeadLetters drives ax instance rerun --where and ax
// dead-letters against the API: the dry run lists the matches, a match
// above --limit is refused without --yes, the dead letters group by error
// class, and a bulk rerun is audited once.
func TestInstanceWhereAndDeadLetters(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	e.apply(reportTask)
	e.apply("task_name: other\nexecution: {handler: h}\n")
	a := e.insertInstance("nightly-report", "ev-1", schemas.StateFailed, "bad record 17")
	b := e.insertInstance("nightly-report", "ev-2", schemas.StateFailed, "bad record 4")
	c := e.insertInstance("nightly-report", "ev-3", schemas.StateFailed, "timeout after 3s")
	e.insertInstance("nightly-report", "ev-4", schemas.StateSucceeded, "")
	e.insertInstance("other", "ev-5", schemas.StateFailed, "bad record 9")

	out := e.mustAx("instance", "rerun", "--where", "task=nightly-report", "--where", "state=failed", "--dry-run")
	for _, id := range []int64{a, b, c} {
		if !strings.Contains(out, fmt.Sprintf("\n%d ", id)) {
			t.Errorf("the dry run does not list instance %d:\n%s", id, out)
		}
	}
	if !strings.Contains(out, "dry run: 3 instances match") {
		t.Errorf("dry run output:\n%s", out)
	}
	code, _, errOut := e.ax("", "instance", "rerun", "--where", "task=nightly-report", "--where", "state=FAILED", "--limit", "2")
	if code == 0 || !strings.Contains(errOut, "more than the limit 2") || !strings.Contains(errOut, "--yes") {
		t.Errorf("a rerun of 3 matches with --limit 2: exit %d, %s; want a refusal naming --yes", code, errOut)
	}
	if code, _, errOut := e.ax("", "instance", "rerun", "7", "--where", "task=other"); code == 0 || !strings.Contains(errOut, "not both") {
		t.Errorf("an id with --where: exit %d, %s", code, errOut)
	}

	out = e.mustAx("dead-letters", "--task", "nightly-report")
	if !strings.Contains(out, "nightly-report  2 ") || !strings.Contains(out, "bad record N") || !strings.Contains(out, "timeout after Ns") {
		t.Errorf("ax dead-letters:\n%s", out)
	}

	out = e.mustAx("instance", "rerun", "--where", "task=nightly-report", "--where", "error=TIMEOUT", "--payload-patch", `{"day": "2026-03-02"}`)
	if !strings.Contains(out, "1 of 1 matching instances rerun") {
		t.Errorf("bulk rerun output:\n%s", out)
	}
	var audits int
	var details string
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*), max(details::text) FROM operator_actions WHERE action = 'bulk_rerun'`).Scan(&audits, &details); err != nil {
		t.Fatal(err)
	}
	if audits != 1 || !strings.Contains(details, `"error": "TIMEOUT"`) || !strings.Contains(details, fmt.Sprint(c)) {
		t.Errorf("%d bulk_rerun audit records, details %s; want one with the query and instance %d", audits, details, c)
	}
}
