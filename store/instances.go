package store

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ax-scheduler/ax/schemas"
)

// Operators recorded on transitions the dispatcher makes by itself.
const (
	OperatorDispatcher = "dispatcher"
	OperatorReaper     = "reaper"
	// OperatorNATS is recorded for a firing that claims an operator (or a
	// manual source) but did not come on the API's subjects
	// (streams.Topology.APITrigger): the bus proves only that someone with
	// the right to publish firings sent it.
	OperatorNATS = "nats"
)

// WorkerOperator is the operator recorded on a transition an executor's report made.
func WorkerOperator(workerID string) string { return "worker:" + workerID }

// operators makes the WorkerOperator of a batch's reports, the last
// worker's again without a string of its own (a batch's reports mostly
// come from few workers, in runs).
type operators struct{ worker, operator string }

func (o *operators) of(workerID string) string {
	if o.operator == "" || o.worker != workerID {
		o.worker, o.operator = workerID, WorkerOperator(workerID)
	}
	return o.operator
}

// NewInstance is one instance for [Store.CreateInstances] to create: a
// firing of a task with the execution settings of the task's current version.
type NewInstance struct {
	Task        string
	TaskVersion int
	EventID     string
	Source      schemas.Source
	// Operator names who fired a manual run; it is recorded on the CREATED transition.
	Operator    string
	Priority    schemas.Priority
	Pool        string
	Handler     string
	TimeoutMS   int64
	MaxAttempts int
	RetryPolicy schemas.Retry
	Payload     json.RawMessage
	FiredAt     time.Time
	// MutexTemplate is the task's concurrency.mutex_key, rendered by the executor.
	MutexTemplate string
	// Route is how the instance's attempts reach an executor.
	Route
	// State is the state after CREATED: DISPATCHED, or SKIPPED or SHADOW with Reason.
	State  schemas.State
	Reason string
	// CreatedReason is recorded on the CREATED transition: why the firing
	// happened as it did ("rerun of instance 42"), or empty.
	CreatedReason string
	// RunID is the run the firing joins; empty starts a new one, named
	// schemas.RunIDPrefix + the new instance's id.
	RunID string
	// Parents tells how the parents of a chain firing ended; nil for others.
	Parents map[string]schemas.ParentResult
	// Shard places a child instance of a sharded or broadcast firing;
	// a parent has only its ShardCount (0 for broadcast until its
	// children are made).
	Shard
	// Trace is the trace context every attempt of the instance continues.
	Trace
	// TaskStamp is the Stamp of the task's record the instance was made
	// from, or empty: the instance is created only if the task's row is
	// still that version (see [IsTaskChanged]).
	TaskStamp string
}

// Trace is the W3C Trace Context of the span that created an instance
// (traceparent and tracestate header values, "" for none): each attempt's
// dispatch span is its child, so a retry scheduled from PostgreSQL
// continues the firing's trace.
type Trace struct {
	Parent string `json:"traceparent,omitempty"`
	State  string `json:"tracestate,omitempty"`
}

// creationBatch is a batch of firings as it travels to the creation
// statement, one JSON document: the settings the firings share (those of
// a task version, for a burst the same for every firing), each once, and
// each firing's own fields with the position of its settings. The JSON
// names are the instances table's columns; an empty field is left out and
// read as its column's default. The statement's parse of the batch is most
// of its time after its index entries.
type creationBatch struct {
	Settings []firingSettings `json:"settings"`
	Firings  []batchFiring    `json:"firings"`
}

type firingSettings struct {
	Task          string           `json:"task"`
	TaskVersion   int              `json:"task_version"`
	Source        schemas.Source   `json:"source"`
	Priority      schemas.Priority `json:"priority"`
	Pool          string           `json:"pool"`
	Handler       string           `json:"handler"`
	TimeoutMS     int64            `json:"timeout_ms"`
	MaxAttempts   int              `json:"max_attempts"`
	RetryPolicy   schemas.Retry    `json:"retry_policy,omitzero"`
	MutexTemplate string           `json:"mutex_template,omitempty"`
	TaskStamp     string           `json:"task_stamp,omitempty"`
	Route
}

