package relay

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/auditor/job"
	"github.com/ax-scheduler/ax/internal/wait"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// Defaults of [Options] (the others are [job.Base]'s).
const (
	DefaultPollInterval = 200 * time.Millisecond
	DefaultSaveInterval = time.Second
	DefaultAckTimeout   = 30 * time.Second
)

// Options configures a [Service]. Zero fields take the stated defaults.
type Options struct {
	// Base holds the options both of the auditor's jobs take: Conn (the
	// connection the records are published on), Store, Topology, BatchSize
	// (the most records published in one batch), RetryInterval,
	// ShutdownTimeout (how long Run lets a batch in flight finish —
	// published and its cursor saved — after its context ends), Logger and
	// Metrics (where the relay registers ax_audit_records_relayed_total and
	// ax_audit_relay_leader).
	job.Base
	// PollInterval is how long the leader waits before it looks at the
	// outbox again when it found nothing new (default DefaultPollInterval).
	PollInterval time.Duration
	// SaveInterval is how often, at most, the leader stores its cursor
	// within a batch of many pages (default DefaultSaveInterval). A new
	// leader skips what AX_AUDIT holds beyond the stored cursor, so a
	// longer interval costs a takeover only a longer skip.
	SaveInterval time.Duration
	// AckTimeout bounds the wait for a batch's acknowledgements (default
	// DefaultAckTimeout).
	AckTimeout time.Duration
	// Version is the version of the audit protocol the relay publishes
	// (see docs/protocol.md): 2 (the default, schemas.AuditBatchVersion)
	// publishes a page's records of one task in one message, a
	// schemas.AuditBatch; 1 publishes one schemas.AuditRecord a message,
	// for consumers that do not read version 2 yet.
	Version int
}

// Service is an outbox relay. Make one with [New] and start it with
// [Service.Run].
type Service struct {
	opts    Options
	top     streams.Topology
	log     zerolog.Logger
	leading atomic.Bool
	// recordsRelayed and leader are the relay's metrics.
	recordsRelayed prometheus.Counter
	leader         prometheus.Gauge
	// afterPublish, set by tests only, runs once a batch is acknowledged
	// and before its cursor is saved; an error stops the leader right
	// there, as a crash would.
	afterPublish func(recs []schemas.AuditRecord) error
	// cutPage, set by tests only, gets a page's messages before they are
	// published: the relay publishes those it returns and, with an error,
	// stops right there, as a crash within the page would.
	cutPage func(msgs []auditMsg) ([]auditMsg, error)
	// now is the relay's clock (time.Now; tests set their own).
	now func() time.Time
}

// New validates opts and fills in the defaults. It does no I/O.
func New(opts Options) (*Service, error) {
	if err := opts.Fill("audit relay"); err != nil {
		return nil, err
	}
	job.Default(&opts.PollInterval, DefaultPollInterval)
	job.Default(&opts.SaveInterval, DefaultSaveInterval)
	job.Default(&opts.AckTimeout, DefaultAckTimeout)
	if opts.Version == 0 {
		opts.Version = schemas.AuditBatchVersion
	}
	if opts.Version != 1 && opts.Version != schemas.AuditBatchVersion {
		return nil, fmt.Errorf("new audit relay: Options.Version %d: use 1 (a record a message) or %d (a task's records a message)",
			opts.Version, schemas.AuditBatchVersion)
	}
	s := &Service{
		opts: opts,
		top:  opts.Topology,
		now:  time.Now,
		log:  opts.Logger.With().Str("service", "auditor").Logger(),
		recordsRelayed: prometheus.NewCounter(prometheus.CounterOpts{Name: "ax_audit_records_relayed_total",
			Help: "Audit records this auditor published to AX_AUDIT."}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ax_audit_relay_leader",
			Help: "1 while this auditor relays the outbox to AX_AUDIT, else 0."}),
	}
	for _, c := range []prometheus.Collector{s.recordsRelayed, s.leader} {
		if err := opts.Metrics.Register(c); err != nil {
			return nil, fmt.Errorf("new audit relay: register metrics: %w", err)
		}
	}
	return s, nil
}

// Leading reports whether this relay publishes the outbox now. It is safe
// to call from any goroutine.
func (s *Service) Leading() bool { return s.leading.Load() }

// Run relays the outbox to AX_AUDIT while it leads, and tries to lead while
// another relay does, until ctx ends. Then it lets the batch in flight be
// published and its cursor saved, for up to ShutdownTimeout, releases the
// lead, and returns. It fails at start when the AX_AUDIT stream does not
// exist (the dispatcher and ax dev create the topology), and tries the
// look-up again, logged, while NATS leaves it unanswered or answers
// "unavailable" ([streams.Transient]); a failure while it
// runs — PostgreSQL or NATS gone — is logged, and the relay gives up the
// lead and tries again after RetryInterval.
func (s *Service) Run(ctx context.Context) error {
	js, err := jetstream.New(s.opts.Conn)
	if err != nil {
		return fmt.Errorf("run audit relay: %w", err)
	}
	pub, err := streams.NewPublisher(s.opts.Conn, streams.PublisherOptions{Timeout: s.opts.AckTimeout})
	if err != nil {
		return fmt.Errorf("run audit relay: %w", err)
	}
	defer pub.Close()
	var stream jetstream.Stream
	err = streams.UntilStarted(ctx, func(err error, wait time.Duration) {
		s.log.Warn().Err(err).Dur("retry_in", wait).Msg("audit relay start-up failed; trying again")
	}, func(ctx context.Context) (err error) {
		stream, err = js.Stream(ctx, s.top.AuditStream())
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("run audit relay: stream %s: %w (the dispatcher and ax dev create the topology: start one of them first)",
			s.top.AuditStream(), err)
	}
	for {
		err := s.campaign(ctx, pub, stream)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && !errors.Is(err, store.ErrRelayHeld) {
			s.log.Warn().Err(err).Dur("retry_in", s.opts.RetryInterval).Msg("audit relay stopped")
		}
		if !wait.SleepJitter(ctx, s.opts.RetryInterval) {
			return nil
		}
	}
}

// campaign takes the relay's lock, when no one holds it, and relays until
// ctx ends or something fails. It returns an error wrapping
// store.ErrRelayHeld when another relay leads.
func (s *Service) campaign(ctx context.Context, pub *streams.Publisher, stream jetstream.Stream) error {
	relay, err := s.opts.Store.AcquireRelay(ctx)
	if err != nil {
		return err
	}
	s.leading.Store(true)
	s.leader.Set(1)
	log := s.log.With().Uint32("pg_pid", relay.PID()).Logger()
	log.Info().Msg("audit relay leading")
	defer func() {
		s.leading.Store(false)
		s.leader.Set(0)
		// Closing the session releases the lock.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := relay.Close(cctx); err != nil {
			log.Warn().Err(err).Msg("release audit relay")
		}
	}()
	return s.lead(ctx, pub, stream, relay, log)
}
