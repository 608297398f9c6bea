package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/nats-io/nats.go"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
)

// The tests of this file play a nats-server that lost, in a kill -9, an
// acknowledged ack of a dispatch message and the lease history of its
// attempt: the message comes again (delivered more than once) and the
// lease key has no history, so the create-only lease write cannot fence
// it out. The dispatcher's fence must.

const countTask = `
task_name: hello
execution:
  handler: test.count
  retry: {max_attempts: 3, initial_interval_sec: 0}
`

// redispatch puts attempt of instance id on its queue again, as the
// dispatcher once routed it, and makes its next delivery a redelivery:
// the test takes it from the pool consumer and gives it back. No
// executor may pull the queue meanwhile.
func (s *system) redispatch(id int64, attempt int) {
	s.t.Helper()
	ctx := context.Background()
	in, err := s.store.GetInstance(ctx, id)
	if err != nil {
		s.t.Fatal(err)
	}
	d := schemas.Dispatch{InstanceID: id, Task: in.Task, TaskVersion: in.TaskVersion, Handler: "test.count", Attempt: attempt,
		MaxAttempts: in.MaxAttempts, EventID: in.EventID, Priority: in.Priority, Pool: in.Pool, TimeoutMS: time.Minute.Milliseconds(),
		FiredAt: in.FiredAt, DispatchedAt: time.Now()}
	top := s.srv.Topology
	if _, err := streams.Publish(ctx, s.js, top.Dispatch(in.Pool, in.Priority, d.Handler), "", d); err != nil {
		s.t.Fatal(err)
	}
	s.giveBack(in.Pool, in.Priority, id)
}

// giveBack takes the dispatch message of instance id from its pool
// consumer and gives it back, so that its next delivery is its second.
func (s *system) giveBack(pool string, p schemas.Priority, id int64) {
	s.t.Helper()
	c, err := s.js.CreateOrUpdateConsumer(context.Background(), s.srv.Topology.DispatchStream(), s.srv.Topology.PoolConsumer(pool, p, "test.count"))
	if err != nil {
		s.t.Fatal(err)
	}
	m, err := c.Next(jetstream.FetchMaxWait(30 * time.Second))
	if err != nil {
		s.t.Fatalf("take the dispatch message of instance %d: %v", id, err)
	}
	if d, err := streams.Decode[schemas.Dispatch](m.Subject(), m.Data()); err != nil || d.InstanceID != id {
		s.t.Fatalf("took dispatch message %+v (%v), want instance %d's", d, err, id)
	}
	if err := m.Nak(); err != nil {
		s.t.Fatal(err)
	}
}

// purgeLease removes every trace of the lease of an attempt from the
// leases bucket, expiry marker included, as a server that lost them would.
func (s *system) purgeLease(id int64, attempt int) {
	s.t.Helper()
	ctx := context.Background()
	top := s.srv.Topology
	st, err := s.js.Stream(ctx, "KV_"+top.LeasesBucket())
	if err != nil {
		s.t.Fatal(err)
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSubject("$KV."+top.LeasesBucket()+"."+streams.LeaseKey(id, attempt))); err != nil {
		s.t.Fatal(err)
	}
}

// dispatchEmpty waits until AX_DISPATCH holds no attempt (its keeper
// aside): each was acked or terminated.
func (s *system) dispatchEmpty() {
	s.t.Helper()
	waitFor(s.t, "AX_DISPATCH to be empty", time.Minute, func() (bool, error) {
		st, err := s.js.Stream(context.Background(), s.srv.Topology.DispatchStream())
		if err != nil {
			return false, err
		}
		n, err := s.srv.Topology.Held(context.Background(), st)
		return n == 0, err
	})
}