type batchFiring struct {
	// Settings is the position of the firing's settings in the batch's.
	Settings      int                             `json:"settings"`
	EventID       string                          `json:"event_id"`
	Payload       json.RawMessage                 `json:"payload,omitempty"`
	FiredAt       time.Time                       `json:"fired_at"`
	Operator      string                          `json:"operator,omitempty"`
	State         schemas.State                   `json:"state"`
	Reason        string                          `json:"reason,omitempty"`
	CreatedReason string                          `json:"created_reason,omitempty"`
	RunID         string                          `json:"run_id,omitempty"`
	Parents       map[string]schemas.ParentResult `json:"parents,omitempty"`
	Shard
	Trace
}

// newCreationBatch encodes in, sorted and each key once, as a creationBatch.
func newCreationBatch(in []NewInstance) ([]byte, error) {
	var b creationBatch
	b.Firings = make([]batchFiring, len(in))
	index := make(map[firingSettings]int)
	for i, x := range in {
		// Retries with the same values but other pointers count as two
		// settings: the batch is larger, not wrong.
		set := firingSettings{Task: x.Task, TaskVersion: x.TaskVersion, Source: x.Source, Priority: x.Priority, Pool: x.Pool,
			Handler: x.Handler, TimeoutMS: x.TimeoutMS, MaxAttempts: x.MaxAttempts, RetryPolicy: x.RetryPolicy,
			MutexTemplate: x.MutexTemplate, TaskStamp: x.TaskStamp, Route: x.Route}
		pos, ok := index[set]
		if !ok {
			pos = len(b.Settings)
			index[set] = pos
			b.Settings = append(b.Settings, set)
		}
		b.Firings[i] = batchFiring{Settings: pos, EventID: x.EventID, Payload: x.Payload, FiredAt: x.FiredAt,
			Operator: x.Operator, State: x.State, Reason: x.Reason, CreatedReason: x.CreatedReason, RunID: x.RunID,
			Parents: x.Parents, Shard: x.Shard, Trace: x.Trace}
	}
	return json.Marshal(b)
}

// Shard places an instance among the children of a sharded or broadcast
// firing: ParentID is the firing's instance (0: not a child), ShardIndex
// counts from 0 to ShardCount-1.
type Shard struct {
	ParentID   int64 `json:"parent_id,omitempty"`
	ShardIndex int   `json:"shard_index,omitempty"`
	ShardCount int   `json:"shard_count,omitempty"`
}

// Route is how an instance's attempts reach an executor, fixed at its
// creation from the task's dispatch policy and min_worker_version.
type Route struct {
	// Strategy is the task's dispatch.strategy ("pull", "hash" or "worker").
	Strategy schemas.DispatchStrategy `json:"dispatch_strategy,omitempty"`
	// Key is the hash_key template with "hash", the worker id with
	// "worker", and empty with "pull".
	Key string `json:"dispatch_key,omitempty"`
	// MinWorkerVersion keeps older executors off the attempts; empty
	// admits every executor.
	MinWorkerVersion string `json:"min_worker_version,omitempty"`
}

// Attempt is an instance as the dispatcher needs it to route an attempt.
type Attempt struct {
	ID          int64
	Task        string
	TaskVersion int
	EventID     string
	State       schemas.State
	Attempt     int
	MaxAttempts int
	RetryPolicy schemas.Retry
	Priority    schemas.Priority
	Pool        string
	Handler     string
	TimeoutMS   int64
	Payload     json.RawMessage
	FiredAt     time.Time
	// DispatchedAt is when the current attempt was routed.
	DispatchedAt time.Time
	// MutexTemplate is the task's concurrency.mutex_key at creation.
	MutexTemplate string
	// Route is how the attempts reach an executor.
	Route
	// RunID is the instance's run; Parents how the parents of a chained
	// task ended in it (nil for an instance no chain fired).
	RunID   string
	Parents map[string]schemas.ParentResult
	// Source says what fired the instance.
	Source schemas.Source
	// Shard places a child of a sharded or broadcast firing.
	Shard
	// Republished says the attempt was DISPATCHED before the statement that
	// returned it (a redelivered firing or retry finding its instance
	// there): its dispatch message may have been published, and run,
	// before, so the one published now must not be run without the
	// dispatcher's word (see [schemas.Dispatch.Republished]).
	Republished bool
	// Trace is the trace context the instance's attempts continue.
	Trace
}

