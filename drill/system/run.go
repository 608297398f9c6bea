package system

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/drill"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
	"github.com/ax-scheduler/ax/streams"
)

// Options configures a drill run.
type Options struct {
	// Binary is the ax binary the sandbox runs (required; see
	// [SandboxOptions]).
	Binary string
	// Scenarios names the scenarios to run, in this order; empty runs every
	// one of [Scenarios].
	Scenarios []string
	// Duration is how long each scenario's load (and fault) lasts (default
	// 1 minute).
	Duration time.Duration
	// Rate is the load's firings per second (default 20).
	Rate int
	// Work is how long each drill attempt works (default 200 ms).
	Work time.Duration
	// LeaseTTL is the sandbox's lease TTL (default 5 s).
	LeaseTTL time.Duration
	// Settle bounds the wait, after the load, for every instance to end
	// (default 1 minute plus 4 lease TTLs); an instance not ended by then
	// is stuck.
	Settle time.Duration
	// RecoverySlack is what an executor crash's recovery may take beyond
	// the lease TTL (default 1 s: the bound is lease TTL + 1 s). A test on
	// a busy machine may allow more; a broken reaper takes minutes.
	RecoverySlack time.Duration
	// Fsync runs the sandbox's PostgreSQL with production durability.
	Fsync bool
	// Logger receives the drill's progress. The zero value logs nothing.
	Logger zerolog.Logger
}

// Defaults of [Options].
const (
	DefaultDuration = time.Minute
	DefaultRate     = 20
	DefaultWork     = 200 * time.Millisecond
	DefaultLeaseTTL = 5 * time.Second
)

// Select returns the scenarios called names, in that order, or every
// scenario for none; an unknown name is an error that lists the known ones.
func Select(names []string) ([]Scenario, error) {
	all := Scenarios()
	if len(names) == 0 {
		return all, nil
	}
	var out []Scenario
	for _, name := range names {
		i := slices.IndexFunc(all, func(s Scenario) bool { return s.Name == name })
		if i < 0 {
			known := make([]string, len(all))
			for j, s := range all {
				known[j] = s.Name
			}
			return nil, fmt.Errorf("unknown scenario %q: choose among %v", name, known)
		}
		out = append(out, all[i])
	}
	return out, nil
}

// Run starts a sandbox, runs each scenario in it in turn and returns their
// results. An error is the drill's own failure (the sandbox would not
// start, a fault could not be injected), not a failed check: those are in
// the results.
func Run(ctx context.Context, opts Options) ([]Result, error) {
	scenarios, err := Select(opts.Scenarios)
	if err != nil {
		return nil, err
	}
	if opts.Duration == 0 {
		opts.Duration = DefaultDuration
	}
	if opts.Rate == 0 {
		opts.Rate = DefaultRate
	}
	if opts.Work == 0 {
		opts.Work = DefaultWork
	}
	if opts.LeaseTTL == 0 {
		opts.LeaseTTL = DefaultLeaseTTL
	}
	if opts.RecoverySlack == 0 {
		opts.RecoverySlack = time.Second
	}
	if opts.Settle == 0 {
		opts.Settle = time.Minute + 4*opts.LeaseTTL
	}
	switch {
	case opts.Duration < time.Second:
		return nil, fmt.Errorf("duration %v: give at least 1s", opts.Duration)
	case opts.Rate < 1 || opts.Rate > 1000:
		return nil, fmt.Errorf("rate %d: give 1 to 1000 firings a second", opts.Rate)
	case opts.LeaseTTL < time.Second:
		return nil, fmt.Errorf("lease TTL %v: give at least 1s", opts.LeaseTTL)
	}
	// One sandbox for the scenarios on one nats-server, another for those
	// on a cluster, each started when its first scenario comes.
	sandboxes := map[bool]*Sandbox{}
	defer func() {
		for _, sb := range sandboxes {
			sb.Close()
		}
	}()
	var results []Result
	for _, sc := range scenarios {
		sb := sandboxes[sc.Cluster]
		if sb == nil {
			sb, err = StartSandbox(ctx, SandboxOptions{Binary: opts.Binary, LeaseTTL: opts.LeaseTTL, Fsync: opts.Fsync, Cluster: sc.Cluster, Logger: opts.Logger})
			if err != nil {
				return results, err
			}
			sandboxes[sc.Cluster] = sb
		}
		opts.Logger.Info().Str("scenario", sc.Name).Dur("duration", opts.Duration).Int("rate", opts.Rate).Msg("drill scenario starts")
		res, err := runScenario(ctx, sb, sc, opts)
		if err != nil {
			return results, fmt.Errorf("scenario %s: %w (the processes' logs are in %s)", sc.Name, err, sb.Dir()+"/logs")
		}
		opts.Logger.Info().Str("scenario", sc.Name).Bool("pass", res.Pass).Msg("drill scenario ends")
		results = append(results, res)
	}
	return results, nil
}

