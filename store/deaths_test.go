package store_test

import (
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
)

// TestWorkerDeathsCountedOnceAndSpendNoAttempt pins what the reaper's
// policy for worker deaths rests on: CountDeaths counts a death once per
// attempt, however often the reaper counts it again (after a pass it
// could not apply), and not for an attempt no longer current; a failure
// NotCounted moves the instance to RETRYING with max_attempts one higher
// even on its last attempt; a Quarantine failure fails it whatever its
// attempts left.
func TestWorkerDeathsCountedOnceAndSpendNoAttempt(t *testing.T) {
	t.Parallel()
	st := store.New(storetest.NewDB(t))
	ctx := t.Context()
	applyTasks(t, st, "deaths")
	in := []store.NewInstance{
		newRunInstance("deaths", "innocent", "", schemas.StateDispatched),
		newRunInstance("deaths", "poison", "", schemas.StateDispatched),
	}
	in[0].MaxAttempts, in[1].MaxAttempts = 1, 5
	made, err := st.CreateInstances(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	innocent, poison := made[0].ID, made[1].ID
	if made[0].EventID != "innocent" {
		innocent, poison = poison, innocent
	}
	lost := []store.Failure{{InstanceID: innocent, Attempt: 1, At: time.Now()}, {InstanceID: poison, Attempt: 1, At: time.Now()}}
	for range 2 { // the second count adds nothing
		deaths, err := st.CountDeaths(ctx, lost)
		if err != nil {
			t.Fatal(err)
		}
		if deaths[[2]int64{innocent, 1}] != 1 || deaths[[2]int64{poison, 1}] != 1 {
			t.Fatalf("deaths %v; want 1 each", deaths)
		}
	}
	if deaths, err := st.CountDeaths(ctx, []store.Failure{{InstanceID: innocent, Attempt: 2}}); err != nil || len(deaths) != 0 {
		t.Fatalf("deaths of an attempt not current: %v, %v; want none", deaths, err)
	}
	out, err := st.FailAttempts(ctx, []store.Failure{
		{InstanceID: innocent, Attempt: 1, At: time.Now(), NotCounted: true, Reason: store.NotCountedReasonPrefix + ": its worker died"},
		{InstanceID: poison, Attempt: 1, At: time.Now(), Quarantine: true, Reason: store.QuarantinedReasonPrefix + ": 3 workers died"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range out {
		switch {
		case !o.Applied:
			t.Errorf("outcome %+v not applied", o)
		case o.InstanceID == innocent && (o.State != schemas.StateRetrying || o.MaxAttempts != 2):
			t.Errorf("innocent on its last attempt: %s, max_attempts %d; want RETRYING, 2 (the death spent no attempt)", o.State, o.MaxAttempts)
		case o.InstanceID == poison && o.State != schemas.StateFailed:
			t.Errorf("quarantined with 4 attempts left: %s; want FAILED", o.State)
		}
	}
	if !store.SpendsNoAttempt(store.NotCountedReasonPrefix+": x") || store.SpendsNoAttempt(store.LeaseExpiredReasonPrefix+": x") {
		t.Error("SpendsNoAttempt does not tell a death not counted from a lease expiry")
	}
}