// attemptColumns lists the columns scanAttempt reads, of the table named t.
func attemptColumns(t string) string {
	return fmt.Sprintf(`%[1]s.id, %[1]s.task, %[1]s.task_version, %[1]s.event_id, %[1]s.state, %[1]s.attempt,
	%[1]s.max_attempts, %[1]s.retry_policy, %[1]s.priority, %[1]s.pool, %[1]s.handler, %[1]s.timeout_ms, %[1]s.payload,
	%[1]s.fired_at, COALESCE(%[1]s.dispatched_at, %[1]s.created_at), %[1]s.mutex_template, %[1]s.run_id, %[1]s.parents,
	%[1]s.dispatch_strategy, %[1]s.dispatch_key, %[1]s.min_worker_version, %[1]s.source,
	COALESCE(%[1]s.parent_id, 0), %[1]s.shard_index, %[1]s.shard_count, %[1]s.traceparent, %[1]s.tracestate`, t)
}

// attemptScanner reads rows of attemptColumns, and the column
// "republished" after them when marked is set (see [Attempt.Republished]),
// into one Attempt whose destinations it builds once for the statement.
// The low-variety text columns (task, state, pool, handler, …) go through
// one words, so a batch's rows share a few strings.
type attemptScanner struct {
	a              Attempt
	retry, parents []byte
	dest           []any
	policies       retryPolicies
}

func newAttemptScanner(marked bool) *attemptScanner {
	s := new(attemptScanner)
	a, w := &s.a, words{}
	s.dest = []any{&a.ID, &word[string]{&a.Task, w}, &a.TaskVersion, &a.EventID, &word[schemas.State]{&a.State, w},
		&a.Attempt, &a.MaxAttempts, &s.retry, &word[schemas.Priority]{&a.Priority, w}, &word[string]{&a.Pool, w},
		&word[string]{&a.Handler, w}, &a.TimeoutMS, &a.Payload, &a.FiredAt, &a.DispatchedAt,
		&word[string]{&a.MutexTemplate, w}, &a.RunID, &s.parents, &word[schemas.DispatchStrategy]{&a.Strategy, w},
		&a.Key, &word[string]{&a.MinWorkerVersion, w}, &word[schemas.Source]{&a.Source, w},
		&a.ParentID, &a.ShardIndex, &a.ShardCount, &a.Trace.Parent, &a.Trace.State}
	if marked {
		s.dest = append(s.dest, &a.Republished)
	}
	return s
}

func (s *attemptScanner) scan(row pgx.Row) (Attempt, error) {
	s.a, s.retry, s.parents = Attempt{}, nil, nil
	if err := row.Scan(s.dest...); err != nil {
		return Attempt{}, err
	}
	var err error
	if s.a.RetryPolicy, err = s.policies.decode(s.retry); err != nil {
		return Attempt{}, fmt.Errorf("decode retry policy of instance %d: %w", s.a.ID, err)
	}
	if len(s.parents) > 0 {
		if err := json.Unmarshal(s.parents, &s.a.Parents); err != nil {
			return Attempt{}, fmt.Errorf("decode parents of instance %d: %w", s.a.ID, err)
		}
	}
	return s.a, nil
}

// words keeps one string for each distinct value it is given.
type words map[string]string

func (w words) get(b []byte) string {
	if s, ok := w[string(b)]; ok {
		return s
	}
	s := string(b)
	w[s] = s
	return s
}

// word scans a text column into dst through words.
type word[T ~string] struct {
	dst   *T
	words words
}

func (x *word[T]) ScanBytes(b []byte) error {
	if b == nil {
		return fmt.Errorf("cannot scan NULL into %T", x.dst)
	}
	*x.dst = T(x.words.get(b))
	return nil
}

