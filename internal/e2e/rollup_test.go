package e2e_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/executortest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
)

// runLedger is what a handler wrote of its runs: every attempt it began and
// every one whose context ended before it finished.
type runLedger struct {
	mu        sync.Mutex
	runs      map[[2]int64]int
	cancelled []string
}

// sleepFor returns a handler that writes its run in l and sleeps d.
func (l *runLedger) sleepFor(d time.Duration) executor.HandlerFunc {
	return func(ctx context.Context, j *executor.Job) (any, error) {
		l.mu.Lock()
		l.runs[[2]int64{j.InstanceID, int64(j.Attempt)}]++
		l.mu.Unlock()
		select {
		case <-time.After(d):
			return nil, nil
		case <-ctx.Done():
			l.mu.Lock()
			l.cancelled = append(l.cancelled, context.Cause(ctx).Error())
			l.mu.Unlock()
			return nil, context.Cause(ctx)
		}
	}
}

// rollUp publishes, as the connection nc, a message with Nats-Rollup: all
// on subject, and returns how many messages older than it the stream of
// bucket holds right after: 0 when the roll-up purged the stream. (Its
// message count proves nothing on a busy machine: the holders may have
// restored their keys before the count is read.)
func (a *authSystem) rollUp(nc *nats.Conn, bucket, subject string) uint64 {
	a.t.Helper()
	ctx := context.Background()
	js, err := jetstream.New(nc)
	if err != nil {
		a.t.Fatal(err)
	}
	m := nats.NewMsg(subject)
	m.Data = []byte(`{}`)
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupAll)
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		a.t.Fatalf("roll-up on %s: %v", subject, err)
	}
	st, err := a.dispatcherJS().Stream(ctx, "KV_"+bucket)
	if err != nil {
		a.t.Fatal(err)
	}
	if first := st.CachedInfo().State.FirstSeq; first < ack.Sequence {
		return ack.Sequence - first
	}
	return 0
}

// leaseKeys returns the keys of the leases bucket.
func (a *authSystem) leaseKeys() []string {
	a.t.Helper()
	kv, err := a.dispatcherJS().KeyValue(context.Background(), a.top.LeasesBucket())
	if err != nil {
		a.t.Fatal(err)
	}
	keys, err := kv.Keys(context.Background())
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		a.t.Fatal(err)
	}
	return keys
}

