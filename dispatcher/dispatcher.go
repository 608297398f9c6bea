package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// Options configures a [Service]. Zero fields take the stated defaults.
type Options struct {
	// Conn is the NATS connection. Required; the caller keeps ownership.
	Conn *nats.Conn
	// Store is the PostgreSQL store. Required.
	Store *store.Store
	// Topology names the subjects (default streams.Default()).
	Topology streams.Topology
	// Streams sizes the topology that Run ensures at start: a zero setting
	// keeps the installed value, a different one is refused unless
	// Streams.Reconfigure (see streams.Topology.Reconcile), and the
	// dispatcher follows the settings in force.
	Streams streams.Config
	// BatchSize is the most messages handled in one batch (default 500).
	BatchSize int
	// ShutdownTimeout bounds how long Run lets in-flight batches finish
	// after its context ends (default 30s).
	ShutdownTimeout time.Duration
	// TimeoutCheck is how often the reaper looks for attempts that outlived
	// their timeout (default 1s); TimeoutGrace is how long past its deadline
	// an attempt may stay RUNNING before it is failed (default 5s), time for
	// the executor to stop it and report.
	TimeoutCheck time.Duration
	TimeoutGrace time.Duration
	// QuarantineAfter is how many workers may die while running one
	// instance before it is quarantined: failed, whatever its attempts
	// left (default DefaultQuarantineAfter, 3; see deaths.go).
	QuarantineAfter int
	// Logger receives the service's log lines (default: none).
	Logger zerolog.Logger
	// NowFunc tells the time (default time.Now).
	NowFunc func() time.Time
	// CalendarPoll is how often waits for calendar-aligned parents are
	// checked (default DefaultCalendarPoll; see calendar.go).
	CalendarPoll time.Duration
	// RandFunc returns a number in [0, 1) for retry jitter (default math/rand/v2).
	RandFunc func() float64
	// Metrics is where the dispatcher registers its counters (default: a
	// registry of its own that nobody serves).
	Metrics prometheus.Registerer
	// Faults injects the faults a rehearsal asks for (default nil, as in
	// production: none). ax drill's database jitter is one
	// (drill/drillfaults, which ax dev and ax dispatcher --drill-faults
	// hand over).
	Faults Faults
	// History configures the instance history's maintenance (defaults:
	// see [HistoryOptions]).
	History HistoryOptions
	// Protocol is the version of the executor protocol the dispatcher
	// writes its dispatch messages in:
	// it routes an attempt only to workers whose record says they speak
	// it, and a version above 1 only to a worker's own subject, since any
	// worker of a pool pulls the pool's subjects (docs/executor-protocol.md,
	// "Versions"). Default 1, which every worker speaks: version 2 adds
	// only the report batch, which a worker sends only when told it may
	// (see SingleReports).
	Protocol int
	// SingleReports stops the dispatcher announcing report batches
	// (default false: every dispatch message says report_batches, and an
	// executor that speaks version 2 of the executor protocol sends its
	// final reports in batches on ax.report.<pool>.<worker_id>.batch). The
	// dispatcher applies the batches it receives either way. Turn it on
	// while a dispatcher older than the batches still consumes the
	// reports: it would drop a batch as malformed.
	SingleReports bool
	// TracerProvider makes the dispatcher's spans (see trace.go; default
	// none; pass otel.GetTracerProvider() for the program's own).
	TracerProvider trace.TracerProvider
}

// Service is a dispatcher. Make one with [New] and start it with [Service.Run].
type Service struct {
	opts Options
	top  streams.Topology
	log  zerolog.Logger
	now  func() time.Time
	// pub publishes the dispatcher's batches (dispatches, schedules,
	// firings of chains): cheaper than JetStream's PublishMsgAsync.
	pub *streams.Publisher
	// ready is closed once Run has its consumers and watcher in place.
	ready chan struct{}
	// metrics counts what the consumers handle.
	metrics *metrics
	// settingsSeen holds the topology settings already logged as differing.
	settingsSeen sync.Map
	// workers is the live view of ax-workers that routing reads.
	workers *liveWorkers
	// router decides where each attempt goes.
	router *router
	// recorder turns reports into transitions.
	recorder *recorder
	// intake turns firings into instances and attempts.
	intake *intake
	// book is what the reaper's watch learned of the leases, which the
	// fence reads (see fence.go).
	book *leaseBook
	// deaths judges what a worker's death costs.
	deaths *deathJudge
	// reaper watches the leases and answers the fence.
	reaper *reaper
	// limiter starts what waits for named limits (limits.go).
	limiter *limiter
	// waits records why attempts wait, once per change (see waits.go).
	waits *waitTracker
	// fair holds back and lets in the attempts of tasks with a fairness
	// key, and knows each task version's slots (fairness.go).
	fair *fairness
	// tracing makes the spans of firings, attempts and reports.
	tracing tracing
}

