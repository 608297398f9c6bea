package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"text/template"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ax-scheduler/ax/schemas"
)

// Named limits (schemas.Limit) are admitted here, in PostgreSQL, where
// every dispatcher's admissions to one limit become one sequence: each
// admission locks the rows of the limits it counts against (FOR UPDATE, in
// name order, so two never deadlock), counts their keys' use in statements
// of its own after the lock, decides, and writes before it commits. An
// instance holds a slot of a key while it is DISPATCHED, RUNNING or
// RETRYING (activeStates), so every path that ends an attempt — a report,
// the reaper after a lease lapsed, a cancel — frees the slot with the
// instance's state, and a crashed worker's slot comes back with its lease.
// The rate counts admissions over a sliding window of PostgreSQL's clock.

// RateLead is how long before a rate's window frees a slot the
// dispatcher's limiter calls [Store.PromoteLimited], which waits out the
// rest holding the limits' locks (see there).
const RateLead = 150 * time.Millisecond

// promoteScan is how many WAITING instances of one (limit, key) one
// promotion round looks at: enough for a round's admissions, few enough
// that one key's backlog does not fill the round.
const promoteScan = 200

// limitRule is a locked limit as admission reads it.
type limitRule struct {
	schemas.Limit
	paused   bool
	rate     int
	interval time.Duration
	key      *template.Template
}

// bounds returns key's concurrency and rate (0: unbounded) and interval.
func (r *limitRule) bounds(key string) (conc, rate int, interval time.Duration) {
	conc, rate, interval = r.Concurrency, r.rate, r.interval
	if o, ok := r.Overrides[key]; ok {
		if o.Concurrency > 0 {
			conc = o.Concurrency
		}
		if n, d, err := schemas.ParseRate(o.Rate); o.Rate != "" && err == nil {
			rate, interval = n, d
		}
	}
	return conc, rate, interval
}

// keyUse is one (limit, key)'s use, as counted under the limit's lock.
type keyUse struct {
	running, waiting int
	// admitted are the admissions within the limit's rate window, oldest
	// first.
	admitted []time.Time
}

// admission decides, under the locks of rules, which attempts start.
type admission struct {
	now   time.Time
	rules map[string]*limitRule
	use   map[[2]string]*keyUse
}

// lockLimits locks the rows of the limits named (in name order) and reads
// them, and PostgreSQL's clock after the locks.
func lockLimits(ctx context.Context, tx pgx.Tx, names []string) (*admission, error) {
	names = slices.Compact(slices.Sorted(slices.Values(names)))
	rows, err := tx.Query(ctx, `SELECT definition, paused FROM limits WHERE name = ANY($1) ORDER BY name FOR UPDATE`, names)
	if err != nil {
		return nil, fmt.Errorf("lock limits %v: %w", names, err)
	}
	a := &admission{rules: make(map[string]*limitRule), use: make(map[[2]string]*keyUse)}
	var (
		data   []byte
		paused bool
	)
	_, err = pgx.ForEachRow(rows, []any{&data, &paused}, func() error {
		r := &limitRule{paused: paused}
		if err := json.Unmarshal(data, &r.Limit); err != nil {
			return err
		}
		if r.Rate != "" {
			r.rate, r.interval, _ = schemas.ParseRate(r.Rate)
		}
		if r.Key != "" {
			if r.key, err = schemas.ParseLimitKey(r.Key); err != nil {
				return err
			}
		}
		a.rules[r.Name] = r
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("lock limits %v: %w", names, err)
	}
	if err := tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&a.now); err != nil {
		return nil, err
	}
	return a, nil
}

// renderKey renders limit name's key over payload; an unknown limit has
// the key "".
func (a *admission) renderKey(name string, payload json.RawMessage) (string, error) {
	r := a.rules[name]
	if r == nil || r.key == nil {
		return "", nil
	}
	var data any
	if len(payload) > 0 {
		if err := json.Unmarshal(payload, &data); err != nil {
			return "", err
		}
	}
	var b strings.Builder
	if err := r.key.Execute(&b, data); err != nil {
		return "", err
	}
	return b.String(), nil
}

