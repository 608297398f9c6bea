package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TriggerKey names one trigger of a task: its index in the definition's triggers.
type TriggerKey struct {
	Task         string
	TriggerIndex int
}

// TriggerState is what the trigger service remembers of one cron trigger,
// in the trigger_state table, which only the trigger service writes.
type TriggerState struct {
	Task         string
	TriggerIndex int
	// Schedule and Timezone are the trigger's schedule when LastTick was
	// written: a trigger whose schedule changed starts afresh.
	Schedule string
	Timezone string
	// LastTick is the latest tick the trigger settled — fired, or skipped by
	// its misfire policy — or, until its first tick, the instant the trigger
	// came into being. Ticks after it that are due are missed ticks.
	LastTick time.Time
	// UpdatedAt is when the row was last written (set by the store).
	UpdatedAt time.Time
}

// Key returns the state's trigger key.
func (s TriggerState) Key() TriggerKey { return TriggerKey{s.Task, s.TriggerIndex} }

// foreignKeyViolation is PostgreSQL's SQLSTATE foreign_key_violation.
const foreignKeyViolation = "23503"

// saveChunk is the most rows one statement of SaveTriggerStates writes.
const saveChunk = 5000

// SaveTriggerStates upserts states in batched statements. LastTick never
// moves backwards: any number of trigger service replicas may save the same
// triggers at once, and the greatest tick wins (the schedule and zone are
// those of the latest write). Several states of one trigger in states count
// as the one with the greatest tick. States of tasks that do not exist (any
// more) are left out without error. Rows are written in key order, so
// concurrent savers do not deadlock.
func (s *Store) SaveTriggerStates(ctx context.Context, states []TriggerState) error {
	if len(states) == 0 {
		return nil
	}
	byKey := make(map[TriggerKey]TriggerState, len(states))
	for _, st := range states {
		if old, ok := byKey[st.Key()]; !ok || st.LastTick.After(old.LastTick) {
			byKey[st.Key()] = st
		}
	}
	keys := make([]TriggerKey, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareKeys)
	for chunk := range slices.Chunk(keys, saveChunk) {
		var (
			task      = make([]string, len(chunk))
			index     = make([]int32, len(chunk))
			schedule  = make([]string, len(chunk))
			timezone  = make([]string, len(chunk))
			lastTicks = make([]time.Time, len(chunk))
		)
		for i, k := range chunk {
			st := byKey[k]
			task[i], index[i], schedule[i], timezone[i], lastTicks[i] = st.Task, int32(st.TriggerIndex), st.Schedule, st.Timezone, st.LastTick
		}
		if err := s.saveTriggerStates(ctx, task, index, schedule, timezone, lastTicks); err != nil {
			return fmt.Errorf("save %d trigger states: %w", len(chunk), err)
		}
	}
	return nil
}

// saveTriggerStates runs one batched upsert. A task deleted while the
// statement runs fails its foreign key check; the statement is then run again,
// and the join leaves the deleted task out.
func (s *Store) saveTriggerStates(ctx context.Context, task []string, index []int32, schedule, timezone []string, lastTicks []time.Time) error {
	for attempt := 1; ; attempt++ {
		_, err := s.pool.Exec(ctx, `
			INSERT INTO trigger_state AS s (task, trigger_index, schedule, timezone, last_tick)
			SELECT u.task, u.trigger_index, u.schedule, u.timezone, u.last_tick
			FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::timestamptz[])
				AS u (task, trigger_index, schedule, timezone, last_tick)
			JOIN tasks ON tasks.name = u.task
			ORDER BY u.task, u.trigger_index
			ON CONFLICT (task, trigger_index) DO UPDATE
			SET schedule = EXCLUDED.schedule, timezone = EXCLUDED.timezone,
				last_tick = GREATEST(s.last_tick, EXCLUDED.last_tick), updated_at = now()`,
			task, index, schedule, timezone, lastTicks)
		var pgErr *pgconn.PgError
		if attempt < 3 && errors.As(err, &pgErr) && pgErr.Code == foreignKeyViolation {
			continue
		}
		return err
	}
}

