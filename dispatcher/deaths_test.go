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
	in := make([]store.NewInstance, 3)
	for i, ev := range []string{"P", "N", "M"} {
		in[i] = store.NewInstance{Task: "t", TaskVersion: 1, EventID: ev, Source: schemas.SourceEvent, Priority: schemas.PriorityNormal,
			Pool: "default", Handler: "h", TimeoutMS: 60000, MaxAttempts: 3, FiredAt: time.Now(), State: schemas.StateDispatched}
	}
	made, err := st.CreateInstances(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	id := map[string]int64{}
	for _, a := range made {
		id[a.EventID] = a.ID
	}
	attempt := map[string]int{"P": 1, "N": 1, "M": 1}
	// death judges the death of worker of the attempts of names, applies
	// it, and returns what became of each.
	death := func(worker string, names ...string) map[string]store.Outcome {
		t.Helper()
		book := newLeaseBook()
		var lost []store.Failure
		for _, n := range names {
			book.put([2]int64{id[n], int64(attempt[n])}, worker)
			lost = append(lost, store.Failure{InstanceID: id[n], Attempt: attempt[n], Reason: leaseLost, At: time.Now()})
		}
		judged, _, err := d.judgeDeaths(ctx, lost, book)
		if err != nil {
			t.Fatal(err)
		}
		outs, err := st.FailAttempts(ctx, judged)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]store.Outcome{}
		for i, o := range outs {
			got[names[i]] = o
			if o.State == schemas.StateRetrying {
				// The next attempt starts, as the retry firing would.
				if _, err := st.Pool().Exec(ctx, `UPDATE instances SET state = 'DISPATCHED', attempt = attempt + 1 WHERE id = $1`, o.InstanceID); err != nil {
					t.Fatal(err)
				}
				attempt[names[i]]++
			}
		}
		return got
	}
	check := func(o store.Outcome, name string, state schemas.State, maxAttempts int) {
		t.Helper()
		if !o.Applied || o.State != state || o.MaxAttempts != maxAttempts {
			t.Errorf("%s: applied %v, %s, max_attempts %d; want %s, max_attempts %d", name, o.Applied, o.State, o.MaxAttempts, state, maxAttempts)
		}
	}
	got := death("w1", "P", "N")
	check(got["P"], "P at its first death", schemas.StateRetrying, 4)
	check(got["N"], "N beside it", schemas.StateRetrying, 4)
	got = death("w2", "P", "M")
	check(got["P"], "P at its second death (a suspect)", schemas.StateRetrying, 5)
	check(got["M"], "M beside it", schemas.StateRetrying, 4)
	got = death("w3", "N", "P")
	check(got["P"], "P at its third death (quarantined)", schemas.StateFailed, 5)
	check(got["N"], "N at its second death, beside P's third", schemas.StateRetrying, 5)

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
