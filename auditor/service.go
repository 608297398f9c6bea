package auditor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// Defaults of [Options].
const (
	DefaultBatchSize       = 500
	DefaultPollInterval    = 200 * time.Millisecond
	DefaultRetryInterval   = 3 * time.Second
	DefaultAckTimeout      = 30 * time.Second
	DefaultShutdownTimeout = 10 * time.Second
	DefaultRefreshInterval = 15 * time.Second
	DefaultLagInterval     = 5 * time.Second
	DefaultConsoleURL      = "http://127.0.0.1:8080"
	DefaultNotifyTimeout   = 10 * time.Second
)

// Options configures a [Service]. Zero fields take the stated defaults.
type Options struct {
	// Conn is the NATS connection the records are published on. Required;
	// the caller keeps ownership.
	Conn *nats.Conn
	// Store is the PostgreSQL store. Required. The leader opens one
	// connection of its own with the settings of the store's pool, to hold
	// the relay's lock.
	Store *store.Store
	// Topology names the subjects and the stream (default streams.Default()).
	Topology streams.Topology
	// BatchSize is the most records published in one batch (default
	// DefaultBatchSize).
	BatchSize int
	// PollInterval is how long the leader waits before it looks at the
	// outbox again when it found nothing new (default DefaultPollInterval).
	PollInterval time.Duration
	// RetryInterval is how often a follower tries to take the lead, and how
	// long a leader that failed waits before it tries again (default
	// DefaultRetryInterval).
	RetryInterval time.Duration
	// AckTimeout bounds the wait for a batch's acknowledgements (default
	// DefaultAckTimeout).
	AckTimeout time.Duration
	// ShutdownTimeout bounds how long Run lets a batch in flight finish —
	// published and its cursor saved — after its context ends (default
	// DefaultShutdownTimeout).
	ShutdownTimeout time.Duration
	// Logger receives the service's log lines (default: none).
	Logger zerolog.Logger

	// Metrics is where the auditor registers its metrics (see
	// docs/operations.md); nil means a registry of its own that nobody
	// serves; a registry takes one auditor. The fleet metrics are computed
	// by the auditor that leads monitoring (see [Service.Monitoring]).
	Metrics prometheus.Registerer
	// RefreshInterval is how often the monitoring leader refreshes the
	// gauges read from PostgreSQL and evaluates the alert rules over a
	// state (default DefaultRefreshInterval).
	RefreshInterval time.Duration
	// LagInterval is how often the monitoring leader reads the consumers'
	// state from JetStream for the consumer and pool lag gauges: one
	// consumer list per stream, and one message read per pool consumer
	// with attempts waiting (default DefaultLagInterval).
	LagInterval time.Duration
	// ConsoleURL is the web console's base URL, for the links to an
	// instance's logs in alert notifications (default DefaultConsoleURL).
	ConsoleURL string
	// Destinations decides which addresses alert notifications may reach
	// (default: public addresses only, no credentials in URLs; see
	// [DestinationPolicy]).
	Destinations DestinationPolicy
	// NotifyTimeout bounds one notification request (default
	// DefaultNotifyTimeout).
	NotifyTimeout time.Duration
	// NowFunc tells the time of alerts and of the backlog's age (default time.Now).
	NowFunc func() time.Time
}

// Service is an auditor. Make one with [New] and start it with [Service.Run].
type Service struct {
	opts    Options
	top     streams.Topology
	log     zerolog.Logger
	now     func() time.Time
	metrics *metrics
	leading atomic.Bool
	// monitoring is set while this auditor leads monitoring, with its
	// consumer and watch in place.
	monitoring atomic.Bool
	// outbox holds the alert notifications the sender has yet to send.
	outbox chan Notification
	// dest is the destination policy; http sends under it.
	dest *compiled
	http *http.Client
	// afterPublish, set by tests only, runs once a batch is acknowledged
	// and before its cursor is saved; an error stops the leader right
	// there, as a crash would.
	afterPublish func(recs []schemas.AuditRecord) error
}