// TestRedeliveryOfASucceededAttemptDoesNotRunIt: attempt 1 succeeded; its
// dispatch message comes again with no lease history. It must not run.
func TestRedeliveryOfASucceededAttemptDoesNotRunIt(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	var runs atomic.Int64
	stop := s.worker(executor.Options{WorkerID: "w1", Mux: countingMux(&runs)})
	s.apply(countTask)
	id := s.fire("hello", nil)
	s.waitState(id, schemas.StateSucceeded, time.Minute)
	stop()

	s.redispatch(id, 1)
	s.purgeLease(id, 1)
	s.worker(executor.Options{WorkerID: "w2", Mux: countingMux(&runs)})
	s.dispatchEmpty()
	if n := runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want 1: a redelivery of a succeeded attempt ran", n)
	}
	in, err := s.store.GetInstance(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"→CREATED", "CREATED→DISPATCHED", "DISPATCHED→RUNNING", "RUNNING→SUCCEEDED"}
	if in.State != schemas.StateSucceeded || in.Attempt != 1 || !slices.Equal(path(in), want) {
		t.Errorf("instance %s at attempt %d via %v, want SUCCEEDED at 1 via %v", in.State, in.Attempt, path(in), want)
	}
}

// TestRedeliveryOfAnAttemptThatNeverRanRunsIt: a dispatch message given
// back before any worker started it (as a full worker or a held mutex
// does) runs, once.
func TestRedeliveryOfAnAttemptThatNeverRanRunsIt(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	var runs atomic.Int64
	s.apply(countTask)
	id := s.fire("hello", nil)
	s.waitState(id, schemas.StateDispatched, time.Minute)
	s.giveBack(schemas.DefaultPool, schemas.PriorityNormal, id)
	s.worker(executor.Options{WorkerID: "w1", Mux: countingMux(&runs)})
	in := s.waitState(id, schemas.StateSucceeded, time.Minute)
	if in.Attempt != 1 || runs.Load() != 1 {
		t.Errorf("succeeded at attempt %d after %d runs, want attempt 1 after 1", in.Attempt, runs.Load())
	}
}

// TestRedeliveryOfALostAttemptFailsIt: attempt 1's lease was put (the
// dispatcher saw it) and then lost with its history, its report never
// came, and its dispatch message comes again: it may have run, so it is
// failed as lost, and attempt 2 runs instead.
func TestRedeliveryOfALostAttemptFailsIt(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	var runs atomic.Int64
	s.apply(countTask)
	id := s.fire("hello", nil)
	s.waitState(id, schemas.StateDispatched, time.Minute)
	// A worker took the lease, then the server lost it and the ack.
	leases, err := s.js.KeyValue(context.Background(), s.srv.Topology.LeasesBucket())
	if err != nil {
		t.Fatal(err)
	}
	lease, _ := json.Marshal(schemas.Lease{InstanceID: id, Attempt: 1, WorkerID: "w0", AcquiredAt: time.Now()})
	if _, err := leases.Create(context.Background(), streams.LeaseKey(id, 1), lease); err != nil {
		t.Fatal(err)
	}
	s.giveBack(schemas.DefaultPool, schemas.PriorityNormal, id)
	// The dispatcher saw the put before the loss.
	waitFor(t, "the dispatcher to see the lease", time.Minute, func() (bool, error) {
		return s.dispatcher.LeaseSeen(id, 1), nil
	})
	s.purgeLease(id, 1)
	s.worker(executor.Options{WorkerID: "w1", Mux: countingMux(&runs)})
	in := s.waitState(id, schemas.StateSucceeded, time.Minute)
	if in.Attempt != 2 || runs.Load() != 1 {
		t.Errorf("succeeded at attempt %d after %d runs, want attempt 2 after 1 (attempt 1 failed as lost, not run)", in.Attempt, runs.Load())
	}
	if p := path(in); !slices.Contains(p, "DISPATCHED→RETRYING") {
		t.Errorf("transitions %v, want attempt 1 failed from DISPATCHED", p)
	}
}

