package auditor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/auditor/job"
	"github.com/ax-scheduler/ax/auditor/monitor"
	"github.com/ax-scheduler/ax/auditor/relay"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// Options configures a [Service]: the fields of [relay.Options] and
// [monitor.Options] in one. Zero fields take the defaults those packages
// state.
type Options struct {
	// Conn is the NATS connection both jobs use. Required; the caller keeps
	// ownership.
	Conn *nats.Conn
	// Store is the PostgreSQL store. Required. Each leader opens one
	// connection of its own with the settings of the store's pool, to hold
	// its lock.
	Store *store.Store
	// Topology names the subjects, streams and buckets (default
	// streams.Default()).
	Topology streams.Topology
	// BatchSize is the most records the relay publishes, and the monitor
	// handles, in one batch.
	BatchSize int
	// PollInterval is how long the relay waits before it looks at the
	// outbox again when it found nothing new.
	PollInterval time.Duration
	// RetryInterval is how often a follower tries to take the lead, and how
	// long a leader that failed waits before it tries again.
	RetryInterval time.Duration
	// AckTimeout bounds the relay's wait for a batch's acknowledgements.
	AckTimeout time.Duration
	// AuditVersion is the audit protocol version the relay publishes:
	// 2 (the default) a page's records of one task a message, 1 a record a
	// message (see [relay.Options].Version and docs/protocol.md).
	AuditVersion int
	// ShutdownTimeout bounds how long Run lets a batch in flight finish and
	// the queued notifications be sent after its context ends.
	ShutdownTimeout time.Duration
	// Logger receives the service's log lines (default: none).
	Logger zerolog.Logger
	// Metrics is where both jobs register their metrics (see
	// docs/operations.md); nil means a registry of its own that nobody
	// serves; a registry takes one auditor.
	Metrics prometheus.Registerer
	// RefreshInterval is how often the monitoring leader refreshes the
	// gauges read from PostgreSQL and evaluates the alert rules over a state.
	RefreshInterval time.Duration
	// LagInterval is how often the monitoring leader reads the consumers'
	// state from JetStream for the lag gauges.
	LagInterval time.Duration
	// ConsoleURL is the web console's base URL, for the links in alert
	// notifications.
	ConsoleURL string
	// Destinations decides which addresses alert notifications may reach.
	Destinations monitor.DestinationPolicy
	// NotifyTimeout bounds one notification request.
	NotifyTimeout time.Duration
	// NowFunc tells the time of alerts and of the backlog's age (default time.Now).
	NowFunc func() time.Time
}

// Service is an auditor: an outbox relay and a monitor. Make one with [New]
// and start it with [Service.Run].
type Service struct {
	log     zerolog.Logger
	relay   *relay.Service
	monitor *monitor.Service
}

// New validates opts and fills in the defaults. It does no I/O.
func New(opts Options) (*Service, error) {
	if opts.Conn == nil {
		return nil, errors.New("new auditor: Options.Conn is required")
	}
	if opts.Store == nil {
		return nil, errors.New("new auditor: Options.Store is required")
	}
	if opts.Metrics == nil {
		opts.Metrics = prometheus.NewRegistry()
	}
	base := job.Base{
		Conn: opts.Conn, Store: opts.Store, Topology: opts.Topology, BatchSize: opts.BatchSize, RetryInterval: opts.RetryInterval,
		ShutdownTimeout: opts.ShutdownTimeout, Logger: opts.Logger, Metrics: opts.Metrics,
	}
	r, err := relay.New(relay.Options{Base: base, PollInterval: opts.PollInterval, AckTimeout: opts.AckTimeout,
		Version: opts.AuditVersion})
	if err != nil {
		return nil, fmt.Errorf("new auditor: %w", err)
	}
	m, err := monitor.New(monitor.Options{
		Base: base, RefreshInterval: opts.RefreshInterval, LagInterval: opts.LagInterval, ConsoleURL: opts.ConsoleURL,
		Destinations: opts.Destinations, NotifyTimeout: opts.NotifyTimeout, NowFunc: opts.NowFunc,
	})
	if err != nil {
		return nil, fmt.Errorf("new auditor: %w", err)
	}
	return &Service{log: opts.Logger.With().Str("service", "auditor").Logger(), relay: r, monitor: m}, nil
}

// Leading reports whether this auditor relays the outbox now. It is safe
// to call from any goroutine.
func (s *Service) Leading() bool { return s.relay.Leading() }

// Monitoring reports whether this auditor leads monitoring now (see
// [monitor.Service.Monitoring]). It is safe to call from any goroutine.
func (s *Service) Monitoring() bool { return s.monitor.Monitoring() }

// Run runs the relay and the monitor until ctx ends, and returns once both
// have stopped (see [relay.Service.Run] and [monitor.Service.Run]). When
// either fails at start — the AX_AUDIT stream does not exist — Run stops
// the other and returns the errors.
func (s *Service) Run(ctx context.Context) error {
	s.log.Info().Msg("auditor started")
	defer s.log.Info().Msg("auditor stopped")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, run := range []func(context.Context) error{s.relay.Run, s.monitor.Run} {
		wg.Go(func() {
			if errs[i] = run(ctx); errs[i] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
