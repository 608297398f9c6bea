package store_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
)

// insertInstance writes an instance row and its transitions the way the
// dispatcher would: CREATED, then each of states in turn.
func insertInstance(t *testing.T, pool *pgxpool.Pool, task, eventID string, states ...schemas.State) int64 {
	t.Helper()
	ctx := t.Context()
	final := schemas.StateCreated
	if len(states) > 0 {
		final = states[len(states)-1]
	}
	var id int64
	err := pool.QueryRow(ctx, `
		INSERT INTO instances (task, task_version, event_id, source, state, max_attempts, priority, pool, handler,
			timeout_ms, payload, fired_at)
		VALUES ($1, 1, $2, 'event', $3, 3, 'normal', 'default', 'builtin.echo', 60000, '{"n": 1}', now())
		RETURNING id`, task, eventID, string(final)).Scan(&id)
	if err != nil {
		t.Fatalf("insert instance: %v", err)
	}
	// Two transitions a row, as the store's statements write them (see
	// migration 00017), the last alone when they are odd.
	from := ""
	all := append([]schemas.State{schemas.StateCreated}, states...)
	for k := 0; k < len(all); k += 2 {
		to, then := string(all[k]), ""
		if k+1 < len(all) {
			then = string(all[k+1])
		}
		_, err := pool.Exec(ctx, `
			INSERT INTO instance_transitions (instance_id, task, from_state, to_state, attempt, operator, reason,
				then_state, then_operator, then_reason)
			VALUES ($1, $2, NULLIF($3, ''), $4, 1, 'dispatcher', 'to ' || $4,
				NULLIF($5, ''), CASE WHEN $5 <> '' THEN 'dispatcher' END, CASE WHEN $5 <> '' THEN 'to ' || $5 END)`,
			id, task, from, to, then)
		if err != nil {
			t.Fatalf("insert transition: %v", err)
		}
		from = to
		if then != "" {
			from = then
		}
	}
	return id
}

func applyTasks(t *testing.T, st *store.Store, names ...string) {
	t.Helper()
	for _, name := range names {
		if _, _, err := st.ApplyTask(t.Context(), parseTask(t, "task_name: "+name+"\nexecution: {handler: builtin.echo}\n"), ""); err != nil {
			t.Fatal(err)
		}
	}
}

