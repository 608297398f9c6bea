package streams

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/schemas"
)

// Header names AX sets on its messages.
const (
	HeaderMsgID          = jetstream.MsgIDHeader // "Nats-Msg-Id"
	HeaderSchedule       = "Nats-Schedule"
	HeaderScheduleTarget = "Nats-Schedule-Target"
	// HeaderScheduler names the schedule that published a message; the
	// server sets it and refuses it on a client's publish.
	HeaderScheduler = "Nats-Scheduler"
)

// TriggerMsgID is the Nats-Msg-Id of the firing eventID of task on
// ax.trigger.<task>: "<task>/<event id>". The triggers stream's duplicate
// window spans every task's subject, so an id scoped by its task keeps the
// firing "x" of one task from silently dropping the firing "x" of another.
// A task name holds no "/", so two (task, event id) pairs never share one.
func TriggerMsgID(task, eventID string) string { return task + "/" + eventID }

// CronMsgIDLen is how many hex digits of its HMAC a cron firing's
// Nats-Msg-Id keeps (128 bits).
const CronMsgIDLen = 32

// CronMsgID returns the Nats-Msg-Id of the trigger service's cron firing
// eventID of task: "<task>/" and the first CronMsgIDLen hex digits of the
// HMAC-SHA256 of eventID under the store's key (store.Store.CronMsgIDKey);
// mac is hmac.New(sha256.New, key), reset here, and not safe for
// concurrent use. Every trigger replica computes the same id, so their
// firings of a tick collapse in the triggers stream's duplicate window;
// outside publishers share that window but not the key, so none can take a
// tick's id first, and the dispatcher knows a firing that carries it for
// the trigger service's.
func CronMsgID(mac hash.Hash, task, eventID string) string {
	mac.Reset()
	mac.Write([]byte(eventID))
	var sum [sha256.Size]byte
	b := make([]byte, 0, len(task)+1+CronMsgIDLen)
	b = append(b, task...)
	b = append(b, '/')
	b = hex.AppendEncode(b, mac.Sum(sum[:0])[:CronMsgIDLen/2])
	return string(b)
}

// NewMsg encodes v as JSON into a message for subject with msgID as its
// Nats-Msg-Id, so that a retried publish is a no-op inside the duplicate window.
// A trigger event, a report and an audit record are encoded by
// schemas.MarshalTriggerEvent, schemas.MarshalReport and
// schemas.MarshalAuditRecord, which write what json.Marshal does without its
// reflection.
func NewMsg(subject, msgID string, v any) (*nats.Msg, error) {
	var data []byte
	var err error
	switch v := v.(type) {
	case schemas.TriggerEvent:
		data, err = schemas.MarshalTriggerEvent(v)
	case schemas.Report:
		data, err = schemas.MarshalReport(v)
	case schemas.AuditRecord:
		data, err = schemas.MarshalAuditRecord(v)
	default:
		data, err = json.Marshal(v)
	}
	if err != nil {
		return nil, fmt.Errorf("encode message for %s: %w", subject, err)
	}
	m := nats.NewMsg(subject)
	m.Data = data
	if msgID != "" {
		m.Header.Set(HeaderMsgID, msgID)
	}
	return m, nil
}

// NewScheduleMsg returns a one-shot message schedule on subject (an
// ax.sched.<event_id> subject) that makes the server publish v to target at
// the given time. The time keeps its fractions of a second: the server honours
// them, where whole seconds would fire up to a second early.
func NewScheduleMsg(subject, target, msgID string, at time.Time, v any) (*nats.Msg, error) {
	m, err := NewMsg(subject, msgID, v)
	if err != nil {
		return nil, err
	}
	m.Header.Set(HeaderSchedule, "@at "+at.UTC().Format(time.RFC3339Nano))
	m.Header.Set(HeaderScheduleTarget, target)
	return m, nil
}

// Publish publishes v to subject and waits for the stream's
// acknowledgement. The message carries the trace context of ctx (see
// [InjectTrace]).
func Publish(ctx context.Context, js jetstream.JetStream, subject, msgID string, v any) (*jetstream.PubAck, error) {
	m, err := NewMsg(subject, msgID, v)
	if err != nil {
		return nil, err
	}
	InjectTrace(ctx, m.Header)
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		return nil, fmt.Errorf("publish to %s: %w", subject, err)
	}
	return ack, nil
}

// AsyncBatch publishes messages without waiting for each acknowledgement and
// then awaits them together: one round trip for a batch, not one a message.
// A batch from [NewAsyncBatch] publishes with the jetstream client's
// PublishMsgAsync; one from [Publisher.Batch] through the [Publisher].
// It is not safe for concurrent use.
type AsyncBatch struct {
	js      jetstream.JetStream
	futures []jetstream.PubAckFuture
	err     error

	// A Publisher's batch; its fields but p are guarded by p.mu.
	p       *Publisher
	entries []batchEntry
	left    int    // entries not answered
	gen     uint32 // bumped when the batch stops waiting for its entries
	waiting bool   // Await waits on done
	done    chan struct{}
	stopped error // why Await stopped waiting, if it did
}

// NewAsyncBatch returns an empty batch publishing on js.
func NewAsyncBatch(js jetstream.JetStream) *AsyncBatch { return &AsyncBatch{js: js} }

