package conformance

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// seen is one message the kit saw on the wire, in the order the server
// delivered it: a report, a write of a lease or a write of a worker record,
// or a control order to a worker.
type seen struct {
	at      time.Time
	subject string
	msgID   string
	op      string // the KV-Operation header of a bucket write: "" (a put), DEL or PURGE
	reply   string
	header  nats.Header
	data    []byte
}

// observer records the executor side's traffic of one pool: the pool's
// reports, every write of the leases and workers buckets, and the control
// orders to workers. One channel takes the subscriptions' messages, so that
// one publisher's messages are seen in the order it sent them: a worker's
// lease created before its report is seen before it. Messages of different
// publishers keep no order: a worker's report may be seen before the
// dispatcher's cancel order it answers (see [cancelVerdict]).
type observer struct {
	top  streams.Topology
	pool string
	subs []*nats.Subscription
	ch   chan *nats.Msg
	quit chan struct{} // closed by stop
	done chan struct{} // closed when the recording goroutine returned

	mu  sync.Mutex
	log []seen
}

// observe subscribes on nc and records until stop.
func observe(nc *nats.Conn, top streams.Topology, pool string) (*observer, error) {
	o := &observer{top: top, pool: pool, ch: make(chan *nats.Msg, 65536), quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(o.done)
		for {
			var m *nats.Msg
			select {
			case m = <-o.ch:
			case <-o.quit:
				return
			}
			s := seen{at: time.Now(), subject: m.Subject, reply: m.Reply, header: m.Header, data: m.Data}
			if m.Header != nil {
				s.msgID, s.op = m.Header.Get(streams.HeaderMsgID), m.Header.Get(kvOperationHeader)
			}
			o.mu.Lock()
			o.log = append(o.log, s)
			o.mu.Unlock()
		}
	}()
	for _, subject := range append([]string{top.Reports(pool, "*"), "$KV." + top.LeasesBucket() + ".>", "$KV." + top.WorkersBucket() + ".>", top.Control("*")},
		safetySubjects(top, pool)...) {
		sub, err := nc.ChanSubscribe(subject, o.ch)
		if err != nil {
			o.stop()
			return nil, fmt.Errorf("subscribe to %s (the kit's NATS user must be allowed to; use the dispatcher's): %w", subject, err)
		}
		o.subs = append(o.subs, sub)
	}
	if err := nc.Flush(); err != nil {
		o.stop()
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	return o, nil
}

// stop ends the subscriptions and the recording.
func (o *observer) stop() {
	for _, s := range o.subs {
		_ = s.Unsubscribe()
	}
	o.subs = nil
	select {
	case <-o.quit:
	default:
		close(o.quit)
	}
	<-o.done
}

// snapshot returns what was seen so far.
func (o *observer) snapshot() []seen {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]seen(nil), o.log...)
}

// wireReport is a report as seen, with its place in the log.
type wireReport struct {
	idx int
	seen
	r   schemas.Report
	err error // the body does not decode
}

// reports returns the reports seen on instance id, in order: on its own
// subject, or in a report batch (each of a batch's reports on it, with the
// batch's subject and id).
func (o *observer) reports(id int64) []wireReport {
	var out []wireReport
	suffix := "." + strconv.FormatInt(id, 10)
	for i, s := range o.snapshot() {
		if _, _, ok := o.top.ReportBatchFrom(s.subject); ok {
			var b schemas.ReportBatch
			if err := json.Unmarshal(s.data, &b); err != nil {
				// Whose it is cannot be told: every instance's.
				out = append(out, wireReport{idx: i, seen: s, err: err})
				continue
			}
			for _, r := range b.Reports {
				if r.InstanceID == id {
					out = append(out, wireReport{idx: i, seen: s, r: r})
				}
			}
			continue
		}
		if !strings.HasPrefix(s.subject, o.top.Prefix()+".report.") || !strings.HasSuffix(s.subject, suffix) {
			continue
		}
		w := wireReport{idx: i, seen: s}
		w.err = json.Unmarshal(s.data, &w.r)
		out = append(out, w)
	}
	return out
}

// cancelOrder returns the first cancel of an attempt seen on
// ax.control.<worker>, if one was.
func (o *observer) cancelOrder(worker string, id int64, attempt int) (seen, bool) {
	subject := o.top.Control(worker)
	for _, s := range o.snapshot() {
		var c schemas.Control
		if s.subject == subject && json.Unmarshal(s.data, &c) == nil &&
			c.Action == schemas.ControlCancel && c.InstanceID == id && c.Attempt == attempt {
			return s, true
		}
	}
	return seen{}, false
}

