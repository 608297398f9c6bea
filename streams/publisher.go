package streams

import (
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrPublisherClosed answers a publish made after, or awaiting its
// acknowledgement when, its [Publisher] was closed.
var ErrPublisherClosed = errors.New("streams: publisher closed")

// PublisherOptions configures a [Publisher].
type PublisherOptions struct {
	// Timeout is how long a publish awaits its acknowledgement before it
	// is answered with jetstream.ErrAsyncPublishTimeout (default 10 s).
	Timeout time.Duration
	// MaxPending bounds the publishes awaiting an acknowledgement; a
	// publish beyond it blocks until one is answered (default 4,096).
	MaxPending int
}

// Default publisher settings.
const (
	DefaultPublishTimeout = 10 * time.Second
	DefaultMaxPending     = 4096
)

// The jetstream client's handling of "no responders" (a stream whose
// server is starting): the publish is sent again twice, 250 ms apart.
const (
	noRespondersTries = 2
	noRespondersWait  = jetstream.DefaultPubRetryWait
)

// A Publisher publishes to JetStream streams on a plain connection and
// matches each acknowledgement to its publish, as the jetstream client's
// PublishMsgAsync does, at a fraction of its cost: one reply subscription
// (a wildcard inbox) for all its publishes, a table of the pending ones
// keyed by a counter, and acknowledgements read without reflection. It
// answers every publish exactly once: with the stream's acknowledgement,
// the stream's error (a *jetstream.APIError, as the jetstream client
// returns), jetstream.ErrAsyncPublishTimeout after the timeout,
// nats.ErrDisconnected at once when the connection loses its server
// (the answer may never come: the caller tries again, which its message
// id dedupes), nats.ErrConnectionClosed when it closes, or
// [ErrPublisherClosed].
//
// Publishes go through an [AsyncBatch] from [Publisher.Batch]. A
// Publisher is safe for concurrent use; its batches are not.
type Publisher struct {
	nc      *nats.Conn
	timeout time.Duration
	prefix  string // the reply subjects' prefix, ending in "."
	epoch   time.Time
	sub     *nats.Subscription
	status  chan nats.Status
	slots   chan struct{} // one a pending publish: the back pressure
	wake    chan struct{} // the first pending publish for the sweeper
	stop    chan struct{}
	wg      sync.WaitGroup

	// sendMu guards hdr and vals, the header map of every message
	// added with AddData: nats.Conn.PublishMsg reads it before it
	// returns, so one map serves them all.
	sendMu sync.Mutex
	hdr    nats.Header
	vals   [maxHeaders][1]string

	// names are stream names and error texts read from
	// acknowledgements; only the reply handler's goroutine uses them.
	names []string

	mu      sync.Mutex
	closed  bool
	next    uint64
	pending map[uint64]pendingPub
	order   []due // pending publishes in the order they were made
	head    int   // order[:head] are gone
}

// pendingPub is a publish awaiting its acknowledgement: entry i of its
// batch when the batch is still at generation gen.
type pendingPub struct {
	b     *AsyncBatch
	gen   uint32
	i     int32
	tries uint8 // no-responders answers so far
}

// due is when the publish of token times out, in nanoseconds from the
// publisher's epoch.
type due struct {
	token uint64
	at    int64
}

// NewPublisher subscribes to its reply subjects on nc and returns a
// publisher; Close it when done.
func NewPublisher(nc *nats.Conn, opts PublisherOptions) (*Publisher, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultPublishTimeout
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = DefaultMaxPending
	}
	p := &Publisher{
		nc:      nc,
		timeout: opts.Timeout,
		prefix:  replyPrefix(nc),
		epoch:   time.Now(),
		slots:   make(chan struct{}, opts.MaxPending),
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		pending: make(map[uint64]pendingPub),
	}
	sub, err := nc.Subscribe(p.prefix+"*", p.onReply)
	if err != nil {
		return nil, fmt.Errorf("subscribe to publish acknowledgements: %w", err)
	}
	p.sub = sub
	p.status = nc.StatusChanged(nats.RECONNECTING, nats.CLOSED)
	p.wg.Add(2)
	go p.sweep()
	go p.watch()
	return p, nil
}

// replyPrefix returns the prefix of a publisher's reply subjects: the
// connection's inbox prefix ("_INBOX." unless set), 11 random base-62
// characters (65 bits: no two publishers share one) and a dot. It is
// short so that a reply subject, its token up to 13 digits long, fits the
// 32 bytes the runtime converts to a string on the stack: send then
// allocates nothing for it.
func replyPrefix(nc *nats.Conn) string {
	const digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	inbox := nc.NewInbox() // its prefix and a 22-character NUID
	b := []byte(inbox[:len(inbox)-22])
	var r [11]byte
	_, _ = rand.Read(r[:]) // it never fails
	for _, c := range r {
		b = append(b, digits[int(c)%len(digits)])
	}
	return string(append(b, '.'))
}