// load counts the use of the (limit, key) pairs of a.
func (a *admission) load(ctx context.Context, tx pgx.Tx, pairs [][2]string) error {
	var names, keys []string
	var windows []int64
	for _, p := range pairs {
		if _, ok := a.use[p]; ok {
			continue
		}
		a.use[p] = &keyUse{}
		var window time.Duration
		if r := a.rules[p[0]]; r != nil {
			_, _, window = r.bounds(p[1])
		}
		names, keys, windows = append(names, p[0]), append(keys, p[1]), append(windows, window.Microseconds())
	}
	if len(names) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, `
SELECT p.l, p.k,
	(SELECT count(*) FROM instance_limits il JOIN instances i ON i.id = il.instance_id
		WHERE il.limit_name = p.l AND il.key = p.k AND il.admitted_at IS NOT NULL AND i.state IN `+activeStates+`),
	(SELECT count(*) FROM instance_limits il JOIN instances i ON i.id = il.instance_id
		WHERE il.limit_name = p.l AND il.key = p.k AND il.admitted_at IS NULL AND i.state = 'WAITING'),
	COALESCE((SELECT array_agg(il.admitted_at ORDER BY il.admitted_at) FROM instance_limits il
		WHERE p.w > 0 AND il.limit_name = p.l AND il.key = p.k
		AND il.admitted_at > $4::timestamptz - make_interval(secs => p.w / 1e6)), '{}')
FROM unnest($1::text[], $2::text[], $3::bigint[]) AS p(l, k, w)`, names, keys, windows, a.now)
	if err != nil {
		return fmt.Errorf("count the use of limits: %w", err)
	}
	var (
		l, k     string
		run, wai int
		times    []time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&l, &k, &run, &wai, &times}, func() error {
		a.use[[2]string{l, k}] = &keyUse{running: run, waiting: wai, admitted: slices.Clone(times)}
		return nil
	})
	if err != nil {
		return fmt.Errorf("count the use of limits: %w", err)
	}
	return nil
}

// check says why an attempt that counts against limits under keys (one
// each) may not start now, in words that stay the same while the cause
// does (a recorded wait is rewritten only when they change), what would
// end the wait, and, when only a rate holds it, when it may start (else
// zero); "" when every limit has room.
func (a *admission) check(limits, keys []string) (reason, ends string, retryAt time.Time) {
	for i, name := range limits {
		r, u := a.rules[name], a.use[[2]string{name, keys[i]}]
		if r == nil {
			return fmt.Sprintf("waiting for limit %s, which is not applied", name), "apply it with ax limit apply -f FILE", time.Time{}
		}
		if r.paused {
			return fmt.Sprintf("waiting for limit %s key %q: the limit is paused", name, keys[i]), "ax limit resume " + name, time.Time{}
		}
		conc, rate, interval := r.bounds(keys[i])
		if conc > 0 && u.running >= conc {
			return fmt.Sprintf("waiting for limit %s key %q: it runs its concurrency of %d", name, keys[i], conc),
				"a running attempt of the key ends", time.Time{}
		}
		if rate > 0 {
			from := a.now.Add(-interval)
			u.admitted = slices.DeleteFunc(u.admitted, func(t time.Time) bool { return !t.After(from) })
			if len(u.admitted) >= rate {
				return fmt.Sprintf("waiting for limit %s key %q: it admitted its rate of %s", name, keys[i], r.rateText(keys[i])),
					"the rate's window moves on", u.admitted[len(u.admitted)-rate].Add(interval)
			}
		}
	}
	return "", "", time.Time{}
}

// take counts an admitted attempt against limits under keys.
func (a *admission) take(limits, keys []string) {
	for i, name := range limits {
		u := a.use[[2]string{name, keys[i]}]
		u.running++
		u.admitted = append(u.admitted, a.now)
	}
}

func (r *limitRule) rateText(key string) string {
	if o, ok := r.Overrides[key]; ok && o.Rate != "" {
		return o.Rate
	}
	return r.Rate
}

