package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ax-scheduler/ax/schemas"
)

// Outcome is what became of one report (or lease expiry) handed to
// [Store.ApplyReports] or [Store.FailAttempts].
type Outcome struct {
	InstanceID int64
	// Attempt is the attempt the report spoke of.
	Attempt int
	// Applied is true when the report changed the instance; false when it was
	// stale (another attempt is current) or already applied.
	Applied bool
	// The instance as it is now (when Applied) or was found (when not).
	Task           string
	State          schemas.State
	CurrentAttempt int
	MaxAttempts    int
	RetryPolicy    schemas.Retry
	WorkerID       string
	// RunID is the instance's run (see [Store.ChainFirings]).
	RunID string
	// ParentID is the parent of a shard or broadcast child; 0 otherwise.
	ParentID int64
	// Pool and Handler are the instance's pool (several joined with
	// schemas.PoolSep) and handler: what a refused report is told apart by.
	Pool, Handler string
	// Found is false when no instance has that id.
	Found bool
	// Trace is the instance's trace context (see [Attempt.Trace]): the
	// parent of the spans of what the reaper does to it.
	Trace Trace
}

// ApplyReports records a batch of executor reports in one statement: a
// started report moves its instance DISPATCHED → RUNNING, a final one
// RUNNING → SUCCEEDED | RETRYING | FAILED (a released one, an attempt
// handed back, RUNNING → RETRYING with max_attempts one higher, so that the
// hand-back spends no attempt), and the started and final reports
// of one attempt in the same batch — the common case under load — make both
// transitions with one update of the instance. Each write is guarded by
// state and attempt, so a report from a stale attempt, or one applied before,
// changes nothing; so does one that is not from the attempt's pool and
// holder (see holderCheck). A final report that comes without a started
// report before it — the executor sends none for a short attempt, and the
// two may reach different dispatchers — also records the RUNNING
// transition. The reports of one attempt in a batch must come from one
// worker (the dispatcher defers the others to a later batch). Outcomes come
// one per report, in the order of started, then final.
func (s *Store) ApplyReports(ctx context.Context, started, final []schemas.Report) ([]Outcome, error) {
	var rows reportRows
	var ops operators
	for _, r := range started {
		rows.add(reportRow{id: r.InstanceID, attempt: r.Attempt, workerID: r.WorkerID, pool: r.Pool, handlers: grantList(r.Handlers),
			operator: ops.of(r.WorkerID), started: true, startedAt: r.StartedAt})
	}
	for _, r := range final {
		errText := r.Error
		if r.Kind == schemas.ReportReleased {
			errText = handedBackReason(errText)
		}
		rows.add(reportRow{id: r.InstanceID, attempt: r.Attempt, workerID: r.WorkerID, pool: r.Pool, handlers: grantList(r.Handlers),
			operator: ops.of(r.WorkerID), final: true, ok: r.Kind == schemas.ReportSucceeded, released: r.Kind == schemas.ReportReleased, output: r.Output,
			errText: errText, permanent: r.Permanent && r.Kind == schemas.ReportFailed, startedAt: r.StartedAt, finishedAt: r.At,
			impliesRunning: true})
	}
	out, err := rows.record(ctx, s.pool)
	if err != nil {
		return nil, fmt.Errorf("apply %d reports: %w", len(started)+len(final), err)
	}
	return out, nil
}

// Failure is an attempt the dispatcher itself fails: its lease expired, or
// it outlived its timeout.
type Failure struct {
	InstanceID int64
	Attempt    int
	// Reason is recorded as the instance's error and the transition's reason.
	Reason string
	At     time.Time
	// Permanent fails the instance with no retry: the failure would
	// repeat on every attempt (a dispatch message over the NATS max
	// payload).
	Permanent bool
	// NotCounted moves the instance to RETRYING whatever its attempts
	// left, with max_attempts one higher: the attempt spends none of the
	// task's (a worker death, see [Store.CountDeaths]). Its
	// Reason should begin with [NotCountedReasonPrefix].
	NotCounted bool
	// Quarantine fails the instance whatever its attempts left (workers
	// kept dying while running it).
	Quarantine bool
}