// TestRollUpsOfLeasesAndWorkersAreHarmless is issue 24 hole 1: ax-leases
// and ax-workers honour Nats-Rollup (nats-server forces it on with limit
// markers), so the default pool's executor credential purges both buckets
// while the workers of two pools run long attempts. The purges happen (the
// streams hold one message each after them), yet no attempt is
// cancelled: every lease comes back within a renewal period, every
// instance succeeds on its first attempt, which ran once, and both
// workers stay listed throughout.
func TestRollUpsOfLeasesAndWorkersAreHarmless(t *testing.T) {
	t.Parallel()
	a := newAuthSystem(t)
	l := &runLedger{runs: map[[2]int64]int{}}
	mux := executor.NewMux()
	mux.HandleFunc(executor.BuiltinSleep, l.sleepFor(4*time.Second))
	executortest.Run(t, executor.Options{Conn: a.connect(string(natsauth.Executor)), WorkerID: defaultWorker,
		Pools: []string{schemas.DefaultPool}, Mux: mux, Slots: 4, Logger: slog.New(zerolog.NewSlogHandler(a.log))})
	executortest.Run(t, executor.Options{Conn: a.connect(gpuExecutor), WorkerID: "g1",
		Pools: []string{"gpu"}, Mux: mux, Slots: 4, Logger: slog.New(zerolog.NewSlogHandler(a.log))})
	a.apply("task_name: long-default\nexecution: {handler: builtin.sleep, timeout: 5m}\n")
	a.apply("task_name: long-gpu\nexecution: {handler: builtin.sleep, timeout: 5m}\ndispatch: {tags: [gpu]}\n")
	var ids []int64
	for range 2 {
		ids = append(ids, a.fire("long-default", nil), a.fire("long-gpu", nil))
	}
	for _, id := range ids {
		a.waitState(id, schemas.StateRunning, time.Minute)
	}
	listed := func() bool {
		var got []string
		for _, w := range a.dispatcher.Workers() {
			got = append(got, w.ID)
		}
		return slices.Contains(got, defaultWorker) && slices.Contains(got, "g1")
	}
	if !listed() {
		t.Fatalf("workers listed: %+v, want %s and g1", a.dispatcher.Workers(), defaultWorker)
	}

	attacker := a.connect(string(natsauth.Executor))
	if n := a.rollUp(attacker, a.top.LeasesBucket(), "$KV."+a.top.LeasesBucket()+"."+streams.LeaseKey(999999, 1)); n != 0 {
		t.Fatalf("KV_%s holds %d messages older than the roll-up, want 0: the attack did nothing", a.top.LeasesBucket(), n)
	}
	rolled := time.Now()
	waitFor(t, "every lease back", 2*leaseTTL, func() (bool, error) {
		keys := a.leaseKeys()
		for _, id := range ids {
			if !slices.Contains(keys, streams.LeaseKey(id, 1)) {
				return false, nil
			}
		}
		return true, nil
	})
	if back := time.Since(rolled); back > leaseTTL/3+time.Second {
		t.Errorf("the leases came back %v after the roll-up, want within a renewal period (%v) and a second", back, leaseTTL/3)
	}
	if n := a.rollUp(attacker, a.top.WorkersBucket(), "$KV."+a.top.WorkersBucket()+"."+defaultWorker); n != 0 {
		t.Fatalf("KV_%s holds %d messages older than the roll-up, want 0: the attack did nothing", a.top.WorkersBucket(), n)
	}

	for _, id := range ids {
		waitFor(t, "the instance to succeed with both workers listed", time.Minute, func() (bool, error) {
			if !listed() {
				t.Fatalf("a worker left the list: %+v", a.dispatcher.Workers())
			}
			inst, err := a.store.GetInstance(context.Background(), id)
			if err != nil {
				return false, err
			}
			if inst.State.Terminal() && inst.State != schemas.StateSucceeded {
				t.Fatalf("instance %d ended %s: %s", id, inst.State, inst.Error)
			}
			if inst.State == schemas.StateSucceeded && inst.Attempt != 1 {
				t.Errorf("instance %d succeeded on attempt %d, want 1", id, inst.Attempt)
			}
			return inst.State == schemas.StateSucceeded, nil
		})
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.cancelled) > 0 {
		t.Errorf("attempts cancelled: %q", l.cancelled)
	}
	for _, id := range ids {
		if n := l.runs[[2]int64{id, 1}]; n != 1 {
			t.Errorf("instance %d attempt 1 ran %d times, want 1", id, n)
		}
	}
	if len(l.runs) != len(ids) {
		t.Errorf("the runLedger holds %d runs, want %d: %v", len(l.runs), len(ids), l.runs)
	}
}

// startVictim runs a worker of the default pool, one slot, whose
// builtin.sleep handler writes its runs in the ledger it returns and
// sleeps a minute, with startedDelay its StartedDelay (0: the default),
// on a connection of its own: closing it is the worker's death.
func (a *authSystem) startVictim(startedDelay time.Duration) (*runLedger, *nats.Conn) {
	a.t.Helper()
	l := &runLedger{runs: map[[2]int64]int{}}
	mux := executor.NewMux()
	mux.HandleFunc(executor.BuiltinSleep, l.sleepFor(time.Minute))
	victimConn := a.connect(string(natsauth.Executor))
	victim, err := executor.New(executor.Options{Conn: victimConn, WorkerID: defaultWorker, StartedDelay: startedDelay,
		Pools: []string{schemas.DefaultPool}, Mux: mux, Slots: 1, Logger: slog.New(zerolog.NewSlogHandler(a.log)), ShutdownTimeout: time.Millisecond})
	if err != nil {
		a.t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = victim.Run(ctx) // it fails once its connection is closed
	}()
	a.t.Cleanup(func() { stop(); <-done })
	return l, victimConn
}

