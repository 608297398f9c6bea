package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/auditor/job"
	"github.com/ax-scheduler/ax/internal/wait/waittest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

func TestMain(m *testing.M) { waittest.VerifyTestMain(m) }

// env is a NATS server with the topology and a database, for auditors.
type env struct {
	t   *testing.T
	srv *streamstest.Server
	js  jetstream.JetStream
	st  *store.Store
	log zerolog.Logger
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := streamstest.NewServer(t, streams.Config{})
	_, js := srv.Connect()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	if os.Getenv("AX_TEST_LOG") != "" {
		log = log.Level(zerolog.DebugLevel)
	}
	return &env{t: t, srv: srv, js: js, st: store.New(storetest.NewDB(t)), log: log}
}

// auditor is a running auditor: stop ends it and waits for Run to return.
type auditor struct {
	*Service
	stop func()
}

// start runs an auditor until ctx ends, stop is called or the test ends;
// tune may set its test hook.
func (e *env) start(ctx context.Context, batchSize int, tune func(*Service)) *auditor {
	e.t.Helper()
	conn, _ := e.srv.Connect()
	svc, err := New(Options{
		Base:         job.Base{Conn: conn, Store: e.st, BatchSize: batchSize, RetryInterval: 50 * time.Millisecond, Logger: e.log},
		PollInterval: 5 * time.Millisecond,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if tune != nil {
		tune(svc)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := svc.Run(ctx); err != nil {
			e.t.Errorf("auditor: %v", err)
		}
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	e.t.Cleanup(stop)
	return &auditor{Service: svc, stop: stop}
}

// seed applies task and writes n instances of it, each with four
// transitions, the way the dispatcher writes them: one statement.
func (e *env) seed(task string, n int) {
	e.t.Helper()
	ctx := context.Background()
	def, err := taskdef.ParseTask([]byte("task_name: " + task + "\nexecution: {handler: h}\n"))
	if err != nil {
		e.t.Fatal(err)
	}
	if _, _, err := e.st.ApplyTask(ctx, def, "alice"); err != nil {
		e.t.Fatal(err)
	}
	_, err = e.st.Pool().Exec(ctx, `
WITH ins AS (
	INSERT INTO instances (task, task_version, event_id, source, state, max_attempts, priority, pool, handler, timeout_ms, fired_at)
	SELECT $1, 1, gen_random_uuid()::text, 'event', 'SUCCEEDED', 1, 'normal', 'default', 'h', 1000, now()
	FROM generate_series(1, $2)
	RETURNING id, task
)
-- Two transitions a row, as the dispatcher writes them.
INSERT INTO instance_transitions (instance_id, task, from_state, to_state, attempt, operator, then_state, then_operator)
SELECT id, task, f, t, 1, 'dispatcher', t2, 'dispatcher'
FROM ins, (VALUES (1, NULL, 'CREATED', 'DISPATCHED'), (2, 'DISPATCHED', 'RUNNING', 'SUCCEEDED')) v(o, f, t, t2)
ORDER BY id, o`, task, n)
	if err != nil {
		e.t.Fatal(err)
	}
}

// outbox returns every record of the outbox tables, by id.
func (e *env) outbox() map[string]schemas.AuditRecord {
	e.t.Helper()
	out := make(map[string]schemas.AuditRecord)
	f := store.AuditFilter{Limit: store.MaxAuditLimit}
	for {
		page, err := e.st.ListAudit(context.Background(), f)
		if err != nil {
			e.t.Fatal(err)
		}
		if len(page) == 0 {
			return out
		}
		for _, r := range page {
			out[r.ID] = r
		}
		f.Before = page[len(page)-1].ID
	}
}

// waitStream waits until AX_AUDIT holds n records.
func (e *env) waitStream(n uint64) {
	e.t.Helper()
	waittest.For(e.t, fmt.Sprintf("AX_AUDIT to hold %d records", n), 30*time.Second, func() (bool, error) {
		return uint64(len(e.trail())) >= n, nil
	})
}

func (e *env) stream() jetstream.Stream {
	e.t.Helper()
	s, err := e.js.Stream(context.Background(), e.srv.Topology.AuditStream())
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// trail reads AX_AUDIT from its first message to its last.
func (e *env) trail() []schemas.AuditRecord {
	e.t.Helper()
	ctx := context.Background()
	stream := e.stream()
	info, err := stream.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []schemas.AuditRecord
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if err != nil {
			e.t.Fatalf("read message %d: %v", seq, err)
		}
		recs, err := schemas.DecodeAuditMessage(m.Data)
		if err != nil {
			e.t.Fatal(err)
		}
		if id := m.Header.Get(streams.HeaderMsgID); len(recs) == 0 || id != recs[len(recs)-1].ID {
			e.t.Errorf("message %d carries %d records with Nats-Msg-Id %q, want its last record's id", seq, len(recs), id)
		}
		for _, r := range recs {
			if want := e.srv.Topology.Audit(r.Task); m.Subject != want {
				e.t.Errorf("record %s is on %s, want %s", r.ID, m.Subject, want)
			}
		}
		out = append(out, recs...)
	}
	return out
}

// messages returns how many messages AX_AUDIT holds.
func (e *env) messages() uint64 {
	e.t.Helper()
	info, err := e.stream().Info(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return info.State.Msgs
}

// checkTrail reads AX_AUDIT and checks that it holds every record of the
// outbox exactly once, as the store has it, each instance's in order.
func (e *env) checkTrail() []schemas.AuditRecord {
	e.t.Helper()
	want := e.outbox()
	trail := e.trail()
	fired := e.firedAt()
	seen := make(map[string]bool, len(trail))
	lastOfInstance := make(map[int64]int64)
	for _, r := range trail {
		if seen[r.ID] {
			e.t.Errorf("record %s is on AX_AUDIT twice", r.ID)
			continue
		}
		seen[r.ID] = true
		w, ok := want[r.ID]
		if !ok {
			e.t.Errorf("AX_AUDIT holds record %s, which is not in the outbox", r.ID)
			continue
		}
		if !sameRecord(r, w) {
			e.t.Errorf("AX_AUDIT holds\n%+v\nthe store has\n%+v", r, w)
		}
		// What the relay adds of the instance (store.Relay's tests check
		// every case): the firing's time on a creation.
		if r.Kind == schemas.AuditTransition && r.From == "" && !r.FiredAt.Equal(fired[r.InstanceID]) {
			e.t.Errorf("record %s, the creation of instance %d, carries fired_at %v, want %v", r.ID, r.InstanceID,
				r.FiredAt, fired[r.InstanceID])
		}
		if r.Kind == schemas.AuditTransition {
			_, id, _ := schemas.ParseAuditID(r.ID)
			if last := lastOfInstance[r.InstanceID]; id < last {
				e.t.Errorf("transition %d of instance %d comes after transition %d", id, r.InstanceID, last)
			}
			lastOfInstance[r.InstanceID] = id
		}
	}
	for id := range want {
		if !seen[id] {
			e.t.Errorf("record %s is not on AX_AUDIT", id)
		}
	}
	return trail
}

// firedAt returns the fired_at of every instance, by id.
func (e *env) firedAt() map[int64]time.Time {
	e.t.Helper()
	rows, err := e.st.Pool().Query(context.Background(), `SELECT id, fired_at FROM instances`)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[int64]time.Time{}
	var (
		id int64
		at time.Time
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &at}, func() error { out[id] = at; return nil }); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// sameRecord reports whether a record on AX_AUDIT is the outbox's b,
// leaving out what the relay adds of the instance.
func sameRecord(a, b schemas.AuditRecord) bool {
	if !a.At.Equal(b.At) {
		return false
	}
	compact := func(r json.RawMessage) string {
		var buf bytes.Buffer
		if len(r) > 0 && json.Compact(&buf, r) != nil {
			return string(r)
		}
		return buf.String()
	}
	if compact(a.Details) != compact(b.Details) {
		return false
	}
	a.At, b.At, a.Details, b.Details = time.Time{}, time.Time{}, nil, nil
	a.FiredAt, a.StartedAt = time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

func TestRelaysEveryRecordOnceInOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed("etl", 150)
	e.seed("mail", 100)
	a := e.start(context.Background(), 64, nil)
	e.waitStream(uint64(len(e.outbox())))

	// While it runs: writers in parallel, whose transactions commit out of
	// the order of their ids, and operator actions.
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 5 {
				e.seed(fmt.Sprintf("t%d", i), 10+j)
				if _, err := e.st.SetTaskEnabled(context.Background(), fmt.Sprintf("t%d", i), j%2 == 0, "bob"); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	e.waitStream(uint64(len(e.outbox())))
	a.stop()
	trail := e.checkTrail()
	if !slices.ContainsFunc(trail, func(r schemas.AuditRecord) bool {
		return r.Action == schemas.ActionDisable && r.Operator == "bob"
	}) {
		t.Error("AX_AUDIT holds no disable by bob")
	}
}

var errCrash = errors.New("crash between publish and cursor save")

// TestCrashBetweenPublishAndCursorSave kills a leader after AX_AUDIT
// acknowledged a batch's third page and before its cursor was saved. The
// next leader must neither lose nor repeat a record — and must not even
// try to publish one again, so the duplicate window plays no part —
// whether the cursor was stored after every page (a SaveInterval shorter
// than a page) or only at the batch's begin (a SaveInterval longer than
// the batch).
func TestCrashBetweenPublishAndCursorSave(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		every time.Duration
		saved int64
	}{
		{"stored after every page", time.Nanosecond, 99}, // the apply, then transitions 1-49 and 50-99
		{"stored at the batch's begin", time.Hour, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			crashBetweenPublishAndCursorSave(t, c.every, c.saved)
		})
	}
}

func crashBetweenPublishAndCursorSave(t *testing.T, every time.Duration, wantSaved int64) {
	e := newEnv(t)
	e.seed("etl", 100) // 1 apply and 400 transitions

	var (
		mu        sync.Mutex
		published = make(map[string]string) // record id → auditor
		batches   int
	)
	crash, kill := context.WithCancel(context.Background())
	defer kill()
	first := e.start(crash, 50, func(s *Service) {
		s.opts.SaveInterval = every
		s.afterPublish = func(recs []schemas.AuditRecord) error {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range recs {
				published[r.ID] = "first"
			}
			if batches++; batches == 3 {
				kill() // the process ends: Run returns, the cursor stays behind
				return errCrash
			}
			return nil
		}
	})
	<-crash.Done()
	first.stop()
	e.waitStream(150)
	var saved int64
	if err := e.st.Pool().QueryRow(context.Background(), `SELECT last_transition_id FROM relay_cursor`).Scan(&saved); err != nil {
		t.Fatal(err)
	}
	if saved != wantSaved {
		t.Fatalf("saved cursor is at transition %d, want %d: the third page must be published but not saved", saved, wantSaved)
	}

	e.start(context.Background(), 50, func(s *Service) {
		s.afterPublish = func(recs []schemas.AuditRecord) error {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range recs {
				if published[r.ID] != "" {
					t.Errorf("record %s published again after the crash", r.ID)
				}
				published[r.ID] = "second"
			}
			return nil
		}
	})
	e.waitStream(401)
	e.checkTrail()
	mu.Lock()
	defer mu.Unlock()
	if len(published) != 401 {
		t.Errorf("%d records published, want 401", len(published))
	}
}

// TestCursorIsWrittenOnceABatch: at a trickle of commits each batch is one
// page of fewer records than the batch size, and the leader writes its
// cursor once a batch — the batch's begin, which stores the end of the one
// before — instead of three times (begin, page, end: each a commit that
// waits for its WAL flush). Once idle, it stores the last batch's end, so
// that the history mover does not wait for the next batch.
func TestCursorIsWrittenOnceABatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.st.Pool().Exec(ctx, `
CREATE TABLE cursor_writes (done text, current text);
CREATE FUNCTION count_cursor_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO cursor_writes VALUES (NEW.done::text, NEW.current::text); RETURN NULL; END $$;
CREATE TRIGGER count_cursor_write AFTER INSERT OR UPDATE ON relay_cursor FOR EACH ROW EXECUTE FUNCTION count_cursor_write()`); err != nil {
		t.Fatal(err)
	}
	var pages atomic.Int32
	e.start(ctx, 500, func(s *Service) {
		s.afterPublish = func([]schemas.AuditRecord) error {
			pages.Add(1)
			return nil
		}
	})
	const rounds = 10
	for range rounds {
		e.seed("etl", 1) // a change of the task and 4 transitions: 1 or 2 batches
		e.waitStream(uint64(len(e.outbox())))
	}
	idle := func() (bool, error) {
		var current *string
		err := e.st.Pool().QueryRow(ctx, `SELECT current::text FROM relay_cursor`).Scan(&current)
		return current == nil, err
	}
	waittest.For(t, "the idle leader to store its last batch's end", 30*time.Second, idle)
	var writes int
	if err := e.st.Pool().QueryRow(ctx, `SELECT count(*) FROM cursor_writes`).Scan(&writes); err != nil {
		t.Fatal(err)
	}
	n := int(pages.Load())
	if n < rounds {
		t.Fatalf("%d pages published for %d rounds", n, rounds)
	}
	// Each page began its batch (one write); the leader idled after each
	// round and stored the end (one write), unless the next round's
	// commit came first.
	if writes > 2*n {
		t.Errorf("%d cursor writes for %d batches of one short page each, want at most %d (a begin each, an end when idle)", writes, n, 2*n)
	}
	// No write stored a page's position: each stored a batch's begin or
	// its end.
	var mid int
	if err := e.st.Pool().QueryRow(ctx, `SELECT count(*) FROM cursor_writes w WHERE w.current IS NOT NULL
		AND (SELECT count(*) FROM cursor_writes v WHERE v.current = w.current) > 1`).Scan(&mid); err != nil {
		t.Fatal(err)
	}
	if mid != 0 {
		t.Errorf("%d cursor writes stored a batch's snapshot it had stored already (a page's save): want one write a batch", mid)
	}
	e.checkTrail()
}

// TestSteadyTrickleIsRelayedInPacedBatches commits instances one after
// another for a second: a batch that follows one that read the outbox to
// its end begins half the PollInterval (200 ms here) after the one before
// began, so the second's commits travel in about ten batches (each of one
// or more pages). Begun at once, each batch held what committed during the
// one before: over 200 batches in the second, each its round trips to
// PostgreSQL and its messages on AX_AUDIT.
func TestSteadyTrickleIsRelayedInPacedBatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.seed("etl", 1)
	var batches atomic.Int32
	e.start(ctx, 500, func(s *Service) {
		s.opts.PollInterval = 200 * time.Millisecond
		s.afterPublish = func(page []schemas.AuditRecord) error {
			if len(page) < 500 { // the page read the outbox to its end
				batches.Add(1)
			}
			return nil
		}
	})
	e.waitStream(uint64(len(e.outbox())))
	before := batches.Load()
	for end := time.Now().Add(time.Second); time.Now().Before(end); {
		e.addInstance("etl")
	}
	e.waitStream(uint64(len(e.outbox())))
	// A batch every 100 ms and one more for the commits after the last;
	// a slow machine makes fewer, larger batches.
	if n := batches.Load() - before; n > 13 {
		t.Errorf("a second of commits was relayed in %d batches, want at most 13 (one every 100 ms)", n)
	}
	e.checkTrail()
}

// TestBatchAfterABacklogBeginsAtOnce: a batch that took longer than the
// pace (half the PollInterval), as a backlog's batch of many pages does,
// is followed at once by the next, which holds what committed meanwhile.
// The PollInterval here is an hour, and the leader's clock moves an hour
// on during the first batch.
func TestBatchAfterABacklogBeginsAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed("etl", 50) // 1 apply and 200 transitions: a batch of five pages of 50
	var (
		mu    sync.Mutex
		clock = time.Now()
		pages int
	)
	added := make(chan struct{})
	e.start(context.Background(), 50, func(s *Service) {
		s.opts.PollInterval = time.Hour
		s.now = func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return clock
		}
		s.afterPublish = func([]schemas.AuditRecord) error {
			mu.Lock()
			defer mu.Unlock()
			if pages++; pages == 1 {
				e.addInstance("etl") // after the batch's snapshot: the next batch's
				clock = clock.Add(time.Hour)
				close(added)
			}
			return nil
		}
	})
	<-added
	e.waitStream(uint64(len(e.outbox())))
	e.checkTrail()
}

