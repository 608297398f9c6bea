package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/ax-scheduler/ax/internal/wait"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// reporter ships the worker's reports to AX_REPORTS: the started reports
// as they fall due (started.go), the final reports, alone or in batches
// (finals.go), kept in the spool while JetStream refuses them (spool.go).
// Its inputs are the connection, the topology and the worker's id; it
// knows nothing of slots, leases or handlers.
type reporter struct {
	conn     *nats.Conn
	topo     streams.Topology
	workerID string
	nonce    string // ends the Nats-Msg-Id of its reports (see msgID)
	spoolDir string // Options.SpoolDir
	single   bool   // Options.SingleReports
	log      *slog.Logger

	// Set by Run before any goroutine starts.
	js jetstream.JetStream
	// pub publishes the batches of started reports: cheaper than js's
	// PublishMsgAsync.
	pub *streams.Publisher

	// ctx ends the tries of the final reports not stored yet: only at
	// shutdown, ShutdownTimeout after the handlers were cancelled (see
	// [Service.drain]).
	ctx  context.Context
	stop context.CancelFunc

	mu           sync.Mutex
	startedQueue []*attempt     // attempts whose started report waits, by due time
	startedWake  chan struct{}  // signalled when startedQueue grows
	finalQueue   []*queuedFinal // final reports waiting for the sender (see sendFinals)
	finalWake    chan struct{}  // signalled when finalQueue grows
	batchSeq     atomic.Uint64  // numbers the report batches (see finalsMsg)
}

// newReporter returns the reporter of a worker with options o.
func newReporter(o Options, log *slog.Logger) *reporter {
	ctx, stop := context.WithCancel(context.Background())
	return &reporter{conn: o.Conn, topo: o.Topology, workerID: o.WorkerID, nonce: nuid.Next(),
		spoolDir: o.SpoolDir, single: o.SingleReports, log: log, ctx: ctx, stop: stop,
		startedWake: make(chan struct{}, 1), finalWake: make(chan struct{}, 1)}
}

// subject is the subject of this worker's reports on d: its pool's, the
// one the dispatcher checks against the instance's pool.
func (r *reporter) subject(d *schemas.Dispatch) string {
	return r.topo.Report(poolOf(d), r.workerID, d.InstanceID)
}

// msgID is the Nats-Msg-Id of a report: a retried publish of the same
// report is a duplicate the stream drops. It ends in the worker's random
// nonce: the duplicate window spans the whole stream, so an id another
// publisher can guess is one it could take first, and the true report
// would be dropped as its duplicate.
func (r *reporter) msgID(d *schemas.Dispatch, kind schemas.ReportKind) string {
	if kind != schemas.ReportStarted {
		kind = "final"
	}
	return strconv.FormatInt(d.InstanceID, 10) + "-" + strconv.Itoa(d.Attempt) + "-" + string(kind) + "-" + r.nonce
}

// reportMsg returns the message of a report of kind on d, encoded as data,
// on its attempt's own subject.
func (r *reporter) reportMsg(d *schemas.Dispatch, kind schemas.ReportKind, data []byte, traceparent string) *nats.Msg {
	m := nats.NewMsg(r.subject(d))
	m.Data = data
	m.Header.Set(streams.HeaderMsgID, r.msgID(d, kind))
	if traceparent != "" {
		m.Header.Set(streams.HeaderTraceParent, traceparent)
	}
	return m
}

// reportHeadroom leaves room for a report's headers under the max payload.
const reportHeadroom = 4 << 10

