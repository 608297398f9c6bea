package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/schemas"
)

// recordMux serves "test.record", which writes each run into book under
// its payload's n and fails for good with "bad record <n>" when the
// payload says bad, or "timeout after <n>s" when it says slow.
func recordMux(book *runBook) *executor.Mux {
	mux := builtinsMux()
	mux.HandleFunc("test.record", func(ctx context.Context, j *executor.Job) (any, error) {
		var p struct {
			N    int  `json:"n"`
			Bad  bool `json:"bad"`
			Slow bool `json:"slow"`
		}
		_ = json.Unmarshal(j.Payload, &p)
		_, _ = book.handler(ctx, &executor.Job{Name: j.Name, EventID: fmt.Sprint(p.N)})
		switch {
		case p.Bad:
			return nil, executor.Permanent(fmt.Errorf("bad record %d", p.N))
		case p.Slow:
			return nil, executor.Permanent(fmt.Errorf("timeout after %ds", p.N))
		}
		return nil, nil
	})
	return mux
}

// fireRecords fires n firings of task with payloads {"n": i} (bad when
// bad(i)) and waits until all have ended.
func (s *system) fireRecords(task string, n int, payload func(i int) map[string]any) {
	s.t.Helper()
	s.fireEach(task, n, func(i int) any { return payload(i) })
	waitFor(s.t, "every "+task+" instance to end", 60*time.Second, func() (bool, error) {
		var ended int
		err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM instances WHERE task = $1 AND state IN ('SUCCEEDED', 'FAILED')`, task).Scan(&ended)
		return ended == n, err
	})
}

const recordTask = `
task_name: %s
execution:
  handler: test.record
  retry:
    max_attempts: 1
`

// TestBulkRerunReRunsExactlyTheMatches fails 5 of 10 instances, and a few
// of another task: a dry run of "task=records, state=FAILED" lists exactly
// the 5, and the bulk rerun with a payload patch that fixes them reruns
// those and no other (the handler's ledger), audited once with its query.
// A query on the error text narrows to one; a query that matches more
// than its limit is refused without --yes.
func TestBulkRerunReRunsExactlyTheMatches(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.apply(fmt.Sprintf(recordTask, "records"))
	s.apply(fmt.Sprintf(recordTask, "others"))
	book := newRunBook()
	s.executor("w1", recordMux(book), 8)
	s.fireRecords("records", 10, func(i int) map[string]any { return map[string]any{"n": i, "bad": i%2 == 1} })
	s.fireRecords("others", 3, func(i int) map[string]any { return map[string]any{"n": 100 + i, "bad": true} })
	ctx := context.Background()

	var failed []int64
	for _, in := range s.instances("records") {
		if in.State == schemas.StateFailed {
			failed = append(failed, in.ID)
		}
	}
	slices.Sort(failed)
	where := schemas.InstanceQuery{Task: "records", State: []schemas.State{schemas.StateFailed}}
	dry, err := s.client.BulkRerun(ctx, wire.BulkRequest{Where: where, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	var listed []int64
	for _, m := range dry.Instances {
		listed = append(listed, m.ID)
	}
	if !slices.Equal(listed, failed) || dry.Matched != 5 || dry.Acted != 0 {
		t.Fatalf("dry run lists %v (matched %d, acted %d), want the 5 FAILED %v", listed, dry.Matched, dry.Acted, failed)
	}
	one, err := s.client.BulkRerun(ctx, wire.BulkRequest{Where: schemas.InstanceQuery{Task: "records", Error: "RECORD 3"}, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if one.Matched != 1 || one.Instances[0].Error != "bad record 3" {
		t.Errorf("error=RECORD 3 matches %+v, want the one instance of bad record 3", one.Instances)
	}
	_, err = s.client.BulkRerun(ctx, wire.BulkRequest{Where: where, Limit: 2})
	if apiErr, ok := errors.AsType[*wire.Error](err); !ok || apiErr.Code != "confirm_needed" {
		t.Fatalf("a rerun of 5 matches with limit 2 = %v, want confirm_needed", err)
	}

	res, err := s.client.BulkRerun(ctx, wire.BulkRequest{Where: where, PayloadPatch: json.RawMessage(`{"bad": null}`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Acted != 5 || res.AuditID == 0 {
		t.Fatalf("bulk rerun acted on %d (audit %d), want 5", res.Acted, res.AuditID)
	}
	s.waitInState("records", schemas.StateSucceeded, 10, 60*time.Second)
	runs := book.snapshot()
	for i := range 10 {
		want := 1 + i%2
		if got := runs[fmt.Sprintf("records %d", i)]; got != want {
			t.Errorf("record %d ran %d times, want %d", i, got, want)
		}
	}
	for i := range 3 {
		if got := runs[fmt.Sprintf("others %d", 100+i)]; got != 1 {
			t.Errorf("others record %d ran %d times; the query named records only", 100+i, got)
		}
	}
	var rerunOf []int64
	rows, err := s.pool.Query(ctx, `SELECT substring(t.reason from 'rerun of instance ([0-9]+)')::bigint FROM instance_transitions t
		JOIN instances i ON i.id = t.instance_id WHERE i.task = 'records' AND t.to_state = 'CREATED' AND t.reason LIKE '%bulk action%' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		rerunOf = append(rerunOf, id)
	}
	rows.Close()
	if !slices.Equal(rerunOf, failed) {
		t.Errorf("the new instances rerun %v, want %v", rerunOf, failed)
	}
	var audits int
	var details string
	if err := s.pool.QueryRow(ctx, `SELECT count(*), max(details::text) FROM operator_actions WHERE action = 'bulk_rerun'`).Scan(&audits, &details); err != nil {
		t.Fatal(err)
	}
	if audits != 1 || !json.Valid([]byte(details)) {
		t.Errorf("%d bulk_rerun audit records (details %s), want one holding the query", audits, details)
	}
	var d struct {
		Where struct{ Task string } `json:"where"`
		IDs   []int64               `json:"ids"`
	}
	_ = json.Unmarshal([]byte(details), &d)
	if d.Where.Task != "records" || !slices.Equal(d.IDs, failed) {
		t.Errorf("the audit record holds %s, want the query and the ids %v", details, failed)
	}
}

// TestBulkCancelOfAThousandWaiting cancels 1,000 WAITING instances (held by
// a serial task's one running instance) with one bulk cancel: they are all
// CANCELLED within one batch time per 500 — 1 s, or on a busy machine the
// time the same instances took to be created in batches — in a few
// transactions, not one per instance (0.5 s, 5 transactions, measured).
func TestBulkCancelOfAThousandWaiting(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.apply(`
task_name: serial
execution:
  handler: builtin.sleep
concurrency:
  max_running_instances: 1
  blocking_strategy: serial
`)
	ctx := context.Background()
	created := time.Now()
	s.fireEach("serial", 1001, sleep60)
	s.waitInState("serial", schemas.StateWaiting, 1000, 60*time.Second)
	// The same firings' creation, batched the same way, calibrates a
	// batch time on this machine (shared, under the race detector).
	create := time.Since(created)
	start := time.Now()
	res, err := s.client.BulkCancel(ctx, wire.BulkRequest{Where: schemas.InstanceQuery{Task: "serial", State: []schemas.State{schemas.StateWaiting}}, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if res.Acted != 1000 {
		t.Fatalf("bulk cancel acted on %d, want 1000", res.Acted)
	}
	s.waitInState("serial", schemas.StateCancelled, 1000, 60*time.Second)
	took := time.Since(start)
	var statements int
	if err := s.pool.QueryRow(ctx, `SELECT count(DISTINCT t.xid) FROM instance_transitions t JOIN instances i ON i.id = t.instance_id
		WHERE i.task = 'serial' AND t.to_state = 'CANCELLED'`).Scan(&statements); err != nil {
		t.Fatal(err)
	}
	bound := max(2*time.Second, 2*create)
	t.Logf("bulk cancel of 1,000 waiting instances: %v, in %d transactions (their creation: %v; bound %v)", took, statements, create, bound)
	if took > bound {
		t.Errorf("bulk cancel of 1,000 took %v, more than one batch time per 500 (%v: twice their creation, or 2 s)", took, bound)
	}
	if statements > 10 {
		t.Errorf("the 1,000 cancellations took %d transactions, want a few batches", statements)
	}
	var audits int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM operator_actions WHERE action = 'bulk_cancel'`).Scan(&audits); err != nil {
		t.Fatal(err)
	}
	if audits != 1 {
		t.Errorf("%d bulk_cancel audit records, want 1", audits)
	}
}

// TestDeadLettersGroupAndReplay fails instances with two causes: the
// dead-letter view groups them by task and error class with counts and
// first/last seen; replaying one group with a payload patch reruns just
// its instances, which then leave the view.
func TestDeadLettersGroupAndReplay(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.apply(fmt.Sprintf(recordTask, "letters"))
	book := newRunBook()
	s.executor("w1", recordMux(book), 8)
	s.fireRecords("letters", 6, func(i int) map[string]any {
		return map[string]any{"n": i, "bad": i < 3, "slow": i == 3 || i == 4}
	})
	ctx := context.Background()
	groups, err := s.client.DeadLetters(ctx, "letters")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, g := range groups {
		got[g.Task+"/"+g.ErrorClass] = g.Count
		if g.FirstSeen.After(g.LastSeen) || g.LatestID == 0 || g.Example == "" {
			t.Errorf("group %+v: first seen after last, or no latest", g)
		}
	}
	want := map[string]int{"letters/bad record N": 3, "letters/timeout after Ns": 2}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("dead-letter groups %v, want %v", got, want)
	}
	dry, err := s.client.ReplayDeadLetters(ctx, wire.ReplayRequest{Task: "letters", ErrorClass: "bad record N", DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if dry.Matched != 3 {
		t.Fatalf("the dry replay matches %d, want 3", dry.Matched)
	}
	res, err := s.client.ReplayDeadLetters(ctx, wire.ReplayRequest{Task: "letters", ErrorClass: "bad record N", PayloadPatch: json.RawMessage(`{"bad": false}`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Acted != 3 {
		t.Fatalf("replay acted on %d, want 3", res.Acted)
	}
	s.waitInState("letters", schemas.StateSucceeded, 4, 60*time.Second)
	runs := book.snapshot()
	for i := range 6 {
		want := 1
		if i < 3 {
			want = 2
		}
		if runs[fmt.Sprintf("letters %d", i)] != want {
			t.Errorf("record %d ran %d times, want %d", i, runs[fmt.Sprintf("letters %d", i)], want)
		}
	}
	groups, err = s.client.DeadLetters(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 1 || groups[0].ErrorClass != "timeout after Ns" || groups[0].Count != 2 {
		t.Errorf("after the replay the dead letters are %+v, want the timeout group only", groups)
	}
}