// CreateInstances creates the instances of a batch of firings in one
// statement, with their CREATED transition and the one after it (one
// instance_transitions row holds both). A firing
// without a RunID starts a run named after its new instance ("run-<id>").
// A firing whose (task, event_id) already has an instance creates nothing:
// its existing instance is returned, unless it moved to the history (see
// [Store.MoveHistory]): an ended instance has nothing left to route. An instance that another
// transaction is creating at the same moment is left out of the result: that
// transaction owns it.
func (s *Store) CreateInstances(ctx context.Context, in []NewInstance) ([]Attempt, error) {
	return createInstances(ctx, s.pool, in, true)
}

// Two ways to insert a batch's instances. A batch whose keys are all new —
// every batch of a burst — is inserted plainly (plainInsert): an INSERT …
// ON CONFLICT inserts each row speculatively and then confirms it, one more
// WAL record and a second probe of the unique index per instance. When the
// plain insert meets a key that exists (a redelivered firing) or that
// another transaction inserted meanwhile, the unique index refuses it, the
// statement changes nothing, and the batch is inserted again with ON
// CONFLICT (conflictInsert), which waits for that transaction, skips its
// keys and returns the instances that exist. The plain insert looks up no
// key itself: a look-up planned on the statistics of a table not yet
// analysed, as in a burst on a new database, was a scan of the whole table
// (or of the task's entries) per batch or per firing.
const (
	plainInsert    = `ORDER BY ord`
	conflictInsert = `-- A conflicting insert waits for the transaction that inserted the key
	-- first: in one global order (the batch's, by task and event_id: see
	-- createInstances), two batches never wait for each other.
	ORDER BY ord
	ON CONFLICT (task, event_id) DO NOTHING`
)

// createInstances inserts the batch with conflictInsert, or with plainInsert
// first when plain is set: q must then run each statement in a transaction
// of its own (a pool), since a refused plain insert aborts the transaction
// it runs in.
func createInstances(ctx context.Context, q batchQuerier, in []NewInstance, plain bool) ([]Attempt, error) {
	if len(in) == 0 {
		return nil, nil
	}
	n := len(in)
	// PostgreSQL keeps microseconds and rounds the text of a finer time;
	// truncate as pgx's binary encoding does, so fired_at never moves later.
	in = slices.Clone(in)
	for i := range in {
		in[i].FiredAt = in[i].FiredAt.Truncate(time.Microsecond)
	}
	// The statement inserts the batch in its order, which must be one
	// global order (see conflictInsert): by the bytes of task, then of
	// event_id, as COLLATE "C" compares them. A key given twice makes one
	// instance with one CREATED transition, of its first firing. Sorted
	// here, the statement sorts only the batch's positions, not its text.
	slices.SortStableFunc(in, func(a, b NewInstance) int {
		return cmp.Or(strings.Compare(a.Task, b.Task), strings.Compare(a.EventID, b.EventID))
	})
	in = slices.CompactFunc(in, func(a, b NewInstance) bool { return a.Task == b.Task && a.EventID == b.EventID })
	batch, err := newCreationBatch(in)
	if err != nil {
		return nil, fmt.Errorf("create %d instances: encode: %w", n, &DataError{err: err})
	}
	if plain {
		out, err := insertInstances(ctx, q, batch, len(in), plainInsert, false)
		if pe, ok := errors.AsType[*pgconn.PgError](err); !ok || pe.Code != "23505" || pe.ConstraintName != "instances_task_event_id_key" {
			if err != nil {
				return nil, fmt.Errorf("create %d instances: %w", n, err)
			}
			return out, nil
		}
	}
	out, err := insertInstances(ctx, q, batch, len(in), conflictInsert, true)
	if err != nil {
		return nil, fmt.Errorf("create %d instances: %w", n, err)
	}
	return out, nil
}

