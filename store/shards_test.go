package store_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
)

func TestShardParents(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	if _, _, err := st.ApplyTask(ctx, parseTask(t, "task_name: split\nexecution: {handler: h, shards: 2}\n"), "alice"); err != nil {
		t.Fatal(err)
	}
	base := store.NewInstance{
		Task: "split", TaskVersion: 1, Source: schemas.SourceEvent, Priority: schemas.PriorityNormal,
		Pool: "default", Handler: "h", TimeoutMS: 1000, MaxAttempts: 1, FiredAt: time.Now(),
		State: schemas.StateDispatched,
	}
	p := base
	p.EventID, p.Shard = "e1", store.Shard{ShardCount: 2}
	p.Route = store.Route{Strategy: schemas.DispatchHash, Key: "{{.k}}", MinWorkerVersion: "1.2.0"}
	made, err := st.CreateInstances(ctx, []store.NewInstance{p})
	if err != nil {
		t.Fatal(err)
	}
	parent := made[0]
	if !parent.Coordinates() || parent.Route != p.Route {
		t.Fatalf("parent = %+v, want a coordinator with route %+v", parent, p.Route)
	}
	var kids []store.NewInstance
	for i := range 2 {
		c := base
		c.EventID, c.RunID = fmt.Sprintf("e1/shard-%d", i), parent.RunID
		c.Shard = store.Shard{ParentID: parent.ID, ShardIndex: i, ShardCount: 2}
		kids = append(kids, c)
	}
	children, err := st.CreateInstances(ctx, kids)
	if err != nil {
		t.Fatal(err)
	}
	if len(children) != 2 || children[1].ParentID != parent.ID || children[1].ShardIndex != 1 || children[1].Coordinates() {
		t.Fatalf("children = %+v", children)
	}
	got, err := st.Children(ctx, []int64{parent.ID, children[0].ID})
	if err != nil || len(got) != 2 || got[0].ID != children[0].ID || got[1].ID != children[1].ID {
		t.Fatalf("Children = %+v, %v; want the two children by shard", got, err)
	}
	for range 2 { // the second call finds the parent RUNNING already
		if _, err := st.StartParents(ctx, []store.ParentStart{{InstanceID: parent.ID, ShardCount: 2}}); err != nil {
			t.Fatal(err)
		}
	}
	end := func(id int64, state schemas.State) {
		if _, err := pool.Exec(ctx, `UPDATE instances SET state = $2 WHERE id = $1`, id, state); err != nil {
			t.Fatal(err)
		}
	}
	runs := []string{parent.RunID}
	end(children[0].ID, schemas.StateSucceeded)
	if ended, err := st.EndParents(ctx, runs); err != nil || len(ended) != 0 {
		t.Fatalf("EndParents with a shard running = %v, %v; want nothing", ended, err)
	}
	end(children[1].ID, schemas.StateFailed)
	ended, err := st.EndParents(ctx, runs)
	if err != nil || len(ended) != 1 || ended[0] != (store.RunEnd{Task: "split", RunID: parent.RunID}) {
		t.Fatalf("EndParents = %v, %v; want the parent's end", ended, err)
	}
	if again, err := st.EndParents(ctx, runs); err != nil || len(again) != 0 {
		t.Fatalf("EndParents again = %v, %v; want nothing", again, err)
	}
	inst, err := st.GetInstance(ctx, parent.ID)
	if err != nil {
		t.Fatal(err)
	}
	if inst.State != schemas.StateFailed || !strings.Contains(inst.Error, "1 (FAILED)") {
		t.Errorf("parent ended %s (%q), want FAILED naming shard 1", inst.State, inst.Error)
	}
}
