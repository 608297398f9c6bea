package executor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/schemas"
)

type shopPayload struct {
	ShopID int `json:"shop_id"`
}

// Attempts with the same mutex key never overlap, on two workers; attempts
// with different keys run side by side.
func TestMutexSerializesEqualKeys(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	entered := make(chan int, 10)
	release := make(chan struct{})
	var mu sync.Mutex
	inShop := map[int]int{}
	mux := executor.NewMux()
	mux.Handle("sync", executor.JSON(func(ctx context.Context, _ *executor.Job, p shopPayload) (any, error) {
		mu.Lock()
		inShop[p.ShopID]++
		if n := inShop[p.ShopID]; n > 1 {
			t.Errorf("%d attempts of shop %d run at once", n, p.ShopID)
		}
		mu.Unlock()
		defer func() {
			mu.Lock()
			inShop[p.ShopID]--
			mu.Unlock()
		}()
		entered <- p.ShopID
		select {
		case <-release:
			return nil, nil
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}))
	w.worker("w1", mux, nil)
	w.worker("w2", mux, nil)

	const template = "shop-{{.shop_id}}"
	for i := range 3 {
		w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: int64(i + 1), Handler: "sync",
			MutexTemplate: template, Payload: json.RawMessage(`{"shop_id": 1}`)})
	}
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 4, Handler: "sync",
		MutexTemplate: template, Payload: json.RawMessage(`{"shop_id": 2}`), TimeoutMS: 90_000})

	// Shop 2 runs beside shop 1, which runs once.
	got := []int{<-entered, <-entered}
	slices.Sort(got)
	if !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("the first two attempts to run are of shops %v, want 1 and 2", got)
	}
	// Each key is held with a TTL of twice the timeout.
	for key, want := range map[string]time.Duration{"shop-1": 2 * time.Minute, "shop-2": 3 * time.Minute} {
		m, err := w.mutexStream().GetLastMsgForSubject(t.Context(), "$KV."+w.topo.MutexBucket()+"."+key)
		if err != nil {
			t.Fatal(err)
		}
		ttl, err := time.ParseDuration(m.Header.Get(jetstream.MsgTTLHeader))
		if err != nil || ttl != want {
			t.Errorf("mutex %s has TTL %q, want %s", key, m.Header.Get(jetstream.MsgTTLHeader), want)
		}
		var holder schemas.Lease
		if err := json.Unmarshal(m.Data, &holder); err != nil || holder.InstanceID == 0 || holder.WorkerID == "" {
			t.Errorf("mutex %s holds %s (%v), want its holder", key, m.Data, err)
		}
	}
	close(release)

	started, finals := w.collect(4)
	// In time, each attempt of shop 1 starts after the one before it ended.
	var shop1 []report
	for id := int64(1); id <= 3; id++ {
		r := finals[id]
		r.StartedAt = started[id].StartedAt
		shop1 = append(shop1, r)
	}
	slices.SortFunc(shop1, func(a, b report) int { return a.StartedAt.Compare(b.StartedAt) })
	for i := 1; i < len(shop1); i++ {
		if shop1[i].StartedAt.Before(shop1[i-1].At) {
			t.Errorf("instance %d started at %s, before instance %d ended at %s",
				shop1[i].InstanceID, shop1[i].StartedAt, shop1[i-1].InstanceID, shop1[i-1].At)
		}
	}
	w.dispatchEmpty()
	w.noMoreReports()
	// Every key was released.
	eventually(t, "the mutex keys are released", func() bool {
		keys, err := w.mutexes().ListKeys(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for range keys.Keys() {
			n++
		}
		return n == 0
	})
}