// Faults is the one seam for the faults a rehearsal (ax drill) injects
// into the dispatcher; production leaves it nil. Its methods are called
// concurrently.
type Faults interface {
	// RecordReports is given each batch of report messages before the
	// recorder reads them, and returns those to record now; it settles
	// (naks or terminates) the others itself.
	RecordReports(ctx context.Context, msgs []jetstream.Msg) []jetstream.Msg
}

// DefaultBatchSize is the default of [Options.BatchSize].
const DefaultBatchSize = 500

// triggerBatchesInFlight is how many batches of firings the dispatcher
// handles at once (see [intake.fire]): their statements run side by side
// (one commit's fsync no longer holds up the next batch), their publishes
// go in batch order, and a batch awaits its acknowledgements while the
// next ones run. It stays below the PostgreSQL connections a store's pool
// has by default (pgxpool: 4, or one a core), so that the report batches
// still find one while the trigger batches write, and with
// batches of DefaultBatchSize keeps the dispatch messages awaiting an
// acknowledgement well under the 4,000 that jetstream lets a connection
// have before its publishes stall.
const triggerBatchesInFlight = 3

// fill fills the defaults of o, and says what is wrong with a value
// that has none.
func (o *Options) fill() error {
	if o.Topology.IsZero() {
		o.Topology = streams.Default()
	}
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = 30 * time.Second
	}
	if o.TimeoutCheck <= 0 {
		o.TimeoutCheck = time.Second
	}
	if o.TimeoutGrace <= 0 {
		o.TimeoutGrace = 5 * time.Second
	}
	if o.QuarantineAfter <= 0 {
		o.QuarantineAfter = DefaultQuarantineAfter
	}
	if o.NowFunc == nil {
		o.NowFunc = time.Now
	}
	if o.RandFunc == nil {
		o.RandFunc = randFloat
	}
	if o.Protocol < 0 {
		return fmt.Errorf("Options.Protocol %d: give a version of the executor protocol, 1 or more, or 0 for 1", o.Protocol)
	}
	if o.Protocol == 0 {
		o.Protocol = 1
	}
	if o.Metrics == nil {
		o.Metrics = prometheus.NewRegistry()
	}
	triggersMaxAge := o.Streams.TriggersMaxAge
	if triggersMaxAge <= 0 {
		triggersMaxAge = streams.DefaultTriggersMaxAge
	}
	return o.History.fill(triggersMaxAge)
}