// addInstance commits an instance of task with its four transitions, two
// rows, as the dispatcher writes them.
func (e *env) addInstance(task string) {
	e.t.Helper()
	_, err := e.st.Pool().Exec(context.Background(), `
WITH ins AS (
	INSERT INTO instances (task, task_version, event_id, source, state, max_attempts, priority, pool, handler, timeout_ms, fired_at)
	VALUES ($1, 1, gen_random_uuid()::text, 'event', 'SUCCEEDED', 1, 'normal', 'default', 'h', 1000, now())
	RETURNING id, task
)
INSERT INTO instance_transitions (instance_id, task, from_state, to_state, attempt, operator, then_state, then_operator)
SELECT id, task, f, t, 1, 'dispatcher', t2, 'dispatcher'
FROM ins, (VALUES (1, NULL, 'CREATED', 'DISPATCHED'), (2, 'DISPATCHED', 'RUNNING', 'SUCCEEDED')) v(o, f, t, t2)
ORDER BY o`, task)
	if err != nil {
		e.t.Fatal(err)
	}
}

// TestIdleLeaderStoresTheEnd: pages of one record are all full, so no
// page ends its batch; the leader finds each batch's end on the next read,
// and once nothing more is there it stores that end before it idles.
func TestIdleLeaderStoresTheEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(context.Background(), 1, nil)
	e.seed("etl", 2)
	e.waitStream(uint64(len(e.outbox())))
	waittest.For(t, "the idle leader to store its last batch's end", 30*time.Second, func() (bool, error) {
		var current *string
		err := e.st.Pool().QueryRow(context.Background(), `SELECT current::text FROM relay_cursor`).Scan(&current)
		return current == nil, err
	})
	e.checkTrail()
}

