package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

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
	// RandFunc returns a number in [0, 1) for retry jitter (default math/rand/v2).
	RandFunc func() float64
	// Metrics is where the dispatcher registers its counters (default: a
	// registry of its own that nobody serves).
	Metrics prometheus.Registerer
	// DrillFaults turns on the faults ax drill rehearses in the recorder
	// (default off): the reports of instances of tasks of type
	// schemas.DrillJitterTaskType are refused on their first
	// schemas.DrillReportFaults deliveries and redelivered after a jittered
	// delay, as if PostgreSQL had failed the transaction (a report batch
	// that carries one is refused whole, as that transaction would refuse
	// it). No other report is touched: drill tasks are applied through the
	// API only. It costs one query per batch of reports.
	DrillFaults bool
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
}

// Service is a dispatcher. Make one with [New] and start it with [Service.Run].
type Service struct {
	opts Options
	top  streams.Topology
	log  zerolog.Logger
	now  func() time.Time
	js   jetstream.JetStream
	// pub publishes the dispatcher's batches (dispatches, schedules,
	// firings of chains): cheaper than js's PublishMsgAsync.
	pub *streams.Publisher
	// ready is closed once Run has its consumers and watcher in place.
	ready chan struct{}
	// held keeps the firings due within holdWindow until their time.
	held *holder
	// metrics counts what the consumers handle.
	metrics *metrics
	// settingsSeen holds the topology settings already logged as differing.
	settingsSeen sync.Map
	// workers is the live view of ax-workers that routing reads.
	workers *liveWorkers
	// gone holds the workers that left, whose queues wait to be routed again.
	gone *departures
	// hashKeys holds the parsed hash_key templates by their text.
	hashKeys sync.Map
	// book is what the reaper's watch learned of the leases, which the
	// fence reads (see fence.go).
	book *leaseBook
	// reconnects dates the connection's reconnections, after which the
	// reaper and the fence give the holders of lapsed leases a grace (see
	// outage.go).
	reconnects reconnects
	// writes dates the refusals of the dispatcher's writes to the leases
	// bucket (see outage.go).
	writes writeHealth
	// leaseTTL is the leases bucket's TTL, in nanoseconds, as the reaper
	// read it at start: how long a suspect's retry waits at least.
	leaseTTL atomic.Int64
	// waits remembers the wait reasons recorded lately (see waits.go).
	waits waitTracker
	// hooks are set by tests only, before Run.
	hooks testHooks
	// rollupWarnings note the buckets whose roll-up was logged (see
	// rollups.go).
	rollupWarnings
	// cronKey is the key of the trigger service's message ids, read from
	// the store on first use (see Service.signedCron).
	cronKey cronKey
}

// testHooks let a test hold a batch of firings at a point of its way
// (see [Service.fire]); each is given the batch's firings. Unset, each
// does nothing.
type testHooks struct {
	// beforeWrites runs before the batch's first statement that writes.
	beforeWrites func([]firing)
	// waitsTurn runs when the batch, holding firings whose order matters,
	// waits for the batch before it to pass its turn before it writes.
	waitsTurn func([]firing)
	// beforeAcks runs before the batch awaits its publishes'
	// acknowledgements.
	beforeAcks func([]firing)
}

// call runs hook, when set, with firings.
func call(hook func([]firing), firings []firing) {
	if hook != nil {
		hook(firings)
	}
}

// DefaultBatchSize is the default of [Options.BatchSize].
const DefaultBatchSize = 500

// triggerBatchesInFlight is how many batches of firings the dispatcher
// handles at once (see [Service.fire]): their statements run side by side
// (one commit's fsync no longer holds up the next batch), their publishes
// go in batch order, and a batch awaits its acknowledgements while the
// next ones run. It stays below the PostgreSQL connections a store's pool
// has by default (pgxpool: 4, or one a core), so that the report batches
// still find one while the trigger batches write, and with
// batches of DefaultBatchSize keeps the dispatch messages awaiting an
// acknowledgement well under the 4,000 that jetstream lets a connection
// have before its publishes stall.
const triggerBatchesInFlight = 3