// creationInput is the head of the creation statement: the batch's
// settings and firings ($1, a creationBatch) as rows, each with its new
// instance's id (numbered), and the check of the tasks they were made from
// (changed).
const creationInput = `
WITH settings AS NOT MATERIALIZED (
	SELECT * FROM ROWS FROM (jsonb_to_recordset($1::jsonb -> 'settings') AS (task text, task_version int, source text,
		priority text, pool text, handler text, timeout_ms bigint, max_attempts int, retry_policy jsonb,
		mutex_template text, dispatch_strategy text, dispatch_key text, min_worker_version text, task_stamp text))
		WITH ORDINALITY AS s(task, task_version, source, priority, pool, handler, timeout_ms, max_attempts, retry_policy,
		mutex_template, dispatch_strategy, dispatch_key, min_worker_version, task_stamp, pos)
), changed AS (
	-- Settings made from a task's row as it was (task_stamp, its xmin)
	-- whose row has changed since: the first refuses the statement
	-- (IsTaskChanged) before the insert takes a row.
	SELECT ax_task_changed(s.task) FROM settings s
	WHERE s.task_stamp IS NOT NULL AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.name = s.task AND t.xmin::text = s.task_stamp)
), input AS (
	-- Each key once, sorted by key (see createInstances); ord is the position.
	SELECT settings.*, f.* FROM ROWS FROM (jsonb_to_recordset($1::jsonb -> 'firings') AS (settings int, event_id text,
		payload jsonb, fired_at timestamptz, operator text, state text, reason text, created_reason text, run_id text,
		parents jsonb, parent_id bigint, shard_index int, shard_count int, traceparent text, tracestate text))
		WITH ORDINALITY AS f(settings_pos, event_id, payload, fired_at, operator, state, reason, created_reason, run_id,
		parents, parent_id, shard_index, shard_count, traceparent, tracestate, ord)
	JOIN settings ON settings.pos = f.settings_pos + 1
), numbered AS (
	-- The id is drawn first so that a new run can be named after it. (The
	-- sequence named, not looked up by pg_get_serial_sequence: that is a
	-- scan of pg_depend for each row.)
	SELECT nextval('instances_id_seq'::regclass) AS id, input.* FROM input
`

// insertInstances runs the creation statement for the JSON batch, its
// instances inserted as how says (plainInsert or conflictInsert), and with
// the instances of the batch's keys that exist when existing is set.
func insertInstances(ctx context.Context, q batchQuerier, batch []byte, n int, how string, existing bool) ([]Attempt, error) {
	found := ""
	if existing {
		found = `
UNION ALL
SELECT ` + attemptColumns("i") + `, true FROM instances i JOIN input ON i.task = input.task AND i.event_id = input.event_id`
	}
	return queryGeneric(ctx, q, n, creationInput+`), ins AS (
	INSERT INTO instances (id, task, task_version, event_id, source, operator, state, max_attempts, retry_policy,
		priority, pool, handler, timeout_ms, payload, fired_at, mutex_template, dispatched_at, finished_at,
		run_id, parents, dispatch_strategy, dispatch_key, min_worker_version, parent_id, shard_index, shard_count,
		traceparent, tracestate)
	OVERRIDING SYSTEM VALUE
	SELECT id, task, task_version, event_id, source, COALESCE(operator, ''), state, max_attempts, COALESCE(retry_policy, '{}'),
		priority, pool, handler, timeout_ms, payload, fired_at, COALESCE(mutex_template, ''),
		-- dispatched_at is the row's own time, after any wait for the
		-- table's lock: the fence takes it for the earliest a lease of
		-- the attempt may have been put (see dispatcher/fence.go).
		CASE WHEN state = 'DISPATCHED' THEN clock_timestamp() END, CASE WHEN state IN ('SKIPPED', 'CANCELLED', 'SHADOW') THEN now() END,
		CASE WHEN COALESCE(run_id, '') <> '' THEN run_id ELSE '`+schemas.RunIDPrefix+`' || id END, parents,
		COALESCE(NULLIF(dispatch_strategy, ''), 'pull'), COALESCE(dispatch_key, ''), COALESCE(min_worker_version, ''),
		parent_id, COALESCE(shard_index, 0), COALESCE(shard_count, 0), COALESCE(traceparent, ''), COALESCE(tracestate, '')
	FROM numbered
	-- An instance moved to the history keeps its key there (see MoveHistory).
	WHERE NOT EXISTS (SELECT 1 FROM instance_history_keys k WHERE k.task = numbered.task AND k.event_id = numbered.event_id)
		AND NOT EXISTS (SELECT FROM changed)
	`+how+`
	RETURNING *
), created AS (
	-- One row holds both transitions, →CREATED and CREATED→state (see
	-- migration 00017).
	INSERT INTO instance_transitions (instance_id, task, from_state, to_state, attempt, operator, reason,
		then_state, then_operator, then_reason)
	SELECT ins.id, ins.task, NULL, 'CREATED', 1,
		CASE WHEN ins.operator <> '' THEN ins.operator ELSE ins.source END, COALESCE(numbered.created_reason, ''),
		ins.state, 'dispatcher', COALESCE(numbered.reason, '')
	FROM ins JOIN numbered USING (id)
)
SELECT `+attemptColumns("ins")+`, false AS republished FROM ins`+found, batch)
}