// TestStopFinishesTheBatchInFlight stops an auditor while a batch is being
// published: the batch is finished and its cursor saved before Run returns.
func TestStopFinishesTheBatchInFlight(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed("etl", 50) // 1 apply and 200 transitions
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var batches atomic.Int32
	a := e.start(ctx, 40, func(s *Service) {
		s.afterPublish = func([]schemas.AuditRecord) error {
			if batches.Add(1) == 1 {
				cancel()
				<-ctx.Done()
			}
			return nil
		}
	})
	<-ctx.Done()
	a.stop()
	if n := batches.Load(); n != 1 {
		t.Fatalf("%d batches published, want 1", n)
	}
	var saved int64
	if err := e.st.Pool().QueryRow(context.Background(), `SELECT last_transition_id FROM relay_cursor`).Scan(&saved); err != nil {
		t.Fatal(err)
	}
	if trail := e.trail(); len(trail) != 40 || saved != 39 {
		t.Errorf("after the stop: %d records on AX_AUDIT, cursor at transition %d; want 40 and 39", len(trail), saved)
	}
}

func TestLeaderFailover(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b := e.start(context.Background(), 20, nil), e.start(context.Background(), 20, nil)
	e.seed("etl", 50)
	e.waitStream(uint64(len(e.outbox())))
	if a.Leading() == b.Leading() {
		t.Fatalf("leading: %t and %t, want exactly one", a.Leading(), b.Leading())
	}

	// The leader's session dies: PostgreSQL releases its lock, its cursor
	// saves fail, and a leader (either one) takes over.
	ctx := context.Background()
	var pid int32
	if err := e.st.Pool().QueryRow(ctx, `
		SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = 1635278689 AND objid = 1969514868
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	e.seed("mail", 50)
	if _, err := e.st.Pool().Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	e.seed("report", 50)
	e.waitStream(uint64(len(e.outbox())))
	e.checkTrail()
	var now int32
	if err := e.st.Pool().QueryRow(ctx, `
		SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = 1635278689 AND objid = 1969514868
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	if now == pid {
		t.Errorf("the terminated session %d still holds the lock", pid)
	}
}

// TestPublishIsFenced checks that the server honours the expectations of
// asynchronous publishes: a deposed leader, whose idea of the stream's end
// is stale, stores nothing, and a repeat is refused.
func TestPublishIsFenced(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	conn, _ := e.srv.Connect()
	// Version 1, one message a record, lets the stale expectations fall
	// between records; version 2 shares send.
	s, err := New(Options{Base: job.Base{Conn: conn, Store: e.st}, Version: 1})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := streams.NewPublisher(conn, streams.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	js := pub.Batch()
	recs := func(from, n int) []schemas.AuditRecord {
		var out []schemas.AuditRecord
		for i := from; i < from+n; i++ {
			out = append(out, schemas.AuditRecord{ID: schemas.TransitionAuditID(int64(i)), Kind: schemas.AuditTransition,
				Task: "etl", InstanceID: 1, To: schemas.StateCreated, Attempt: 1, Operator: "dispatcher", At: time.Now()})
		}
		return out
	}
	ctx := t.Context()
	end, err := s.publish(ctx, js, recs(1, 5), tail{})
	if err != nil || end != (tail{seq: 5, id: "t-5"}) {
		t.Fatalf("publish = %+v, %v; want the stream to end at 5 with t-5", end, err)
	}
	for _, tt := range []struct {
		name  string
		recs  []schemas.AuditRecord
		stale tail
		want  string
	}{
		// A leader that started when the stream ended at 2.
		{"stale sequence", recs(100, 5), tail{seq: 2}, "wrong last sequence"},
		// A leader that last published t-2.
		{"stale record", recs(100, 5), tail{seq: 2, id: "t-2"}, "wrong last msg ID"},
		// A repeat of records the stream holds, in their place.
		{"repeat", recs(5, 1), tail{seq: 4, id: "t-4"}, "duplicate true"},
	} {
		if _, err := s.publish(ctx, js, tt.recs, tt.stale); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: publish error = %v, want %q", tt.name, err, tt.want)
		}
	}
	if got := e.trail(); len(got) != 5 || got[4].ID != "t-5" {
		t.Errorf("AX_AUDIT holds %d records, want t-1..t-5", len(got))
	}
	// The true tail goes on, by record and by sequence.
	if end, err = s.publish(ctx, js, recs(6, 2), end); err != nil || end != (tail{seq: 7, id: "t-7"}) {
		t.Errorf("publish after the stale ones = %+v, %v; want 7, t-7", end, err)
	}
	if end, err = s.publish(ctx, js, recs(8, 1), tail{seq: 7}); err != nil || end != (tail{seq: 8, id: "t-8"}) {
		t.Errorf("publish from the sequence = %+v, %v; want 8, t-8", end, err)
	}
}

func TestNewRequires(t *testing.T) {
	t.Parallel()
	if _, err := New(Options{Base: job.Base{Store: &store.Store{}}}); err == nil || !strings.Contains(err.Error(), "Conn") {
		t.Errorf("New without Conn = %v", err)
	}
	e := newEnv(t)
	conn, _ := e.srv.Connect()
	if _, err := New(Options{Base: job.Base{Conn: conn}}); err == nil || !strings.Contains(err.Error(), "Store") {
		t.Errorf("New without Store = %v", err)
	}
	s, err := New(Options{Base: job.Base{Conn: conn, Store: e.st}})
	if err != nil {
		t.Fatal(err)
	}
	if s.opts.BatchSize != job.DefaultBatchSize || s.opts.PollInterval != DefaultPollInterval || s.top != streams.Default() {
		t.Errorf("defaults = %+v", s.opts)
	}
}

// TestVersionTwoCarriesATaskRecordsOfAPageInOneMessage: in version 2 (the
// default) a page's records of one task are one message, whatever the
// tasks' records interleave; version 1 publishes one message a record.
// Either way AX_AUDIT holds every record once, each instance's in order.
func TestVersionTwoCarriesATaskRecordsOfAPageInOneMessage(t *testing.T) {
	t.Parallel()
	for _, version := range []int{1, 2} {
		t.Run(fmt.Sprintf("version %d", version), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.seed("etl", 150)
			e.seed("mail", 100) // 2 applies and 1,000 transitions
			a := e.start(context.Background(), 500, func(s *Service) { s.opts.Version = version })
			e.waitStream(1002)
			a.stop()
			e.checkTrail()
			// Two pages of 500 and one of 2, each of both tasks at most.
			msgs, want := e.messages(), uint64(1002)
			if version == 2 {
				want = 6
			}
			if msgs > want || (version == 1 && msgs != want) {
				t.Errorf("AX_AUDIT holds %d messages for 1,002 records, want %d", msgs, want)
			}
		})
	}
}