// run is one scenario's run: its processes and what happened to them.
type run struct {
	sb   *Sandbox
	sc   Scenario
	opts Options
	d    time.Duration
	task string // the work task; poison is its poison twin
	pois string

	mu       sync.Mutex
	crashes  []crash
	faults   []fault
	fired    map[string]string // event id → task, of the firings JetStream acknowledged
	nextExec int
	execs    []string // the executors started, by name
	deaths   int      // the executors that exited by themselves (Supervise)
	// checks are the scenario's own checks, which its fault made (see
	// [run.check]); the verdict adds them to its own.
	checks []drill.Check
}

// check adds a check of the scenario's own to its verdict.
func (r *run) check(c drill.Check) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checks = append(r.checks, c)
}

// crash is an executor's death (or stop) at a time.
type crash struct {
	worker string
	at     time.Time
}

// fault is a fault from its start to its end (when it was restored).
type fault struct {
	what       string
	start, end time.Time
}

func (r *run) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// fault notes the start of a fault; the next restore ends it.
func (r *run) fault(what string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults = append(r.faults, fault{what: what, start: at})
}

// restored ends the faults not ended yet.
func (r *run) restored(at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.faults {
		if r.faults[i].end.IsZero() {
			r.faults[i].end = at
		}
	}
}

func (r *run) crash(worker string, at time.Time) {
	r.mu.Lock()
	r.crashes = append(r.crashes, crash{worker, at})
	r.mu.Unlock()
	r.fault("executor "+worker, at)
}

func (r *run) killExecutor(name string) error {
	if err := r.sb.Proc(name).Kill(); err != nil {
		return err
	}
	r.crash(name, time.Now())
	return nil
}

// busyExecutor returns one of workers that the ledger shows running an
// attempt now, so that a kill cuts an attempt short: on a loaded machine a
// kill at a fixed moment may find its victim idle, and then nothing is
// rehearsed. It looks for a second at most, then returns fallback.
func (r *run) busyExecutor(ctx context.Context, workers []string, fallback string) string {
	deadline := time.Now().Add(time.Second)
	for {
		runs, err := ReadLedger(r.sb.Ledger)
		if err == nil {
			for _, run := range slices.Backward(runs) {
				if run.End.IsZero() && slices.Contains(workers, run.Worker) {
					return run.Worker
				}
			}
		}
		if time.Now().After(deadline) || !r.sleep(ctx, 20*time.Millisecond) {
			return fallback
		}
	}
}

func (r *run) startExecutor() error {
	r.mu.Lock()
	r.nextExec++
	name := r.sc.Name + "-e" + strconv.Itoa(r.nextExec)
	r.execs = append(r.execs, name)
	r.mu.Unlock()
	_, err := r.sb.StartExecutor(name, 8)
	return err
}

// supervise replaces each executor that exited by itself at once, as a
// process supervisor would, until ctx ends; each exit is a crash. A
// process the drill stops or kills itself is not one: only Supervise
// scenarios, whose faults kill none, call it.
func (r *run) supervise(ctx context.Context) {
	replaced := make(map[string]bool)
	for r.sleep(ctx, 20*time.Millisecond) {
		r.mu.Lock()
		names := slices.Clone(r.execs)
		r.mu.Unlock()
		for _, name := range names {
			if p := r.sb.Proc(name); replaced[name] || p == nil || p.Running() {
				continue
			}
			replaced[name] = true
			r.mu.Lock()
			r.crashes = append(r.crashes, crash{name, time.Now()})
			r.deaths++
			r.mu.Unlock()
			if err := r.startExecutor(); err != nil {
				r.opts.Logger.Error().Err(err).Str("executor", name).Msg("replace an executor that exited")
			}
		}
	}
}

// burst is how many firings restart fires at once before its kill.
const burst = 40

// restart kills the dispatcher called name with kill -9 while its batch of
// firings is inside PostgreSQL, and starts it again after gap. The drill
// holds a SHARE lock on instances (a moment: reads go on, writes wait),
// fires a burst of firings and waits until the dispatchers' inserts of
// their instances wait for the lock; then it kills the dispatcher and lets
// the lock go. The dead dispatcher's statement runs on in its PostgreSQL
// backend and commits or not, the firings it held unacknowledged: they
// come back after the ack wait and must each make one instance — not
// none (the firings acknowledged before the commit are lost) and not a
// second one (the firing dedupe). A kill at a random moment between the
// load's firings, 50 ms apart, mostly hit an idle dispatcher.
func (r *run) restart(ctx context.Context, name string, gap time.Duration) error {
	return r.restartWith(ctx, name, gap, false)
}