// TestForeignFenceQuestions acts as a hostile executor: the gpu pool's
// credentials ask whether a default-pool attempt may start. The server
// refuses the question on the default pool's subject; on its own pool's
// subject the dispatcher refuses it and counts it; the attempt is not
// touched and runs on its own pool.
func TestForeignFenceQuestions(t *testing.T) {
	t.Parallel()
	a := newAuthSystem(t)
	a.apply(`
task_name: plain-echo
execution:
  handler: builtin.echo
`)
	id := a.fire("plain-echo", map[string]string{"x": "y"})
	a.waitState(id, schemas.StateDispatched, time.Minute)

	nc, v := a.watch(gpuExecutor)
	q, _ := json.Marshal(schemas.FenceQuestion{InstanceID: id, Attempt: 1, WorkerID: "evil"})
	// On the default pool's subject: the server refuses to deliver it.
	own := a.top.Fence(schemas.DefaultPool, "evil", id)
	if err := errors.Join(nc.Publish(own, q), nc.Flush()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the server to refuse a fence question on another pool's subject", time.Minute, func() (bool, error) { return v.Refused(own), nil })
	// On its own pool's subject: the dispatcher refuses it. Its fence
	// may not answer yet on a busy machine (no responders): ask again.
	var reply *nats.Msg
	waitFor(t, "the dispatcher's fence to answer", time.Minute, func() (bool, error) {
		var err error
		reply, err = nc.Request(a.top.Fence("gpu", "evil", id), q, time.Minute)
		if errors.Is(err, nats.ErrNoResponders) {
			return false, nil
		}
		return err == nil, err
	})
	var ans schemas.FenceAnswer
	if err := json.Unmarshal(reply.Data, &ans); err != nil || ans.Start {
		t.Fatalf("answer %s (%v), want a refusal", reply.Data, err)
	}
	if n := counterValue(t, a.reg, "ax_fence_answers_total", "answer", "refused"); n != 1 {
		t.Errorf("ax_fence_answers_total{answer=refused} = %v, want 1", n)
	}
	in, err := a.store.GetInstance(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if in.State != schemas.StateDispatched || in.Attempt != 1 {
		t.Fatalf("after the foreign question the instance is %s at attempt %d, want DISPATCHED at 1", in.State, in.Attempt)
	}
	a.executor(string(natsauth.Executor), defaultWorker, schemas.DefaultPool)
	if in := a.waitState(id, schemas.StateSucceeded, time.Minute); in.Attempt != 1 {
		t.Errorf("succeeded at attempt %d, want 1", in.Attempt)
	}
}

// TestFenceQuestionsAllAnswered: after a dispatcher restart every
// redelivered attempt asks the fence, thousands at once. Many questions
// arriving together wait their turn: each gets its answer, none is dropped
// to be asked again after the executor's timeout.
func TestFenceQuestionsAllAnswered(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	conn, _ := s.srv.Connect()
	ask := func(id int64, timeout time.Duration) error {
		q, err := json.Marshal(schemas.FenceQuestion{InstanceID: id, Attempt: 1, WorkerID: "w1"})
		if err != nil {
			return err
		}
		reply, err := conn.Request(s.srv.Topology.Fence(schemas.DefaultPool, "w1", id), q, timeout)
		if err != nil {
			return err
		}
		var a schemas.FenceAnswer
		if err := json.Unmarshal(reply.Data, &a); err != nil {
			return err
		}
		if a.Start {
			return fmt.Errorf("instance %d may start: %s", id, a.Reason)
		}
		return nil
	}
	// The dispatcher answers once its watch of the leases has read the
	// bucket.
	waitFor(t, "the dispatcher to answer a fence question", time.Minute, func() (bool, error) {
		return ask(999_999, 5*time.Second) == nil, nil
	})
	const n = 500
	replies := make(chan error, n)
	for i := range n {
		// No such instance: the answer is no. The executor's own timeout is
		// 5 s; a minute leaves a loaded machine time to answer 500, and
		// still fails a question dropped.
		go func() { replies <- ask(int64(1_000_000+i), time.Minute) }()
	}
	var failed []error
	for range n {
		if err := <-replies; err != nil {
			failed = append(failed, err)
		}
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d fence questions asked at once not answered no (first: %v)", len(failed), n, failed[0])
	}
}