// TestCrashWithinAPage kills a leader after AX_AUDIT stored the first of a
// page's messages (a task's records) and before the others: the next leader
// publishes the rest of the page — not skipping it, as it would skip up to
// a page's last record — and then goes on: no record lost or repeated. The
// page is the batch's first, at its stored begin, or its second, a page
// past the cursor the leader stored at the begin (a SaveInterval longer
// than the batch): the next leader finds where the page began from the
// message before it.
func TestCrashWithinAPage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		page int32 // the page of the batch the leader dies within
		size int   // the batch size
	}{
		{"the batch's first page", 1, 500},
		{"a page past the stored cursor", 2, 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			crashWithinAPage(t, c.page, c.size)
		})
	}
}

func crashWithinAPage(t *testing.T, page int32, size int) {
	e := newEnv(t)
	e.seed("etl", 20)
	e.seed("mail", 20)
	e.seed("etl", 20) // 2 applies and 240 transitions: pages of two tasks
	crash, kill := context.WithCancel(context.Background())
	defer kill()
	var pages, parts, published atomic.Int32
	first := e.start(crash, size, func(s *Service) {
		s.opts.SaveInterval = time.Hour
		s.cutPage = func(msgs []auditMsg) ([]auditMsg, error) {
			if pages.Add(1) < page {
				published.Add(int32(len(msgs)))
				return msgs, nil
			}
			parts.Store(int32(len(msgs)))
			kill()
			return msgs[:1], errCrash
		}
	})
	<-crash.Done()
	first.stop()
	if n := parts.Load(); n < 2 {
		t.Fatalf("the page made %d messages, want one a task", n)
	}
	if got, want := e.messages(), uint64(published.Load())+1; got != want {
		t.Fatalf("AX_AUDIT holds %d messages after the crash, want %d: the pages before and the page's first", got, want)
	}
	var current *string
	if err := e.st.Pool().QueryRow(context.Background(), `SELECT current::text FROM relay_cursor`).Scan(&current); err != nil {
		t.Fatal(err)
	}
	if current == nil {
		t.Fatal("the stored cursor ends a batch, want it at the crashed batch's begin")
	}
	e.start(context.Background(), size, nil)
	e.waitStream(242)
	e.seed("report", 5)
	e.waitStream(uint64(len(e.outbox())))
	e.checkTrail()
}