// FailAttempts fails attempts that are DISPATCHED or RUNNING, as the reaper:
// each moves to RETRYING, or FAILED when its attempts are spent (see
// [Failure.NotCounted] and [Failure.Quarantine]). A failure of
// an attempt that already ended, or is no longer current, changes nothing.
func (s *Store) FailAttempts(ctx context.Context, in []Failure) ([]Outcome, error) {
	var rows reportRows
	for _, f := range in {
		rows.add(reportRow{id: f.InstanceID, attempt: f.Attempt, operator: OperatorReaper, final: true, errText: f.Reason,
			finishedAt: f.At, released: f.NotCounted && !f.Quarantine, permanent: f.Permanent || f.Quarantine})
	}
	out, err := rows.record(ctx, s.pool)
	if err != nil {
		return nil, fmt.Errorf("fail %d attempts: %w", len(in), err)
	}
	return out, nil
}

// UnfinishedAttempts returns those of in whose instance is still DISPATCHED
// or RUNNING at that attempt, in the order of in: the reaper's candidates
// that it must look at before failing them. One query.
func (s *Store) UnfinishedAttempts(ctx context.Context, in []Failure) ([]Failure, error) {
	if len(in) == 0 {
		return nil, nil
	}
	ids, attempts := make([]int64, len(in)), make([]int32, len(in))
	for i, f := range in {
		ids[i], attempts[i] = f.InstanceID, int32(f.Attempt)
	}
	rows, err := s.pool.Query(ctx, `
SELECT DISTINCT i.id, i.attempt FROM unnest($1::bigint[], $2::int[]) AS r(id, attempt)
JOIN instances i ON i.id = r.id AND i.attempt = r.attempt
WHERE i.state IN ('DISPATCHED', 'RUNNING')`, ids, attempts)
	if err != nil {
		return nil, fmt.Errorf("list unfinished attempts: %w", err)
	}
	live := make(map[[2]int64]bool)
	for rows.Next() {
		var id int64
		var attempt int32
		if err := rows.Scan(&id, &attempt); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list unfinished attempts: %w", err)
		}
		live[[2]int64{id, int64(attempt)}] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list unfinished attempts: %w", err)
	}
	var out []Failure
	for _, f := range in {
		if k := [2]int64{f.InstanceID, int64(f.Attempt)}; live[k] {
			out = append(out, f)
			delete(live, k)
		}
	}
	return out, nil
}

// StaleReport is a report the dispatcher refused because its attempt was
// fenced out, for the instance's timeline.
type StaleReport struct {
	InstanceID int64
	Attempt    int
	Kind       schemas.ReportKind
	WorkerID   string
	Reason     string
	At         time.Time
	// Refused marks a report refused because it came from another pool or
	// another worker than the attempt's (event kind refused_<report kind>)
	// rather than from a fenced-out attempt.
	Refused bool
}

// RecordStaleReports adds an event to the timeline of each instance that a
// stale report was refused for: kind stale_<report kind> (refused_<report
// kind> for a report of another pool or worker), operator the
// reporting worker. One event per attempt and kind: a redelivered report
// adds none. Events are not transitions and are not relayed to AX_AUDIT.
func (s *Store) RecordStaleReports(ctx context.Context, in []StaleReport) error {
	events := make([]Event, len(in))
	for i, r := range in {
		prefix := "stale_"
		if r.Refused {
			prefix = "refused_"
		}
		events[i] = Event{InstanceID: r.InstanceID, Attempt: r.Attempt, Kind: prefix + string(r.Kind), Reason: r.Reason, At: r.At}
		if r.WorkerID != "" {
			events[i].Operator = WorkerOperator(r.WorkerID)
		}
	}
	return s.RecordEvents(ctx, events)
}

// instanceEvents returns the events of an instance, oldest first.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// impliedStartReason is the reason of a DISPATCHED → RUNNING transition
// that a final report recorded: the executor sends no started report for an
// attempt that ends soon enough, or it was overtaken.
const impliedStartReason = "recorded with the final report: no started report was recorded before it"

// reportRow is what the reports (or failures) of one attempt in a batch
// ask of its instance: to start it (started), to end it (final), or both.
type reportRow struct {
	id       int64
	attempt  int
	workerID string
	// pool is the pool the reports came from; "" for the dispatcher's own
	// failures, which any attempt may take.
	pool string
	// handlers are the handlers the reporting worker's credential grants
	// in pool, space-separated (see holderCheck).
	handlers string
	operator string
	started  bool
	final    bool
	// The end, when final: it succeeded (ok), or failed with errText, or
	// was handed back (released) with errText as the reason: RETRYING
	// whatever the attempts left, and max_attempts one higher, so that the
	// next attempt spends none of the task's.
	ok         bool
	released   bool
	output     json.RawMessage
	errText    string
	permanent  bool
	startedAt  time.Time
	finishedAt time.Time
	// impliesRunning records DISPATCHED → RUNNING before the end when the
	// instance is still DISPATCHED and no started report is in the batch
	// (none was sent, or the final report overtook it).
	impliesRunning bool
	// reports are the positions in the batch of the reports this row holds,
	// each with whether it was a final one.
	reports []reportRef
}

