package store_test

import (
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
)

// TestPromoteLimitedLooksOnceWhenNothingWaits: a dispatcher's limiter runs
// a round after every batch of ends; with nothing WAITING the round is one
// statement, not a transaction (BEGIN, the look, COMMIT). What waits is
// still admitted once its limit lets it.
func TestPromoteLimitedLooksOnceWhenNothingWaits(t *testing.T) {
	t.Parallel()
	pool, sent := storetest.NewCounted(t)
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "etl")

	before := len(sent.All())
	attempts, _, _, err := st.PromoteLimited(ctx)
	if err != nil || len(attempts) != 0 {
		t.Fatalf("PromoteLimited with nothing waiting = %v, %v", attempts, err)
	}
	if round := sent.All()[before:]; len(round) != 1 || strings.Contains(strings.ToLower(round[0]), "begin") {
		t.Errorf("a round with nothing waiting sent %d statements (%q), want the one look", len(round), round)
	}

	if _, err := st.ApplyLimit(ctx, schemas.Limit{Name: "api", Concurrency: 1, Paused: true}); err != nil {
		t.Fatal(err)
	}
	created, err := st.CreateAdmittedInstances(ctx, "etl", []string{"api"},
		[]store.NewInstance{newRunInstance("etl", "e1", "", schemas.StateDispatched)})
	if err != nil || len(created) != 1 || created[0].State != schemas.StateWaiting {
		t.Fatalf("CreateAdmittedInstances under a paused limit = %v, %v; want the firing WAITING", created, err)
	}
	if attempts, _, _, err := st.PromoteLimited(ctx); err != nil || len(attempts) != 0 {
		t.Fatalf("PromoteLimited under a paused limit = %v, %v; want nothing admitted", attempts, err)
	}
	if _, err := st.SetLimitPaused(ctx, "api", false); err != nil {
		t.Fatal(err)
	}
	attempts, _, _, err = st.PromoteLimited(ctx)
	if err != nil || len(attempts) != 1 {
		t.Fatalf("PromoteLimited once the limit resumed = %v, %v; want the WAITING firing admitted", attempts, err)
	}
}
