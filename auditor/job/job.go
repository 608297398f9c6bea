// Package job holds what the auditor's two jobs — the outbox relay
// ([relay]) and the monitor ([monitor]) — share: the options of a job that
// one auditor at a time leads, with a PostgreSQL advisory lock of its own,
// and their defaults.
//
// [relay]: https://pkg.go.dev/github.com/ax-scheduler/ax/auditor/relay
// [monitor]: https://pkg.go.dev/github.com/ax-scheduler/ax/auditor/monitor
package job

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// Defaults of [Base].
const (
	DefaultBatchSize       = 500
	DefaultRetryInterval   = 3 * time.Second
	DefaultShutdownTimeout = 10 * time.Second
)

// Base is the part of a job's options both jobs have. Zero fields take
// the stated defaults ([Base.Fill]).
type Base struct {
	// Conn is the NATS connection the job works on. Required; the caller
	// keeps ownership.
	Conn *nats.Conn
	// Store is the PostgreSQL store. Required. The job's leader opens one
	// connection of its own with the settings of the store's pool, to hold
	// its lock.
	Store *store.Store
	// Topology names the subjects, streams and buckets (default
	// streams.Default()).
	Topology streams.Topology
	// BatchSize is the most audit records handled in one batch (default
	// DefaultBatchSize).
	BatchSize int
	// RetryInterval is how often a follower tries to take the lead, and how
	// long a leader that failed waits before it tries again (default
	// DefaultRetryInterval).
	RetryInterval time.Duration
	// ShutdownTimeout bounds how long the job's Run lets the work in flight
	// finish after its context ends (default DefaultShutdownTimeout).
	ShutdownTimeout time.Duration
	// Logger receives the job's log lines (default: none).
	Logger zerolog.Logger
	// Metrics is where the job registers its metrics (see
	// docs/operations.md); nil means a registry of its own that nobody
	// serves.
	Metrics prometheus.Registerer
}

// Fill checks the required fields and fills in the defaults of the others,
// for the New of the job name ("audit relay"); its errors name the job and
// the missing field. It does no I/O.
func (b *Base) Fill(name string) error {
	if b.Conn == nil {
		return fmt.Errorf("new %s: Options.Conn is required", name)
	}
	if b.Store == nil {
		return fmt.Errorf("new %s: Options.Store is required", name)
	}
	if b.Topology.IsZero() {
		b.Topology = streams.Default()
	}
	if b.BatchSize <= 0 {
		b.BatchSize = DefaultBatchSize
	}
	Default(&b.RetryInterval, DefaultRetryInterval)
	Default(&b.ShutdownTimeout, DefaultShutdownTimeout)
	if b.Metrics == nil {
		b.Metrics = prometheus.NewRegistry()
	}
	return nil
}

// Default sets *d to v when *d is zero or negative: a job's other
// durations take their defaults with it.
func Default(d *time.Duration, v time.Duration) {
	if *d <= 0 {
		*d = v
	}
}
