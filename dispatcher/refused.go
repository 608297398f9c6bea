package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
)

// A firing PostgreSQL refuses must not hold up the others of its batch: no
// input delays another by more than one batch. What the dispatcher can
// check before the insert it checks (taskdef.ParseTriggerEvent refuses text
// PostgreSQL cannot store, and such a firing is created SKIPPED with the
// reason); whatever else PostgreSQL refuses is found by splitting the batch,
// and recorded SKIPPED without what it carried, or, when even that is
// refused, terminated with a log line. ax_dispatcher_refused_firings_total
// counts both.

// createFunc creates a batch of instances in one statement or transaction:
// [store.Store.CreateInstances], or CreateLimitedInstances of one task.
type createFunc func(ctx context.Context, in []store.NewInstance) ([]store.Attempt, []store.Victim, error)

// refusal is a firing whose instance PostgreSQL refused, and why.
type refusal struct {
	in  store.NewInstance
	err error
}

// createIsolating creates in with create. When PostgreSQL refuses what some
// firings hold ([store.IsDataError]), it splits the batch in halves, and
// those in turn, until each refused firing is alone: the others are created
// now, a few statements later, and the refused ones come back with their
// errors. Any other error fails the whole batch, for redelivery.
func createIsolating(ctx context.Context, in []store.NewInstance, create createFunc) ([]store.Attempt, []store.Victim, []refusal, error) {
	if len(in) == 0 {
		return nil, nil, nil, nil
	}
	attempts, victims, err := create(ctx, in)
	if err == nil || !store.IsDataError(err) {
		return attempts, victims, nil, err
	}
	if len(in) == 1 {
		return nil, nil, []refusal{{in: in[0], err: err}}, nil
	}
	half := len(in) / 2
	a1, v1, r1, err := createIsolating(ctx, in[:half], create)
	if err != nil {
		return nil, nil, nil, err
	}
	a2, v2, r2, err := createIsolating(ctx, in[half:], create)
	if err != nil {
		return nil, nil, nil, err
	}
	return append(a1, a2...), append(v1, v2...), append(r1, r2...), nil
}

// recordRefused records each refused firing as a SKIPPED instance that says
// what PostgreSQL refused, without its payload, parents and run (any of
// which may be what it refused), its text made storable and fired now. A
// firing that cannot be recorded even so is terminated (never redelivered)
// with an error in the log. It returns the SKIPPED instances made and the
// messages it terminated.
func (it *intake) recordRefused(ctx context.Context, refused []refusal, msgs map[[2]string][]jetstream.Msg) ([]store.Attempt, map[jetstream.Msg]bool, error) {
	if len(refused) == 0 {
		return nil, nil, nil
	}
	skipped := make([]store.NewInstance, len(refused))
	for i, r := range refused {
		x := r.in
		x.Payload, x.Parents, x.Shard = nil, nil, store.Shard{ParentID: x.ParentID, ShardIndex: x.ShardIndex}
		if !schemas.ValidText(x.RunID) {
			x.RunID = ""
		}
		x.EventID, x.Operator, x.CreatedReason = storableText(x.EventID), storableText(x.Operator), storableText(x.CreatedReason)
		x.FiredAt = it.now()
		x.State = schemas.StateSkipped
		x.Reason = storableText("PostgreSQL refused the firing: " + pgReason(r.err) +
			"; it was recorded without its payload, parents and run")
		skipped[i] = x
		it.log.Warn().Str("task", x.Task).Str("event_id", x.EventID).Str("reason", x.Reason).
			Msg("firing refused by PostgreSQL recorded as SKIPPED")
	}
	plain := func(ctx context.Context, in []store.NewInstance) ([]store.Attempt, []store.Victim, error) {
		a, err := it.store.CreateInstances(ctx, in)
		return a, nil, err
	}
	attempts, _, again, err := createIsolating(ctx, skipped, plain)
	if err != nil {
		return nil, nil, err
	}
	it.metrics.refused.WithLabelValues("postgres", "skipped").Add(float64(len(refused) - len(again)))
	var termed map[jetstream.Msg]bool
	for i, r := range again {
		if termed == nil {
			termed = make(map[jetstream.Msg]bool)
		}
		// The key is the original event id, before its text was made storable.
		orig := refused[indexOf(skipped, r.in)].in
		for _, m := range msgs[[2]string{orig.Task, orig.EventID}] {
			termed[m] = true
			_ = m.Term()
		}
		it.log.Error().Err(again[i].err).Str("task", orig.Task).Str("event_id", storableText(orig.EventID)).
			Msg("firing refused by PostgreSQL even without its payload; terminated")
	}
	it.metrics.refused.WithLabelValues("postgres", "terminated").Add(float64(len(again)))
	return attempts, termed, nil
}

// indexOf returns the index in xs of the instance x (by task and event id).
func indexOf(xs []store.NewInstance, x store.NewInstance) int {
	for i := range xs {
		if xs[i].Task == x.Task && xs[i].EventID == x.EventID {
			return i
		}
	}
	return 0
}

// pgReason says what PostgreSQL refused, without the detail (which may
// quote the value).
func pgReason(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return fmt.Sprintf("%s (SQLSTATE %s)", pgErr.Message, pgErr.Code)
	}
	return err.Error()
}

// storableText returns s with what PostgreSQL cannot store in text (bytes
// that are not UTF-8, NUL characters) replaced by U+FFFD.
func storableText(s string) string {
	if schemas.ValidText(s) {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, string(utf8.RuneError)), "\x00", string(utf8.RuneError))
}
