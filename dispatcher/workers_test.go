package dispatcher

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

// entry is one entry of the workers bucket, as a watch delivers it.
type entry struct {
	key   string
	value []byte
	op    jetstream.KeyValueOp
}

func (e entry) Bucket() string                  { return "ax-workers" }
func (e entry) Key() string                     { return e.key }
func (e entry) Value() []byte                   { return e.value }
func (e entry) Revision() uint64                { return 1 }
func (e entry) Created() time.Time              { return time.Time{} }
func (e entry) Delta() uint64                   { return 0 }
func (e entry) Operation() jetstream.KeyValueOp { return e.op }

// A worker writes its grant keys before its first heartbeat, but its first
// reports can reach a busy dispatcher before the watch of ax-workers
// delivers them: the view asks the bucket, and keeps what it finds. A
// worker without keys is asked about once a grantLookupEvery.
func TestGrantsReadFromTheBucketBeforeTheWatchHasThem(t *testing.T) {
	t.Parallel()
	srv := streamstest.NewServer(t, streams.Config{})
	nc, js := srv.Connect()
	kv, err := js.KeyValue(t.Context(), srv.Topology.WorkersBucket())
	if err != nil {
		t.Fatal(err)
	}
	grant := func(worker, pool, handler string) {
		t.Helper()
		// As an executor writes them: a plain publish (a pool may hold
		// '+'), then a round trip so that the server has it.
		if err := nc.Publish(srv.Topology.GrantSubject(worker, pool, handler), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(t.Context(), worker, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	grant("w1", "default", "a.b")
	grant("w1", "default", "c")
	grant("w1", "gpu", "x")

	now := time.Unix(1_000_000, 0)
	v := newLiveWorkers(func() time.Time { return now })
	v.bucket = kv // no watch: the view has seen none of the keys
	if got := v.grantedHandlers(t.Context(), "w1", "default"); !slices.Equal(got, []string{"a.b", "c"}) {
		t.Errorf("granted handlers of w1 in default, from the bucket = %v, want a.b and c", got)
	}
	if got := v.seenGrants("w1", "default"); !slices.Equal(got, []string{"a.b", "c"}) {
		t.Errorf("the view after the look-up = %v, want a.b and c kept", got)
	}

	if got := v.grantedHandlers(t.Context(), "w2", "default"); got != nil {
		t.Errorf("granted handlers of a worker without keys = %v, want none", got)
	}
	grant("w2", "default", "a.b")
	if got := v.grantedHandlers(t.Context(), "w2", "default"); got != nil {
		t.Errorf("asked again within %v of a look-up that found none: %v, want none until then", grantLookupEvery, got)
	}
	now = now.Add(grantLookupEvery)
	if got := v.grantedHandlers(t.Context(), "w2", "default"); !slices.Equal(got, []string{"a.b"}) {
		t.Errorf("granted handlers of w2 %v later = %v, want a.b", grantLookupEvery, got)
	}

	// Reports naming ever new worker ids cost at most
	// grantLookupsPerSecond look-ups a second, all workers together.
	now = now.Add(grantLookupEvery)
	grant("w3", "default", "a.b")
	for i := range grantLookupsPerSecond {
		v.grantedHandlers(t.Context(), fmt.Sprintf("forged-%d", i), "default")
	}
	if got := v.grantedHandlers(t.Context(), "w3", "default"); got != nil {
		t.Errorf("a look-up past %d in a second found %v, want none asked", grantLookupsPerSecond, got)
	}
	now = now.Add(time.Second)
	if got := v.grantedHandlers(t.Context(), "w3", "default"); !slices.Equal(got, []string{"a.b"}) {
		t.Errorf("granted handlers of w3 in the next second = %v, want a.b", got)
	}
}

// TestWorkersServeWhatTheirGrantsBack applies heartbeats and grant keys to
// the dispatcher's view: a worker serves a pool and a handler only when its
// heartbeat claims them and a live grant key backs the pair; a grant whose
// key went stops routing at once but still backs its worker's reports for
// grantMemory.
func TestWorkersServeWhatTheirGrantsBack(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	v := newLiveWorkers(func() time.Time { return now })
	v.setTTL(30 * time.Second)
	put := func(key string, value []byte) {
		t.Helper()
		if _, err := v.apply(entry{key: key, value: value, op: jetstream.KeyValuePut}); err != nil {
			t.Fatal(err)
		}
	}
	rec, _ := json.Marshal(schemas.Worker{ID: "w1", Pools: []string{"default", "gpu"}, Handlers: []string{"a.b", "c"}, Version: "9.9.9"})
	put(streams.GrantKey("w1", "default", "a.b"), nil)
	put(streams.GrantKey("w1", "default", "x"), nil) // granted, not claimed
	put("w1", rec)

	if got := v.eligible("default", "a.b", "", 1); len(got) != 1 {
		t.Errorf("eligible for default/a.b = %v, want w1", got)
	}
	for _, c := range [][2]string{{"gpu", "a.b"}, {"default", "c"}, {"default", "x"}} {
		if got := v.eligible(c[0], c[1], "", 1); len(got) != 0 {
			t.Errorf("eligible for %s/%s = %v, want none: claimed or granted, not both", c[0], c[1], got)
		}
	}
	if w, _ := v.live("w1"); !slices.Equal(w.Pools, []string{"default"}) || !slices.Equal(w.Handlers, []string{"a.b"}) {
		t.Errorf("verified w1 = pools %v handlers %v, want default and a.b", w.Pools, w.Handlers)
	}

	// The key goes: no more routing, but reports still count for a while.
	if _, err := v.apply(entry{key: streams.GrantKey("w1", "default", "a.b"), op: jetstream.KeyValuePurge}); err != nil {
		t.Fatal(err)
	}
	if got := v.eligible("default", "a.b", "", 1); len(got) != 0 {
		t.Errorf("eligible after the grant went = %v, want none", got)
	}
	if got := v.grantedHandlers(t.Context(), "w1", "default"); !slices.Equal(got, []string{"a.b", "x"}) {
		t.Errorf("granted handlers after the key went = %v, want a.b and x", got)
	}
	now = now.Add(grantMemory + time.Second)
	if got := v.grantedHandlers(t.Context(), "w1", "default"); !slices.Equal(got, []string{"x"}) {
		t.Errorf("granted handlers %s after the key went = %v, want x alone", grantMemory, got)
	}
	if got := v.grantedHandlers(t.Context(), "w2", "default"); got != nil {
		t.Errorf("granted handlers of an unknown worker = %v, want none", got)
	}
}