// CreateAdmittedInstances creates the instances of a batch of firings of
// one task whose definition names limits: each firing due now
// (DISPATCHED) is admitted when every limit has room for its key and no
// instance of its keys waits before it, and is created WAITING otherwise,
// the limit and key it waits for as the reason of its CREATED→WAITING
// transition ([Store.PromoteLimited] starts it). A firing whose payload
// lacks a field a key names is SKIPPED with the reason. It returns the
// attempts to route, as [Store.CreateInstances].
func (s *Store) CreateAdmittedInstances(ctx context.Context, task string, limits []string, in []NewInstance) ([]Attempt, error) {
	limits = slices.Compact(slices.Sorted(slices.Values(limits)))
	var attempts []Attempt
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		a, err := lockLimits(ctx, tx, limits)
		if err != nil {
			return err
		}
		eventIDs := make([]string, len(in))
		for i, x := range in {
			eventIDs[i] = x.EventID
		}
		rows, err := tx.Query(ctx, `SELECT event_id FROM instances WHERE task = $1 AND event_id = ANY($2)`, task, eventIDs)
		if err != nil {
			return err
		}
		existing, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		decided := slices.Clone(in)
		keys, pairs := a.keysOf(limits, decided, existing)
		if err := a.load(ctx, tx, pairs); err != nil {
			return err
		}
		held := a.decideNew(limits, decided, keys)
		if attempts, err = createInstances(ctx, tx, decided, false); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `
INSERT INTO instance_limits (instance_id, limit_name, key, admitted_at)
SELECT i.id, u.l, u.k, CASE WHEN u.a THEN $6::timestamptz END
FROM unnest($2::text[], $3::text[], $4::text[], $5::bool[]) AS u(e, l, k, a)
JOIN instances i ON i.task = $1 AND i.event_id = u.e
ON CONFLICT DO NOTHING`, task, held.events, held.limits, held.keys, held.admitted, a.now)
		if err != nil || len(held.waits.events) == 0 {
			return err
		}
		_, err = tx.Exec(ctx, `
INSERT INTO instance_waits (instance_id, attempt, kind, reason, ends, since)
SELECT i.id, i.attempt, 'limit', u.r, u.e, $5::timestamptz
FROM unnest($2::text[], $3::text[], $4::text[]) AS u(ev, r, e)
JOIN instances i ON i.task = $1 AND i.event_id = u.ev AND i.state = 'WAITING'
ORDER BY 1
ON CONFLICT (instance_id) DO NOTHING`, task, held.waits.events, held.waits.reasons, held.waits.ends, a.now)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create %d instances of %s (limits %v): %w", len(in), task, limits, err)
	}
	return attempts, nil
}

// keysOf renders the keys of limits for each new firing due now of
// decided (not among existing), by firing (nil for the others), and lists
// the (limit, key) pairs. A firing whose payload a key cannot be rendered
// over is made SKIPPED with the reason.
func (a *admission) keysOf(limits []string, decided []NewInstance, existing []string) ([][]string, [][2]string) {
	keys := make([][]string, len(decided))
	var pairs [][2]string
	for i := range decided {
		x := &decided[i]
		if slices.Contains(existing, x.EventID) || x.State != schemas.StateDispatched {
			continue
		}
		keys[i] = make([]string, len(limits))
		for j, name := range limits {
			k, err := a.renderKey(name, x.Payload)
			if err != nil {
				x.State, x.Reason, keys[i] = schemas.StateSkipped, fmt.Sprintf("limit %s: its key %s cannot be rendered over the payload: %v",
					name, a.rules[name].Key, strings.TrimPrefix(err.Error(), "template: ")), nil
				break
			}
			keys[i][j] = k
			pairs = append(pairs, [2]string{name, k})
		}
	}
	return keys, pairs
}

// limitRows are the instance_limits rows of new firings, by event id.
type limitRows struct {
	events, limits, keys []string
	admitted             []bool
	// waits are the waits of the firings made WAITING.
	waits waitRows
}

// waitRows are instance_waits rows of kind limit: by event id (new
// firings) or by instance id.
type waitRows struct {
	events, reasons, ends []string
	ids                   []int64
}

// decideNew admits each new firing (keys[i] not nil) whose limits have
// room and whose keys have nothing waiting before it, and makes the others
// WAITING with the reason; it returns their instance_limits rows.
func (a *admission) decideNew(limits []string, decided []NewInstance, keys [][]string) limitRows {
	var out limitRows
	for i := range decided {
		x := &decided[i]
		if keys[i] == nil {
			continue
		}
		reason, ends, _ := a.check(limits, keys[i])
		for j, name := range limits {
			if u := a.use[[2]string{name, keys[i][j]}]; reason == "" && u.waiting > 0 {
				reason = fmt.Sprintf("waiting for limit %s key %q: instances of the key that came before it wait first", name, keys[i][j])
				ends = "the instances before it start"
			}
		}
		ok := reason == ""
		if ok {
			a.take(limits, keys[i])
		} else {
			x.State, x.Reason = schemas.StateWaiting, reason
			for j, name := range limits {
				a.use[[2]string{name, keys[i][j]}].waiting++
			}
			w := &out.waits
			w.events, w.reasons, w.ends = append(w.events, x.EventID), append(w.reasons, reason), append(w.ends, ends)
		}
		for j, name := range limits {
			out.events, out.limits = append(out.events, x.EventID), append(out.limits, name)
			out.keys, out.admitted = append(out.keys, keys[i][j]), append(out.admitted, ok)
		}
	}
	return out
}

