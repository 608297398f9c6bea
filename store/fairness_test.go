package store_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
)

// TestReleaseFairTakesTurnsByWeight holds a backlog of key a, then two
// attempts of b and three of big (weight 3), and releases them a few at a
// time: big takes three turns for each one of the others, a new key does
// not wait for a's backlog, and an instance that moved on is dropped
// unpublished.
func TestReleaseFairTakesTurnsByWeight(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "fair")
	var in []store.NewInstance
	for i := range 13 {
		in = append(in, newRunInstance("fair", fmt.Sprintf("e%d", i), "", schemas.StateDispatched))
	}
	made, err := st.CreateInstances(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	const subject = "ax.dispatch.default.normal.h"
	keyOf := map[int64]string{}
	hold := func(from, to int, key string, weight int) {
		t.Helper()
		var msgs []store.FairMessage
		for _, a := range made[from:to] {
			keyOf[a.ID] = key
			msgs = append(msgs, store.FairMessage{InstanceID: a.ID, Attempt: a.Attempt, Subject: subject, Ring: "ring",
				MsgID: fmt.Sprint(a.ID), Key: key, Weight: weight, Message: []byte(`{}`)})
		}
		if err := st.HoldFair(ctx, msgs); err != nil {
			t.Fatal(err)
		}
	}
	release := func(n int) []string {
		t.Helper()
		var keys []string
		got, err := st.ReleaseFair(ctx, subject, func() (int, error) { return n, nil }, func(ms []store.FairMessage) error {
			for _, m := range ms {
				keys = append(keys, m.Key)
			}
			return nil
		})
		if err != nil || got != len(keys) {
			t.Fatalf("ReleaseFair = %d, %v; published %d", got, err, len(keys))
		}
		return keys
	}
	hold(0, 6, "a", 1)
	x, err := st.ExplainInstance(ctx, made[3].ID)
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(x.Steps, func(s schemas.ExplainStep) bool { return s.Kind == "fair_wait" }); i < 0 ||
		!strings.Contains(x.Steps[i].Text, `key "a"`) || !strings.Contains(x.Steps[i].Text, "3 of the key's attempts before it") {
		t.Errorf("the explanation of a held attempt does not say why it waits: %+v", x.Steps)
	}
	if got := release(2); !slices.Equal(got, []string{"a", "a"}) {
		t.Fatalf("first release %q, want a a", got)
	}
	hold(6, 8, "b", 1)
	hold(8, 11, "big", 3)
	// The clocks: a's and the queue's at 2. b: 3, 4; big: 2⅓, 2⅔, 3; a: 3, 4…
	if got, want := release(6), []string{"big", "big", "a", "b", "big", "a"}; !slices.Equal(got, want) {
		t.Fatalf("second release %q, want %q", got, want)
	}
	// Cancelled while held: dropped, not published.
	if _, err := pool.Exec(ctx, `UPDATE instances SET state = 'CANCELLED' WHERE id = $1`, made[4].ID); err != nil {
		t.Fatal(err)
	}
	if got, want := release(10), []string{"b", "a"}; !slices.Equal(got, want) {
		t.Fatalf("last release %q, want %q (a's cancelled one dropped)", got, want)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM fair_queue`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("fair_queue holds %d (%v), want none", left, err)
	}
}