// DeleteTriggerStates deletes the states of keys: triggers that are no
// longer cron triggers. Unknown keys are fine.
func (s *Store) DeleteTriggerStates(ctx context.Context, keys []TriggerKey) error {
	if len(keys) == 0 {
		return nil
	}
	task := make([]string, len(keys))
	index := make([]int32, len(keys))
	for i, k := range keys {
		task[i], index[i] = k.Task, int32(k.TriggerIndex)
	}
	_, err := s.pool.Exec(ctx, `
		WITH lk AS (
			-- In the upsert's order, so that two trigger replicas never deadlock.
			SELECT s.task, s.trigger_index FROM trigger_state s
			JOIN unnest($1::text[], $2::int[]) AS u (task, trigger_index) USING (task, trigger_index)
			ORDER BY s.task, s.trigger_index FOR UPDATE OF s
		)
		DELETE FROM trigger_state s USING lk
		WHERE s.task = lk.task AND s.trigger_index = lk.trigger_index`, task, index)
	if err != nil {
		return fmt.Errorf("delete %d trigger states: %w", len(keys), err)
	}
	return nil
}

// ListTriggerStates returns the state of every trigger, by key.
func (s *Store) ListTriggerStates(ctx context.Context) (map[TriggerKey]TriggerState, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+triggerStateColumns+` FROM trigger_state`)
	if err != nil {
		return nil, fmt.Errorf("list trigger states: %w", err)
	}
	out, err := collectTriggerStates(rows)
	if err != nil {
		return nil, fmt.Errorf("list trigger states: %w", err)
	}
	return out, nil
}

// GetTriggerStates returns the states of the triggers of the tasks named in
// tasks, by key, in one query.
func (s *Store) GetTriggerStates(ctx context.Context, tasks []string) (map[TriggerKey]TriggerState, error) {
	if len(tasks) == 0 {
		return map[TriggerKey]TriggerState{}, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT `+triggerStateColumns+` FROM trigger_state WHERE task = ANY($1)`, tasks)
	if err != nil {
		return nil, fmt.Errorf("get trigger states: %w", err)
	}
	out, err := collectTriggerStates(rows)
	if err != nil {
		return nil, fmt.Errorf("get trigger states: %w", err)
	}
	return out, nil
}

const triggerStateColumns = `task, trigger_index, schedule, timezone, last_tick, updated_at`

func collectTriggerStates(rows pgx.Rows) (map[TriggerKey]TriggerState, error) {
	states, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (TriggerState, error) {
		var st TriggerState
		err := row.Scan(&st.Task, &st.TriggerIndex, &st.Schedule, &st.Timezone, &st.LastTick, &st.UpdatedAt)
		return st, err
	})
	if err != nil {
		return nil, err
	}
	out := make(map[TriggerKey]TriggerState, len(states))
	for _, st := range states {
		out[st.Key()] = st
	}
	return out, nil
}

func compareKeys(a, b TriggerKey) int {
	if c := cmp.Compare(a.Task, b.Task); c != 0 {
		return c
	}
	return cmp.Compare(a.TriggerIndex, b.TriggerIndex)
}

// CronMsgIDKey returns the secret of the cron firings' Nats-Msg-Id, made
// at random by PostgreSQL when the schema was migrated (table
// cron_msg_id_key): every trigger service replica reads the same one, and
// outside publishers, who reach NATS but not PostgreSQL, never see it.
func (s *Store) CronMsgIDKey(ctx context.Context) ([]byte, error) {
	var key string
	if err := s.pool.QueryRow(ctx, `SELECT key FROM cron_msg_id_key`).Scan(&key); err != nil {
		return nil, fmt.Errorf("cron msg id key: %w", err)
	}
	return []byte(key), nil
}