// batchQuerier runs statements pipelined on one connection: a pool or a
// transaction.
type batchQuerier interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// queryGeneric runs the creation statement with PostgreSQL's generic plan
// (see genericPlan) and reads its attempts, about size of them (the
// batch's firings: the list is made once). Its estimates do not depend on
// its parameter either (a JSON document the planner counts as 100 rows
// whatever it holds), yet it was planned anew for every batch: about a
// quarter of the backend's CPU per instance created
// (BenchmarkCreateInstances).
func queryGeneric(ctx context.Context, q batchQuerier, size int, sql string, args ...any) (out []Attempt, err error) {
	err = queryWith(ctx, q, genericPlan, func(rows pgx.Rows) (err error) {
		out, err = collect(rows, true, size)
		return err
	}, sql, args...)
	return out, err
}

// byKey is the setting a batch statement that locks instances runs with
// (see lockedInstances): no sequential scan where an index serves, so that
// whatever the table's statistics when the statement was planned, it finds
// its instances by the primary key.
var byKey = []string{"enable_seqscan = off"}

// genericPlan is the setting of a statement that the services run often
// with a short list (of names, of runs) and whose plan is the same
// whatever the list: PostgreSQL's generic plan, made once per connection.
// Left to choose (plan_cache_mode auto), the server compares the generic
// plan, made for a list of ten, with the custom plans it made for the two
// or three elements the list holds at a low rate, finds the custom ones
// cheaper, and plans the statement anew on every call (the chain look-up
// planned for 337 µs a call at a steady 500 firings/s: commit 8a046e4;
// the pipeline benchmarks print planning time under
// pg_stat_statements.track_planning; TestShortListStatementsArePlannedOnce).
var genericPlan = []string{"plan_cache_mode = force_generic_plan"}

// queryWith runs sql with settings ("name = value" each) for it alone and
// hands its rows to read, which closes them (see queriesWith).
func queryWith(ctx context.Context, q batchQuerier, settings []string, read func(pgx.Rows) error, sql string, args ...any) error {
	return queriesWith(ctx, q, settings, statement{sql: sql, args: args, read: read})
}

// statement is one query of queriesWith and the function that reads its
// rows.
type statement struct {
	sql  string
	args []any
	read func(pgx.Rows) error
}