// New validates opts and fills the defaults. It does no I/O.
func New(opts Options) (*Service, error) {
	if opts.Conn == nil {
		return nil, errors.New("new dispatcher: Options.Conn is required")
	}
	if opts.Store == nil {
		return nil, errors.New("new dispatcher: Options.Store is required")
	}
	if err := opts.fill(); err != nil {
		return nil, fmt.Errorf("new dispatcher: %w", err)
	}
	m, err := newMetrics(opts.Metrics)
	if err != nil {
		return nil, fmt.Errorf("new dispatcher: register metrics: %w", err)
	}
	log := opts.Logger.With().Str("service", "dispatcher").Logger()
	workers := newLiveWorkers(opts.NowFunc)
	s := &Service{
		opts:    opts,
		top:     opts.Topology,
		log:     log,
		now:     opts.NowFunc,
		ready:   make(chan struct{}),
		metrics: m,
		workers: workers,
		book:    newLeaseBook(),
		tracing: newTracing(opts.TracerProvider),
	}
	s.waits = &waitTracker{now: opts.NowFunc, log: log, store: opts.Store, workers: workers, protocol: opts.Protocol}
	s.router = &router{top: opts.Topology, protocol: opts.Protocol, workers: workers, log: log,
		gone: newDepartures(), conn: opts.Conn, store: opts.Store, batchSize: opts.BatchSize, now: opts.NowFunc, metrics: m, next: s,
		waits: s.waits}
	s.deaths = &deathJudge{store: opts.Store, quarantineAfter: opts.QuarantineAfter, rand: opts.RandFunc, now: opts.NowFunc,
		log: log, suspects: m.suspects}
	s.reaper = &reaper{store: opts.Store, top: opts.Topology, conn: opts.Conn,
		streams: func() streams.Config { return s.opts.Streams }, timeoutCheck: opts.TimeoutCheck, timeoutGrace: opts.TimeoutGrace,
		batchSize: opts.BatchSize, book: s.book, workers: workers, deaths: s.deaths,
		now: opts.NowFunc, rand: opts.RandFunc, log: log, metrics: m, next: s, departed: s.router.departed, tracing: s.tracing,
		unsent: newUnsentFailures()}
	s.recorder = &recorder{store: opts.Store, top: opts.Topology, workers: workers, faults: opts.Faults,
		now: opts.NowFunc, rand: opts.RandFunc, log: log, metrics: m, next: s, tracing: s.tracing}
	lm, err := newLimitMetrics(opts.Metrics)
	if err != nil {
		return nil, fmt.Errorf("new dispatcher: register metrics: %w", err)
	}
	s.limiter = newLimiter(opts.Store, s, log, lm)
	s.intake = &intake{store: opts.Store, top: opts.Topology, conn: opts.Conn, now: opts.NowFunc, log: log, metrics: m,
		held: newHolder(), next: s, tracing: s.tracing, tasks: newTaskCache(),
		// Run follows the installed settings (see setUp).
		triggersMaxAge: func() time.Duration { return s.opts.Streams.TriggersMaxAge }}
	s.fair = newFairness(s)
	return s, nil
}

// Ready returns a channel that is closed once Run has ensured the topology
// and its consumers exist: firings published from then on are handled.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Run ensures the topology and dispatches until ctx ends. A start-up
// request that NATS leaves unanswered or answers "unavailable" (a cluster
// electing its leaders, [streams.Transient]) is logged and tried again
// until ctx ends; any other failure to start is returned. Then it stops
// taking messages, lets the batches in flight finish on a detached context
// for up to ShutdownTimeout, leaves what is unfinished un-acked for
// redelivery, and returns once every goroutine it started has exited.
func (s *Service) Run(ctx context.Context) error {
	err := s.run(ctx)
	if ctx.Err() != nil {
		// Whatever failed after ctx ended failed because of the stop.
		return nil
	}
	return err
}

// publishAckTimeout bounds the wait for a published message's
// acknowledgement. Without it, a message whose acknowledgement is lost —
// its stream's leader stopped after taking it, a connection that moved to
// another node — would hold its batch, un-acked, for ever. Timed out, the
// batch fails and is redelivered, and its messages' ids make a second
// publish of what was stored a no-op.
const publishAckTimeout = 10 * time.Second

// reportSettings logs, once per setting, the topology settings the
// dispatcher's options state differently from the installation, and shows
// each in ax_topology_setting_mismatch: refused (err is the refusal) or,
// with Reconfigure, applied.
func (s *Service) reportSettings(diffs []streams.Difference, err error) {
	for _, d := range diffs {
		if _, seen := s.settingsSeen.LoadOrStore(d.Setting, true); seen {
			continue
		}
		ev := s.log.Info()
		msg := "topology setting changed (--reconfigure)"
		if err != nil {
			s.metrics.settingMismatch.WithLabelValues(d.Setting).Set(1)
			ev, msg = s.log.Error(), "topology setting differs from the installed one; refused (leave the flag unset to follow it, or add --reconfigure)"
		}
		ev.Str("setting", d.Setting).Str("flag", d.Flag).Str("stream", d.Stream).
			Str("installed", d.Installed).Str("asked", d.Asked).Msg(msg)
	}
}

// startFailed logs a start-up failure that the dispatcher tries again.
func (s *Service) startFailed(err error, wait time.Duration) {
	s.log.Warn().Err(err).Dur("retry_in", wait).Msg("dispatcher start-up failed; trying again")
}