type reportRef struct {
	pos   int
	final bool
}

// reportRows gathers a batch's reports into one row per attempt.
type reportRows struct {
	rows  []reportRow
	index map[[2]int64]int
	n     int
}

// add merges r into the row of its attempt: a started report and a final
// one become one row; of two final reports of one attempt (a redelivery),
// the first is the one applied, the second is answered as a report applied
// before.
func (b *reportRows) add(r reportRow) {
	if b.index == nil {
		b.index = make(map[[2]int64]int)
	}
	ref := reportRef{pos: b.n, final: r.final}
	b.n++
	k := [2]int64{r.id, int64(r.attempt)}
	i, ok := b.index[k]
	if !ok {
		r.reports = []reportRef{ref}
		b.index[k] = len(b.rows)
		b.rows = append(b.rows, r)
		return
	}
	row := &b.rows[i]
	row.reports = append(row.reports, ref)
	switch {
	case r.final && !row.final:
		row.final, row.ok, row.released, row.output, row.errText, row.permanent = true, r.ok, r.released, r.output, r.errText, r.permanent
		row.finishedAt, row.impliesRunning = r.finishedAt, r.impliesRunning
		if r.workerID != "" {
			row.workerID, row.operator = r.workerID, r.operator
		}
		if !r.startedAt.IsZero() {
			row.startedAt = r.startedAt
		}
	case r.started && !row.started:
		row.started = true
		if row.startedAt.IsZero() {
			row.startedAt = r.startedAt
		}
	}
}

// record writes the rows in one statement and returns one outcome per report
// added, in the order they were added.
//
// Every batch statement that writes instances locks its rows in one global
// order — by id — before it changes them: a CTE over lockedInstances that
// the UPDATE joins. Two batches over the same rows then wait for one
// another instead of deadlocking, whatever order their input came in. A
// transaction of several such statements would have to lock the union
// first, since two statements each in order are not in order together:
// which is why the started and final reports of a batch are one statement.
//
// The lock is taken on every instance a report names, whatever its state,
// and the outcome of a report not applied is the instance as locked (cur),
// not as the statement's snapshot had it: a report that waited for the
// lock of a cancel (or of the reaper's failure) would otherwise be
// answered with the instance before it — DISPATCHED with no worker yet,
// or still RUNNING — and the dispatcher, which tells a stale report from
// a refused one by the outcome, would count the holder's report as
// another worker's and never tell the worker to stop the attempt.
func (b *reportRows) record(ctx context.Context, q batchQuerier) ([]Outcome, error) {
	if len(b.rows) == 0 {
		return nil, nil
	}
	var results map[[2]int64]rowOutcome
	if err := queryWith(ctx, q, byKey, func(rows pgx.Rows) (err error) {
		results, err = collectRowOutcomes(rows)
		return err
	}, recordReportsSQL, b.args()...); err != nil {
		return nil, fmt.Errorf("record reports: %w", err)
	}
	return b.outcomes(results)
}

// args are the rows as the columns of recordReportsSQL, one array each.
func (b *reportRows) args() []any {
	n := len(b.rows)
	var (
		ids, attempts, pools     = make([]int64, n), make([]int32, n), make([]string, n)
		grants                   = make([]string, n)
		workers, operators, errs = make([]string, n), make([]string, n), make([]string, n)
		starts, finals, oks      = make([]bool, n), make([]bool, n), make([]bool, n)
		permanents, implies      = make([]bool, n), make([]bool, n)
		released                 = make([]bool, n)
		outputs                  = make([][]byte, n)
		startedAt, finishedAt    = make([]*time.Time, n), make([]*time.Time, n)
	)
	for i := range b.rows {
		r := &b.rows[i]
		ids[i], attempts[i], workers[i], operators[i], errs[i] = r.id, int32(r.attempt), r.workerID, r.operator, r.errText
		pools[i], grants[i] = r.pool, r.handlers
		starts[i], finals[i], oks[i], permanents[i], implies[i] = r.started, r.final, r.ok, r.permanent, r.impliesRunning
		released[i] = r.released
		if len(r.output) > 0 {
			outputs[i] = r.output
		}
		if !r.startedAt.IsZero() {
			startedAt[i] = &r.startedAt
		}
		if r.final {
			finishedAt[i] = &r.finishedAt
		}
	}
	return []any{ids, attempts, textArray(workers), textArray(operators), starts, finals, oks, outputs, textArray(errs), permanents, timeArray(startedAt), timeArray(finishedAt), implies, textArray(pools),
		released, textArray(grants)}
}