// queriesWith runs the statements with settings ("name = value" each) for
// them alone and hands each one's rows to its read, which closes them. The
// settings are made and reset around the statements in one round trip, in
// their implicit transaction (or the caller's): if a statement fails, its
// rollback undoes the SETs too. Their work is committed once queriesWith
// returns nil, not once their rows are read: the implicit transaction ends
// after the resets.
func queriesWith(ctx context.Context, q batchQuerier, settings []string, stmts ...statement) error {
	b := &pgx.Batch{}
	for _, s := range settings {
		b.Queue("SET " + s)
	}
	for _, st := range stmts {
		b.Queue(st.sql, st.args...)
	}
	for _, s := range settings {
		name, _, _ := strings.Cut(s, " ")
		b.Queue("RESET " + name)
	}
	br := q.SendBatch(ctx, b)
	defer br.Close()
	for range settings {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	for _, st := range stmts {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		if err := st.read(rows); err != nil {
			return err
		}
	}
	for range settings {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	return br.Close()
}

// Coordinates reports whether the instance is the parent of a sharded or
// broadcast firing: it runs no handler, its children do.
func (a Attempt) Coordinates() bool {
	return a.ParentID == 0 && (a.ShardCount > 0 || a.Strategy == schemas.DispatchBroadcast)
}

func collectAttempts(rows pgx.Rows) ([]Attempt, error) { return collect(rows, false, 0) }

// collectMarkedAttempts reads rows of attemptColumns followed by the
// column "republished".
func collectMarkedAttempts(rows pgx.Rows) ([]Attempt, error) { return collect(rows, true, 0) }

// collect reads rows of attemptColumns (and "republished" when marked)
// into a list made for size of them.
func collect(rows pgx.Rows, marked bool, size int) ([]Attempt, error) {
	defer rows.Close()
	var out []Attempt
	if size > 0 {
		out = make([]Attempt, 0, size)
	}
	scanner := newAttemptScanner(marked)
	for rows.Next() {
		a, err := scanner.scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// retryPolicies decodes the retry policies of a statement's rows, keeping
// the last one: a batch's rows are mostly of one task version, whose
// policy is the same bytes, so each is decoded once, not once a row. The
// policies it returns share their pointer fields, which are only read.
type retryPolicies struct {
	raw    []byte
	policy schemas.Retry
}

func (p *retryPolicies) decode(raw []byte) (schemas.Retry, error) {
	if p.raw != nil && bytes.Equal(raw, p.raw) {
		return p.policy, nil
	}
	var policy schemas.Retry
	if err := json.Unmarshal(raw, &policy); err != nil {
		return policy, err
	}
	p.raw, p.policy = append(p.raw[:0], raw...), policy
	return policy, nil
}

// RetryStart names an attempt to start: Attempt is the new attempt's number.
type RetryStart struct {
	InstanceID int64
	Attempt    int
}

// StartRetries moves each instance from RETRYING at Attempt-1 to DISPATCHED
// at Attempt, in one statement. It returns the instances that are DISPATCHED
// at their Attempt afterwards — moved now, or by an earlier call whose
// dispatch may not have been published — and leaves out the rest (cancelled,
// already running, unknown).
func (s *Store) StartRetries(ctx context.Context, in []RetryStart) ([]Attempt, error) {
	if len(in) == 0 {
		return nil, nil
	}
	ids, attempts := make([]int64, len(in)), make([]int32, len(in))
	for i, r := range in {
		ids[i], attempts[i] = r.InstanceID, int32(r.Attempt)
	}
	var out []Attempt
	err := queryWith(ctx, s.pool, byKey, func(rows pgx.Rows) (err error) {
		out, err = collectMarkedAttempts(rows)
		return err
	}, `
WITH input AS (
	SELECT * FROM unnest($1::bigint[], $2::int[]) AS t(id, attempt)
), lk AS (
	-- In id order, as every batch statement locks (see reportRows.record).
	SELECT i.id FROM `+lockedInstances("input")+`
	JOIN input ON i.id = input.id AND i.attempt = input.attempt - 1 WHERE i.state = 'RETRYING'
), upd AS (
	UPDATE instances i SET state = 'DISPATCHED', attempt = input.attempt, dispatched_at = clock_timestamp(),
		worker_id = '', updated_at = now()
	FROM input, lk
	WHERE i.id = input.id AND i.state = 'RETRYING' AND i.attempt = input.attempt - 1 AND lk.id = i.id
	RETURNING i.*
), tr AS (
	INSERT INTO instance_transitions (instance_id, task, from_state, to_state, attempt, operator, reason)
	SELECT id, task, 'RETRYING', 'DISPATCHED', attempt, 'dispatcher', 'attempt ' || attempt || ' of ' || max_attempts
	FROM upd
)
SELECT `+attemptColumns("upd")+`, false AS republished FROM upd
UNION ALL
SELECT `+attemptColumns("i")+`, true FROM input
-- by the primary key (see lockedInstances)
CROSS JOIN LATERAL (SELECT * FROM instances WHERE id = input.id OFFSET 0) i
WHERE i.attempt = input.attempt AND i.state = 'DISPATCHED'`,
		ids, attempts)
	if err != nil {
		return nil, fmt.Errorf("start %d retries: %w", len(in), err)
	}
	return out, nil
}
