package e2e_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/dispatcher"
	"github.com/ax-scheduler/ax/internal/servicetest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
)

// TestHistoryMovesRetainsAndArchives runs the history's maintenance in two
// dispatchers whose clock jumps 30 days ahead once every instance ended:
// one of them leads; the ended instances leave the hot tables; a task with
// retention 10d and archive: true lands in the archive, one with retention
// 10d alone is dropped, one without keeps its history; the API reads the
// moved instances (?archived=true, by id, by idempotency key), a firing
// repeated makes no second instance, and a rerun of an archived instance
// runs once more.
func TestHistoryMovesRetainsAndArchives(t *testing.T) {
	t.Parallel()
	var shift atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(shift.Load())) }
	tune := func(o *dispatcher.Options) {
		o.NowFunc = now
		o.History = dispatcher.HistoryOptions{Interval: 20 * time.Millisecond, Period: store.HistoryDay}
	}
	s := newSystem(t, tune)
	// The second dispatcher competes for the maintenance lock.
	second := dispatcher.Options{Store: s.store, Logger: s.log}
	tune(&second)
	second.Conn, _ = s.srv.Connect()
	d2, err := dispatcher.New(second)
	if err != nil {
		t.Fatal(err)
	}
	servicetest.Start(t, "dispatcher-2", d2)
	s.auditors(1)
	runs := s.countingExecutor(4)
	for _, def := range []string{
		"task_name: kept\nexecution: {handler: test.count}\n",
		"task_name: archived\nretention: 10d\narchive: true\nexecution: {handler: test.count}\n",
		"task_name: dropped\nretention: 10d\nexecution: {handler: test.count}\n",
	} {
		s.apply(def)
	}
	ctx := context.Background()
	ids := map[string]int64{}
	for _, task := range []string{"kept", "archived", "dropped"} {
		res, err := s.client.Fire(ctx, task, wire.FireRequest{IdempotencyKey: "order-42", Payload: []byte(`{"n":1}`)})
		if err != nil || res.InstanceID == 0 {
			t.Fatalf("fire %s: %+v, %v", task, res, err)
		}
		ids[task] = res.InstanceID
		s.waitState(res.InstanceID, schemas.StateSucceeded, time.Minute)
	}

	shift.Store(int64(30 * 24 * time.Hour))
	waitFor(t, "the ended instances to leave the hot tables and the dropped one to expire", time.Minute, func() (bool, error) {
		var hot, gone int
		err := s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM instances),
			(SELECT count(*) FROM archived_instances WHERE task = 'dropped')`).Scan(&hot, &gone)
		return hot == 0 && gone == 0, err
	})
	var leaders int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND (classid::bigint << 32 | objid::bigint) = x'61785f686973746f'::bigint`).Scan(&leaders); err != nil || leaders != 1 {
		t.Fatalf("%d sessions hold the history lock (%v), want 1 of the two dispatchers", leaders, err)
	}

	list, err := s.client.ListInstances(ctx, apiclient.InstanceQuery{Archived: true})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, in := range list {
		got[in.Task] = in.Archived && in.State == schemas.StateSucceeded
	}
	if len(list) != 2 || !got["kept"] || !got["archived"] {
		t.Fatalf("?archived=true lists %+v, want kept's and archived's instances", list)
	}
	if n, err := s.store.ListInstances(ctx, store.InstanceFilter{}); err != nil || len(n) != 0 {
		t.Fatalf("the default list holds %d instances (%v), want none", len(n), err)
	}
	var inArchive int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM instance_archive WHERE id = $1`, ids["archived"]).Scan(&inArchive); err != nil || inArchive != 1 {
		t.Fatalf("instance of archived in instance_archive: %d (%v)", inArchive, err)
	}
	in, err := s.client.GetInstance(ctx, ids["archived"])
	if err != nil || !in.Archived || len(in.Transitions) != 4 {
		t.Fatalf("GET of the archived instance = %+v, %v; want it with its 4 transitions", in, err)
	}
	if _, err := s.client.GetInstance(ctx, ids["dropped"]); err == nil {
		t.Fatal("the dropped instance is still readable")
	}

	// The same idempotency key again: the instance is in the history, so
	// the firing is one with it.
	for _, task := range []string{"kept", "archived"} {
		res, err := s.client.Fire(ctx, task, wire.FireRequest{IdempotencyKey: "order-42", Payload: []byte(`{"n":1}`)})
		if err != nil || res.InstanceID != ids[task] || !res.Existing {
			t.Fatalf("fire %s again: %+v, %v; want its moved instance %d", task, res, err, ids[task])
		}
	}
	// A rerun of an archived instance is a new instance that runs.
	res, err := s.client.Rerun(ctx, ids["archived"])
	if err != nil {
		t.Fatal(err)
	}
	s.waitState(res.InstanceID, schemas.StateSucceeded, time.Minute)
	if n := runs.Load(); n != 4 {
		t.Fatalf("the handler ran %d times, want 4: three firings and one rerun", n)
	}
	// The rerun is an instance of its own. (Where it is now, the hot
	// tables or the history, the mover decides: with the clock 30 days on,
	// an ended instance is old enough to move once its audit is relayed.)
	rerun, err := s.client.GetInstance(ctx, res.InstanceID)
	if err != nil || rerun.ID == ids["archived"] || rerun.Task != "archived" || rerun.State != schemas.StateSucceeded {
		t.Fatalf("the rerun = %+v, %v; want a SUCCEEDED instance of archived other than %d", rerun, err, ids["archived"])
	}
}