// New validates opts and fills in the defaults. It does no I/O.
func New(opts Options) (*Service, error) {
	if opts.Conn == nil {
		return nil, errors.New("new auditor: Options.Conn is required")
	}
	if opts.Store == nil {
		return nil, errors.New("new auditor: Options.Store is required")
	}
	if opts.Topology == (streams.Topology{}) {
		opts.Topology = streams.Default()
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = DefaultBatchSize
	}
	def(&opts.PollInterval, DefaultPollInterval)
	def(&opts.RetryInterval, DefaultRetryInterval)
	def(&opts.AckTimeout, DefaultAckTimeout)
	def(&opts.ShutdownTimeout, DefaultShutdownTimeout)
	def(&opts.RefreshInterval, DefaultRefreshInterval)
	def(&opts.LagInterval, DefaultLagInterval)
	if opts.ConsoleURL == "" {
		opts.ConsoleURL = DefaultConsoleURL
	}
	def(&opts.NotifyTimeout, DefaultNotifyTimeout)
	dest, err := opts.Destinations.compile()
	if err != nil {
		return nil, fmt.Errorf("new auditor: Options.Destinations: %w", err)
	}
	if opts.NowFunc == nil {
		opts.NowFunc = time.Now
	}
	if opts.Metrics == nil {
		opts.Metrics = prometheus.NewRegistry()
	}
	m, err := newMetrics(opts.Metrics)
	if err != nil {
		return nil, fmt.Errorf("new auditor: register metrics: %w", err)
	}
	return &Service{
		opts:    opts,
		top:     opts.Topology,
		log:     opts.Logger.With().Str("service", "auditor").Logger(),
		now:     opts.NowFunc,
		metrics: m,
		outbox:  make(chan Notification, notifyQueue),
		dest:    dest,
		http:    dest.client(opts.NotifyTimeout),
	}, nil
}

// Leading reports whether this auditor relays the outbox now. It is safe
// to call from any goroutine.
func (s *Service) Leading() bool { return s.leading.Load() }

// Monitoring reports whether this auditor leads monitoring now — computes
// the fleet metrics and evaluates the alert rules — with its consumer on
// AX_AUDIT and its watch of ax-workers in place. It is safe to call from
// any goroutine.
func (s *Service) Monitoring() bool { return s.monitoring.Load() }

// Run relays the outbox to AX_AUDIT while it leads, and tries to lead while
// another auditor does, until ctx ends. Then it lets the batch in flight be
// published and its cursor saved, for up to ShutdownTimeout, releases the
// lead, and returns. It fails at start when the AX_AUDIT stream does not
// exist (the dispatcher and ax dev create the topology); a failure while it
// runs — PostgreSQL or NATS gone — is logged, and the auditor gives up the
// lead and tries again after RetryInterval.
func (s *Service) Run(ctx context.Context) error {
	js, err := jetstream.New(s.opts.Conn, jetstream.WithPublishAsyncTimeout(s.opts.AckTimeout))
	if err != nil {
		return fmt.Errorf("run auditor: %w", err)
	}
	stream, err := js.Stream(ctx, s.top.AuditStream())
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("run auditor: stream %s: %w (the dispatcher and ax dev create the topology: start one of them first)",
			s.top.AuditStream(), err)
	}
	s.log.Info().Msg("auditor started")
	defer s.log.Info().Msg("auditor stopped")
	// Monitoring and the notifications run beside the relay; Run returns
	// once they have stopped.
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { s.monitorLoop(ctx, js) })
	wg.Go(func() { s.sender(ctx) })
	for {
		err := s.campaign(ctx, js, stream)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && !errors.Is(err, store.ErrRelayHeld) {
			s.log.Warn().Err(err).Dur("retry_in", s.opts.RetryInterval).Msg("audit relay stopped")
		}
		if !sleep(ctx, s.opts.RetryInterval) {
			return nil
		}
	}
}

// campaign takes the relay's lock, when no one holds it, and relays until
// ctx ends or something fails. It returns an error wrapping
// store.ErrRelayHeld when another auditor leads.
func (s *Service) campaign(ctx context.Context, js jetstream.JetStream, stream jetstream.Stream) error {
	relay, err := s.opts.Store.AcquireRelay(ctx)
	if err != nil {
		return err
	}
	s.leading.Store(true)
	s.metrics.relayLeader.Set(1)
	log := s.log.With().Uint32("pg_pid", relay.PID()).Logger()
	log.Info().Msg("audit relay leading")
	defer func() {
		s.leading.Store(false)
		s.metrics.relayLeader.Set(0)
		// Closing the session releases the lock.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := relay.Close(cctx); err != nil {
			log.Warn().Err(err).Msg("release audit relay")
		}
	}()
	return s.lead(ctx, js, stream, relay, log)
}

// sleep waits for d or ctx, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