// leaseWrites returns the writes of the lease of an attempt, in order,
// with their places in the log.
func (o *observer) leaseWrites(id int64, attempt int) (idx []int, writes []seen) {
	subject := "$KV." + o.top.LeasesBucket() + "." + streams.LeaseKey(id, attempt)
	for i, s := range o.snapshot() {
		if s.subject == subject {
			idx, writes = append(idx, i), append(writes, s)
		}
	}
	return idx, writes
}

// workerWrites returns the writes of worker id's record, in order.
func (o *observer) workerWrites(id string) []seen {
	subject := "$KV." + o.top.WorkersBucket() + "." + id
	var out []seen
	for _, s := range o.snapshot() {
		if s.subject == subject {
			out = append(out, s)
		}
	}
	return out
}

// kvOperationHeader is the header of a bucket write that deletes or
// purges its key.
const kvOperationHeader = "KV-Operation"

// msgIDRE is the form of a report's Nats-Msg-Id:
// <instance>-<attempt>-<started|final>-<nonce>.
var msgIDRE = regexp.MustCompile(`^([0-9]+)-([0-9]+)-(started|final)-(\S+)$`)

// batchIDRE is the form of a report batch's Nats-Msg-Id: batch-<n>-<nonce>.
var batchIDRE = regexp.MustCompile(`^batch-[0-9]+-\S+$`)

// checkReport returns what is wrong with a report as it came (subject,
// body, Nats-Msg-Id), "" when nothing is.
func (o *observer) checkReport(w wireReport, id int64) string {
	if w.err != nil {
		return fmt.Sprintf("report on %s does not decode: %v", w.subject, w.err)
	}
	r := w.r
	if r.InstanceID != id || r.Attempt < 1 || r.WorkerID == "" {
		return fmt.Sprintf("report on %s names instance %d attempt %d worker %q", w.subject, r.InstanceID, r.Attempt, r.WorkerID)
	}
	if _, _, ok := o.top.ReportBatchFrom(w.subject); ok {
		switch want := o.top.ReportBatch(o.pool, r.WorkerID); {
		case w.subject != want:
			return fmt.Sprintf("report of worker %q came in a batch on %s, want %s", r.WorkerID, w.subject, want)
		case !r.Kind.IsFinal():
			return fmt.Sprintf("%s report in a batch on %s: a batch carries final reports only", r.Kind, w.subject)
		case !batchIDRE.MatchString(w.msgID):
			return fmt.Sprintf("report batch on %s has Nats-Msg-Id %q, want batch-<n>-<nonce>", w.subject, w.msgID)
		case r.At.IsZero() || r.StartedAt.IsZero():
			return fmt.Sprintf("%s report in a batch on %s lacks at or started_at", r.Kind, w.subject)
		case r.Progress != nil:
			return fmt.Sprintf("%s report in a batch on %s carries progress, which only a progress report may", r.Kind, w.subject)
		}
		return ""
	}
	if want := o.top.Report(o.pool, r.WorkerID, id); w.subject != want {
		return fmt.Sprintf("report of worker %q came on %s, want %s", r.WorkerID, w.subject, want)
	}
	if r.Kind != schemas.ReportStarted && r.Kind != schemas.ReportProgress && !r.Kind.IsFinal() {
		return fmt.Sprintf("report on %s has kind %q", w.subject, r.Kind)
	}
	if r.At.IsZero() || r.StartedAt.IsZero() {
		return fmt.Sprintf("%s report on %s lacks at or started_at", r.Kind, w.subject)
	}
	if r.Kind == schemas.ReportProgress {
		// A progress report needs no Nats-Msg-Id (a duplicate is harmless).
		if r.Progress == nil {
			return fmt.Sprintf("progress report on %s has no progress", w.subject)
		}
		if err := r.Progress.Check(); err != nil {
			return fmt.Sprintf("progress report on %s: %v", w.subject, err)
		}
		return ""
	}
	if r.Progress != nil {
		return fmt.Sprintf("%s report on %s carries progress, which only a progress report may", r.Kind, w.subject)
	}
	m := msgIDRE.FindStringSubmatch(w.msgID)
	kind := "final"
	if r.Kind == schemas.ReportStarted {
		kind = "started"
	}
	if m == nil || m[1] != strconv.FormatInt(id, 10) || m[2] != strconv.Itoa(r.Attempt) || m[3] != kind {
		return fmt.Sprintf("%s report of attempt %d has Nats-Msg-Id %q, want %d-%d-%s-<nonce>", r.Kind, r.Attempt, w.msgID, id, r.Attempt, kind)
	}
	return ""
}