// New validates opts and fills the defaults. It does no I/O.
func New(opts Options) (*Service, error) {
	if opts.Conn == nil {
		return nil, errors.New("new dispatcher: Options.Conn is required")
	}
	if opts.Store == nil {
		return nil, errors.New("new dispatcher: Options.Store is required")
	}
	if opts.Topology.IsZero() {
		opts.Topology = streams.Default()
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = DefaultBatchSize
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 30 * time.Second
	}
	if opts.TimeoutCheck <= 0 {
		opts.TimeoutCheck = time.Second
	}
	if opts.TimeoutGrace <= 0 {
		opts.TimeoutGrace = 5 * time.Second
	}
	if opts.QuarantineAfter <= 0 {
		opts.QuarantineAfter = DefaultQuarantineAfter
	}
	if opts.NowFunc == nil {
		opts.NowFunc = time.Now
	}
	if opts.RandFunc == nil {
		opts.RandFunc = randFloat
	}
	if opts.Protocol < 0 {
		return nil, fmt.Errorf("new dispatcher: Options.Protocol %d: give a version of the executor protocol, 1 or more, or 0 for 1", opts.Protocol)
	}
	if opts.Protocol == 0 {
		opts.Protocol = 1
	}
	if opts.Metrics == nil {
		opts.Metrics = prometheus.NewRegistry()
	}
	triggersMaxAge := opts.Streams.TriggersMaxAge
	if triggersMaxAge <= 0 {
		triggersMaxAge = streams.DefaultTriggersMaxAge
	}
	if err := opts.History.fill(triggersMaxAge); err != nil {
		return nil, fmt.Errorf("new dispatcher: %w", err)
	}
	m, err := newMetrics(opts.Metrics)
	if err != nil {
		return nil, fmt.Errorf("new dispatcher: register metrics: %w", err)
	}
	return &Service{
		opts:    opts,
		top:     opts.Topology,
		log:     opts.Logger.With().Str("service", "dispatcher").Logger(),
		now:     opts.NowFunc,
		ready:   make(chan struct{}),
		held:    newHolder(),
		metrics: m,
		workers: newLiveWorkers(opts.NowFunc),
		gone:    newDepartures(),
		book:    newLeaseBook(),
	}, nil
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
	s.js = js
	pub, err := streams.NewPublisher(s.opts.Conn, streams.PublisherOptions{Timeout: publishAckTimeout})
	if err != nil {
		return fmt.Errorf("run dispatcher: %w", err)
	}
	defer pub.Close()
	s.pub = pub
	var (
		triggers, firings jetstream.Consumer
		reports           jetstream.Consumer
		reportStream      jetstream.Stream
		leases, workersKV jetstream.KeyValue
	)
	// A cold cluster may take longer to elect its leaders than one request
	// waits: the start-up work is tried again until it succeeds or ctx ends.
	setUp := func(ctx context.Context) error {
		ensured, err := s.top.Reconcile(ctx, js, s.opts.Streams)
		s.reportSettings(ensured.Differences, err)
		if err != nil {
			return err
		}
		// Follow the installed settings, not the flags' defaults.
		s.opts.Streams = ensured.Config
		if triggers, err = js.CreateOrUpdateConsumer(ctx, s.top.TriggersStream(), s.top.DispatcherConsumer()); err != nil {
			return fmt.Errorf("consumer on %s: %w", s.top.TriggersStream(), err)
		}
		if firings, err = js.CreateOrUpdateConsumer(ctx, s.top.FiringsStream(), s.top.FiringsConsumer()); err != nil {
			return fmt.Errorf("consumer on %s: %w", s.top.FiringsStream(), err)
		}
		if reports, err = js.CreateOrUpdateConsumer(ctx, s.top.ReportsStream(), s.top.RecorderConsumer()); err != nil {
			return fmt.Errorf("consumer on %s: %w", s.top.ReportsStream(), err)
		}
		if reportStream, err = js.Stream(ctx, s.top.ReportsStream()); err != nil {
			return fmt.Errorf("stream %s: %w", s.top.ReportsStream(), err)
		}
		if leases, err = js.KeyValue(ctx, s.top.LeasesBucket()); err != nil {
			return fmt.Errorf("bucket %s: %w", s.top.LeasesBucket(), err)
		}
		if workersKV, err = js.KeyValue(ctx, s.top.WorkersBucket()); err != nil {
			return fmt.Errorf("bucket %s: %w", s.top.WorkersBucket(), err)
		}
		status, err := workersKV.Status(ctx)
		if err != nil {
			return fmt.Errorf("bucket %s: %w", s.top.WorkersBucket(), err)
		}
		s.workers.setTTL(status.TTL())
		return nil
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

	watch, err := s.watchWorkers(runCtx, workersKV)
	if err != nil {
		return fmt.Errorf("run dispatcher: %w", err)
	}
	// The watch of the leases begins before the first firing is consumed:
	// the fence knows every lease put of an attempt this dispatcher
	// dispatched. Begun by the reaper beside the consumers, it could begin
	// after a dispatch, and the fence took a redelivery of that attempt for
	// one that may have run and failed it as lost.
	s.book.began(s.watchBegins(runCtx))
	leaseWatch, err := leases.WatchAll(runCtx)
	if err != nil {
		return fmt.Errorf("run dispatcher: watch %s: %w", s.top.LeasesBucket(), err)
	}

	s.log.Info().Msg("dispatcher started")
	close(s.ready)
	// Both consumers take any message a client may publish, a bulk
	// trigger or a report batch up to max_payload: both are bounded by
	// bytes the same way.
	pullBytes := pullByteLimit(s.opts.Conn.MaxPayload())
	loops := []func() error{
		func() error {
			return consumeBatches(runCtx, work, triggers, s.opts.BatchSize, triggerBatchesInFlight, pullBytes,
				s.metrics.counted("triggers", s.handleTriggers))
		},
		func() error {
			return consumeBatches(runCtx, work, firings, s.opts.BatchSize, triggerBatchesInFlight, pullBytes,
				s.metrics.counted("triggers", s.handleTriggers))
		},
		func() error {
			return consumeBatches(runCtx, work, reports, s.opts.BatchSize, 1, pullBytes, s.metrics.counted("reports",
				func(ctx context.Context, msgs []jetstream.Msg, _ *turn) { s.handleReports(ctx, msgs) }))
		},
		func() error { return s.reap(runCtx, work, leases, leaseWatch, reportStream) },
		func() error { return s.probeWrites(runCtx, leases) },
		func() error { return s.answerFences(runCtx, work, leases, reportStream) },
		func() error { return s.holdLoop(runCtx, work) },
		func() error { return s.reroute(runCtx, work) },
		func() error { return s.historyLoop(runCtx) },
		watch,
	}
	var wg sync.WaitGroup
	var once sync.Once
	var runErr error
	for _, loop := range loops {
		wg.Go(func() {
			if err := loop(); err != nil {
				once.Do(func() { runErr = err })
				cancelRun(err)
			}
		})
	}
	wg.Wait()
	s.log.Info().Msg("dispatcher stopped")
	return runErr
}
