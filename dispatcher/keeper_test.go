package dispatcher

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/internal/wait"
	"github.com/ax-scheduler/ax/schemas"
)

// TestDispatcherKeepsTheWorkQueueStreams: a started dispatcher has put one
// keeper on each work-queue stream (streams.Keeper), and after an attempt
// is dispatched it puts a new one after it, the one before purged.
func TestDispatcherKeepsTheWorkQueueStreams(t *testing.T) {
	t.Parallel()
	b := newBatchRig(t, bulkTask)
	b.start()
	top := b.srv.Topology
	keepers := func(name string) (keeperSeq, lastSeq uint64, n uint64) {
		t.Helper()
		st, err := b.js.Stream(b.ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(b.ctx, jetstream.WithSubjectFilter(top.Keeper(name)))
		if err != nil {
			t.Fatal(err)
		}
		if n = info.State.Subjects[top.Keeper(name)]; n > 0 {
			m, err := st.GetLastMsgForSubject(b.ctx, top.Keeper(name))
			if err != nil {
				t.Fatal(err)
			}
			keeperSeq = m.Sequence
		}
		return keeperSeq, info.State.LastSeq, n
	}
	for _, name := range []string{top.DispatchStream(), top.ReportsStream()} {
		if _, _, n := keepers(name); n != 1 {
			t.Errorf("%s holds %d keepers once the dispatcher started, want 1", name, n)
		}
	}
	b.publish("bulk", "", []byte(`{"event_id": "e1", "payload": {"n": 1}, "payload_version": 2}`))
	// The attempt waits in AX_DISPATCH (no executor takes it); within a
	// KeeperInterval a new keeper follows it.
	dispatch, err := b.js.Stream(b.ctx, top.DispatchStream())
	if err != nil {
		t.Fatal(err)
	}
	if err := wait.Until(b.ctx, func() (bool, error) {
		attempt, err := dispatch.GetLastMsgForSubject(b.ctx, top.Dispatch(schemas.DefaultPool, schemas.PriorityNormal, "test.noop"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		keeper, _, n := keepers(top.DispatchStream())
		return keeper > attempt.Sequence && n == 1, nil
	}); err != nil {
		keeper, last, n := keepers(top.DispatchStream())
		t.Fatalf("no new keeper after the attempt: %d keepers, the last at %d, the stream's last sequence %d (%v)", n, keeper, last, err)
	}
}
