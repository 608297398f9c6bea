package executor

import (
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// Defaults of [Options].
const (
	DefaultVersion           = "0.1.0"
	DefaultSlots             = 16
	DefaultHeartbeatInterval = 5 * time.Second
	DefaultIdleWait          = time.Second
	DefaultDoorbellWait      = 100 * time.Millisecond
	DefaultShutdownTimeout   = 30 * time.Second
	DefaultRequeueDelay      = time.Second
	DefaultLogBuffer         = 10000
	DefaultLogFlushInterval  = 100 * time.Millisecond
	DefaultStartedDelay      = time.Second
)

// Options configures a worker. Zero fields take the stated defaults.
type Options struct {
	// Conn is the NATS connection the worker uses. Required. The worker does
	// not close it.
	Conn *nats.Conn
	// Topology names AX's subjects, streams and buckets (zero value:
	// streams.Default()).
	Topology streams.Topology
	// WorkerID names the worker in ax-workers, in reports and in its control
	// subject (default "<hostname>-<6 random characters>"). Letters, digits,
	// '-' and '_' only: it is a NATS subject token and a KV key.
	WorkerID string
	// Version is the worker's semantic version, matched against a task's
	// min_worker_version (default [DefaultVersion]).
	Version string
	// Pools are the executor pools the worker serves (default ["default"]).
	// A pool's name is its tags sorted and joined with "+" ("eu+gpu").
	Pools []string
	// Slots is how many attempts the worker runs at once (default
	// [DefaultSlots]). It pulls work only while a slot is free.
	Slots int
	// Mux holds the handlers the worker runs. Required, with at least one handler.
	Mux *Mux
	// HeartbeatInterval is how often the worker puts itself in ax-workers
	// (default [DefaultHeartbeatInterval]). It must be shorter than the
	// bucket's TTL.
	HeartbeatInterval time.Duration
	// IdleWait is how long an idle worker waits before polling its consumers
	// again when no doorbell rings (default [DefaultIdleWait]).
	IdleWait time.Duration
	// DoorbellWait is how long a worker whose doorbell rang, but whose
	// fetch found the queue empty, waits on the server for the queue's next
	// attempt (default [DefaultDoorbellWait]): the server counts a stored
	// message for its consumers on a goroutine of its own, after it
	// acknowledged the publish, so a fetch sent on the ring can come before
	// the attempt is there. The worker then asks once more, for one message,
	// with a pull request the server holds until the attempt is counted, and
	// takes the rest at once; without it the ring would be spent and the
	// attempt wait for the next ring or IdleWait. A worker that lost the
	// attempt to another waits the whole DoorbellWait on that queue (its
	// other queues' doorbells are served after it), and takes the queue's
	// next attempt if one comes meanwhile.
	DoorbellWait time.Duration
	// ShutdownTimeout is how long running handlers may go on after Run's
	// context ends before their contexts are cancelled and their attempts
	// handed back, to run again elsewhere without spending an attempt
	// (default [DefaultShutdownTimeout]). Give it the grace the platform
	// gives the process on SIGTERM, less a few seconds for the reports.
	ShutdownTimeout time.Duration
	// SpoolDir, when set, is a folder where the worker keeps each final
	// report that JetStream did not store at the first try, until it is
	// stored: a worker started again on the same folder sends what it
	// holds there first, so a report outlives the worker's restart during
	// a JetStream outage. Empty keeps such reports in memory only (they
	// are still tried until stored, but a restart loses them). The folder
	// is made if missing; give each worker its own.
	SpoolDir string
	// RequeueDelay is how long an attempt that cannot start yet is given
	// back to JetStream for, before this or another worker takes it again
	// (default [DefaultRequeueDelay]): its handler's slots are full
	// ([Concurrency]) or another attempt holds its mutex key.
	RequeueDelay time.Duration
	// Logger receives the worker's logs (nil: no logs). The lines a
	// handler logs through [Logger] are copied to it too, at their own
	// level, tagged with the attempt; its level does not limit what ships
	// to AX_LOGS.
	Logger *slog.Logger
	// TaskLogLevel is the least level of the handler log lines the worker
	// ships to AX_LOGS (nil: [slog.LevelDebug]).
	TaskLogLevel slog.Leveler
	// LogBuffer is how many handler log lines the worker holds while they
	// wait to be shipped to AX_LOGS (default [DefaultLogBuffer]). When it is
	// full the oldest line is dropped and counted ([Service.LogLinesDropped]),
	// so logging never blocks a handler nor grows memory without bound.
	LogBuffer int
	// LogFlushInterval is how often the worker ships the waiting handler log
	// lines (default [DefaultLogFlushInterval]); 500 waiting lines ship at once.
	LogFlushInterval time.Duration
	// StartedDelay is how long an attempt runs before the worker reports it
	// started (default [DefaultStartedDelay]). An attempt that ends sooner
	// sends no started report: its final report carries when it started,
	// and the dispatcher records both transitions from it. Only what an
	// operator sees waits for it: the lease fences the attempt from the
	// start. A negative StartedDelay reports every attempt started before
	// its handler runs.
	StartedDelay time.Duration
	// SingleReports sends every final report alone, on its attempt's own
	// subject (default false: when the dispatch message says the
	// dispatchers take report batches, the final reports that end while
	// another is being published go together in one message, see
	// [schemas.ReportBatch]).
	SingleReports bool
	// Codec, when set, decodes encoded payloads (and encoded parent
	// outputs) before the handler sees them, and encodes every output the
	// handler returns, so that the scheduler only ever holds envelopes (see
	// [schemas.PayloadCodec], [schemas.NewAESGCM]). Without one, an attempt
	// whose payload is encoded fails permanently, saying so. Default none.
	Codec schemas.PayloadCodec
	// NowFunc returns the current time for reports, leases and heartbeats
	// (default time.Now). Deadlines run on the real clock.
	NowFunc func() time.Time
	// TracerProvider makes the spans of the attempts (ax.executor.run),
	// whose context the handlers get; pass otel.GetTracerProvider() for
	// the program's global one. Default: none recorded (the dispatch
	// message's trace context still reaches the handler and the report).
	TracerProvider trace.TracerProvider
}

var workerIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// withDefaults validates o and fills in its defaults.
func (o Options) withDefaults() (Options, error) {
	if o.Conn == nil {
		return o, errors.New("executor options: Conn is required")
	}
	if o.Mux == nil || len(o.Mux.Names()) == 0 {
		return o, errors.New("executor options: Mux is required and needs at least one handler (see RegisterBuiltins)")
	}
	if o.Topology.IsZero() {
		o.Topology = streams.Default()
	}
	if o.WorkerID == "" {
		o.WorkerID = defaultWorkerID()
	}
	if !workerIDRE.MatchString(o.WorkerID) {
		return o, fmt.Errorf("executor options: worker id %q: use 1-128 letters, digits, '-' or '_' (it becomes a NATS subject token and a KV key)", o.WorkerID)
	}
	if o.Version == "" {
		o.Version = DefaultVersion
	}
	if len(o.Pools) == 0 {
		o.Pools = []string{schemas.DefaultPool}
	}
	if err := checkPools(o.Pools); err != nil {
		return o, err
	}
	o.Pools = append([]string(nil), o.Pools...)
	if err := o.fillDurations(); err != nil {
		return o, err
	}
	if o.StartedDelay == 0 {
		o.StartedDelay = DefaultStartedDelay
	}
	if o.Slots < 0 {
		return o, fmt.Errorf("executor options: Slots is %d; use a positive number or 0 for the default", o.Slots)
	}
	if o.Slots == 0 {
		o.Slots = DefaultSlots
	}
	if o.LogBuffer < 0 {
		return o, fmt.Errorf("executor options: LogBuffer is %d; use a positive number of lines or 0 for the default", o.LogBuffer)
	}
	if o.LogBuffer == 0 {
		o.LogBuffer = DefaultLogBuffer
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.TaskLogLevel == nil {
		o.TaskLogLevel = slog.LevelDebug
	}
	if o.NowFunc == nil {
		o.NowFunc = time.Now
	}
	return o, nil
}

// checkPools says what is wrong with the first pool of pools that is not
// a valid pool name, or is listed twice.
func checkPools(pools []string) error {
	seen := make(map[string]bool, len(pools))
	for _, p := range pools {
		if p == "" || strings.ContainsAny(p, ".*>/\\ \t\r\n") {
			return fmt.Errorf("executor options: pool %q: a pool is the task tags sorted and joined with '+', without '.', '*', '>', slashes or spaces", p)
		}
		if p == streams.WorkerPool {
			return fmt.Errorf("executor options: pool %q is reserved for the subjects that address one worker; choose another pool", p)
		}
		if seen[p] {
			return fmt.Errorf("executor options: pool %q is listed twice", p)
		}
		seen[p] = true
	}
	return nil
}

// fillDurations checks o's durations and fills in their defaults.
func (o *Options) fillDurations() error {
	durations := []struct {
		name string
		d    *time.Duration
		def  time.Duration
	}{
		{"HeartbeatInterval", &o.HeartbeatInterval, DefaultHeartbeatInterval},
		{"IdleWait", &o.IdleWait, DefaultIdleWait},
		{"DoorbellWait", &o.DoorbellWait, DefaultDoorbellWait},
		{"ShutdownTimeout", &o.ShutdownTimeout, DefaultShutdownTimeout},
		{"RequeueDelay", &o.RequeueDelay, DefaultRequeueDelay},
		{"LogFlushInterval", &o.LogFlushInterval, DefaultLogFlushInterval},
	}
	for _, f := range durations {
		if *f.d < 0 {
			return fmt.Errorf("executor options: %s is %s; use a positive duration or 0 for the default", f.name, *f.d)
		}
		if *f.d == 0 {
			*f.d = f.def
		}
	}
	return nil
}

// defaultWorkerID returns "<hostname>-<6 random characters>", the host name
// reduced to the characters a worker id allows.
func defaultWorkerID() string {
	host := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '-'
	}, hostname())
	host = strings.Trim(host, "-")
	if len(host) > 100 {
		host = host[:100]
	}
	if host == "" {
		host = "worker"
	}
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 6)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return host + "-" + string(b)
}

// hostname returns the machine's host name, "" when unknown.
func hostname() string {
	h, _ := os.Hostname()
	return h
}
