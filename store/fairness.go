package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ax-scheduler/ax/schemas"
)

// TaskVersion names one version of a task definition.
type TaskVersion struct {
	Task    string
	Version int
}

// TaskFlow is what a task version says about how its attempts share a
// pool: the worker slots one takes and its fairness key.
type TaskFlow struct {
	Slots    int
	Fairness schemas.Fairness
}

// TaskFlows returns the flow settings of the task versions keys, read
// from task_versions (a version never changes, so callers may keep them).
// A version not found is left out.
func (s *Store) TaskFlows(ctx context.Context, keys []TaskVersion) (map[TaskVersion]TaskFlow, error) {
	names, versions := make([]string, len(keys)), make([]int32, len(keys))
	for i, k := range keys {
		names[i], versions[i] = k.Task, int32(k.Version)
	}
	rows, err := s.pool.Query(ctx, `
		SELECT v.name, v.version, COALESCE((v.definition->'execution'->>'slots')::int, 0),
		       COALESCE(v.definition->'dispatch'->'fairness', 'null')
		FROM task_versions v JOIN unnest($1::text[], $2::int[]) AS k(name, version)
		  ON v.name = k.name AND v.version = k.version`, names, versions)
	if err != nil {
		return nil, fmt.Errorf("read the flow settings of %d task versions: %w", len(keys), err)
	}
	out := make(map[TaskVersion]TaskFlow, len(keys))
	var (
		k    TaskVersion
		f    TaskFlow
		fair []byte
	)
	_, err = pgx.ForEachRow(rows, []any{&k.Task, &k.Version, &f.Slots, &fair}, func() error {
		f.Fairness = schemas.Fairness{}
		if err := json.Unmarshal(fair, &f.Fairness); err != nil {
			return fmt.Errorf("task %s version %d: dispatch.fairness: %w", k.Task, k.Version, err)
		}
		out[k] = f
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the flow settings of %d task versions: %w", len(keys), err)
	}
	return out, nil
}

// FairMessage is an attempt's dispatch message held back in fair_queue:
// published to Subject with message id MsgID and the traceparent header
// Traceparent (when not empty), its doorbell Ring rung.
type FairMessage struct {
	InstanceID  int64
	Attempt     int
	Subject     string
	Ring        string
	MsgID       string
	Key         string
	Weight      int
	Message     []byte
	Traceparent string
}

// HoldFair stores msgs in fair_queue; an attempt already there is left as
// it is (a redelivered firing holds its attempt once). It waits for a
// release of the same queue in progress (see ReleaseFair), which may
// forget the clocks of keys that it finds with nothing held.
func (s *Store) HoldFair(ctx context.Context, msgs []FairMessage) error {
	if len(msgs) == 0 {
		return nil
	}
	n := len(msgs)
	ids, attempts, weights := make([]int64, n), make([]int32, n), make([]int32, n)
	subjects, rings, msgIDs, keys := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	bodies, traces := make([][]byte, n), make([]string, n)
	for i, m := range msgs {
		ids[i], attempts[i], weights[i] = m.InstanceID, int32(m.Attempt), int32(max(m.Weight, 1))
		subjects[i], rings[i], msgIDs[i], keys[i], bodies[i] = m.Subject, m.Ring, m.MsgID, m.Key, m.Message
		traces[i] = m.Traceparent
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Shared with other holds, exclusive of a release (in one order).
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared(hashtextextended('ax.fair_queue:' || subject, 0))
			FROM (SELECT DISTINCT subject FROM unnest($1::text[]) AS u(subject) ORDER BY 1) AS s`, subjects); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
			WITH held AS (
				INSERT INTO fair_queue (instance_id, attempt, subject, ring, msg_id, fair_key, weight, message, traceparent)
				SELECT * FROM unnest($1::bigint[], $2::int[], $3::text[], $4::text[], $5::text[], $6::text[], $7::int[], $8::bytea[],
					$9::text[])
				ORDER BY 1, 2
				ON CONFLICT (instance_id, attempt) DO NOTHING),
			queues AS (
				INSERT INTO fair_queues (subject, vtime) SELECT DISTINCT subject, 0 FROM unnest($3::text[]) AS u(subject) ORDER BY 1
				ON CONFLICT (subject) DO NOTHING)
			INSERT INTO fair_clock (subject, fair_key, vtime)
			SELECT DISTINCT subject, fair_key, 0 FROM unnest($3::text[], $6::text[]) AS u(subject, fair_key) ORDER BY 1, 2
			ON CONFLICT (subject, fair_key) DO NOTHING`, ids, attempts, subjects, rings, msgIDs, keys, weights, bodies, traces)
		return err
	})
	if err != nil {
		return fmt.Errorf("hold %d attempts for fair dispatch: %w", n, err)
	}
	return nil
}