// PromoteLimited starts the WAITING instances that their limits now admit,
// oldest first within each key (WAITING → DISPATCHED), and returns their
// attempts to route and how long until a rate that holds one may admit
// it (0 when none does, or when a key's backlog needs another round at
// once). Any number of dispatchers may call it at once: they take the
// limits' locks in turn. When nothing waits on a limit it costs one
// statement, a look at the WAITING instances outside a transaction (a
// dispatcher's limiter runs a round after every batch of ends); what
// waits is read again in the transaction that admits it.
func (s *Store) PromoteLimited(ctx context.Context) (attempts []Attempt, next time.Duration, more bool, err error) {
	cands, err := waitingCandidates(ctx, s.pool)
	if err != nil || len(cands) == 0 {
		if err != nil {
			err = fmt.Errorf("promote instances waiting for limits: %w", err)
		}
		return nil, 0, false, err
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		cands, err := waitingCandidates(ctx, tx)
		if err != nil || len(cands) == 0 {
			return err
		}
		var names []string
		var pairs [][2]string
		for _, c := range cands {
			names = append(names, c.limits...)
			for j := range c.limits {
				pairs = append(pairs, [2]string{c.limits[j], c.keys[j]})
			}
		}
		a, err := lockLimits(ctx, tx, names)
		if err != nil {
			return err
		}
		if err := a.load(ctx, tx, pairs); err != nil {
			return err
		}
		ids, soonest, waits := a.decideWaiting(cands, &more)
		// A rate's window that frees within RateLead is waited for here,
		// under the lock, and the clock read again: the limiter wakes that
		// much early, so the round's own statements do not make every
		// window start late (which would lower the rate by their time).
		if wait := soonest.Sub(a.now); len(ids) == 0 && !soonest.IsZero() && wait <= RateLead {
			time.Sleep(wait)
			if err := tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&a.now); err != nil {
				return err
			}
			ids, soonest, waits = a.decideWaiting(cands, &more)
		}
		if !soonest.IsZero() {
			next = max(soonest.Sub(a.now), time.Millisecond)
		}
		if err := recordLimitWaits(ctx, tx, waits, a.now); err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil
		}
		attempts, err = admitWaiting(ctx, tx, ids, a.now)
		return err
	})
	if err != nil {
		return nil, 0, false, fmt.Errorf("promote instances waiting for limits: %w", err)
	}
	return attempts, next, more, nil
}

// candidate is a WAITING instance with the limits (by name) and keys it
// counts against.
type candidate struct {
	id           int64
	limits, keys []string
}

// waitingCandidates returns the oldest promoteScan WAITING instances of
// each (limit, key), by id.
func waitingCandidates(ctx context.Context, q querier) ([]candidate, error) {
	rows, err := q.Query(ctx, `
WITH w AS (
	SELECT il.instance_id, row_number() OVER (PARTITION BY il.limit_name, il.key ORDER BY il.instance_id) AS rn
	`+waitingOnLimits+`
)
SELECT il.instance_id, array_agg(il.limit_name ORDER BY il.limit_name), array_agg(il.key ORDER BY il.limit_name)
FROM instance_limits il WHERE il.instance_id IN (SELECT instance_id FROM w WHERE rn <= $1)
GROUP BY il.instance_id ORDER BY il.instance_id`, promoteScan)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (candidate, error) {
		var c candidate
		err := row.Scan(&c.id, &c.limits, &c.keys)
		return c, err
	})
}

// decideWaiting admits, oldest first, the candidates whose limits have
// room, and returns their ids and the soonest moment a rate lets one of
// the others in (zero: none); *more is set when a key filled its scan.
func (a *admission) decideWaiting(cands []candidate, more *bool) (ids []int64, soonest time.Time, waits waitRows) {
	perPair := make(map[[2]string]int)
	for _, c := range cands {
		reason, ends, at := a.check(c.limits, c.keys)
		if reason != "" {
			waits.ids, waits.reasons, waits.ends = append(waits.ids, c.id), append(waits.reasons, reason), append(waits.ends, ends)
			if !at.IsZero() && (soonest.IsZero() || at.Before(soonest)) {
				soonest = at
			}
			continue
		}
		a.take(c.limits, c.keys)
		ids = append(ids, c.id)
		for j := range c.limits {
			p := [2]string{c.limits[j], c.keys[j]}
			if perPair[p]++; perPair[p] >= promoteScan {
				*more = true
			}
		}
	}
	return ids, soonest, waits
}