// Add publishes m asynchronously. An error is kept and returned by
// [AsyncBatch.Wait]. A Publisher's batch blocks while the publisher has
// its MaxPending publishes pending.
func (b *AsyncBatch) Add(m *nats.Msg) {
	if b.p != nil {
		b.p.publish(b, outMsg{m: m})
		return
	}
	f, err := b.js.PublishMsgAsync(m)
	if err != nil {
		b.err = errors.Join(b.err, fmt.Errorf("publish to %s: %w", m.Subject, err))
		return
	}
	b.futures = append(b.futures, f)
}

// AddData publishes data to subject with the headers hdr asynchronously,
// as Add does a message. A [Publisher.Batch] makes no nats.Msg nor
// header map for it when hdr holds up to two headers: the publisher
// writes them from a map of its own.
func (b *AsyncBatch) AddData(subject string, data []byte, hdr ...Header) {
	if b.p != nil && len(hdr) <= maxHeaders {
		m := outMsg{subject: subject, data: data, nhdr: len(hdr)}
		copy(m.hdr[:], hdr)
		b.p.publish(b, m)
		return
	}
	m := &nats.Msg{Subject: subject, Data: data}
	if len(hdr) > 0 {
		m.Header = make(nats.Header, len(hdr))
		for _, h := range hdr {
			m.Header.Add(h.Key, h.Value)
		}
	}
	b.Add(m)
}

// Grow makes room for n more messages, so that a batch of a known size
// is not regrown as they are added.
func (b *AsyncBatch) Grow(n int) {
	if b.p == nil {
		b.futures = slices.Grow(b.futures, n)
		return
	}
	b.p.mu.Lock()
	defer b.p.mu.Unlock()
	b.entries = slices.Grow(b.entries, n)
}

// Len returns how many messages were added.
func (b *AsyncBatch) Len() int {
	if b.p != nil {
		return len(b.entries)
	}
	return len(b.futures)
}

// Wait awaits every acknowledgement and returns the first failures joined,
// naming each subject. The batch is empty afterwards.
func (b *AsyncBatch) Wait(ctx context.Context) error {
	if b.p != nil {
		return b.waitPublisher(ctx)
	}
	err := b.err
	for _, f := range b.futures {
		select {
		case <-f.Ok():
		case e := <-f.Err():
			err = errors.Join(err, fmt.Errorf("publish to %s: %w", f.Msg().Subject, e))
		case <-ctx.Done():
			return errors.Join(err, fmt.Errorf("await publish acks: %w", ctx.Err()))
		}
	}
	b.futures, b.err = b.futures[:0], nil
	return err
}

func (b *AsyncBatch) waitPublisher(ctx context.Context) error {
	waitErr := b.Await(ctx)
	var err error
	for i := range b.entries {
		if _, e := b.Result(i); e != nil && b.entries[i].answered {
			err = errors.Join(err, e)
		}
	}
	if waitErr != nil {
		err = errors.Join(err, fmt.Errorf("await publish acks: %w", waitErr))
	}
	b.Reset()
	return err
}

// Await awaits the answer of every message of a [Publisher.Batch], or
// ctx's end, which it returns; then [AsyncBatch.Result] tells each
// message's outcome. It panics on a batch of [NewAsyncBatch].
func (b *AsyncBatch) Await(ctx context.Context) error {
	p := b.p
	p.mu.Lock()
	if b.left == 0 {
		p.mu.Unlock()
		return nil
	}
	b.waiting = true
	p.mu.Unlock()
	select {
	case <-b.done:
		return nil
	case <-ctx.Done():
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if b.left == 0 {
		// Answered meanwhile.
		b.waiting = false
		select {
		case <-b.done:
		default:
		}
		return nil
	}
	// The answers still to come are for no one: the batch's next
	// generation does not take them.
	b.gen++
	b.left, b.waiting, b.stopped = 0, false, ctx.Err()
	return b.stopped
}

// Result returns the acknowledgement of the i-th message added to a
// [Publisher.Batch] or its error, naming its subject, after
// [AsyncBatch.Await] returned. A message Await stopped waiting for has
// the error "await acknowledgement: " and ctx's error.
func (b *AsyncBatch) Result(i int) (jetstream.PubAck, error) {
	e := &b.entries[i]
	switch {
	case !e.answered:
		return jetstream.PubAck{}, fmt.Errorf("publish to %s: await acknowledgement: %w", e.out.subj(), b.stopped)
	case e.err != nil:
		return jetstream.PubAck{}, fmt.Errorf("publish to %s: %w", e.out.subj(), e.err)
	}
	return e.ack, nil
}

// Reset empties a [Publisher.Batch] for reuse; answers still to come
// for its messages are dropped.
func (b *AsyncBatch) Reset() {
	p := b.p
	p.mu.Lock()
	defer p.mu.Unlock()
	b.gen++
	b.left, b.waiting, b.stopped = 0, false, nil
	select {
	case <-b.done:
	default:
	}
	clear(b.entries)
	b.entries = b.entries[:0]
}

// Decode unmarshals a message's JSON body into a T, naming the subject on
// error. An audit record is decoded by schemas.DecodeAuditRecord, which
// reads what json.Unmarshal does without its reflection (the monitor reads
// four records a no-op instance).
func Decode[T any](subject string, data []byte) (T, error) {
	// The decoder's type is func([]byte) (T, error) for T AuditRecord only.
	// Its v is not the one json.Unmarshal takes the address of, which is
	// moved to the heap.
	if plain, ok := any(schemas.DecodeAuditRecord).(func([]byte) (T, error)); ok {
		v, err := plain(data)
		if err != nil {
			return v, fmt.Errorf("decode message on %s: %w", subject, err)
		}
		return v, nil
	}
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		return v, fmt.Errorf("decode message on %s: %w", subject, err)
	}
	return v, nil
}