// outcomes answers each report added from the outcome of its row: in
// results, keyed by instance and attempt.
func (b *reportRows) outcomes(results map[[2]int64]rowOutcome) ([]Outcome, error) {
	out := make([]Outcome, b.n)
	for _, r := range b.rows {
		res, ok := results[[2]int64{r.id, int64(r.attempt)}]
		if !ok {
			return nil, fmt.Errorf("record reports: no outcome for instance %d attempt %d", r.id, r.attempt)
		}
		var tookFinal, tookStart bool
		for _, ref := range r.reports {
			o := res.Outcome
			switch {
			case !res.Applied:
			case ref.final:
				// The first final report ended the attempt; another is a
				// second delivery, answered as one applied before.
				o.Applied, tookFinal = !tookFinal, true
			default:
				// The started report moved the instance to RUNNING when
				// it was DISPATCHED; one that found it RUNNING already,
				// or came twice, changed nothing.
				o.Applied = !tookStart && (!r.final || res.oldState == schemas.StateDispatched)
				tookStart = true
				if !o.Applied {
					o.State = schemas.StateRunning
				}
			}
			out[ref.pos] = o
		}
	}
	return out, nil
}

// recordReportsSQL is the statement of [reportRows.record]: it locks the
// named instances by id, applies the reports their holder may make, writes
// the transitions, and returns one row per report row — applied (true,
// the state before) or not (false, the instance as locked).
var recordReportsSQL = `
WITH r AS (
	SELECT * FROM unnest($1::bigint[], $2::int[], $3::text[], $4::text[], $5::bool[], $6::bool[], $7::bool[],
		$8::jsonb[], $9::text[], $10::bool[], $11::timestamptz[], $12::timestamptz[], $13::bool[], $14::text[], $15::bool[], $16::text[])
	AS t(id, attempt, worker_id, operator, started, final, ok, output, error, permanent, started_at, finished_at,
		implies_running, pool, released, handlers)
), cur AS (
	SELECT i.* FROM ` + lockedInstances("r") + `
), old AS (
	-- The reports to apply, each with its instance's state: the update
	-- reads its reports from here, joined once. (Joined to r as well, the
	-- update scanned r once for each row: r is a CTE the planner expects
	-- ten rows of, and a batch has hundreds.)
	SELECT r.*, i.state AS old_state FROM cur i JOIN r ON r.id = i.id AND r.attempt = i.attempt
	WHERE (i.state = 'DISPATCHED' OR (r.final AND i.state = 'RUNNING')) AND (r.pool = '' OR ` + holderCheck + `)
), upd AS (
	UPDATE instances i SET
		state = CASE WHEN NOT r.final THEN 'RUNNING'
			WHEN r.ok THEN 'SUCCEEDED'
			WHEN r.released OR (NOT r.permanent AND i.attempt < i.max_attempts) THEN 'RETRYING'
			ELSE 'FAILED' END,
		max_attempts = CASE WHEN r.final AND r.released THEN i.max_attempts + 1 ELSE i.max_attempts END,
		output = CASE WHEN r.final THEN r.output ELSE i.output END,
		error = CASE WHEN r.final THEN r.error ELSE i.error END,
		worker_id = CASE WHEN r.worker_id <> '' THEN r.worker_id ELSE i.worker_id END,
		started_at = COALESCE(r.started_at, i.started_at),
		finished_at = CASE WHEN NOT r.final THEN i.finished_at
			WHEN r.released THEN NULL
			WHEN r.ok OR r.permanent OR i.attempt >= i.max_attempts THEN r.finished_at END,
		updated_at = now()
	FROM old r
	WHERE i.id = r.id AND i.attempt = r.attempt
	RETURNING i.id, i.task, i.state, i.attempt, i.max_attempts, i.retry_policy, i.worker_id, i.run_id, i.parent_id, i.pool, i.handler,
		i.traceparent, i.tracestate, i.error, r.old_state, r.operator AS by, r.final AS ends,
		r.final AND r.old_state = 'DISPATCHED' AND (r.started OR r.implies_running) AS via_running,
		r.started AS reported_start
), tr AS (
	-- An attempt that ends from DISPATCHED through RUNNING has both
	-- transitions in one row (see migration 00017).
	INSERT INTO instance_transitions (instance_id, task, from_state, to_state, attempt, operator, reason,
		then_state, then_operator, then_reason)
	SELECT id, task, 'DISPATCHED', 'RUNNING', attempt, by,
		CASE WHEN reported_start THEN '' ELSE '` + impliedStartReason + `' END,
		state, by, CASE WHEN ends THEN error ELSE '' END
	FROM upd WHERE via_running
	UNION ALL
	SELECT id, task, old_state, state, attempt, by, CASE WHEN ends THEN error ELSE '' END, NULL, NULL, NULL
	FROM upd WHERE NOT via_running
)
SELECT true, upd.old_state, upd.id, upd.attempt, ` + outcomeColumns("upd") + ` FROM upd
UNION ALL
SELECT false, '', r.id, r.attempt, ` + outcomeColumns("i") + `
FROM r LEFT JOIN cur i ON i.id = r.id
WHERE NOT EXISTS (SELECT 1 FROM upd WHERE upd.id = r.id AND upd.attempt = r.attempt)`