// recordLimitWaits writes the wait reasons of the WAITING instances w
// names, only where they changed (the reasons hold no counts, so a wait
// whose cause stays is not rewritten each round).
func recordLimitWaits(ctx context.Context, tx pgx.Tx, w waitRows, now time.Time) error {
	if len(w.ids) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `
INSERT INTO instance_waits (instance_id, attempt, kind, reason, ends, since)
SELECT i.id, i.attempt, 'limit', u.r, u.e, $4::timestamptz
FROM unnest($1::bigint[], $2::text[], $3::text[]) AS u(id, r, e)
JOIN instances i ON i.id = u.id AND i.state = 'WAITING'
ORDER BY 1
ON CONFLICT (instance_id) DO UPDATE SET attempt = EXCLUDED.attempt, kind = EXCLUDED.kind, reason = EXCLUDED.reason,
	ends = EXCLUDED.ends, since = EXCLUDED.since
WHERE instance_waits.reason IS DISTINCT FROM EXCLUDED.reason OR instance_waits.kind IS DISTINCT FROM EXCLUDED.kind`,
		w.ids, w.reasons, w.ends, now)
	if err != nil {
		return fmt.Errorf("record the waits for limits: %w", err)
	}
	return nil
}

// admitWaiting moves the instances ids from WAITING to DISPATCHED,
// admitted at now, and returns their attempts.
func admitWaiting(ctx context.Context, tx pgx.Tx, ids []int64, now time.Time) ([]Attempt, error) {
	rows, err := tx.Query(ctx, `
WITH lk AS (
	-- In id order, as every batch statement locks (see reportRows.record).
	SELECT id FROM instances WHERE id = ANY($1) AND state = 'WAITING' ORDER BY id FOR UPDATE
), upd AS (
	UPDATE instances i SET state = 'DISPATCHED', dispatched_at = clock_timestamp(), updated_at = now()
	FROM lk WHERE i.id = lk.id AND i.state = 'WAITING'
	RETURNING i.*
), tr AS (
	INSERT INTO instance_transitions (instance_id, task, from_state, to_state, attempt, operator, reason)
	SELECT id, task, 'WAITING', 'DISPATCHED', attempt, 'dispatcher', 'admitted by its limits'
	FROM upd
), adm AS (
	UPDATE instance_limits SET admitted_at = $2 WHERE instance_id IN (SELECT id FROM upd)
), unwait AS (
	DELETE FROM instance_waits WHERE instance_id IN (SELECT id FROM upd)
)
SELECT `+attemptColumns("upd")+` FROM upd ORDER BY id`, ids, now)
	if err != nil {
		return nil, err
	}
	return collectAttempts(rows)
}

// ForgetLimitAdmissions deletes the limit rows of instances that ended
// (or left for the history) and were admitted longer than an hour ago (the
// longest rate interval): they count against nothing any more. It deletes
// at most 10,000 rows a call and returns how many it deleted.
func (s *Store) ForgetLimitAdmissions(ctx context.Context) (int64, error) {
	tag, err := s.pool.Exec(ctx, `
DELETE FROM instance_limits WHERE ctid IN (
	SELECT il.ctid FROM instance_limits il LEFT JOIN instances i ON i.id = il.instance_id
	WHERE il.admitted_at < now() - interval '1 hour' AND (i.id IS NULL OR i.state NOT IN `+activeStates+`)
	LIMIT 10000)`)
	if err != nil {
		return 0, fmt.Errorf("forget old limit admissions: %w", err)
	}
	return tag.RowsAffected(), nil
}

// ApplyLimit creates or replaces the limit l (checked with
// [schemas.Limit.Problems] by the caller) and returns it with its use. A
// limit applied with paused: false stays paused when it is paused: pause
// and resume say that ([Store.SetLimitPaused]), so applying a file again
// never resumes by surprise; one applied with paused: true is paused.
func (s *Store) ApplyLimit(ctx context.Context, l schemas.Limit) (schemas.LimitUsage, error) {
	paused := l.Paused
	l.Paused = false
	data, err := json.Marshal(l)
	if err != nil {
		return schemas.LimitUsage{}, err
	}
	if _, err := s.pool.Exec(ctx, `
INSERT INTO limits (name, definition, paused) VALUES ($1, $2, $3)
ON CONFLICT (name) DO UPDATE SET definition = EXCLUDED.definition, paused = limits.paused OR EXCLUDED.paused, updated_at = now()`,
		l.Name, data, paused); err != nil {
		return schemas.LimitUsage{}, fmt.Errorf("apply limit %s: %w", l.Name, err)
	}
	return s.GetLimit(ctx, l.Name)
}