func TestGetInstance(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "etl")
	id := insertInstance(t, pool, "etl", "ev-1", schemas.StateDispatched, schemas.StateRunning)
	if _, err := pool.Exec(ctx, `UPDATE instances SET worker_id = 'w1', started_at = now() WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}

	in, err := st.GetInstance(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if in.ID != id || in.Task != "etl" || in.EventID != "ev-1" || in.State != schemas.StateRunning ||
		in.Source != schemas.SourceEvent || in.Attempt != 1 || in.MaxAttempts != 3 || in.Priority != schemas.PriorityNormal ||
		in.Pool != "default" || in.WorkerID != "w1" || in.TaskVersion != 1 {
		t.Errorf("instance = %+v", in)
	}
	if string(in.Payload) != `{"n": 1}` || in.Output != nil || in.StartedAt == nil || in.FinishedAt != nil || in.FiredAt.IsZero() {
		t.Errorf("instance payload %s output %s started %v finished %v fired %v", in.Payload, in.Output, in.StartedAt, in.FinishedAt, in.FiredAt)
	}
	var path []string
	for _, tr := range in.Transitions {
		path = append(path, fmt.Sprintf("%q>%s", tr.From, tr.To))
		if tr.InstanceID != id || tr.Task != "etl" || tr.Operator != "dispatcher" || tr.Reason != "to "+string(tr.To) || tr.At.IsZero() {
			t.Errorf("transition = %+v", tr)
		}
	}
	if got, want := fmt.Sprint(path), `["">CREATED "CREATED">DISPATCHED "DISPATCHED">RUNNING]`; got != want {
		t.Errorf("transitions = %s, want %s", got, want)
	}

	_, err = st.GetInstance(ctx, id+1000)
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetInstance(unknown) error = %v, want ErrNotFound", err)
	}
}

func TestInstanceByEvent(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "etl", "other")
	id := insertInstance(t, pool, "etl", "ev-1", schemas.StateDispatched)

	in, err := st.InstanceByEvent(ctx, "etl", "ev-1")
	if err != nil {
		t.Fatal(err)
	}
	if in.ID != id || in.State != schemas.StateDispatched || in.Transitions != nil {
		t.Errorf("InstanceByEvent = %+v, want instance %d without transitions", in, id)
	}
	for _, q := range [][2]string{{"etl", "ev-2"}, {"other", "ev-1"}} {
		if _, err := st.InstanceByEvent(ctx, q[0], q[1]); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("InstanceByEvent(%s, %s) error = %v, want ErrNotFound", q[0], q[1], err)
		}
	}
}

func TestListInstances(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "a", "b")
	var ids []int64 // ids[i] is instance i: tasks alternate a, b; every third FAILED
	for i := range 9 {
		task := []string{"a", "b"}[i%2]
		state := schemas.StateSucceeded
		if i%3 == 0 {
			state = schemas.StateFailed
		}
		ids = append(ids, insertInstance(t, pool, task, fmt.Sprint("ev-", i), state))
	}
	// Instance i fired i hours after base.
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, id := range ids {
		if _, err := pool.Exec(ctx, `UPDATE instances SET fired_at = $2 WHERE id = $1`, id, base.Add(time.Duration(i)*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	idsOf := func(list []schemas.Instance) string {
		var out []int64
		for _, in := range list {
			out = append(out, in.ID)
			if in.Transitions != nil {
				t.Errorf("instance %d listed with transitions", in.ID)
			}
		}
		return fmt.Sprint(out)
	}
	want := func(is ...int) string {
		var out []int64
		for _, i := range is {
			out = append(out, ids[i])
		}
		return fmt.Sprint(out)
	}

	tests := []struct {
		name   string
		filter store.InstanceFilter
		want   string
	}{
		{"all newest first", store.InstanceFilter{}, want(8, 7, 6, 5, 4, 3, 2, 1, 0)},
		{"task", store.InstanceFilter{Task: "b"}, want(7, 5, 3, 1)},
		{"state", store.InstanceFilter{State: schemas.StateFailed}, want(6, 3, 0)},
		{"task and state", store.InstanceFilter{Task: "a", State: schemas.StateFailed}, want(6, 0)},
		{"limit", store.InstanceFilter{Limit: 2}, want(8, 7)},
		{"next page", store.InstanceFilter{Limit: 2, BeforeID: ids[7]}, want(6, 5)},
		{"page of a task", store.InstanceFilter{Task: "a", BeforeID: ids[4]}, want(2, 0)},
		{"page before", store.InstanceFilter{Limit: 2, AfterID: ids[4]}, want(6, 5)},
		{"newest page before", store.InstanceFilter{Limit: 3, AfterID: ids[6]}, want(8, 7)},
		{"page of a task before", store.InstanceFilter{Task: "b", Limit: 1, AfterID: ids[3]}, want(5)},
		{"between", store.InstanceFilter{AfterID: ids[2], BeforeID: ids[6]}, want(5, 4, 3)},
		{"unknown task", store.InstanceFilter{Task: "zzz"}, "[]"},
		{"since", store.InstanceFilter{Since: base.Add(6 * time.Hour)}, want(8, 7, 6)},
		{"until", store.InstanceFilter{Until: base.Add(2 * time.Hour)}, want(1, 0)},
		{"a window of a task", store.InstanceFilter{Task: "a", Since: base.Add(2 * time.Hour), Until: base.Add(7 * time.Hour)}, want(6, 4, 2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			list, err := st.ListInstances(ctx, tt.filter)
			if err != nil {
				t.Fatal(err)
			}
			if got := idsOf(list); got != tt.want {
				t.Errorf("ListInstances(%+v) = %s, want %s", tt.filter, got, tt.want)
			}
		})
	}
}

func TestListInstancesLimits(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "bulk")
	// One statement makes more rows than the largest page.
	_, err := pool.Exec(ctx, `
		INSERT INTO instances (task, task_version, event_id, source, state, max_attempts, priority, pool, handler, timeout_ms, fired_at)
		SELECT 'bulk', 1, 'ev-' || i, 'event', 'SUCCEEDED', 1, 'normal', 'default', 'h', 1000, now()
		FROM generate_series(1, $1) AS i`, store.MaxInstanceLimit+10)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ limit, want int }{
		{0, store.DefaultInstanceLimit},
		{-1, store.DefaultInstanceLimit},
		{store.MaxInstanceLimit + 1, store.MaxInstanceLimit},
		{7, 7},
	} {
		list, err := st.ListInstances(ctx, store.InstanceFilter{Limit: tt.limit})
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != tt.want {
			t.Errorf("ListInstances(Limit %d) returned %d instances, want %d", tt.limit, len(list), tt.want)
		}
	}
}

func TestInstanceFiring(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	// Version 1 takes payloads of version 2; version 2 of the task moves to 3.
	for _, v := range []string{"2", "3"} {
		def := parseTask(t, "task_name: etl\nschema_version: "+v+"\nexecution: {handler: builtin.echo}\n")
		if _, _, err := st.ApplyTask(ctx, def, ""); err != nil {
			t.Fatal(err)
		}
	}
	id := insertInstance(t, pool, "etl", "ev-1", schemas.StateSucceeded)
	if _, err := pool.Exec(ctx, `UPDATE instances SET priority = 'urgent' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}

	f, err := st.InstanceFiring(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if f.InstanceID != id || f.Task != "etl" || string(f.Payload) != `{"n": 1}` || f.PayloadVersion != 2 || f.Priority != schemas.PriorityUrgent {
		t.Errorf("InstanceFiring = %+v, want etl's payload of version 2 at priority urgent", f)
	}
	if _, err := st.InstanceFiring(ctx, id+1000); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("InstanceFiring(unknown) error = %v, want ErrNotFound", err)
	}
}