// lockedInstances is the FROM item of a batch statement's lock (see
// reportRows.record): the instances whose ids the relation ids holds, each
// found by the primary key alone and locked, in id order. The ids are
// sorted first and each instance is locked as it is looked up (a
// sub-select with a locking clause is never flattened into a join), so the
// locks follow the sort; the statement filters the rows it locked by
// their state (the latest version of each, as locked). OFFSET 0 keeps such
// a filter out of the look-up, where the partial index on live states
// would serve it by reading every instance in that state. Run with byKey,
// the lock reads no more of instances than the rows named, whatever the
// plan: a join of the table with the batch, planned when the table was
// small or its statistics stale (a generic plan kept since a quiet spell,
// or since the history mover emptied the table), scanned every hot
// instance for each batch (~1 ms a report statement of a few reports at a
// steady 500 firings/s).
func lockedInstances(ids string) string {
	return `(SELECT DISTINCT id FROM ` + ids + ` ORDER BY id) q
	CROSS JOIN LATERAL (SELECT * FROM instances i WHERE i.id = q.id OFFSET 0 FOR UPDATE OF i) i`
}

// holderCheck is the condition on instance i and report row r under which
// reports may change the instance: they come from the instance's pool (the
// pool their subject names, which NATS permissions bind to the publishing
// user), and from the worker that holds the attempt once one does (a
// started or final report recorded the worker); before one does, from a
// worker whose credential grants the attempt's handler in that pool
// (r.handlers, space-separated: the handlers its grant keys show,
// schemas.Report.Handlers), so that a worker of the pool cannot take an
// attempt of a handler it could never have pulled. A report that fails it
// is refused: the dispatcher counts and records it, and the instance stays
// as it was. An instance that any of several pools may run has them all as
// its pool, joined with schemas.PoolSep ("a|b"): a report from any of
// them is from the instance's pool.
const holderCheck = `(i.pool = r.pool OR r.pool = ANY(string_to_array(i.pool, '|'))) AND (i.worker_id = r.worker_id OR
	(i.worker_id = '' AND i.handler = ANY(string_to_array(r.handlers, ' '))))`

// grantList is handlers as holderCheck reads them: space-separated (a
// handler name has no space).
func grantList(handlers []string) string { return strings.Join(handlers, " ") }

// rowOutcome is the outcome of one row of [reportRows.record].
type rowOutcome struct {
	Outcome
	oldState schemas.State
}

func collectRowOutcomes(rows pgx.Rows) (map[[2]int64]rowOutcome, error) {
	defer rows.Close()
	out := make(map[[2]int64]rowOutcome)
	var policies retryPolicies
	var o rowOutcome
	var retry []byte
	w := words{}
	dest := []any{&o.Applied, &word[schemas.State]{&o.oldState, w}, &o.InstanceID, &o.Attempt, &o.Found,
		&word[string]{&o.Task, w}, &word[schemas.State]{&o.State, w}, &o.CurrentAttempt, &o.MaxAttempts, &retry,
		&word[string]{&o.WorkerID, w}, &o.RunID, &o.ParentID, &word[string]{&o.Pool, w}, &word[string]{&o.Handler, w},
		&o.Trace.Parent, &o.Trace.State}
	for rows.Next() {
		o, retry = rowOutcome{}, nil
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		var err error
		if o.RetryPolicy, err = policies.decode(retry); err != nil {
			return nil, fmt.Errorf("decode retry policy of instance %d: %w", o.InstanceID, err)
		}
		out[[2]int64{o.InstanceID, int64(o.Attempt)}] = o
	}
	return out, rows.Err()
}