// SetLimitPaused pauses or resumes the limit called name. An unknown limit
// is an error wrapping [ErrNotFound].
func (s *Store) SetLimitPaused(ctx context.Context, name string, paused bool) (schemas.LimitUsage, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE limits SET paused = $2, updated_at = now() WHERE name = $1`, name, paused)
	if err == nil && tag.RowsAffected() == 0 {
		err = fmt.Errorf("limit %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return schemas.LimitUsage{}, fmt.Errorf("set limit %s paused=%t: %w", name, paused, err)
	}
	return s.GetLimit(ctx, name)
}

// DeleteLimit deletes the limit called name: what waits for it waits until
// a limit of that name is applied again. An unknown limit is an error
// wrapping [ErrNotFound].
func (s *Store) DeleteLimit(ctx context.Context, name string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM limits WHERE name = $1`, name)
	if err == nil && tag.RowsAffected() == 0 {
		err = fmt.Errorf("limit %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("delete limit %s: %w", name, err)
	}
	return nil
}

// GetLimit returns the limit called name with its use; an unknown limit
// is an error wrapping [ErrNotFound].
func (s *Store) GetLimit(ctx context.Context, name string) (schemas.LimitUsage, error) {
	out, err := s.listLimits(ctx, name)
	if err == nil && len(out) == 0 {
		err = fmt.Errorf("limit %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return schemas.LimitUsage{}, err
	}
	return out[0], nil
}

// ListLimits returns every limit with its use, by name: running and
// waiting over all keys, the admissions in the last second, and the
// 20 busiest keys.
func (s *Store) ListLimits(ctx context.Context) ([]schemas.LimitUsage, error) {
	return s.listLimits(ctx, "")
}

// maxKeysShown is how many keys of a limit a listing shows (and the
// metrics label, the rest counted as "other").
const maxKeysShown = 20

func (s *Store) listLimits(ctx context.Context, name string) ([]schemas.LimitUsage, error) {
	rows, err := s.pool.Query(ctx, `
SELECT l.definition, l.paused, l.updated_at,
	COALESCE((SELECT json_agg(json_build_object('key', k.key, 'running', k.r, 'waiting', k.w) ORDER BY k.r + k.w DESC, k.key)
		FROM (SELECT il.key, count(*) FILTER (WHERE i.state IN `+activeStates+` AND il.admitted_at IS NOT NULL) AS r,
			count(*) FILTER (WHERE i.state = 'WAITING') AS w
			FROM instance_limits il JOIN instances i ON i.id = il.instance_id
			WHERE il.limit_name = l.name AND i.state IN ('WAITING', 'DISPATCHED', 'RUNNING', 'RETRYING')
			GROUP BY il.key) k), '[]'),
	(SELECT count(*) FROM instance_limits il WHERE il.limit_name = l.name AND il.admitted_at > now() - $2::interval)
FROM limits l WHERE $1 = '' OR l.name = $1 ORDER BY l.name`, name, "1 second")
	if err != nil {
		return nil, fmt.Errorf("list limits: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (schemas.LimitUsage, error) {
		var u schemas.LimitUsage
		var def, keys []byte
		if err := row.Scan(&def, &u.Paused, &u.UpdatedAt, &keys, &u.AdmittedLastSecond); err != nil {
			return u, err
		}
		paused := u.Paused
		if err := json.Unmarshal(def, &u.Limit); err != nil {
			return u, err
		}
		u.Paused = paused
		if err := json.Unmarshal(keys, &u.Keys); err != nil {
			return u, err
		}
		for _, k := range u.Keys {
			u.Running, u.Waiting = u.Running+k.Running, u.Waiting+k.Waiting
		}
		if len(u.Keys) > maxKeysShown {
			u.Keys = u.Keys[:maxKeysShown]
		}
		return u, nil
	})
	if err != nil {
		return nil, fmt.Errorf("list limits: %w", err)
	}
	return out, nil
}
