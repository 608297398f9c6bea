package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Decision kinds.
const (
	// DecisionMisfire: a trigger found ticks First to Last missed and
	// applied its misfire policy (Reason says what it fired and skipped).
	DecisionMisfire = "misfire"
)

// Decision is what a service decided that is no transition of an
// instance (table decisions), for ax explain.
type Decision struct {
	Task         string
	TriggerIndex int
	InstanceID   int64
	Kind         string
	// First and Last bound the ticks the decision is about.
	First, Last time.Time
	// Actor names the service replica that decided ("trigger@host:pid").
	Actor  string
	Reason string
	// At is when it decided, on the deciding service's clock.
	At time.Time
}

// RecordDecisions stores ds in one statement. A decision stored already
// (the same task, trigger, kind, last tick and actor) is not stored again.
func (s *Store) RecordDecisions(ctx context.Context, ds []Decision) error {
	if len(ds) == 0 {
		return nil
	}
	var (
		tasks, kinds, actors, reasons []string
		triggers                      []int32
		ids                           []int64
		firsts, lasts, ats            []time.Time
	)
	for _, d := range ds {
		tasks, kinds, actors, reasons = append(tasks, d.Task), append(kinds, d.Kind), append(actors, d.Actor), append(reasons, d.Reason)
		triggers, ids = append(triggers, int32(d.TriggerIndex)), append(ids, d.InstanceID)
		firsts, lasts, ats = append(firsts, d.First), append(lasts, d.Last), append(ats, d.At)
	}
	_, err := s.pool.Exec(ctx, `
		INSERT INTO decisions (task, trigger_index, instance_id, kind, first_tick, last_tick, actor, reason, at)
		SELECT * FROM unnest($1::text[], $2::int[], $3::bigint[], $4::text[], $5::timestamptz[], $6::timestamptz[], $7::text[], $8::text[], $9::timestamptz[])
		ON CONFLICT (task, trigger_index, kind, last_tick, actor) DO NOTHING`,
		tasks, triggers, ids, kinds, firsts, lasts, actors, reasons, ats)
	if err != nil {
		return fmt.Errorf("record %d decisions: %w", len(ds), err)
	}
	return nil
}

// DecisionsAbout returns the decisions about task whose ticks span tick,
// oldest first.
func (s *Store) DecisionsAbout(ctx context.Context, task string, tick time.Time) ([]Decision, error) {
	rows, err := s.pool.Query(ctx, `SELECT task, trigger_index, instance_id, kind, first_tick, last_tick, actor, reason, at
		FROM decisions WHERE task = $1 AND first_tick <= $2 AND last_tick >= $2 ORDER BY at, id`, task, tick)
	if err != nil {
		return nil, fmt.Errorf("read the decisions about %s at %s: %w", task, tick.UTC().Format(time.RFC3339), err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Decision, error) {
		var d Decision
		err := r.Scan(&d.Task, &d.TriggerIndex, &d.InstanceID, &d.Kind, &d.First, &d.Last, &d.Actor, &d.Reason, &d.At)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the decisions about %s: %w", task, err)
	}
	return out, nil
}