// Close answers every pending publish with [ErrPublisherClosed], ends
// the reply subscription and returns after the publisher's goroutines
// have exited. It does not close the connection.
func (p *Publisher) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	close(p.stop)
	_ = p.sub.Unsubscribe()
	p.nc.RemoveStatusListener(p.status)
	p.wg.Wait()
	p.failAll(ErrPublisherClosed)
}

// Batch returns an empty batch publishing through p.
func (p *Publisher) Batch() *AsyncBatch {
	return &AsyncBatch{p: p, done: make(chan struct{}, 1)}
}

// Pending returns how many publishes await their acknowledgement.
func (p *Publisher) Pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pending)
}

func (p *Publisher) now() int64 { return int64(time.Since(p.epoch)) }

// publish adds m to b and publishes it, blocking while MaxPending
// publishes are pending.
func (p *Publisher) publish(b *AsyncBatch, m outMsg) {
	slot := false
	select {
	case p.slots <- struct{}{}:
		slot = true
	case <-p.stop:
	}
	p.mu.Lock()
	i := len(b.entries)
	b.entries = append(b.entries, batchEntry{out: m})
	if p.closed {
		b.entries[i].err, b.entries[i].answered = ErrPublisherClosed, true
		p.mu.Unlock()
		if slot {
			<-p.slots
		}
		return
	}
	p.next++
	token := p.next
	p.pending[token] = pendingPub{b: b, gen: b.gen, i: int32(i)}
	b.left++
	p.order = append(p.order, due{token: token, at: p.now() + int64(p.timeout)})
	first := len(p.order)-p.head == 1
	p.mu.Unlock()
	if first {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
	if err := p.send(&m, token); err != nil {
		p.answer(token, jetstream.PubAck{}, err)
	}
}

// send publishes m with the reply subject of token. nats.Conn writes
// headers only from a nats.Header: those of a message added with AddData
// go in the publisher's own map.
func (p *Publisher) send(m *outMsg, token uint64) error {
	var buf [64]byte
	reply := string(strconv.AppendUint(append(buf[:0], p.prefix...), token, 10))
	if m.m != nil {
		return p.nc.PublishMsg(&nats.Msg{Subject: m.m.Subject, Reply: reply, Header: m.m.Header, Data: m.m.Data})
	}
	if m.nhdr == 0 {
		return p.nc.PublishMsg(&nats.Msg{Subject: m.subject, Reply: reply, Data: m.data})
	}
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	if p.hdr == nil {
		p.hdr = make(nats.Header, maxHeaders)
	}
	clear(p.hdr)
	for i, h := range m.hdr[:m.nhdr] {
		p.vals[i][0] = h.Value
		p.hdr[h.Key] = p.vals[i][:]
	}
	return p.nc.PublishMsg(&nats.Msg{Subject: m.subject, Reply: reply, Header: p.hdr, Data: m.data})
}

// onReply answers the publish an acknowledgement is for.
func (p *Publisher) onReply(m *nats.Msg) {
	if len(m.Subject) <= len(p.prefix) {
		return
	}
	token, err := strconv.ParseUint(m.Subject[len(p.prefix):], 10, 64)
	if err != nil {
		return
	}
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		p.noResponders(token)
		return
	}
	r, err := parsePubAck(m.Data, p.intern)
	switch {
	case err != nil:
		p.answer(token, jetstream.PubAck{}, jetstream.ErrInvalidJSAck)
	case r.err != nil:
		p.answer(token, jetstream.PubAck{}, r.err)
	case r.ack.Stream == "":
		p.answer(token, jetstream.PubAck{}, jetstream.ErrInvalidJSAck)
	default:
		p.answer(token, r.ack, nil)
	}
}

// intern returns b as a string, the same string each time for the first
// few texts it sees (stream names, mostly), which then cost no allocation.
func (p *Publisher) intern(b []byte) string {
	for _, s := range p.names {
		if s == string(b) {
			return s
		}
	}
	s := string(b)
	if len(p.names) < 16 {
		p.names = append(p.names, s)
	}
	return s
}

