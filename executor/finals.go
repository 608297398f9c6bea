package executor

import (
	"context"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// The final reports of the attempts whose dispatch message says the
// dispatchers take report batches (schemas.Dispatch.ReportBatches) go
// through one sender: what is queued when it is free goes out as one
// message per pool on ax.report.<pool>.<worker_id>.batch, and what is
// queued while that message is published waits for the next. There is no
// linger: a lone report goes at once, on its attempt's own subject, and a
// batch forms only from the reports that end while the one before is in
// flight, so the idle path costs what it did and a burst costs one message
// (and one acknowledgement) per batch instead of per attempt.

// maxBatchReports bounds the reports of one batch; the server's max
// payload bounds its bytes.
const maxBatchReports = 1000

// queuedFinal is a final report waiting for the sender.
type queuedFinal struct {
	d    *schemas.Dispatch
	kind schemas.ReportKind
	data []byte // the report, encoded
	// trace is the report's traceparent, the header of a report sent alone.
	trace string
	done  chan error // receives the outcome of its publish
}

// sendFinal publishes the final report of d, encoded as data, through the
// sender, and returns once it is stored (or failed to be).
func (r *reporter) sendFinal(d *schemas.Dispatch, kind schemas.ReportKind, data []byte, traceparent string) error {
	q := &queuedFinal{d: d, kind: kind, data: data, trace: traceparent, done: make(chan error, 1)}
	r.mu.Lock()
	r.finalQueue = append(r.finalQueue, q)
	r.mu.Unlock()
	signal(r.finalWake)
	return <-q.done
}

// sendFinals publishes the queued final reports until ctx ends; Run ends
// it only once every attempt is reported, so nothing is queued then.
func (r *reporter) sendFinals(ctx context.Context) {
	for {
		r.mu.Lock()
		queued := r.finalQueue
		r.finalQueue = nil
		r.mu.Unlock()
		if len(queued) > 0 {
			r.publishFinals(queued)
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-r.finalWake:
		}
	}
}

// publishFinals publishes queued as batches, by pool, each within the
// server's max payload and maxBatchReports, and tells each report its
// outcome. A batch of one is a single report on its attempt's subject.
func (r *reporter) publishFinals(queued []*queuedFinal) {
	byPool := make(map[string][]*queuedFinal)
	var pools []string
	for _, q := range queued {
		pool := poolOf(q.d)
		if byPool[pool] == nil {
			pools = append(pools, pool)
		}
		byPool[pool] = append(byPool[pool], q)
	}
	limit := int(r.conn.MaxPayload() - reportHeadroom)
	for _, pool := range pools {
		qs := byPool[pool]
		for len(qs) > 0 {
			n, size := 0, len(`{"reports":[]}`)
			for n < len(qs) && n < maxBatchReports && (n == 0 || size+1+len(qs[n].data) <= limit) {
				size += len(qs[n].data) + 1
				n++
			}
			batch := qs[:n]
			spooled := make([]string, 0, n)
			err := r.publishRetry(r.ctx, r.finalsMsg(pool, batch), func() {
				for _, q := range batch {
					spooled = append(spooled, r.spool(q.d, q.kind, q.data))
				}
			})
			if err == nil {
				for _, path := range spooled {
					r.unspool(path)
				}
			}
			for _, q := range batch {
				q.done <- err
			}
			qs = qs[n:]
		}
	}
}

// finalsMsg returns the message of the final reports qs, of pool: a
// report batch, or the report alone when it is the only one.
func (r *reporter) finalsMsg(pool string, qs []*queuedFinal) *nats.Msg {
	if len(qs) == 1 {
		return r.reportMsg(qs[0].d, qs[0].kind, qs[0].data, qs[0].trace)
	}
	m := nats.NewMsg(r.topo.ReportBatch(pool, r.workerID))
	m.Data = append(m.Data, `{"reports":[`...)
	for i, q := range qs {
		if i > 0 {
			m.Data = append(m.Data, ',')
		}
		m.Data = append(m.Data, q.data...)
	}
	m.Data = append(m.Data, "]}"...)
	// The batch's id, unique to this run of the worker and ending in its
	// random nonce, makes a retried publish a duplicate the stream drops.
	m.Header.Set(streams.HeaderMsgID, "batch-"+strconv.FormatUint(r.batchSeq.Add(1), 10)+"-"+r.nonce)
	return m
}