// An attempt whose key another attempt holds is requeued, not run, and
// runs once the key is released.
func TestMutexHeldElsewhereRequeues(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	var runs sync.Map
	mux := executor.NewMux()
	mux.HandleFunc("count", func(_ context.Context, task *executor.Job) (any, error) {
		runs.Store(task.InstanceID, true)
		return nil, nil
	})
	rev, err := w.mutexes().Create(t.Context(), "report-daily", []byte(`{"worker_id":"other"}`), jetstream.KeyTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	w.worker("w1", mux, nil)
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 1, Handler: "count", MutexTemplate: "report-daily"})
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 2, Handler: "count"})
	w.succeeded(2)

	consumer, err := w.js.Consumer(t.Context(), w.topo.DispatchStream(), w.topo.PoolConsumer(schemas.DefaultPool, schemas.PriorityNormal, "count").Durable)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the attempt is requeued twice", func() bool {
		info, err := consumer.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return info.NumRedelivered > 0 && info.Delivered.Consumer >= 4
	})
	if _, ran := runs.Load(int64(1)); ran {
		t.Fatal("the attempt ran while another held its mutex")
	}
	if err := w.mutexes().Delete(t.Context(), "report-daily", jetstream.LastRevision(rev)); err != nil {
		t.Fatal(err)
	}
	w.succeeded(1)
	w.dispatchEmpty()
}

// A key that does not render fails the attempt permanently, naming the
// template and what is wrong.
func TestMutexKeyRenderFails(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.worker("w1", builtins(), nil)
	tests := []struct {
		template, payload string
		want              []string
	}{
		{"order-{{.shop_id}}", `{"shop": 1}`, []string{`mutex key template "order-{{.shop_id}}"`, `map has no entry for key "shop_id"`}},
		{"order-{{.shop_id}}", ``, []string{`mutex key template "order-{{.shop_id}}"`, `shop_id`}},
		{"order-{{.name}}", `{"name": "a b"}`, []string{`rendered "order-a b", which is not a KV key`}},
		// A number renders as written: as a float64 it would render
		// 1.2345678901234567e+19, which is not a key.
		{"order-{{.id}}", `{"id": 12345678901234567890}`, nil},
	}
	for i, tt := range tests {
		w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: int64(i + 1), Handler: executor.BuiltinEcho,
			MutexTemplate: tt.template, Payload: json.RawMessage(tt.payload)})
	}
	finals := map[int64]report{}
	for len(finals) < len(tests) {
		if r := w.next(); r.Kind != schemas.ReportStarted {
			finals[r.InstanceID] = r
		}
	}
	for i, tt := range tests {
		r := finals[int64(i+1)]
		if tt.want == nil {
			if r.Kind != schemas.ReportSucceeded {
				t.Errorf("%s over %s: %+v, want success", tt.template, tt.payload, r.Report)
			}
			continue
		}
		if r.Kind != schemas.ReportFailed || !r.Permanent {
			t.Errorf("%s over %s: %+v, want a permanent failure", tt.template, tt.payload, r.Report)
		}
		for _, want := range tt.want {
			if !strings.Contains(r.Error, want) {
				t.Errorf("%s over %s: error %q does not contain %q", tt.template, tt.payload, r.Error, want)
			}
		}
	}
	eventually(t, "the mutex of the attempt that ran is released", func() bool {
		_, err := w.mutexes().Get(t.Context(), "order-12345678901234567890")
		return isKeyMissing(err)
	})
}

func (w *world) mutexes() jetstream.KeyValue {
	w.t.Helper()
	kv, err := w.js.KeyValue(w.t.Context(), w.topo.MutexBucket())
	if err != nil {
		w.t.Fatal(err)
	}
	return kv
}

func (w *world) mutexStream() jetstream.Stream {
	w.t.Helper()
	s, err := w.js.Stream(w.t.Context(), fmt.Sprintf("KV_%s", w.topo.MutexBucket()))
	if err != nil {
		w.t.Fatal(err)
	}
	return s
}

// A worker refuses to start when the mutex bucket cannot hold per-key TTLs
// (a topology made by an older dispatcher), naming the bucket.
func TestMutexBucketWithoutMarkersIsRefused(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	if err := w.js.DeleteKeyValue(t.Context(), w.topo.MutexBucket()); err != nil {
		t.Fatal(err)
	}
	if _, err := w.js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: w.topo.MutexBucket()}); err != nil {
		t.Fatal(err)
	}
	s, err := executor.New(w.options(builtins()))
	if err != nil {
		t.Fatal(err)
	}
	err = s.Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), "bucket ax-mutex does not allow message TTLs") {
		t.Errorf("Run = %v, want an error naming the bucket", err)
	}
}