// TestRolledAwayLeaseOfADeadWorkerIsReaped: a worker's connection dies
// while it runs an attempt, and before its lease expires the gpu pool's
// executor credential purges ax-leases with a roll-up, which leaves no
// expiry marker for the reaper's watch. The reaper's sweep finds the lease
// gone and not restored, and fails the attempt as lost within about two
// lease TTLs — not at its five-minute timeout — and counts the roll-up.
func TestRolledAwayLeaseOfADeadWorkerIsReaped(t *testing.T) {
	t.Parallel()
	a := newAuthSystem(t)
	_, victimConn := a.startVictim(0)

	a.apply("task_name: orphan\nexecution: {handler: builtin.sleep, timeout: 5m, retry: {max_attempts: 2}}\n")
	id := a.fire("orphan", nil)
	a.waitState(id, schemas.StateRunning, time.Minute)
	waitFor(t, "the lease", time.Minute, func() (bool, error) {
		return slices.Contains(a.leaseKeys(), streams.LeaseKey(id, 1)), nil
	})
	victimConn.Close() // the worker is gone: nothing renews its lease
	a.rollUpAndAwaitTheReaper(id, schemas.StateRunning)
	if n := counterValue(t, a.reg, "ax_kv_rollups_detected_total", "bucket", a.top.LeasesBucket()); n < 1 {
		t.Errorf("ax_kv_rollups_detected_total{bucket=%q} = %v, want at least 1", a.top.LeasesBucket(), n)
	}
}

// TestVanishedLeaseOfAnAttemptNotReportedStartedIsReaped: as above, but
// the worker dies before its started report was stored (JetStream refused
// it: a full store, which refuses the lease's expiry marker too), so the
// attempt is DISPATCHED in PostgreSQL while its lease vanishes without a
// marker. The reaper's sweep takes every attempt whose lease put its watch
// saw, not only the RUNNING ones, and fails it as lost within about two
// lease TTLs; before, the instance stayed DISPATCHED for ever (ax drill
// system's jetstream-full: "stuck 2").
func TestVanishedLeaseOfAnAttemptNotReportedStartedIsReaped(t *testing.T) {
	t.Parallel()
	a := newAuthSystem(t)
	// Its started report would go an hour after the start.
	l, victimConn := a.startVictim(time.Hour)

	a.apply("task_name: unreported\nexecution: {handler: builtin.sleep, timeout: 5m, retry: {max_attempts: 2}}\n")
	id := a.fire("unreported", nil)
	waitFor(t, "the lease", time.Minute, func() (bool, error) {
		return slices.Contains(a.leaseKeys(), streams.LeaseKey(id, 1)), nil
	})
	waitFor(t, "the handler to run", time.Minute, func() (bool, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.runs) > 0, nil
	})
	victimConn.Close() // the worker is gone: nothing renews its lease
	if inst, err := a.store.GetInstance(context.Background(), id); err != nil || inst.State != schemas.StateDispatched {
		t.Fatalf("the instance is %v (%v), want DISPATCHED: its started report must not have been recorded", inst.State, err)
	}
	a.rollUpAndAwaitTheReaper(id, schemas.StateDispatched)
}