// noResponders sends the publish of token again after a wait, as the
// jetstream client does, or answers it with jetstream.ErrNoStreamResponse
// after noRespondersTries.
func (p *Publisher) noResponders(token uint64) {
	p.mu.Lock()
	pp, ok := p.pending[token]
	if !ok || pp.tries >= noRespondersTries {
		p.mu.Unlock()
		if ok {
			p.answer(token, jetstream.PubAck{}, jetstream.ErrNoStreamResponse)
		}
		return
	}
	pp.tries++
	p.pending[token] = pp
	p.mu.Unlock()
	time.AfterFunc(noRespondersWait, func() {
		p.mu.Lock()
		pp, ok := p.pending[token]
		var m outMsg
		ok = ok && pp.gen == pp.b.gen
		if ok {
			m = pp.b.entries[pp.i].out
		}
		p.mu.Unlock()
		if !ok {
			return
		}
		if err := p.send(&m, token); err != nil {
			p.answer(token, jetstream.PubAck{}, err)
		}
	})
}

// answer answers the publish of token, if it is still pending.
func (p *Publisher) answer(token uint64, ack jetstream.PubAck, err error) {
	p.mu.Lock()
	pp, ok := p.pending[token]
	if ok {
		delete(p.pending, token)
		p.settle(pp, ack, err)
		p.trim()
	}
	p.mu.Unlock()
	if ok {
		<-p.slots
	}
}

// settle records an answer in its batch. p.mu is held.
func (p *Publisher) settle(pp pendingPub, ack jetstream.PubAck, err error) {
	b := pp.b
	if pp.gen != b.gen {
		return // the batch stopped waiting for it
	}
	e := &b.entries[pp.i]
	e.ack, e.err, e.answered = ack, err, true
	b.left--
	if b.left == 0 && b.waiting {
		b.waiting = false
		b.done <- struct{}{}
	}
}

// trim drops the answered publishes from the front of order. p.mu is held.
func (p *Publisher) trim() {
	for p.head < len(p.order) {
		if _, ok := p.pending[p.order[p.head].token]; ok {
			break
		}
		p.head++
	}
	switch {
	case p.head == len(p.order):
		p.order, p.head = p.order[:0], 0
	case p.head >= 1024 && p.head >= len(p.order)/2:
		n := copy(p.order, p.order[p.head:])
		p.order, p.head = p.order[:n], 0
	}
}

// sweep answers the publishes whose acknowledgement did not come in time
// with jetstream.ErrAsyncPublishTimeout. Every publish has the same
// timeout, so the first in order is the first due.
func (p *Publisher) sweep() {
	defer p.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		p.mu.Lock()
		now, expired := p.now(), 0
		for p.head < len(p.order) && p.order[p.head].at <= now {
			token := p.order[p.head].token
			p.head++
			if pp, ok := p.pending[token]; ok {
				delete(p.pending, token)
				p.settle(pp, jetstream.PubAck{}, jetstream.ErrAsyncPublishTimeout)
				expired++
			}
		}
		p.trim()
		wait := time.Duration(-1)
		if p.head < len(p.order) {
			wait = time.Duration(p.order[p.head].at - now)
		}
		p.mu.Unlock()
		for range expired {
			<-p.slots
		}
		if wait < 0 {
			select {
			case <-p.wake:
				continue
			case <-p.stop:
				return
			}
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-p.stop:
			return
		}
	}
}

// watch answers every pending publish at once when the connection loses
// its server or closes: the acknowledgements of publishes the server may
// never have received would otherwise be awaited until the timeout.
func (p *Publisher) watch() {
	defer p.wg.Done()
	for {
		select {
		case s, ok := <-p.status:
			if !ok {
				return
			}
			err := nats.ErrDisconnected
			if s == nats.CLOSED {
				err = nats.ErrConnectionClosed
			}
			p.failAll(err)
		case <-p.stop:
			return
		}
	}
}

// failAll answers every pending publish with err.
func (p *Publisher) failAll(err error) {
	p.mu.Lock()
	n := len(p.pending)
	for token, pp := range p.pending {
		delete(p.pending, token)
		p.settle(pp, jetstream.PubAck{}, err)
	}
	p.order, p.head = p.order[:0], 0
	p.mu.Unlock()
	for range n {
		<-p.slots
	}
}

// A Header is one header of a message added with [AsyncBatch.AddData].
type Header struct{ Key, Value string }

// maxHeaders is how many headers AddData takes without a nats.Msg.
const maxHeaders = 3

// outMsg is a message to publish: m, or one of AddData's.
type outMsg struct {
	m       *nats.Msg
	subject string
	data    []byte
	hdr     [maxHeaders]Header
	nhdr    int
}

func (m *outMsg) subj() string {
	if m.m != nil {
		return m.m.Subject
	}
	return m.subject
}

// batchEntry is one publish of a batch and, once answered, its answer.
type batchEntry struct {
	out      outMsg
	ack      jetstream.PubAck
	err      error
	answered bool
}
