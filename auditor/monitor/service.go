package monitor

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

	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// Defaults of [Options].
const (
	DefaultBatchSize       = 500
	DefaultRetryInterval   = 3 * time.Second
	DefaultShutdownTimeout = 10 * time.Second
	DefaultRefreshInterval = 15 * time.Second
	DefaultLagInterval     = 5 * time.Second
	DefaultConsoleURL      = "http://127.0.0.1:8080"
	DefaultNotifyTimeout   = 10 * time.Second
)

// Options configures a [Service]. Zero fields take the stated defaults.
type Options struct {
	// Conn is the NATS connection the monitor consumes the audit trail and
	// watches ax-workers on. Required; the caller keeps ownership.
	Conn *nats.Conn
	// Store is the PostgreSQL store. Required. The leader opens one
	// connection of its own with the settings of the store's pool, to hold
	// the monitoring lock.
	Store *store.Store
	// Topology names the subjects, streams and buckets (default
	// streams.Default()).
	Topology streams.Topology
	// BatchSize is the most audit records handled in one batch (default
	// DefaultBatchSize).
	BatchSize int
	// RetryInterval is how often a follower tries to take the lead, how long
	// a leader that failed waits before it tries again, and how long a batch
	// PostgreSQL failed waits for redelivery (default DefaultRetryInterval).
	RetryInterval time.Duration
	// ShutdownTimeout bounds how long Run lets the queued notifications be
	// sent after its context ends (default DefaultShutdownTimeout).
	ShutdownTimeout time.Duration
	// Logger receives the monitor's log lines (default: none).
	Logger zerolog.Logger
	// Metrics is where the monitor registers its metrics (see
	// docs/operations.md); nil means a registry of its own that nobody
	// serves; a registry takes one monitor. The fleet metrics are computed
	// by the monitor that leads (see [Service.Monitoring]).
	Metrics prometheus.Registerer
	// RefreshInterval is how often the leader refreshes the gauges read
	// from PostgreSQL and evaluates the alert rules over a state (default
	// DefaultRefreshInterval).
	RefreshInterval time.Duration
	// LagInterval is how often the leader reads the consumers' state from
	// JetStream for the consumer and pool lag gauges: one consumer list per
	// stream, and one message read per pool consumer with attempts waiting
	// (default DefaultLagInterval).
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

// Service is a monitor. Make one with [New] and start it with [Service.Run].
type Service struct {
	opts    Options
	top     streams.Topology
	log     zerolog.Logger
	now     func() time.Time
	metrics *metrics
	// monitoring is set while this monitor leads, with its consumer and
	// watch in place.
	monitoring atomic.Bool
	// outbox holds the alert notifications the sender has yet to send.
	outbox chan Notification
	// dest is the destination policy; http sends under it.
	dest *compiled
	http *http.Client
}

// New validates opts and fills in the defaults. It does no I/O.
func New(opts Options) (*Service, error) {
	if opts.Conn == nil {
		return nil, errors.New("new monitor: Options.Conn is required")
	}
	if opts.Store == nil {
		return nil, errors.New("new monitor: Options.Store is required")
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
	def(&opts.RetryInterval, DefaultRetryInterval)
	def(&opts.ShutdownTimeout, DefaultShutdownTimeout)
	def(&opts.RefreshInterval, DefaultRefreshInterval)
	def(&opts.LagInterval, DefaultLagInterval)
	if opts.ConsoleURL == "" {
		opts.ConsoleURL = DefaultConsoleURL
	}
	def(&opts.NotifyTimeout, DefaultNotifyTimeout)
	dest, err := opts.Destinations.compile()
	if err != nil {
		return nil, fmt.Errorf("new monitor: Options.Destinations: %w", err)
	}
	if opts.NowFunc == nil {
		opts.NowFunc = time.Now
	}
	if opts.Metrics == nil {
		opts.Metrics = prometheus.NewRegistry()
	}
	m, err := newMetrics(opts.Metrics)
	if err != nil {
		return nil, fmt.Errorf("new monitor: register metrics: %w", err)
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

// Monitoring reports whether this monitor leads now — computes the fleet
// metrics and evaluates the alert rules — with its consumer on AX_AUDIT and
// its watch of ax-workers in place. It is safe to call from any goroutine.
func (s *Service) Monitoring() bool { return s.monitoring.Load() }

// Run monitors while it leads, and tries to lead while another monitor
// does, until ctx ends; beside it a sender delivers the alert
// notifications. Then it sends what is queued for up to ShutdownTimeout and
// returns. It fails at start when the AX_AUDIT stream does not exist (the
// dispatcher and ax dev create the topology); a failure while it runs —
// PostgreSQL or NATS gone — is logged, and the monitor gives up the lead
// and tries again after RetryInterval.
func (s *Service) Run(ctx context.Context) error {
	js, err := jetstream.New(s.opts.Conn)
	if err != nil {
		return fmt.Errorf("run monitor: %w", err)
	}
	if _, err := js.Stream(ctx, s.top.AuditStream()); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("run monitor: stream %s: %w (the dispatcher and ax dev create the topology: start one of them first)",
			s.top.AuditStream(), err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { s.sender(ctx) })
	s.monitorLoop(ctx, js)
	return nil
}