// final publishes the final report rep of d and returns once it is stored,
// or the worker's shutdown ended its tries. A report larger than the
// server's max payload allows becomes, in rep too, a permanent failure
// saying so. batches says whether d's dispatchers take report batches.
func (r *reporter) final(d *schemas.Dispatch, rep *schemas.Report, batches bool) error {
	// Encoded alone: a report that goes in a batch needs no message of
	// its own (see reportMsg).
	data, err := schemas.MarshalReport(*rep)
	if err == nil && int64(len(data)) > r.conn.MaxPayload()-reportHeadroom {
		size := len(rep.Output)
		rep.Kind, rep.Output, rep.Permanent = schemas.ReportFailed, nil, true
		rep.Error = fmt.Sprintf("output of %d bytes is larger than the NATS server's max payload of %d bytes allows; store large results elsewhere and return a reference",
			size, r.conn.MaxPayload())
		data, err = schemas.MarshalReport(*rep)
	}
	switch {
	case err != nil:
		return fmt.Errorf("encode report for %s: %w", r.subject(d), err)
	case batches && !r.single:
		return r.sendFinal(d, rep.Kind, data, rep.Traceparent)
	}
	var spooled string
	err = r.publishRetry(r.ctx, r.reportMsg(d, rep.Kind, data, rep.Traceparent), func() {
		spooled = r.spool(d, rep.Kind, data)
	})
	if err == nil {
		r.unspool(spooled)
	}
	return err
}

// A final report is tried until it is stored, however long JetStream
// refuses it (a full store, a stream without quorum, a server down): the
// attempt stays on the worker's running set meanwhile, so its lease is
// renewed whenever renewals go through, and the dispatcher's reaper fails
// no attempt as lost while its own writes to the leases bucket are refused
// (dispatcher/outage.go). Each try awaits its acknowledgement for at most
// reportTry, so that a try sent as the server went down, whose answer
// never comes, is followed by another once the server is back instead of
// being awaited for opTimeout. Only the worker's shutdown ends the tries
// (once ShutdownTimeout has passed twice): a report the first try did not
// store is in the spool then, when the worker has one (spool.go).
const reportTry = 2 * time.Second

// unsentWarnAfter is how long a final report goes unstored before the
// worker says so, and then again every unsentWarnAfter.
const unsentWarnAfter = 10 * time.Second

// publishBackoff are the delays between the tries of a report; the last
// one repeats, for as long as the report is refused.
var publishBackoff = []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, time.Second, 2 * time.Second}

// errReportsStopped is the error of a report whose tries the worker's
// shutdown ended.
var errReportsStopped = errors.New("the worker is shutting down")

// publishRetry publishes m and awaits its acknowledgement, trying again
// with capped backoff until it is stored, the connection is closed or the
// worker's shutdown stops the reports (ctx ends: r.ctx or one derived from
// it). m carries a Nats-Msg-Id, so a try that reached the stream
// unacknowledged makes a later one a duplicate the stream drops. refused,
// when not nil, is called once, after the first try that failed (the
// report then goes to the spool).
func (r *reporter) publishRetry(ctx context.Context, m *nats.Msg, refused func()) error {
	start := time.Now()
	warned := start
	for i := 0; ; i++ {
		tryCtx, cancel := context.WithTimeout(ctx, reportTry)
		_, err := r.js.PublishMsg(tryCtx, m)
		cancel()
		if err == nil {
			if i > 0 {
				r.log.Info("final report stored", "subject", m.Subject, "tries", i+1, "after", time.Since(start).Round(time.Millisecond))
			}
			return nil
		}
		if r.conn.IsClosed() {
			// A closed connection does not come back: nothing to wait for.
			return fmt.Errorf("publish to %s: %w (the connection is closed)", m.Subject, err)
		}
		if i == 0 && refused != nil {
			// Before the stop below: a report whose tries the shutdown
			// ended, tried once or not at all, is spooled all the same.
			refused()
		}
		if ctx.Err() != nil {
			return fmt.Errorf("publish to %s: %w after %d tries over %s: %w", m.Subject, errReportsStopped, i+1,
				time.Since(start).Round(time.Millisecond), err)
		}
		if time.Since(warned) >= unsentWarnAfter {
			warned = time.Now()
			r.log.Warn("final report not stored yet; keeping it and trying again until it is", "error", err, "subject", m.Subject, "tries", i+1, "unsent_for", time.Since(start).Round(time.Second))
		}
		// Jittered: the workers of a fleet whose reports a server's outage
		// refused together do not all try again at the same moments.
		wait.SleepJitter(ctx, publishBackoff[min(i, len(publishBackoff)-1)])
	}
}

// poolOf is the pool of d: a dispatch message without one (routed by a
// dispatcher older than the field) is of the default pool.
func poolOf(d *schemas.Dispatch) string {
	if d.Pool == "" {
		return schemas.DefaultPool
	}
	return d.Pool
}