// restartWith is restart, with the burst's keys held instead of the table
// when keys is set: the drill inserts an instance of each of the burst's
// firings in its transaction, so that the dispatchers' creation
// statements wait for it as they run (a lock on the table stops a
// statement not yet prepared on its connection at parse, and a dead
// client's statement never gets further); when the drill rolls back,
// each statement the dead dispatcher left goes on and commits its
// instances DISPATCHED, whose dispatch messages it never published.
func (r *run) restartWith(ctx context.Context, name string, gap time.Duration, keys bool) error {
	r.mu.Lock()
	prefix := fmt.Sprintf("%s-burst-%d-", r.sc.Name, len(r.faults))
	r.mu.Unlock()
	tx, err := r.sb.Pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("hold the dispatchers' batch: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if keys {
		_, err = tx.Exec(ctx, `INSERT INTO instances (task, task_version, event_id, source, state, max_attempts, priority, pool, handler, timeout_ms, fired_at)
			SELECT $1, 1, $2 || i, 'api', 'CREATED', 1, 'normal', 'default', $3, 1000, now() FROM generate_series(0, $4 - 1) i`,
			r.task, prefix, WorkHandler, burst)
	} else {
		_, err = tx.Exec(ctx, `SET LOCAL lock_timeout = '10s'; LOCK TABLE instances IN SHARE MODE`)
	}
	if err != nil {
		return fmt.Errorf("hold the dispatchers' batch: %w", err)
	}
	var holder int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&holder); err != nil {
		return fmt.Errorf("hold the dispatchers' batch: %w", err)
	}
	var wg sync.WaitGroup
	for i := range burst {
		// A firing JetStream did not take is not fired: nothing to check.
		wg.Go(func() { _ = r.publish(r.task, prefix+strconv.Itoa(i), r.opts.Work, strconv.Itoa(i%16)) })
	}
	defer wg.Wait()
	// Every running dispatcher's batch waits (or 10 s passed: a dispatcher
	// that never got there is killed anyway).
	want := len(r.sb.Running(r.sc.Name + "-d"))
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var waiting int
		var err error
		if keys {
			// Only a creation statement waits for the held keys (a held
			// table makes reports wait too).
			err = r.sb.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, holder).Scan(&waiting)
		} else {
			err = r.sb.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%INSERT INTO instances%'`).Scan(&waiting)
		}
		if err == nil && waiting >= want || ctx.Err() != nil {
			break
		}
	}
	if err := r.sb.Proc(name).Kill(); err != nil {
		return err
	}
	r.fault(name, time.Now())
	if err := tx.Rollback(ctx); err != nil {
		return fmt.Errorf("let the dispatchers' batch go: %w", err)
	}
	time.Sleep(gap)
	_, err = r.sb.StartDispatcher(name)
	return err
}

