package monitor

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/auditor/job"
	"github.com/ax-scheduler/ax/streams"
)

// Defaults of [Options] (the others are [job.Base]'s).
const (
	DefaultRefreshInterval = 15 * time.Second
	DefaultLagInterval     = 5 * time.Second
	DefaultConsoleURL      = "http://127.0.0.1:8080"
	DefaultNotifyTimeout   = 10 * time.Second
)

// Options configures a [Service]. Zero fields take the stated defaults.
type Options struct {
	// Base holds the options both of the auditor's jobs take: Conn (the
	// connection the monitor consumes the audit trail and watches
	// ax-workers on), Store, Topology, BatchSize (the most audit records
	// handled in one batch), RetryInterval (also how long a batch
	// PostgreSQL failed waits for redelivery), ShutdownTimeout (how long
	// Run lets the queued notifications be sent after its context ends),
	// Logger and Metrics (a registry takes one monitor; the fleet metrics
	// are computed by the monitor that leads, see [Service.Monitoring]).
	job.Base
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
	if err := opts.Fill("monitor"); err != nil {
		return nil, err
	}
	job.Default(&opts.RefreshInterval, DefaultRefreshInterval)
	job.Default(&opts.LagInterval, DefaultLagInterval)
	if opts.ConsoleURL == "" {
		opts.ConsoleURL = DefaultConsoleURL
	}
	job.Default(&opts.NotifyTimeout, DefaultNotifyTimeout)
	dest, err := opts.Destinations.compile()
	if err != nil {
		return nil, fmt.Errorf("new monitor: Options.Destinations: %w", err)
	}
	if opts.NowFunc == nil {
		opts.NowFunc = time.Now
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
// dispatcher and ax dev create the topology), and tries the look-up again,
// logged, while NATS leaves it unanswered or answers "unavailable"
// ([streams.Transient]); a failure while it runs —
// PostgreSQL or NATS gone — is logged, and the monitor gives up the lead
// and tries again after RetryInterval.
func (s *Service) Run(ctx context.Context) error {
	js, err := jetstream.New(s.opts.Conn)
	if err != nil {
		return fmt.Errorf("run monitor: %w", err)
	}
	err = streams.UntilStarted(ctx, func(err error, wait time.Duration) {
		s.log.Warn().Err(err).Dur("retry_in", wait).Msg("monitor start-up failed; trying again")
	}, func(ctx context.Context) error {
		_, err := js.Stream(ctx, s.top.AuditStream())
		return err
	})
	if err != nil {
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
