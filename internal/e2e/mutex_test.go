package e2e_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/devstack"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/internal/natsembed"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
	"github.com/ax-scheduler/ax/streams/natsauth/natsauthtest"
)

// TestMutexKeySerialisesRunsOfOneKey fires three runs for one shop and one
// for another: the task's mutex_key keeps the first shop's runs apart, while
// the other shop's run goes on beside them.
func TestMutexKeySerialisesRunsOfOneKey(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	mux := executor.NewMux()
	mux.HandleFunc("test.hold", func(ctx context.Context, _ *executor.Job) (any, error) {
		select {
		case <-time.After(300 * time.Millisecond):
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	s.executor("w1", mux, 8)
	s.apply(`
task_name: shop-sync
execution:
  handler: test.hold
concurrency:
  mutex_key: "shop-{{.shop_id}}"
`)
	var shop1 []int64
	for range 3 {
		shop1 = append(shop1, s.fire("shop-sync", map[string]int{"shop_id": 1}))
	}
	shop2 := s.fire("shop-sync", map[string]int{"shop_id": 2})

	type span struct{ start, end time.Time }
	spanOf := func(id int64) span {
		inst := s.waitState(id, schemas.StateSucceeded, 30*time.Second)
		return span{*inst.StartedAt, *inst.FinishedAt}
	}
	var spans []span
	for _, id := range shop1 {
		spans = append(spans, spanOf(id))
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].start.Before(spans[j].start) })
	for i := 1; i < len(spans); i++ {
		if spans[i].start.Before(spans[i-1].end) {
			t.Errorf("shop 1 runs overlap: %v–%v and %v–%v", spans[i-1].start, spans[i-1].end, spans[i].start, spans[i].end)
		}
	}
	other := spanOf(shop2)
	if !other.start.Before(spans[len(spans)-1].start) {
		t.Errorf("shop 2 started at %v, after every shop 1 run had started: it waited for a mutex it does not share",
			other.start)
	}
}

// TestMutexKeyRunsBackToBackUnderNATSAuth fires one mutex_key three times
// in a row on a server with a user per role (issue 24, hole 11): the
// executor's user may read the mutex bucket, so a run takes the key its
// predecessor released at once, not a minute later when the release's
// marker ages out, and its connection is refused nothing.
func TestMutexKeyRunsBackToBackUnderNATSAuth(t *testing.T) {
	t.Parallel()
	top := streams.Default()
	passwords := map[natsauth.Role]string{}
	byUser := map[string]string{}
	refusals := map[string]*natsauthtest.Refusals{}
	for _, role := range natsauth.Roles {
		passwords[role] = "pw-" + string(role)
		byUser[string(role)] = passwords[role]
		refusals[string(role)] = natsauthtest.New()
	}
	ns := natsauthtest.NewServer(t, natsembed.Options{Users: natsauth.Users(top, passwords,
		natsauth.Scope{Pools: []string{schemas.DefaultPool}, WorkerID: "w1", Handlers: []string{"test.quick"}})})
	pool := storetest.NewDB(t)
	s := &system{t: t, store: store.New(pool), pool: pool, log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)}
	mux := executor.NewMux()
	mux.HandleFunc("test.quick", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	s.stack, _ = s.startStack(devstack.Options{NATSURL: ns.ClientURL(), Passwords: byUser,
		NATSOptions: func(user string) []nats.Option { return []nats.Option{nats.ErrorHandler(refusals[user].Handler)} },
		Streams:     streams.Config{LeaseTTL: leaseTTL},
		Executors:   []devstack.Executor{{Options: executor.Options{WorkerID: "w1", Mux: mux, Slots: 4}}}})
	s.serveAPI(s.stack.API)
	s.apply(`
task_name: one-at-a-time
execution:
  handler: test.quick
concurrency:
  mutex_key: "the-one"
`)
	for i := range 3 {
		fired := time.Now()
		inst := s.waitState(s.fire("one-at-a-time", map[string]int{"run": i}), schemas.StateSucceeded, 90*time.Second)
		if took := inst.FinishedAt.Sub(fired); took > time.Second {
			t.Errorf("run %d of one mutex_key ended %s after it was fired, want under 1s: it waited for the key its predecessor released", i+1, took)
		}
	}
	if errs := refusals[string(natsauth.Executor)].Errors(); len(errs) > 0 {
		t.Errorf("the executor was refused: %q", errs)
	}
}