func (s *Service) run(ctx context.Context) error {
	js, err := jetstream.New(s.opts.Conn, jetstream.WithPublishAsyncTimeout(publishAckTimeout))
	if err != nil {
		return fmt.Errorf("run dispatcher: %w", err)
	}
	s.reaper.js, s.router.js, s.fair.js = js, js, js
	pub, err := streams.NewPublisher(s.opts.Conn, streams.PublisherOptions{Timeout: publishAckTimeout})
	if err != nil {
		return fmt.Errorf("run dispatcher: %w", err)
	}
	defer pub.Close()
	s.pub = pub
	var h handles
	// A cold cluster may take longer to elect its leaders than one request
	// waits: the start-up work is tried again until it succeeds or ctx ends.
	setUp := func(ctx context.Context) (err error) {
		h, err = s.setUp(ctx, js)
		return err
	}
	if err := streams.UntilStarted(ctx, s.startFailed, setUp); err != nil {
		return fmt.Errorf("run dispatcher: %w", err)
	}

	// A loop that fails stops the others: the service runs whole or not at all.
	runCtx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)
	// work is the context batches run on: it outlives runCtx by up to
	// ShutdownTimeout so that a batch in flight can finish.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	stop := context.AfterFunc(runCtx, func() {
		time.AfterFunc(s.opts.ShutdownTimeout, cancelWork)
	})
	defer stop()

	if h.watchWorkers, err = s.watchWorkers(runCtx, h.workersKV); err != nil {
		return fmt.Errorf("run dispatcher: %w", err)
	}
	// The watch of the leases begins before the first firing is consumed:
	// the fence knows every lease put of an attempt this dispatcher
	// dispatched. Begun by the reaper beside the consumers, it could begin
	// after a dispatch, and the fence took a redelivery of that attempt for
	// one that may have run and failed it as lost.
	s.book.began(s.reaper.watchBegins(runCtx))
	if h.leaseWatch, err = h.leases.WatchAll(runCtx); err != nil {
		return fmt.Errorf("run dispatcher: watch %s: %w", s.top.LeasesBucket(), err)
	}

	s.log.Info().Msg("dispatcher started")
	close(s.ready)
	err = runLoops(s.loops(runCtx, work, h), cancelRun)
	s.log.Info().Msg("dispatcher stopped")
	return err
}

// handles are what the dispatcher's loops consume and watch, found or
// made at start.
type handles struct {
	triggers, firings, reports jetstream.Consumer
	reportStream               jetstream.Stream
	leases, workersKV          jetstream.KeyValue
	leaseWatch                 jetstream.KeyWatcher
	watchWorkers               func() error
	keepers                    []*streams.Keeper
}

// setUp reconciles the topology with Options.Streams, follows the
// installed settings, and finds or makes the consumers, the reports
// stream and the buckets the loops use.
func (s *Service) setUp(ctx context.Context, js jetstream.JetStream) (handles, error) {
	var h handles
	ensured, err := s.top.Reconcile(ctx, js, s.opts.Streams)
	s.reportSettings(ensured.Differences, err)
	if err != nil {
		return h, err
	}
	// Follow the installed settings, not the flags' defaults.
	s.opts.Streams = ensured.Config
	if h.triggers, err = js.CreateOrUpdateConsumer(ctx, s.top.TriggersStream(), s.top.DispatcherConsumer()); err != nil {
		return h, fmt.Errorf("consumer on %s: %w", s.top.TriggersStream(), err)
	}
	if h.firings, err = js.CreateOrUpdateConsumer(ctx, s.top.FiringsStream(), s.top.FiringsConsumer()); err != nil {
		return h, fmt.Errorf("consumer on %s: %w", s.top.FiringsStream(), err)
	}
	if h.reports, err = js.CreateOrUpdateConsumer(ctx, s.top.ReportsStream(), s.top.RecorderConsumer()); err != nil {
		return h, fmt.Errorf("consumer on %s: %w", s.top.ReportsStream(), err)
	}
	if h.reportStream, err = js.Stream(ctx, s.top.ReportsStream()); err != nil {
		return h, fmt.Errorf("stream %s: %w", s.top.ReportsStream(), err)
	}
	if h.leases, err = js.KeyValue(ctx, s.top.LeasesBucket()); err != nil {
		return h, fmt.Errorf("bucket %s: %w", s.top.LeasesBucket(), err)
	}
	if h.workersKV, err = js.KeyValue(ctx, s.top.WorkersBucket()); err != nil {
		return h, fmt.Errorf("bucket %s: %w", s.top.WorkersBucket(), err)
	}
	status, err := h.workersKV.Status(ctx)
	if err != nil {
		return h, fmt.Errorf("bucket %s: %w", s.top.WorkersBucket(), err)
	}
	s.workers.setTTL(status.TTL())
	// The work-queue streams' keepers, the first ones before the first
	// dispatch (see streams.Keeper).
	h.keepers = s.top.Keepers(js)
	for _, k := range h.keepers {
		if err := k.Keep(ctx); err != nil {
			return h, err
		}
	}
	return h, nil
}

