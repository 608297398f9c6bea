package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/internal/wait"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
)

// TestApplyReportsOneOutcomePerReport hands ApplyReports a batch that
// holds, for some attempts, both their started and final reports and, for
// some, a report twice (a redelivery in the same batch): every report gets
// its own outcome, in the order given, and every attempt its transitions
// once, the RUNNING one included.
func TestApplyReportsOneOutcomePerReport(t *testing.T) {
	t.Parallel()
	st := store.New(storetest.NewDB(t))
	ctx := t.Context()
	applyTasks(t, st, "rep")
	in := make([]store.NewInstance, 3)
	for i := range in {
		in[i] = newRunInstance("rep", fmt.Sprintf("e%d", i), "", schemas.StateDispatched)
		in[i].MaxAttempts = 3
	}
	made, err := st.CreateInstances(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	byEvent := make(map[string]int64)
	for _, a := range made {
		byEvent[a.EventID] = a.ID
	}
	a, b, c := byEvent["e0"], byEvent["e1"], byEvent["e2"]
	now := time.Now()
	report := func(id int64, kind schemas.ReportKind) schemas.Report {
		r := schemas.Report{InstanceID: id, Attempt: 1, WorkerID: "w1", Kind: kind, StartedAt: now, At: now}
		if kind == schemas.ReportFailed {
			r.Error = "boom"
		}
		return r
	}
	started := []schemas.Report{report(a, schemas.ReportStarted), report(a, schemas.ReportStarted), report(b, schemas.ReportStarted)}
	final := []schemas.Report{report(a, schemas.ReportSucceeded), report(b, schemas.ReportFailed),
		report(b, schemas.ReportFailed), report(c, schemas.ReportSucceeded)}
	out, err := st.ApplyReports(ctx, started, final)
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		id      int64
		applied bool
		state   schemas.State
	}
	wants := []want{
		{a, true, schemas.StateSucceeded}, {a, false, schemas.StateRunning}, {b, true, schemas.StateRetrying},
		{a, true, schemas.StateSucceeded}, {b, true, schemas.StateRetrying}, {b, false, schemas.StateRetrying},
		{c, true, schemas.StateSucceeded},
	}
	if len(out) != len(wants) {
		t.Fatalf("%d outcomes for %d reports: %+v", len(out), len(wants), out)
	}
	for i, w := range wants {
		o := out[i]
		if o.InstanceID != w.id || o.Attempt != 1 || o.Applied != w.applied || o.State != w.state || !o.Found {
			t.Errorf("outcome %d = %+v; want instance %d applied %v state %s", i, o, w.id, w.applied, w.state)
		}
	}

	history := func(id int64) string {
		inst, err := st.GetInstance(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var steps []string
		for _, tr := range inst.Transitions {
			steps = append(steps, fmt.Sprintf("%s→%s by %s (%s)", tr.From, tr.To, tr.Operator, tr.Reason))
		}
		return strings.Join(steps, "; ")
	}
	const made2 = "→CREATED by event (); CREATED→DISPATCHED by dispatcher (); "
	for id, w := range map[int64]string{
		a: made2 + "DISPATCHED→RUNNING by worker:w1 (); RUNNING→SUCCEEDED by worker:w1 ()",
		b: made2 + "DISPATCHED→RUNNING by worker:w1 (); RUNNING→RETRYING by worker:w1 (boom)",
		c: made2 + "DISPATCHED→RUNNING by worker:w1 (recorded with the final report: no started report was recorded before it); " +
			"RUNNING→SUCCEEDED by worker:w1 ()",
	} {
		if got := history(id); got != w {
			t.Errorf("instance %d: transitions\n  %s\nwant\n  %s", id, got, w)
		}
	}
}

// TestReleasedReportSpendsNoAttempt hands ApplyReports a released report
// (an attempt handed back by a worker that stopped) of an instance on its
// last attempt, permanent flag and all: it moves RUNNING → RETRYING, not
// FAILED, with max_attempts one higher and no finish time, and the reason
// on the transition. A failure of the next attempt then fails the instance:
// the hand-back bought one attempt, not more.
func TestReleasedReportSpendsNoAttempt(t *testing.T) {
	t.Parallel()
	st := store.New(storetest.NewDB(t))
	ctx := t.Context()
	applyTasks(t, st, "rel")
	made, err := st.CreateInstances(ctx, []store.NewInstance{newRunInstance("rel", "e1", "", schemas.StateDispatched)})
	if err != nil {
		t.Fatal(err)
	}
	id, now := made[0].ID, time.Now()
	released := schemas.Report{InstanceID: id, Attempt: 1, WorkerID: "w1", Kind: schemas.ReportReleased, StartedAt: now, At: now,
		Error: "handed back: worker w1 stopped", Permanent: true}
	out, err := st.ApplyReports(ctx, nil, []schemas.Report{released})
	if err != nil {
		t.Fatal(err)
	}
	if o := out[0]; !o.Applied || o.State != schemas.StateRetrying || o.CurrentAttempt != 1 || o.MaxAttempts != 2 {
		t.Fatalf("outcome %+v, want applied, RETRYING at attempt 1 of 2", o)
	}
	inst, err := st.GetInstance(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	last := inst.Transitions[len(inst.Transitions)-1]
	if inst.FinishedAt != nil || last.From != schemas.StateRunning || last.To != schemas.StateRetrying || last.Reason != released.Error {
		t.Errorf("instance finished %v, last transition %+v; want no finish, RUNNING→RETRYING with the hand-back's reason", inst.FinishedAt, last)
	}
	// The next attempt fails: the instance has no attempt left. A second
	// start of it (a retry firing that came again) returns it marked
	// republished: its dispatch message may have been published, and run.
	for i, want := range []bool{false, true} {
		started, err := st.StartRetries(ctx, []store.RetryStart{{InstanceID: id, Attempt: 2}})
		if err != nil {
			t.Fatal(err)
		}
		if len(started) != 1 || started[0].Attempt != 2 || started[0].Republished != want {
			t.Fatalf("start %d of attempt 2 returned %+v, want attempt 2 with Republished %v", i+1, started, want)
		}
	}
	failed := schemas.Report{InstanceID: id, Attempt: 2, WorkerID: "w2", Kind: schemas.ReportFailed, StartedAt: now, At: now, Error: "boom"}
	if out, err = st.ApplyReports(ctx, nil, []schemas.Report{failed}); err != nil {
		t.Fatal(err)
	}
	if o := out[0]; !o.Applied || o.State != schemas.StateFailed {
		t.Errorf("outcome of attempt 2's failure %+v, want FAILED", o)
	}
}

// TestReportRacingACancelSeesIt hands ApplyReports a report of an attempt
// whose cancel commits while the report's statement waits for the
// instance's lock: the started report of a DISPATCHED attempt, and the
// final report of a RUNNING one from its holder. Neither is applied, and
// the outcome is the instance as the cancel left it (CANCELLED), not as
// the statement's snapshot had it (DISPATCHED with no worker yet, or
// RUNNING): the dispatcher tells a stale report from a refused one, a
// worker that is not the holder, by that outcome.
func TestReportRacingACancelSeesIt(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "race")
	now := time.Now()
	for _, tc := range []struct {
		name  string
		state schemas.State // before the cancel
		kind  schemas.ReportKind
	}{
		{"started of a dispatched attempt", schemas.StateDispatched, schemas.ReportStarted},
		{"final of a running attempt", schemas.StateRunning, schemas.ReportFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			made, err := st.CreateInstances(ctx, []store.NewInstance{newRunInstance("race", tc.name, "", schemas.StateDispatched)})
			if err != nil {
				t.Fatal(err)
			}
			id := made[0].ID
			r := schemas.Report{InstanceID: id, Attempt: 1, WorkerID: "w1", Pool: "default", Handlers: []string{"h"}, Kind: tc.kind, StartedAt: now, At: now, Error: "boom"}
			if tc.state == schemas.StateRunning {
				start := r
				start.Kind = schemas.ReportStarted
				if out, err := st.ApplyReports(ctx, []schemas.Report{start}, nil); err != nil || !out[0].Applied {
					t.Fatalf("started report = %+v, %v; want applied", out, err)
				}
			}
			// The cancel holds the instance's lock until it commits.
			cancel, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer cancel.Rollback(ctx)
			if _, err := cancel.Exec(ctx, `UPDATE instances SET state = 'CANCELLED', finished_at = now(), error = 'cancelled: race' WHERE id = $1`, id); err != nil {
				t.Fatal(err)
			}
			type result struct {
				out []store.Outcome
				err error
			}
			done := make(chan result, 1)
			go func() {
				var res result
				if r.Kind == schemas.ReportStarted {
					res.out, res.err = st.ApplyReports(ctx, []schemas.Report{r}, nil)
				} else {
					res.out, res.err = st.ApplyReports(ctx, nil, []schemas.Report{r})
				}
				done <- res
			}()
			// The report's statement took its snapshot and waits for the lock.
			waitCtx, stop := context.WithTimeout(ctx, time.Minute)
			defer stop()
			if err := wait.Until(waitCtx, func() (bool, error) {
				var n int
				err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
					AND wait_event_type = 'Lock' AND query LIKE '%FOR UPDATE OF i%'`).Scan(&n)
				return n > 0, err
			}); err != nil {
				t.Fatalf("the report never waited for the cancel's lock: %v", err)
			}
			if err := cancel.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			res := <-done
			if res.err != nil {
				t.Fatal(res.err)
			}
			if o := res.out[0]; o.Applied || !o.Found || o.State != schemas.StateCancelled || o.CurrentAttempt != 1 {
				t.Fatalf("outcome = %+v; want not applied, found CANCELLED at attempt 1", o)
			}
		})
	}
}

// TestUnheldAttemptNeedsTheHandlersGrant reports on an attempt that no
// worker holds yet: from a worker of its pool whose credential grants other
// handlers (or none), the started, final and progress reports change
// nothing; from one whose grants name the attempt's handler, they apply.
func TestUnheldAttemptNeedsTheHandlersGrant(t *testing.T) {
	t.Parallel()
	st := store.New(storetest.NewDB(t))
	ctx := t.Context()
	applyTasks(t, st, "g")
	id := create(t, st, newRunInstance("g", "e1", "", schemas.StateDispatched))[0].ID
	now := time.Now()
	for _, grants := range [][]string{nil, {"other", "h.more"}} {
		started := schemas.Report{InstanceID: id, Attempt: 1, WorkerID: "w-evil", Pool: "default", Handlers: grants,
			Kind: schemas.ReportStarted, StartedAt: now, At: now}
		final := started
		final.Kind, final.Output = schemas.ReportSucceeded, json.RawMessage(`{"forged":true}`)
		out, err := st.ApplyReports(ctx, []schemas.Report{started}, []schemas.Report{final})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range out {
			if o.Applied || o.State != schemas.StateDispatched {
				t.Errorf("grants %v: outcome %+v, want refused on a DISPATCHED instance", grants, o)
			}
		}
		progress := started
		progress.Kind, progress.Progress = schemas.ReportProgress, &schemas.Progress{Done: 1, Total: 2}
		if po, err := st.ApplyProgress(ctx, []schemas.Report{progress}); err != nil || po[0].Applied || !po[0].Refused {
			t.Errorf("grants %v: progress = %+v, %v; want refused", grants, po, err)
		}
	}
	in, err := st.GetInstance(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if in.State != schemas.StateDispatched || in.WorkerID != "" || len(in.Output) != 0 || in.Progress != nil {
		t.Fatalf("instance %s by %q, output %s, progress %+v; want DISPATCHED as it was", in.State, in.WorkerID, in.Output, in.Progress)
	}
	ok := schemas.Report{InstanceID: id, Attempt: 1, WorkerID: "w1", Pool: "default", Handlers: []string{"x", "h"},
		Kind: schemas.ReportSucceeded, StartedAt: now, At: now, Output: json.RawMessage(`{}`)}
	if out, err := st.ApplyReports(ctx, nil, []schemas.Report{ok}); err != nil || !out[0].Applied || out[0].State != schemas.StateSucceeded {
		t.Fatalf("report of a worker granted the handler = %+v, %v; want applied", out, err)
	}
}
