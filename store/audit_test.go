package store_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
)

// auditIDs returns the ids of records.
func auditIDs(recs []schemas.AuditRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.ID
	}
	return out
}

// actionRows returns the operator actions of a task, oldest first, as
// "action operator details".
func actionRows(t *testing.T, pool *pgxpool.Pool, task string) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `
		SELECT action || ' ' || operator || ' ' || COALESCE(details::text, '-') FROM operator_actions
		WHERE task = $1 ORDER BY id`, task)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestTaskChangesRecordActions(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	apply := func(def, operator string) {
		t.Helper()
		if _, _, err := st.ApplyTask(ctx, parseTask(t, def), operator); err != nil {
			t.Fatal(err)
		}
	}
	setEnabled := func(enabled bool, operator string) store.TaskRecord {
		t.Helper()
		rec, err := st.SetTaskEnabled(ctx, "report", enabled, operator)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	apply("task_name: report\nexecution: {handler: h}\n", "alice")
	apply("task_name: report\nexecution: {handler: h}\n", "bob") // unchanged: no version, no action
	apply("task_name: report\ndescription: nightly\nexecution: {handler: h}\n", "carol")
	if rec := setEnabled(false, "dave"); rec.Enabled {
		t.Error("disable left the task enabled")
	}
	before := setEnabled(false, "erin") // already disabled: no action
	if rec := setEnabled(true, "frank"); !rec.Enabled || !rec.UpdatedAt.After(before.UpdatedAt) {
		t.Errorf("enable: enabled %t, updated %v (was %v)", rec.Enabled, rec.UpdatedAt, before.UpdatedAt)
	}
	want := []string{`apply alice {"version": 1}`, `apply carol {"version": 2}`, "disable dave -", "enable frank -"}
	if got := actionRows(t, pool, "report"); !slices.Equal(got, want) {
		t.Errorf("operator actions = %q, want %q", got, want)
	}
	if _, err := st.SetTaskEnabled(ctx, "missing", false, "alice"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SetTaskEnabled(missing) error = %v, want ErrNotFound", err)
	}
	if got := actionRows(t, pool, "missing"); len(got) != 0 {
		t.Errorf("disabling a missing task recorded %q", got)
	}
}

func TestRecordAction(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	id, err := st.RecordAction(ctx, store.Action{Action: schemas.ActionCancel, Task: "etl", InstanceID: 42,
		Operator: "alice", Reason: "wrong day", Details: json.RawMessage(`{"worker_id": "w-1"}`)})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := st.ListAudit(ctx, store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 {
		t.Fatalf("ListAudit = %+v, want the one action", recs)
	}
	r := recs[0]
	if r.ID != schemas.ActionAuditID(id) || r.Kind != schemas.AuditAction || r.Task != "etl" || r.InstanceID != 42 ||
		r.Action != schemas.ActionCancel || r.Operator != "alice" || r.Reason != "wrong day" ||
		string(r.Details) != `{"worker_id": "w-1"}` || r.From != "" || r.To != "" || r.Attempt != 0 ||
		time.Since(r.At) > time.Minute {
		t.Errorf("record = %+v", r)
	}

	for _, bad := range []store.Action{
		{Task: "etl"},
		{Action: schemas.ActionFire},
		{Action: schemas.ActionFire, Task: "etl", Details: json.RawMessage(`{`)},
	} {
		if _, err := st.RecordAction(ctx, bad); err == nil {
			t.Errorf("RecordAction(%+v) succeeded", bad)
		}
	}
}

func TestListAudit(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "etl", "mail") // apply actions by ""
	etl := insertInstance(t, pool, "etl", "ev-1", schemas.StateDispatched, schemas.StateRunning)
	mail := insertInstance(t, pool, "mail", "ev-2", schemas.StateDispatched)
	if _, err := st.RecordAction(ctx, store.Action{Action: schemas.ActionCancel, Task: "etl", InstanceID: etl, Operator: "alice"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetTaskEnabled(ctx, "mail", false, "bob"); err != nil {
		t.Fatal(err)
	}

	all, err := st.ListAudit(ctx, store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	// 2 applies, 3 + 2 transitions, cancel, disable.
	if len(all) != 9 {
		t.Fatalf("ListAudit = %q, want 9 records", auditIDs(all))
	}
	if all[0].Action != schemas.ActionDisable || all[1].Action != schemas.ActionCancel || all[8].Action != schemas.ActionApply {
		t.Errorf("ListAudit = %q, want the disable first and an apply last", auditIDs(all))
	}
	for i := 1; i < len(all); i++ {
		if all[i].At.After(all[i-1].At) {
			t.Errorf("record %s (%v) comes after the older %s (%v)", all[i].ID, all[i].At, all[i-1].ID, all[i-1].At)
		}
	}
	tr := all[2]
	if tr.Kind != schemas.AuditTransition || tr.Task != "mail" || tr.InstanceID != mail || tr.From != schemas.StateCreated ||
		tr.To != schemas.StateDispatched || tr.Attempt != 1 || tr.Operator != "dispatcher" || tr.Reason != "to DISPATCHED" ||
		tr.Action != "" || tr.Details != nil {
		t.Errorf("newest transition = %+v", tr)
	}

	for _, tt := range []struct {
		name string
		f    store.AuditFilter
		want int
		keep func(schemas.AuditRecord) bool
	}{
		{"task", store.AuditFilter{Task: "etl"}, 5, func(r schemas.AuditRecord) bool { return r.Task == "etl" }},
		{"instance", store.AuditFilter{InstanceID: etl}, 4, func(r schemas.AuditRecord) bool { return r.InstanceID == etl }},
		{"operator", store.AuditFilter{Operator: "dispatcher"}, 5, func(r schemas.AuditRecord) bool { return r.Operator == "dispatcher" }},
		{"since", store.AuditFilter{Since: all[1].At}, 2, func(r schemas.AuditRecord) bool { return !r.At.Before(all[1].At) }},
		{"everything", store.AuditFilter{Task: "etl", InstanceID: etl, Operator: "alice", Since: all[8].At}, 1,
			func(r schemas.AuditRecord) bool { return r.Action == schemas.ActionCancel }},
		{"limit", store.AuditFilter{Limit: 3}, 3, func(r schemas.AuditRecord) bool { return slices.Contains(auditIDs(all[:3]), r.ID) }},
	} {
		got, err := st.ListAudit(ctx, tt.f)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if len(got) != tt.want || !slices.ContainsFunc(got, tt.keep) {
			t.Errorf("%s: ListAudit(%+v) = %q, want %d records", tt.name, tt.f, auditIDs(got), tt.want)
		}
		for _, r := range got {
			if !tt.keep(r) {
				t.Errorf("%s: ListAudit(%+v) returned %+v", tt.name, tt.f, r)
			}
		}
	}

	if _, err := st.ListAudit(ctx, store.AuditFilter{Before: "t-999999"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ListAudit(before an unknown record) error = %v, want ErrNotFound", err)
	}
	if _, err := st.ListAudit(ctx, store.AuditFilter{Before: "x-1"}); err == nil || !strings.Contains(err.Error(), "not an audit record id") {
		t.Errorf("ListAudit(before x-1) error = %v, want one that says it is not an id", err)
	}
}

func TestListAuditPagesThroughTies(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "etl")
	id := insertInstance(t, pool, "etl", "ev-1", schemas.StateDispatched, schemas.StateRunning, schemas.StateSucceeded)
	for range 4 {
		if _, err := st.RecordAction(ctx, store.Action{Action: schemas.ActionFire, Task: "etl", Operator: "alice"}); err != nil {
			t.Fatal(err)
		}
	}
	// Everything written at two instants: the order must break the ties.
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, table := range []string{"instance_transitions", "operator_actions"} {
		if _, err := pool.Exec(ctx, `UPDATE `+table+` SET at = $1::timestamptz + (id % 2) * interval '1 second'`, at); err != nil {
			t.Fatal(err)
		}
	}
	all, err := st.ListAudit(ctx, store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 9 {
		t.Fatalf("ListAudit = %q, want 9 records", auditIDs(all))
	}
	for _, limit := range []int{1, 2, 4} {
		got := auditIDs(pageAudit(t, st, store.AuditFilter{Limit: limit}))
		if !slices.Equal(got, auditIDs(all)) {
			t.Errorf("pages of %d = %q, want %q", limit, got, auditIDs(all))
		}
	}
	onInstance, err := st.ListAudit(ctx, store.AuditFilter{InstanceID: id, Limit: 2, Before: all[0].ID})
	if err != nil || len(onInstance) != 2 {
		t.Errorf("ListAudit(instance, before) = %+v, %v", onInstance, err)
	}
}

// pageAudit reads every record f selects, a page of f.Limit at a time.
func pageAudit(t *testing.T, st *store.Store, f store.AuditFilter) []schemas.AuditRecord {
	t.Helper()
	var out []schemas.AuditRecord
	for {
		page, err := st.ListAudit(t.Context(), f)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			return out
		}
		if len(page) > f.Limit {
			t.Fatalf("page of %d records with limit %d", len(page), f.Limit)
		}
		out = append(out, page...)
		f.Before = page[len(page)-1].ID
	}
}

// TestListAuditReadsBothTransitionsOfARow: the creation's two transitions,
// one row of instance_transitions by two operators, are two records, each
// found by its own operator and each a page of its own.
func TestListAuditReadsBothTransitionsOfARow(t *testing.T) {
	t.Parallel()
	st := store.New(storetest.NewDB(t))
	ctx := t.Context()
	applyTasks(t, st, "etl")
	made := create(t, st, newRunInstance("etl", "ev-1", "", schemas.StateDispatched))
	var pages []string
	for _, r := range pageAudit(t, st, store.AuditFilter{InstanceID: made[0].ID, Limit: 1}) {
		pages = append(pages, r.ID+" "+string(r.To)+" by "+r.Operator)
	}
	if len(pages) != 2 || !strings.HasSuffix(pages[0], " DISPATCHED by dispatcher") || !strings.HasSuffix(pages[1], " CREATED by event") {
		t.Fatalf("pages of one record = %q, want the DISPATCHED transition by the dispatcher, then CREATED by event", pages)
	}
	for op, to := range map[string]schemas.State{"dispatcher": schemas.StateDispatched, "event": schemas.StateCreated} {
		got, err := st.ListAudit(ctx, store.AuditFilter{Operator: op, Task: "etl"})
		if err != nil || len(got) != 1 || got[0].To != to {
			t.Errorf("ListAudit by %s = %+v, %v; want its one transition to %s", op, got, err, to)
		}
	}
}