// rollUpAndAwaitTheReaper purges ax-leases with a roll-up as the gpu
// pool's executor, which leaves no expiry marker for the reaper's watch,
// and waits for the reaper to fail attempt 1 of instance id, which the
// roll-up found in state from, as lost: within two lease TTLs and two
// seconds of the roll-up.
func (a *authSystem) rollUpAndAwaitTheReaper(id int64, from schemas.State) {
	t := a.t
	t.Helper()
	if n := a.rollUp(a.connect(gpuExecutor), a.top.LeasesBucket(), "$KV."+a.top.LeasesBucket()+"."+streams.LeaseKey(999999, 1)); n != 0 {
		t.Fatalf("KV_%s holds %d messages older than the roll-up, want 0: the attack did nothing", a.top.LeasesBucket(), n)
	}
	rolled := time.Now()
	var lostAt time.Time
	waitFor(t, "the reaper to fail attempt 1 as lost", 4*leaseTTL+5*time.Second, func() (bool, error) {
		inst, err := a.store.GetInstance(context.Background(), id)
		if err != nil {
			return false, err
		}
		for _, tr := range inst.Transitions {
			if tr.From == from && tr.Attempt == 1 && tr.To != schemas.StateRunning {
				if tr.Operator != "reaper" {
					t.Fatalf("attempt 1 left %s for %s by %q (%s), want the reaper", from, tr.To, tr.Operator, tr.Reason)
				}
				lostAt = tr.At
				return true, nil
			}
		}
		return false, nil
	})
	if lag := lostAt.Sub(rolled); lag > 2*leaseTTL+2*time.Second {
		t.Errorf("attempt 1 failed as lost %v after the roll-up, want within two lease TTLs (%v) and two seconds", lag, 2*leaseTTL)
	}
}

// TestWorkerWhoseHeartbeatVanishedDeparts: a worker (ghost) dies with
// hash-routed attempts waiting on its own queue, and a roll-up of
// ax-workers removes its key before it expires, so no expiry marker tells
// the dispatcher. The dispatcher still takes it for departed once its last
// heartbeat is older than the bucket's TTL, and routes its queue again:
// every attempt succeeds on the live worker, which put its heartbeat
// again after the roll-up and never left the list.
func TestWorkerWhoseHeartbeatVanishedDeparts(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	var c calls
	s.worker(executor.Options{WorkerID: "w1", Mux: c.mux("w1"), HeartbeatInterval: time.Second})
	s.putWorker("ghost", map[string]any{"handlers": []string{"test.where"}, "protocol": schemas.ExecutorProtocol})
	s.routedTo("ghost", "w1")
	s.apply("task_name: hashed\nexecution: {handler: test.where}\ndispatch: {strategy: hash, hash_key: 'c-{{.customer}}'}\n")
	var ids []int64
	for i := range 10 {
		ids = append(ids, s.fire("hashed", map[string]any{"customer": i}))
	}
	stream, err := s.js.Stream(context.Background(), s.srv.Topology.DispatchStream())
	if err != nil {
		t.Fatal(err)
	}
	own := s.srv.Topology.DispatchWorker("ghost")
	waitFor(t, "attempts on ghost's own queue", time.Minute, func() (bool, error) {
		info, err := stream.Info(context.Background(), jetstream.WithSubjectFilter(own))
		return err == nil && info.State.Subjects[own] > 0, err
	})

	m := nats.NewMsg("$KV." + s.srv.Topology.WorkersBucket() + ".intruder")
	m.Data = []byte(`{}`)
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupAll)
	if _, err := s.js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		waitFor(t, "the instance to succeed", 2*streams.DefaultWorkerTTL, func() (bool, error) {
			if !slices.ContainsFunc(s.dispatcher.Workers(), func(w schemas.Worker) bool { return w.ID == "w1" }) {
				t.Fatalf("w1 left the list: %+v", s.dispatcher.Workers())
			}
			inst, err := s.store.GetInstance(context.Background(), id)
			return err == nil && inst.State == schemas.StateSucceeded, err
		})
	}
	if n := c.of("w1"); n != len(ids) {
		t.Errorf("w1 ran %d attempts, want %d", n, len(ids))
	}
	var listed []string
	for _, w := range s.dispatcher.Workers() {
		listed = append(listed, w.ID)
	}
	if !slices.Equal(listed, []string{"w1"}) {
		t.Errorf("workers listed: %v, want w1 only", listed)
	}
}
