package trigger

import (
	"container/heap"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // cron triggers name IANA zones; do not depend on the host's zoneinfo

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// Options configures a [Service]. Zero fields take the stated defaults.
type Options struct {
	// Conn is the NATS connection. Required; the caller keeps ownership.
	Conn *nats.Conn
	// Store is the PostgreSQL store, where the service reads the tasks and
	// keeps the trigger state. Required.
	Store *store.Store
	// Topology names the subjects and buckets (default streams.Default()).
	Topology streams.Topology
	// Logger receives the service's log lines (default: none).
	Logger zerolog.Logger
	// Clock is the source of time and of the timer the ticks (and the
	// retry of failed publishes) wait on (default [RealClock]). The waits
	// before retrying the database run in real time.
	Clock Clock
	// NowFunc tells the time (default Clock.Now).
	NowFunc func() time.Time
	// MisfireGrace is how late a tick may be seen and still fire as on
	// time; a tick seen later is missed and follows its trigger's misfire
	// policy (default 1s).
	MisfireGrace time.Duration
	// ShutdownTimeout bounds how long Run, once its context ends, awaits
	// the publishes in flight and saves the trigger state (default 10s).
	ShutdownTimeout time.Duration
	// BackfillPoll is how often the service looks for running backfills
	// to fire (default [DefaultBackfillPoll]; see backfill.go).
	BackfillPoll time.Duration
	// TracerProvider makes the spans of the cron firings (ax.trigger.fire;
	// default none; pass otel.GetTracerProvider() for the program's own).
	TracerProvider trace.TracerProvider
}

// Defaults of [Options].
const (
	DefaultMisfireGrace    = time.Second
	DefaultShutdownTimeout = 10 * time.Second
)

const (
	// retryDelay is how long a failed publish, save or reload waits before
	// it is tried again.
	retryDelay = time.Second
	// publishTimeout bounds the wait for one publish acknowledgement.
	publishTimeout = 10 * time.Second
)

// Service is the trigger service. Make one with [New] and start it with
// [Service.Run]; a Service runs once.
type Service struct {
	opts  Options
	top   streams.Topology
	log   zerolog.Logger
	clock Clock
	now   func() time.Time
	grace int64

	js jetstream.JetStream
	// pub publishes the firings, cheaper than js's PublishMsgAsync.
	pub     *streams.Publisher
	tracer  trace.Tracer
	persist *persister
	// triggerPrefix is the subject of a firing without its task name.
	triggerPrefix string
	// msgID is the HMAC of the firings' Nats-Msg-Id, keyed with the
	// store's CronMsgIDKey (see streams.CronMsgID); the run loop owns it.
	msgID hash.Hash
	// cronKey is the key of msgID, for the backfill loop's own HMAC.
	cronKey []byte

	// The run loop owns what follows: no locks.
	heap      tickHeap
	tasks     map[string]*task
	schedules map[string]*schedule
	// retry holds the firings whose publish failed, tried again at retryAt.
	retry   *outbox
	retryAt int64
	// due is a buffer of due heap items.
	due []item
	// prepared holds the firings of the tick at preparedAt, encoded ahead.
	prepared   map[*entry]*firing
	preparedAt int64

	// ready is closed once every task is planned and changes are watched.
	ready chan struct{}

	// Test hooks, nil in production: onLoaded runs once every task is
	// planned, before the first firing; onPublish just before each publish.
	onLoaded  func()
	onPublish func(tick int64)
}

// New validates opts and fills the defaults. It does no I/O.
func New(opts Options) (*Service, error) {
	if opts.Conn == nil {
		return nil, errors.New("new trigger: Options.Conn is required")
	}
	if opts.Store == nil {
		return nil, errors.New("new trigger: Options.Store is required")
	}
	if opts.Topology.IsZero() {
		opts.Topology = streams.Default()
	}
	if opts.Clock == nil {
		opts.Clock = RealClock()
	}
	if opts.NowFunc == nil {
		opts.NowFunc = opts.Clock.Now
	}
	if opts.MisfireGrace <= 0 {
		opts.MisfireGrace = DefaultMisfireGrace
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	if opts.BackfillPoll <= 0 {
		opts.BackfillPoll = DefaultBackfillPoll
	}
	log := opts.Logger.With().Str("service", "trigger").Logger()
	return &Service{
		opts:  opts,
		top:   opts.Topology,
		log:   log,
		clock: opts.Clock,
		now:   opts.NowFunc,
		grace: int64(opts.MisfireGrace),
		// Topology.Trigger joins its parts; the hot path only appends a name.
		triggerPrefix: strings.TrimSuffix(opts.Topology.Trigger("x"), "x"),
		persist:       newPersister(opts.Store, log),
		tasks:         make(map[string]*task),
		schedules:     make(map[string]*schedule),
		prepared:      make(map[*entry]*firing),
		ready:         make(chan struct{}),
		tracer:        newTracer(opts.TracerProvider),
	}, nil
}

// Ready returns a channel that is closed once Run has planned every task and
// watches for changes: a task applied from then on is planned at once.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Run checks that the triggers stream and the tasks bucket exist (the
// dispatcher or `ax dev` makes them; Run never changes their settings),
// plans every cron trigger of every enabled task,
// and fires them until ctx ends. It watches the tasks bucket and replans a
// task whenever its entry changes. When ctx ends it stops firing, awaits the
// publishes in flight and saves the trigger state for up to ShutdownTimeout,
// and returns once every goroutine it started has exited. A check that
// NATS leaves unanswered or answers "unavailable" ([streams.Transient]) is
// logged and tried again until ctx ends (nil then); any other failure to
// start (a stream missing), or a watcher that closes, is returned; trouble
// with NATS or PostgreSQL while running is logged and retried.
func (s *Service) Run(ctx context.Context) error {
	// runCtx ends with ctx or when a loop fails; everything that stops at
	// shutdown watches it, so that all see the same end.
	runCtx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)
	js, err := jetstream.New(s.opts.Conn, jetstream.WithPublishAsyncTimeout(publishTimeout))
	if err != nil {
		return fmt.Errorf("run trigger: %w", err)
	}
	s.js = js
	if s.pub, err = streams.NewPublisher(s.opts.Conn, streams.PublisherOptions{Timeout: publishTimeout}); err != nil {
		return fmt.Errorf("run trigger: %w", err)
	}
	defer s.pub.Close()
	// The dispatcher owns the topology's settings: this service only
	// checks that what it uses is there, and never resets them. A cluster
	// still electing its leaders leaves the checks unanswered for a while:
	// they are tried again until ctx ends.
	var kv jetstream.KeyValue
	err = streams.UntilStarted(ctx, func(err error, wait time.Duration) {
		s.log.Warn().Err(err).Dur("retry_in", wait).Msg("trigger start-up failed; trying again")
	}, func(ctx context.Context) error {
		if err := s.top.Require(ctx, js, []string{s.top.TriggersStream()}, []string{s.top.TasksBucket()}); err != nil {
			return err
		}
		if kv, err = js.KeyValue(ctx, s.top.TasksBucket()); err != nil {
			return fmt.Errorf("bucket %s: %w", s.top.TasksBucket(), err)
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("run trigger: %w", err)
	}
	// Watch before loading: a change made while the tasks load is then
	// either in what is loaded or reloaded after it.
	watcher, err := kv.WatchAll(runCtx, jetstream.UpdatesOnly(), jetstream.MetaOnly())
	if err != nil {
		return fmt.Errorf("run trigger: watch %s: %w", s.top.TasksBucket(), err)
	}
	defer func() { _ = watcher.Stop() }()
	if err := s.loadAll(ctx); err != nil {
		return fmt.Errorf("run trigger: %w", err)
	}
	if s.onLoaded != nil {
		s.onLoaded()
	}
	close(s.ready)

	// work outlives runCtx by up to ShutdownTimeout, so that the publishes
	// in flight are awaited and the trigger state is saved.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	stop := context.AfterFunc(runCtx, func() {
		time.AfterFunc(s.opts.ShutdownTimeout, cancelWork)
	})
	defer stop()
	persistStop, stopPersist := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPersist()

	s.log.Info().Int("tasks", len(s.tasks)).Int("triggers", len(s.heap)).Msg("trigger started")
	var (
		wg     sync.WaitGroup
		once   sync.Once
		runErr error
	)
	fail := func(err error) {
		once.Do(func() { runErr = err })
		cancelRun(err)
	}
	wg.Go(func() { s.persist.run(persistStop, work) })
	wg.Go(func() { s.runBackfills(runCtx, s.cronKey) })
	reloads := make(chan reload)
	wg.Go(func() {
		if err := s.watchTasks(runCtx, watcher, reloads); err != nil {
			fail(err)
		}
	})
	s.loop(runCtx, work, reloads)
	// The loop has saved its last ticks: the persister may flush and stop.
	stopPersist()
	wg.Wait()
	s.log.Info().Msg("trigger stopped")
	return runErr
}

// loadAll reads the key of the firings' message ids and plans every task
// in the store.
func (s *Service) loadAll(ctx context.Context) error {
	key, err := s.opts.Store.CronMsgIDKey(ctx)
	if err != nil {
		return err
	}
	s.msgID = hmac.New(sha256.New, key)
	s.cronKey = key
	recs, err := s.opts.Store.ListTasks(ctx)
	if err != nil {
		return err
	}
	mark := s.persist.reading()
	defer s.persist.doneReading(mark)
	states, err := s.opts.Store.ListTriggerStates(ctx)
	if err != nil {
		return err
	}
	now := s.now().UnixNano()
	byName := make(map[string]*store.TaskRecord, len(recs))
	for i := range recs {
		byName[recs[i].Name] = &recs[i]
		s.applyTask(&recs[i], states, mark, now)
	}
	s.dropStale(states, byName)
	return nil
}

// loop fires the due ticks and applies task reloads until ctx ends. One
// timer waits for the earliest tick of the heap (or a retry).
func (s *Service) loop(ctx, work context.Context, reloads <-chan reload) {
	var timer Timer // made on first use: a simulated clock sees every armed timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		s.fireDue(work)
		s.prepare(s.now().UnixNano())
		var wake <-chan time.Time
		if at, ok := s.nextWake(); ok {
			d := time.Duration(at - s.now().UnixNano())
			if timer == nil {
				timer = s.clock.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			wake = timer.C()
		} else if timer != nil {
			timer.Stop()
		}
		select {
		case <-ctx.Done():
			return
		case r := <-reloads:
			s.applyReload(r)
		case <-wake:
		}
	}
}

// nextWake returns when the loop must wake next: the earliest tick of the
// heap or the retry of failed publishes, whichever comes first.
func (s *Service) nextWake() (int64, bool) {
	at := int64(never)
	if len(s.heap) > 0 {
		at = s.heap[0].next
	}
	if s.retry != nil {
		at = min(at, s.retryAt)
	}
	return at, at != never
}

// removeEntry takes e out of the heap.
func (s *Service) removeEntry(e *entry) {
	if e.index >= 0 {
		heap.Remove(&s.heap, int(e.index))
	}
	s.release(e.sched)
}
