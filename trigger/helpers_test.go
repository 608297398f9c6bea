package trigger_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/internal/logtest"
	"github.com/ax-scheduler/ax/internal/servicetest"
	"github.com/ax-scheduler/ax/internal/wait"
	"github.com/ax-scheduler/ax/internal/wait/waittest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/streamstest"
	"github.com/ax-scheduler/ax/trigger"
	"github.com/ax-scheduler/ax/trigger/triggertest"
)

func TestMain(m *testing.M) { waittest.VerifyTestMain(m) }

// env is one test's installation: NATS, PostgreSQL and a simulated clock
// shared by the trigger services the test starts.
type env struct {
	t     *testing.T
	srv   *streamstest.Server
	js    jetstream.JetStream
	kv    jetstream.KeyValue
	db    *storetest.DB
	st    *store.Store
	clock *triggertest.Clock
	logs  *logtest.Buffer
}

func newEnv(t *testing.T, start time.Time) *env {
	t.Helper()
	srv := streamstest.NewServer(t, streams.Config{})
	_, js := srv.Connect()
	kv, err := js.KeyValue(t.Context(), srv.Topology.TasksBucket())
	if err != nil {
		t.Fatal(err)
	}
	db := storetest.New(t)
	e := &env{t: t, srv: srv, js: js, kv: kv, db: db, st: store.New(db.Pool), clock: triggertest.NewClock(start), logs: &logtest.Buffer{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("trigger logs:\n%s", e.logs.String())
		}
	})
	return e
}

// apply applies a task definition (YAML) and puts its entry in the tasks
// bucket, as the api does.
func (e *env) apply(def string) store.TaskRecord {
	e.t.Helper()
	task, err := taskdef.ParseTask([]byte(def))
	if err != nil {
		e.t.Fatal(err)
	}
	rec, _, err := e.st.ApplyTask(context.Background(), task, "test")
	if err != nil {
		e.t.Fatal(err)
	}
	e.put(rec)
	return rec
}

// setEnabled enables or disables a task and puts its entry.
func (e *env) setEnabled(name string, enabled bool) {
	e.t.Helper()
	rec, err := e.st.SetTaskEnabled(context.Background(), name, enabled, "test")
	if err != nil {
		e.t.Fatal(err)
	}
	e.put(rec)
}

func (e *env) put(rec store.TaskRecord) {
	e.t.Helper()
	data, err := json.Marshal(schemas.TaskEntry{Version: rec.Version, Enabled: rec.Enabled})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.kv.Put(context.Background(), rec.Name, data); err != nil {
		e.t.Fatal(err)
	}
}

// start runs a trigger service until the returned stop is called or the
// test ends, and returns once it is ready; stop waits for Run to return and
// fails the test on its error.
func (e *env) start(opts trigger.Options) (stop func()) {
	e.t.Helper()
	conn, _ := e.srv.Connect()
	opts.Conn, opts.Store, opts.Clock = conn, e.st, e.clock
	opts.Logger = zerolog.New(e.logs).Level(zerolog.DebugLevel)
	svc, err := trigger.New(opts)
	if err != nil {
		e.t.Fatal(err)
	}
	running := servicetest.Start(e.t, "trigger", svc)
	return func() {
		if err := running.Stop(); err != nil {
			e.t.Errorf("trigger: %v", err)
		}
	}
}

// events returns every trigger event in AX_TRIGGERS, in stream order.
func (e *env) events() []schemas.TriggerEvent {
	e.t.Helper()
	ctx := context.Background()
	s, err := e.js.Stream(ctx, e.srv.Topology.TriggersStream())
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []schemas.TriggerEvent
	if info.State.Msgs == 0 {
		return nil
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			e.t.Fatal(err)
		}
		ev, err := taskdef.ParseTriggerEvent(m.Data)
		if err != nil {
			e.t.Fatalf("message %d on %s: %v", seq, m.Subject, err)
		}
		// A cron firing's Nats-Msg-Id is its task's and a keyed hash of
		// its event id, which an outside publisher of the same stream
		// cannot compute first.
		if got, want := m.Header.Get(streams.HeaderMsgID), e.cronMsgID(ev.Task, ev.EventID); got != want {
			e.t.Errorf("message %d has Nats-Msg-Id %q, want %q", seq, got, want)
		}
		if task, _ := e.srv.Topology.TriggerTask(m.Subject); task != ev.Task {
			e.t.Errorf("event of task %q published on %s", ev.Task, m.Subject)
		}
		out = append(out, ev)
	}
	return out
}

// published returns a func that tells every trigger event published on a
// trigger subject from now on, in order: also those the stream dropped as
// duplicates. Call it once the publishes were acknowledged: it flushes its
// connection first, so that all of them have arrived.
func (e *env) published() func() []schemas.TriggerEvent {
	e.t.Helper()
	nc, _ := e.srv.Connect()
	var (
		mu  sync.Mutex
		out []schemas.TriggerEvent
	)
	sub, err := nc.Subscribe(e.srv.Topology.Trigger("*"), func(m *nats.Msg) {
		ev, err := taskdef.ParseTriggerEvent(m.Data)
		if err != nil {
			e.t.Errorf("message on %s: %v", m.Subject, err)
			return
		}
		mu.Lock()
		out = append(out, ev)
		mu.Unlock()
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		e.t.Fatal(err)
	}
	return func() []schemas.TriggerEvent {
		e.t.Helper()
		if err := nc.Flush(); err != nil {
			e.t.Fatal(err)
		}
		// Flush returns once the server answered; the messages it sent
		// before are in the subscription's queue, not yet handled.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := wait.Until(ctx, func() (bool, error) {
			n, _, err := sub.Pending()
			return n == 0, err
		}); err != nil {
			e.t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(out)
	}
}

// cronMsgID returns the Nats-Msg-Id of the cron firing eventID of task:
// <task>/ and the first 32 hex digits of the HMAC-SHA256 of eventID under
// the store's key.
func (e *env) cronMsgID(task, eventID string) string {
	e.t.Helper()
	key, err := e.st.CronMsgIDKey(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	if len(key) < 64 {
		e.t.Fatalf("the store's cron msg id key has %d characters, want 64", len(key))
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(eventID))
	return task + "/" + hex.EncodeToString(mac.Sum(nil))[:32]
}

// waitLastTick waits, for up to a minute, until the stored trigger state
// of (task, index) is tick.
func (e *env) waitLastTick(task string, index int, tick time.Time) {
	e.t.Helper()
	var (
		st store.TriggerState
		ok bool
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := wait.Until(ctx, func() (bool, error) {
		states, err := e.st.GetTriggerStates(ctx, []string{task})
		st, ok = states[store.TriggerKey{Task: task, TriggerIndex: index}]
		return ok && st.LastTick.Equal(tick), err
	})
	if err != nil {
		e.t.Fatalf("trigger state of %s/%d is %+v (found %t), want last tick %v: %v", task, index, st, ok, tick, err)
	}
}

func rfc(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func mustTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}