// FairSubjects returns the subjects that have attempts held in fair_queue.
func (s *Store) FairSubjects(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT q.subject FROM fair_queues q
		WHERE EXISTS (SELECT FROM fair_queue f WHERE f.subject = q.subject)`)
	if err != nil {
		return nil, fmt.Errorf("list the queues with attempts held for fair dispatch: %w", err)
	}
	subjects, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list the queues with attempts held for fair dispatch: %w", err)
	}
	return subjects, nil
}

// ReleaseFair lets attempts held for subject into its queue, in one
// transaction: unless another dispatcher releases for subject at the same
// time (then it returns 0 at once), it asks room how many the queue may
// take now, picks that many by start-time fair queuing over their keys
// (each key's k-th waiting attempt finishes at max(the queue's virtual
// time, the key's) + k/weight; the earliest finish goes first, the older
// on a tie), hands them to publish, which must return only once they are
// stored on the stream, and deletes them and moves the clocks on. An
// attempt whose instance moved on meanwhile (cancelled) is deleted
// without being published. It returns how many it let in.
//
// A crash after publish and before the commit leaves the attempts held:
// the next release publishes them again under the same message ids,
// which the stream's duplicate window drops.
func (s *Store) ReleaseFair(ctx context.Context, subject string, room func() (int, error),
	publish func([]FairMessage) error) (int, error) {
	released := 0
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var locked bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(hashtextextended('ax.fair_queue:' || $1, 0))`,
			subject).Scan(&locked); err != nil || !locked {
			return err
		}
		n, err := room()
		if err != nil || n <= 0 {
			return err
		}
		picked, finish, err := pickFair(ctx, tx, subject, n)
		if err != nil || len(picked) == 0 {
			return err
		}
		var live []FairMessage
		for _, p := range picked {
			if p.live {
				live = append(live, p.FairMessage)
			}
		}
		if len(live) > 0 {
			if err := publish(live); err != nil {
				return err
			}
		}
		released = len(live)
		return forgetFair(ctx, tx, subject, picked, finish)
	})
	if err != nil {
		return 0, fmt.Errorf("release attempts held for %s: %w", subject, err)
	}
	return released, nil
}

// pickedFair is an attempt ReleaseFair picked, with its finish tag, and
// whether its instance still waits for it.
type pickedFair struct {
	FairMessage
	finish float64
	live   bool
}

// pickFair returns the n attempts held for subject that finish first, in
// that order, and the latest finish tag of each key among them.
func pickFair(ctx context.Context, tx pgx.Tx, subject string, n int) ([]pickedFair, map[string]float64, error) {
	// Each key's first n attempts (by the index), then the first n of all.
	rows, err := tx.Query(ctx, `
		SELECT f.instance_id, f.attempt, f.ring, f.msg_id, f.fair_key, f.weight, f.message,
		       GREATEST(q.vtime, c.vtime) + f.rn::float8 / f.weight AS finish,
		       COALESCE(i.state = $3 AND i.attempt = f.attempt, false),
		       COALESCE(NULLIF(f.traceparent, ''), i.traceparent, '')
		FROM fair_queues q
		JOIN fair_clock c ON c.subject = q.subject
		CROSS JOIN LATERAL (
			SELECT x.*, row_number() OVER (ORDER BY x.seq) AS rn FROM (
				SELECT * FROM fair_queue x WHERE x.subject = c.subject AND x.fair_key = c.fair_key ORDER BY x.seq LIMIT $2) x
		) f
		LEFT JOIN instances i ON i.id = f.instance_id
		WHERE q.subject = $1
		ORDER BY finish, f.seq
		LIMIT $2`, subject, n, schemas.StateDispatched)
	if err != nil {
		return nil, nil, err
	}
	var (
		out []pickedFair
		p   pickedFair
	)
	finish := map[string]float64{}
	_, err = pgx.ForEachRow(rows, []any{&p.InstanceID, &p.Attempt, &p.Ring, &p.MsgID, &p.Key, &p.Weight, &p.Message,
		&p.finish, &p.live, &p.Traceparent}, func() error {
		p.Subject = subject
		out = append(out, p)
		finish[p.Key] = max(finish[p.Key], p.finish)
		p = pickedFair{}
		return nil
	})
	return out, finish, err
}