// keepLastBlocks keeps the work-queue streams' last blocks from emptying
// (see streams.Keeper) every streams.KeeperInterval until ctx ends. A
// failure is logged and tried again at the next interval: a stream
// without its keeper costs more CPU per ack, nothing else.
func (s *Service) keepLastBlocks(ctx context.Context, keepers []*streams.Keeper) error {
	return s.every(ctx, streams.KeeperInterval, "work-queue stream not kept; trying again", func(ctx context.Context) error {
		var errs []error
		for _, k := range keepers {
			errs = append(errs, k.Keep(ctx))
		}
		return errors.Join(errs...)
	})
}

// every runs pass every d until ctx ends. A failure is logged with
// message and the next pass tries again.
func (s *Service) every(ctx context.Context, d time.Duration, message string, pass func(context.Context) error) error {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := pass(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn().Err(err).Msg(message)
		}
		t.Reset(d)
	}
}

// loops are the dispatcher's parts, each a loop that runs until runCtx
// ends (its batches on work): the intake of the triggers and the
// firings, the recorder of the reports, the reaper, the probe of the
// leases bucket, the fence, the holder of delayed firings, the router of
// departed workers' queues, the history's maintenance, the keepers of
// the work-queue streams and the watch of the workers.
func (s *Service) loops(runCtx, work context.Context, h handles) []func() error {
	// Both consumers take any message a client may publish, a bulk
	// trigger or a report batch up to max_payload: both are bounded by
	// bytes the same way.
	pullBytes := pullByteLimit(s.opts.Conn.MaxPayload())
	return []func() error{
		func() error {
			return consumeBatches(runCtx, work, h.triggers, s.opts.BatchSize, triggerBatchesInFlight, pullBytes,
				s.metrics.counted("triggers", s.intake.handleTriggers))
		},
		func() error {
			return consumeBatches(runCtx, work, h.firings, s.opts.BatchSize, triggerBatchesInFlight, pullBytes,
				s.metrics.counted("triggers", s.intake.handleTriggers))
		},
		func() error {
			return consumeBatches(runCtx, work, h.reports, s.opts.BatchSize, 1, pullBytes, s.metrics.counted("reports",
				func(ctx context.Context, msgs []jetstream.Msg, _ *turn) { s.recorder.handleReports(ctx, msgs) }))
		},
		func() error { return s.reaper.reap(runCtx, work, h.leases, h.leaseWatch, h.reportStream) },
		func() error { return s.reaper.probeWrites(runCtx, h.leases) },
		func() error { return s.reaper.answerFences(runCtx, work, h.leases, h.reportStream) },
		func() error { return s.intake.holdLoop(runCtx, work) },
		func() error { return s.router.reroute(runCtx, work) },
		func() error { return s.historyLoop(runCtx) },
		func() error { return s.limiter.run(runCtx) },
		func() error { return s.runCalendar(runCtx) },
		func() error { return s.fair.releaseLoop(runCtx) },
		func() error { return s.keepLastBlocks(runCtx, h.keepers) },
		h.watchWorkers,
	}
}

// runLoops runs loops side by side until all have returned; the first
// that fails cancels the others (cancel) and its error is returned.
func runLoops(loops []func() error, cancel context.CancelCauseFunc) error {
	var wg sync.WaitGroup
	var once sync.Once
	var runErr error
	for _, loop := range loops {
		wg.Go(func() {
			if err := loop(); err != nil {
				once.Do(func() { runErr = err })
				cancel(err)
			}
		})
	}
	wg.Wait()
	return runErr
}