func outcomeColumns(t string) string {
	return fmt.Sprintf(`%[1]s.id IS NOT NULL, COALESCE(%[1]s.task, ''), COALESCE(%[1]s.state, ''), COALESCE(%[1]s.attempt, 0),
	COALESCE(%[1]s.max_attempts, 0), COALESCE(%[1]s.retry_policy, '{}'), COALESCE(%[1]s.worker_id, ''),
	COALESCE(%[1]s.run_id, ''), COALESCE(%[1]s.parent_id, 0), COALESCE(%[1]s.pool, ''), COALESCE(%[1]s.handler, ''),
	COALESCE(%[1]s.traceparent, ''), COALESCE(%[1]s.tracestate, '')`, t)
}

// RunningAttempt names the current attempt of a RUNNING instance.
type RunningAttempt struct {
	InstanceID int64
	Attempt    int
	WorkerID   string
	Timeout    time.Duration
}

// RunningAttempts lists the RUNNING instances whose attempt started before since.
func (s *Store) RunningAttempts(ctx context.Context, since time.Time) ([]RunningAttempt, error) {
	rows, err := s.pool.Query(ctx,
		`SELECT id, attempt, worker_id, timeout_ms FROM instances WHERE state = 'RUNNING' AND started_at < $1 ORDER BY id`, since)
	if err != nil {
		return nil, fmt.Errorf("list running attempts: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanRunning)
	if err != nil {
		return nil, fmt.Errorf("list running attempts: %w", err)
	}
	return out, nil
}

// OverdueAttempts lists the RUNNING attempts that have outlived their timeout
// by more than grace. The query reads only the live instances' index.
func (s *Store) OverdueAttempts(ctx context.Context, grace time.Duration) ([]RunningAttempt, error) {
	rows, err := s.pool.Query(ctx, `
SELECT id, attempt, worker_id, timeout_ms FROM instances
WHERE state = 'RUNNING' AND started_at + (timeout_ms + $1::bigint) * interval '1 millisecond' < now()
ORDER BY id LIMIT 1000`, grace.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("list overdue attempts: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanRunning)
	if err != nil {
		return nil, fmt.Errorf("list overdue attempts: %w", err)
	}
	return out, nil
}

func scanRunning(row pgx.CollectableRow) (RunningAttempt, error) {
	var r RunningAttempt
	var timeoutMS int64
	err := row.Scan(&r.InstanceID, &r.Attempt, &r.WorkerID, &timeoutMS)
	r.Timeout = time.Duration(timeoutMS) * time.Millisecond
	return r, err
}

// AttemptState is what a fence question needs of an instance: its pool,
// state, current attempt and when that attempt was dispatched.
type AttemptState struct {
	Pool         string
	State        schemas.State
	Attempt      int
	DispatchedAt time.Time // zero if never dispatched
}

// GetAttemptState returns the pool, state, attempt and dispatch time of
// live instance id, or an error wrapping [ErrNotFound] when no live
// instance has that id (it never existed, or its history moved out of the
// hot tables: it ended long ago). One indexed read.
func (s *Store) GetAttemptState(ctx context.Context, id int64) (AttemptState, error) {
	var a AttemptState
	var dispatched *time.Time
	err := s.pool.QueryRow(ctx, `SELECT pool, state, attempt, dispatched_at FROM instances WHERE id = $1`, id).
		Scan(&a.Pool, &a.State, &a.Attempt, &dispatched)
	if errors.Is(err, pgx.ErrNoRows) {
		return a, fmt.Errorf("get attempt state of instance %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return a, fmt.Errorf("get attempt state of instance %d: %w", id, err)
	}
	if dispatched != nil {
		a.DispatchedAt = *dispatched
	}
	return a, nil
}

// Now returns PostgreSQL's clock: the time the times it records (such as
// dispatched_at) are compared with.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := s.pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("read the database's clock: %w", err)
	}
	return now, nil
}