func runScenario(ctx context.Context, sb *Sandbox, sc Scenario, opts Options) (Result, error) {
	r := &run{sb: sb, sc: sc, opts: opts, d: opts.Duration, task: "drill-" + sc.Name, pois: "drill-" + sc.Name + "-poison",
		fired: make(map[string]string)}
	if err := r.applyTasks(ctx, true); err != nil {
		return Result{}, err
	}
	defer sb.StopAll(10 * time.Second)
	for i := 1; i <= max(1, sc.Dispatchers); i++ {
		if _, err := sb.StartDispatcher(fmt.Sprintf("%s-d%d", sc.Name, i)); err != nil {
			return Result{}, err
		}
	}
	if sc.Trigger {
		if _, err := sb.StartTrigger(sc.Name + "-t1"); err != nil {
			return Result{}, err
		}
	}
	for range sc.Executors {
		if err := r.startExecutor(); err != nil {
			return Result{}, err
		}
	}
	if sc.Supervise {
		// Stopped before the processes are (defers run last in, first out).
		supCtx, stopSup := context.WithCancel(ctx)
		var sup sync.WaitGroup
		sup.Go(func() { r.supervise(supCtx) })
		defer func() { stopSup(); sup.Wait() }()
	}

	// The fault must hit a system that runs: one firing succeeds first.
	if err := r.warmUp(ctx); err != nil {
		return Result{}, err
	}
	start := time.Now()
	loadCtx, stopLoad := context.WithTimeout(ctx, opts.Duration)
	defer stopLoad()
	var wg sync.WaitGroup
	var faultErr error
	if sc.Fault != nil {
		wg.Go(func() {
			faultErr = sc.Fault(loadCtx, r)
			r.restored(time.Now())
		})
	}
	if !sc.Cron {
		wg.Go(func() { r.load(loadCtx) })
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	if faultErr != nil {
		return Result{}, fmt.Errorf("inject the fault: %w", faultErr)
	}
	if sc.Cron {
		// The cron trigger stops firing: the window is over.
		if err := r.applyTasks(ctx, false); err != nil {
			return Result{}, err
		}
	}
	if err := r.settle(ctx); err != nil {
		return Result{}, err
	}
	res, err := r.collect(ctx)
	res.Wall = time.Since(start).Round(time.Millisecond).String()
	return res, err
}

// applyTasks registers the scenario's tasks; cron off removes the cron
// trigger of a Cron scenario.
func (r *run) applyTasks(ctx context.Context, cron bool) error {
	attempts := r.sc.MaxAttempts
	if attempts == 0 {
		attempts = 10
	}
	work := fmt.Sprintf(`{"task_name": %q, "execution": {"handler": %q, "timeout": "1m",
		"retry": {"max_attempts": %d, "initial_interval_sec": 0}}`, r.task, WorkHandler, attempts)
	if r.sc.Hash {
		work += `, "dispatch": {"strategy": "hash", "hash_key": "k-{{.key}}"}`
	}
	if r.sc.Cron && cron {
		work += `, "triggers": [{"type": "cron", "schedule": "* * * * * *", "misfire": "skip"}]`
	}
	defs := []string{work + "}"}
	if r.sc.Poison {
		defs = append(defs, fmt.Sprintf(`{"task_name": %q, "execution": {"handler": %q, "retry": {"max_attempts": 2, "initial_interval_sec": 0}}}`,
			r.pois, PoisonHandler))
	}
	if r.sc.Killer {
		defs = append(defs, fmt.Sprintf(`{"task_name": %q, "execution": {"handler": %q, "retry": {"max_attempts": %d, "initial_interval_sec": 0}}}`,
			r.pois, KillerHandler, attempts))
	}
	for _, d := range defs {
		def, err := taskdef.ParseTask([]byte(d))
		if err != nil {
			return fmt.Errorf("the drill's task: %w", err)
		}
		if _, _, err := r.sb.Store.ApplyTask(ctx, def, "drill"); err != nil {
			return fmt.Errorf("apply the drill's task %s: %w", def.TaskName, err)
		}
	}
	return nil
}

// load fires the scenario's task at the rate until ctx ends, straight to
// AX_TRIGGERS. A firing JetStream did not acknowledge (the server is down)
// is sent again, with the same event id, at the next tick.
func (r *run) load(ctx context.Context) {
	tick := time.NewTicker(time.Second / time.Duration(r.opts.Rate))
	defer tick.Stop()
	for n := 0; ; {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		task := r.task
		if r.sc.Poison && n%100 == 99 {
			task = r.pois
		}
		if r.publish(task, r.sc.Name+"-"+strconv.Itoa(n), r.opts.Work, strconv.Itoa(n%16)) != nil {
			continue
		}
		n++
	}
}

// warmUp fires one attempt and waits until it has succeeded: every
// process has started and found the others.
func (r *run) warmUp(ctx context.Context) error {
	eventID := r.sc.Name + "-warm-up"
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := r.publish(r.task, eventID, 0, "warm-up")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("warm up: fire: %w (the processes' logs are in %s)", err, r.sb.Dir()+"/logs")
		}
		if !r.sleep(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
	for {
		var state schemas.State
		err := r.sb.Pool.QueryRow(ctx, `SELECT state FROM instances WHERE task = $1 AND event_id = $2`, r.task, eventID).Scan(&state)
		if err == nil && state == schemas.StateSucceeded {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("warm up: the first firing did not succeed within 2 minutes (state %q; the processes' logs are in %s)", state, r.sb.Dir()+"/logs")
		}
		if !r.sleep(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// publish fires task once with event id eventID, an attempt working work
// on hash key key, and notes it fired once JetStream acknowledged it.
func (r *run) publish(task, eventID string, work time.Duration, key string) error {
	ev := schemas.TriggerEvent{EventID: eventID, FiredAt: time.Now(), Payload: Work{MS: int(work / time.Millisecond), Key: key}.payload()}
	// Not the load's context: the last publish outlives the load, so that
	// what JetStream stored is counted as fired.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := streams.Publish(ctx, r.sb.JS, r.sb.Top.Trigger(task), ev.EventID, ev); err != nil {
		return err
	}
	r.mu.Lock()
	r.fired[ev.EventID] = task
	r.mu.Unlock()
	return nil
}

// longRuns fires n attempts that work work each and returns the workers
// they started on, once every one has ("" when ctx ended first). A fault
// that follows hits attempts in flight for sure, whatever the load.
func (r *run) longRuns(ctx context.Context, n int, work time.Duration) ([]string, error) {
	events := make([]string, n)
	for i := range events {
		events[i] = fmt.Sprintf("%s-long-%d", r.sc.Name, i)
		if err := r.publish(r.task, events[i], work, "long"); err != nil {
			return nil, fmt.Errorf("fire a long attempt: %w", err)
		}
	}
	for {
		var workers []string
		rows, err := r.sb.Pool.Query(ctx, `SELECT id FROM instances WHERE task = $1 AND event_id = ANY($2)`, r.task, events)
		if err == nil {
			ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				return nil, err
			}
			runs, err := ReadLedger(r.sb.Ledger)
			if err != nil {
				return nil, err
			}
			for _, run := range runs {
				if slices.Contains(ids, run.Instance) && run.End.IsZero() {
					workers = append(workers, run.Worker)
				}
			}
			if len(workers) == n {
				return workers, nil
			}
		}
		if !r.sleep(ctx, 50*time.Millisecond) {
			return nil, nil
		}
	}
}

// settle waits until every firing has its instance, every instance has
// ended, every run of a live worker has ended and every firing and report
// has been handled (a killed dispatcher's, redelivered after the ack wait,
// and a stopped worker's late reports included), twice in a row a
// poll apart, for up to opts.Settle. In a cron scenario that must hold
// for two of the trigger's periods: the drill knows a cron firing only by
// its instance, and the trigger service may fire one more tick after its
// trigger was removed, until it has seen the removal (a tick made 0.1 s
// after a settle of two polls was counted stuck while it ran).
func (r *run) settle(ctx context.Context) error {
	window := settlePoll
	if r.sc.Cron {
		window = 2 * time.Second
	}
	deadline := time.Now().Add(r.opts.Settle)
	var stableSince time.Time
	for stable := 0; (stable < 2 || time.Since(stableSince) < window) && time.Now().Before(deadline); {
		done, err := r.settled(ctx)
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr
		}
		if err != nil {
			r.opts.Logger.Debug().Err(err).Msg("wait for the drill's instances to end") // PostgreSQL or NATS is coming back
		}
		switch {
		case !done:
			stable = 0
		case stable == 0:
			stable, stableSince = 1, time.Now()
		default:
			stable++
		}
		time.Sleep(settlePoll)
	}
	return nil // what has not ended is stuck: collect counts it
}

// settlePoll spaces settle's looks.
const settlePoll = 250 * time.Millisecond

func (r *run) settled(ctx context.Context) (bool, error) {
	rows, err := r.sb.Pool.Query(ctx, `SELECT event_id, state FROM instances WHERE task = ANY($1)`, []string{r.task, r.pois})
	if err != nil {
		return false, err
	}
	made := make(map[string]bool)
	for rows.Next() {
		var id string
		var state schemas.State
		if err := rows.Scan(&id, &state); err != nil {
			return false, err
		}
		if !state.Terminal() {
			rows.Close()
			return false, nil
		}
		made[id] = true
	}
	if err := rows.Err(); err != nil {
		return false, err
	}
	r.mu.Lock()
	for id := range r.fired {
		if !made[id] {
			r.mu.Unlock()
			return false, nil
		}
	}
	r.mu.Unlock()
	runs, err := ReadLedger(r.sb.Ledger)
	if err != nil {
		return false, err
	}
	for _, run := range runs {
		if p := r.sb.Proc(run.Worker); run.End.IsZero() && p != nil && p.Running() {
			return false, nil
		}
	}
	// Neither consumer holds a message: a killed dispatcher's firings and
	// reports, redelivered after the ack wait, have been handled (a firing
	// whose instance it had made, made again, would be doubled).
	for _, c := range [][2]string{
		{r.sb.Top.ReportsStream(), r.sb.Top.RecorderConsumer().Durable},
		{r.sb.Top.TriggersStream(), r.sb.Top.DispatcherConsumer().Durable},
		{r.sb.Top.FiringsStream(), r.sb.Top.FiringsConsumer().Durable},
	} {
		consumer, err := r.sb.JS.Consumer(ctx, c[0], c[1])
		if err != nil {
			return false, err
		}
		info, err := consumer.Info(ctx)
		if err != nil {
			return false, err
		}
		if info.NumPending != 0 || info.NumAckPending != 0 {
			return false, nil
		}
	}
	return true, nil
}