// forgetFair deletes the picked attempts from fair_queue and moves the
// clocks of subject and of the picked keys to their latest finish tags.
func forgetFair(ctx context.Context, tx pgx.Tx, subject string, picked []pickedFair, finish map[string]float64) error {
	ids, attempts := make([]int64, len(picked)), make([]int32, len(picked))
	for i, p := range picked {
		ids[i], attempts[i] = p.InstanceID, int32(p.Attempt)
	}
	keys, tags := make([]string, 0, len(finish)), make([]float64, 0, len(finish))
	latest := 0.0
	for k, f := range finish {
		keys, tags, latest = append(keys, k), append(tags, f), max(latest, f)
	}
	batch := &pgx.Batch{}
	batch.Queue(`DELETE FROM fair_queue f USING unnest($1::bigint[], $2::int[]) AS k(id, attempt)
		WHERE f.instance_id = k.id AND f.attempt = k.attempt`, ids, attempts)
	batch.Queue(`INSERT INTO fair_clock (subject, fair_key, vtime) SELECT $1, k, t FROM unnest($2::text[], $3::float8[]) AS u(k, t)
		ON CONFLICT (subject, fair_key) DO UPDATE SET vtime = GREATEST(fair_clock.vtime, EXCLUDED.vtime)`, subject, keys, tags)
	batch.Queue(`INSERT INTO fair_queues (subject, vtime) VALUES ($1, $2)
		ON CONFLICT (subject) DO UPDATE SET vtime = GREATEST(fair_queues.vtime, EXCLUDED.vtime)`, subject, latest)
	// A key with nothing held and a clock not ahead of the queue's starts
	// at the queue's time anyway: its row can go, so that the picks of a
	// queue cost its keys with work, not every key it ever had. (Holds
	// wait for this transaction: see HoldFair.)
	batch.Queue(`DELETE FROM fair_clock c WHERE c.subject = $1 AND c.vtime <= $2
		AND NOT EXISTS (SELECT FROM fair_queue f WHERE f.subject = c.subject AND f.fair_key = c.fair_key)`, subject, latest)
	return tx.SendBatch(ctx, batch).Close()
}

// fairWait explains an attempt held back for fairness: its key, since
// when, and how many attempts of its queue wait with it. ok is false when
// the attempt is not held.
func (s *Store) fairWait(ctx context.Context, in schemas.Instance) (step schemas.ExplainStep, ok bool, err error) {
	var (
		key, subject string
		at           time.Time
		waiting, own int
	)
	err = s.pool.QueryRow(ctx, `
		SELECT f.fair_key, f.subject, f.queued_at,
		       (SELECT count(*) FROM fair_queue w WHERE w.subject = f.subject),
		       (SELECT count(*) FROM fair_queue w WHERE w.subject = f.subject AND w.fair_key = f.fair_key AND w.seq < f.seq)
		FROM fair_queue f WHERE f.instance_id = $1 AND f.attempt = $2`, in.ID, in.Attempt).Scan(&key, &subject, &at, &waiting, &own)
	if errors.Is(err, pgx.ErrNoRows) {
		return step, false, nil
	}
	if err != nil {
		return step, false, fmt.Errorf("explain instance %d: read its fair queue: %w", in.ID, err)
	}
	return schemas.ExplainStep{At: at, Kind: "fair_wait", Actor: "dispatcher", Text: fmt.Sprintf(
		"attempt %d waits for its turn under the task's dispatch.fairness key %q: held by the dispatcher until %s has room, "+
			"with %d of the key's attempts before it and %d attempts of all keys held for that queue", in.Attempt, key, subject, own, waiting)}, true, nil
}
