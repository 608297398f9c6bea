package dispatcher

import (
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

// TestJudgeDeathsTellsThePoisonFromItsNeighbours replays three worker
// deaths of one poison P, each beside other instances: the first with N,
// the second with M, the third with N again. Each death's attempts are
// judged as the reaper judges them: none spends an attempt, P is a
// suspect (an event) from its second death on, and P alone is quarantined
// at its third — N, in two deaths by then, fewer than P's three, is
// retried.
func TestJudgeDeathsTellsThePoisonFromItsNeighbours(t *testing.T) {
	t.Parallel()
	b := newDeathBed(t, "P", "N", "M")
	st, ctx, id, death := b.st, t.Context(), b.id, b.death
	got := death("w1", "P", "N")
	checkOutcome(t, got["P"], "P at its first death", schemas.StateRetrying, 4)
	checkOutcome(t, got["N"], "N beside it", schemas.StateRetrying, 4)
	got = death("w2", "P", "M")
	checkOutcome(t, got["P"], "P at its second death (a suspect)", schemas.StateRetrying, 5)
	checkOutcome(t, got["M"], "M beside it", schemas.StateRetrying, 4)
	got = death("w3", "N", "P")
	checkOutcome(t, got["P"], "P at its third death (quarantined)", schemas.StateFailed, 5)
	checkOutcome(t, got["N"], "N at its second death, beside P's third", schemas.StateRetrying, 5)

	p, err := st.GetInstance(ctx, id["P"])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(p.Error, "quarantined: 3 workers died while running this instance (the last, worker w3") {
		t.Errorf("P's error %q; want it quarantined by 3 deaths, the last of w3", p.Error)
	}
	var suspects int
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM instance_events WHERE kind = $1 AND instance_id = $2`, SuspectEvent, id["P"]).
		Scan(&suspects); err != nil {
		t.Fatal(err)
	}
	if suspects != 2 {
		t.Errorf("P has %d suspect events; want 2 (its second and third deaths)", suspects)
	}
}

// deathBed is a dispatcher and a store with one instance, DISPATCHED at
// attempt 1, of each name, whose worker deaths a test replays.
type deathBed struct {
	d       *Service
	st      *store.Store
	id      map[string]int64
	attempt map[string]int
	t       *testing.T
}

func newDeathBed(t *testing.T, names ...string) *deathBed {
	t.Helper()
	srv := streamstest.NewServer(t, streams.Config{})
	conn, _ := srv.Connect()
	st := store.New(storetest.NewDB(t))
	ctx := t.Context()
	def, err := taskdef.ParseTask([]byte(`{"task_name": "t", "execution": {"handler": "h"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.ApplyTask(ctx, def, "test"); err != nil {
		t.Fatal(err)
	}
	d, err := New(Options{Conn: conn, Store: st, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	in := make([]store.NewInstance, len(names))
	for i, ev := range names {
		in[i] = store.NewInstance{Task: "t", TaskVersion: 1, EventID: ev, Source: schemas.SourceEvent, Priority: schemas.PriorityNormal,
			Pool: "default", Handler: "h", TimeoutMS: 60000, MaxAttempts: 3, FiredAt: time.Now(), State: schemas.StateDispatched}
	}
	made, err := st.CreateInstances(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	b := &deathBed{d: d, st: st, id: map[string]int64{}, attempt: map[string]int{}, t: t}
	for _, a := range made {
		b.id[a.EventID] = a.ID
		b.attempt[a.EventID] = 1
	}
	return b
}

// judge judges the death of worker of the attempts of names and applies
// it, returning what became of each and each one's verdict.
func (b *deathBed) judge(worker string, names ...string) (map[string]store.Outcome, map[string]verdict) {
	b.t.Helper()
	t, ctx := b.t, b.t.Context()
	book := newLeaseBook()
	var lost []store.Failure
	for _, n := range names {
		book.put([2]int64{b.id[n], int64(b.attempt[n])}, worker)
		lost = append(lost, store.Failure{InstanceID: b.id[n], Attempt: b.attempt[n], Reason: leaseLost, At: time.Now()})
	}
	judged, verdicts, err := b.d.deaths.judgeDeaths(ctx, lost, book)
	if err != nil {
		t.Fatal(err)
	}
	outs, err := b.st.FailAttempts(ctx, judged)
	if err != nil {
		t.Fatal(err)
	}
	got, vs := map[string]store.Outcome{}, map[string]verdict{}
	for i, o := range outs {
		got[names[i]] = o
		vs[names[i]] = verdicts[[2]int64{o.InstanceID, int64(o.Attempt)}]
		if o.State == schemas.StateRetrying {
			// The next attempt starts, as the retry firing would.
			if _, err := b.st.Pool().Exec(ctx, `UPDATE instances SET state = 'DISPATCHED', attempt = attempt + 1 WHERE id = $1`, o.InstanceID); err != nil {
				t.Fatal(err)
			}
			b.attempt[names[i]]++
		}
	}
	return got, vs
}

// death is judge without the verdicts.
func (b *deathBed) death(worker string, names ...string) map[string]store.Outcome {
	b.t.Helper()
	got, _ := b.judge(worker, names...)
	return got
}

// checkOutcome fails t unless o applied and left its instance in state
// with maxAttempts.
func checkOutcome(t *testing.T, o store.Outcome, name string, state schemas.State, maxAttempts int) {
	t.Helper()
	if !o.Applied || o.State != state || o.MaxAttempts != maxAttempts {
		t.Errorf("%s: applied %v, %s, max_attempts %d; want %s, max_attempts %d", name, o.Applied, o.State, o.MaxAttempts, state, maxAttempts)
	}
}

// TestJudgeDeathsRetriesATieApart replays the deaths of a poison P beside
// N, which shares each of them: at the third, P and N are tied on three
// deaths and cannot be told apart. Neither is quarantined (an innocent
// would be): both are retried, not counted, one after the other, apartGap
// lease TTLs apart; the fourth death, P's alone beside M, quarantines P.
func TestJudgeDeathsRetriesATieApart(t *testing.T) {
	t.Parallel()
	b := newDeathBed(t, "P", "N", "M")
	b.d.deaths.leaseTTL.Store(int64(10 * time.Second))
	b.death("w1", "P", "N")
	// The tied are numbered by instance id.
	first, second := "P", "N"
	if b.id["N"] < b.id["P"] {
		first, second = "N", "P"
	}
	got, vs := b.judge("w2", "N", "P")
	if vs[first].apart != 1 || vs[second].apart != 2 {
		t.Errorf("at the second death, %s and %s tied on 2 deaths are %+v and %+v; want apart 1 and 2", first, second, vs[first], vs[second])
	}
	checkOutcome(t, got["N"], "N tied with P on two deaths", schemas.StateRetrying, 5)
	got, vs = b.judge("w3", "P", "N")
	checkOutcome(t, got["P"], "P tied with N on three deaths", schemas.StateRetrying, 6)
	checkOutcome(t, got["N"], "N tied with P on three deaths", schemas.StateRetrying, 6)
	for _, name := range []string{"P", "N"} {
		in, err := b.st.GetInstance(t.Context(), b.id[name])
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(in.Error, store.TiedReason) {
			t.Errorf("%s's reason %q; want it to say %q", name, in.Error, store.TiedReason)
		}
	}
	// The tied retries start apartGap lease TTLs apart, in id order.
	w1, w2 := b.d.deaths.deathWait(vs[first], time.Second), b.d.deaths.deathWait(vs[second], time.Second)
	if w1 != 10*time.Second || w2 != w1+apartGap*10*time.Second {
		t.Errorf("tied retries wait %v (%s) and %v (%s); want 10s and %v", w1, first, w2, second, 10*time.Second+apartGap*10*time.Second)
	}
	got = b.death("w4", "M", "P")
	checkOutcome(t, got["P"], "P at its fourth death, the only one with the most", schemas.StateFailed, 6)
	checkOutcome(t, got["M"], "M beside it", schemas.StateRetrying, 4)
}
