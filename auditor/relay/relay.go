package relay

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/internal/wait"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// lead publishes the outbox while this auditor holds relay's lock, until
// ctx ends (nil) or something fails (the error). A batch in flight when ctx
// ends is published and its cursor saved on a context that outlives ctx by
// up to ShutdownTimeout.
func (s *Service) lead(ctx context.Context, pub *streams.Publisher, stream jetstream.Stream, relay *store.Relay, log zerolog.Logger) error {
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(s.opts.ShutdownTimeout, cancelWork) })
	defer stop()

	cur, err := relay.Cursor(ctx)
	if err != nil {
		return err
	}
	batch := pub.Batch()
	end, cur, err := s.resume(work, batch, stream, relay, cur, log)
	if err != nil {
		return err
	}
	at := &position{relay: relay, now: s.now, cur: cur, savedAt: s.now()}
	for {
		asked := s.now()
		recs, next, err := relay.Next(ctx, at.cur, s.opts.BatchSize)
		if err != nil {
			return err
		}
		if len(recs) == 0 {
			// Nothing more: next ends cur's batch, if it had one (its
			// last page was a full one), and is stored before the idle.
			at.unsaved = at.unsaved || at.cur.Current != ""
			at.cur = next
			if err := at.save(work); err != nil {
				return err
			}
			if !wait.Sleep(ctx, s.opts.PollInterval) {
				return nil
			}
			continue
		}
		if end, err = s.publish(work, batch, recs, end); err != nil {
			return err
		}
		if s.afterPublish != nil {
			if err := s.afterPublish(recs); err != nil {
				return err
			}
		}
		at.published(next, asked)
		s.recordsRelayed.Add(float64(len(recs)))
		log.Debug().Int("records", len(recs)).Str("last", recs[len(recs)-1].ID).Uint64("stream_seq", end.seq).
			Msg("audit records published")
		if ctx.Err() != nil {
			return at.save(work)
		}
		if next.Current != "" {
			if s.now().Sub(at.savedAt) >= s.opts.SaveInterval {
				if err := at.save(work); err != nil {
					return err
				}
			}
			continue
		}
		// The page read the outbox to its end: the next batch begins a
		// pace after this one began (see pace) — at once after a batch
		// that took longer, a backlog's.
		if rest := s.pace() - s.now().Sub(at.begun); rest > 0 && !wait.Sleep(ctx, rest) {
			return at.save(work)
		}
	}
}

// position is where the leader has published up to, and what of it is
// stored. The leader stores its cursor when a batch begins (store.Relay.Next
// does, with the end of the batch before), within a batch once every
// SaveInterval, and before it idles or stops. A stored cursor behind what
// AX_AUDIT holds costs a new leader only a longer skip (see resume): a burst
// that publishes a page every few milliseconds pays a commit a
// SaveInterval, not one a page.
type position struct {
	relay *store.Relay
	now   func() time.Time
	// cur is the cursor past the last page published; unsaved is whether
	// it is ahead of the stored one, and savedAt when one was last stored.
	cur     store.RelayCursor
	unsaved bool
	savedAt time.Time
	// batch is the snapshot of the batch the last page was of, and begun
	// when the leader asked for the batch's first page.
	batch string
	begun time.Time
}

// published moves p past a page, next being the cursor Next returned with
// it when asked at asked.
func (p *position) published(next store.RelayCursor, asked time.Time) {
	batch := next.Current
	if batch == "" { // the page ended its batch, whose snapshot is now Done
		batch = next.Done
	}
	if batch != p.batch {
		// Next began the batch, storing its begin.
		p.batch, p.begun, p.savedAt = batch, asked, p.now()
	}
	p.cur, p.unsaved = next, true
}

// save stores p's cursor when it is ahead of the stored one.
func (p *position) save(ctx context.Context) error {
	if !p.unsaved {
		return nil
	}
	p.unsaved, p.savedAt = false, p.now()
	return p.relay.SaveCursor(ctx, p.cur)
}

// pace is how often at most the leader begins a batch that follows one
// that read the outbox to its end: every half PollInterval. Each batch
// costs its round trips to PostgreSQL (a snapshot and the first rows, a
// page, the instances' times, the cursor) and a message a task on
// AX_AUDIT whatever it holds; at a steady rate a batch begun at once holds
// only what committed during the one before. The cursor is not stored
// meanwhile: the next batch's begin stores it.
func (s *Service) pace() time.Duration { return s.opts.PollInterval / 2 }

// resume returns the tail of AX_AUDIT (its last sequence only: this leader
// has published nothing) and the cursor past the stream's last record: a
// leader that stopped between publishing a batch and saving its cursor left
// records there that must not be published again.
//
// When that message is a part of a page other than its last (see
// [Service.messages]), the leader before stopped within the page: resume
// publishes the page's other parts and saves the cursor past it.
func (s *Service) resume(ctx context.Context, batch *streams.AsyncBatch, stream jetstream.Stream, relay *store.Relay,
	cur store.RelayCursor, log zerolog.Logger) (tail, store.RelayCursor, error) {
	info, err := stream.Info(ctx)
	if err != nil {
		return tail{}, cur, fmt.Errorf("resume audit relay: stream %s: %w", s.top.AuditStream(), err)
	}
	end := tail{seq: info.State.LastSeq}
	if info.State.Msgs == 0 {
		return end, cur, nil
	}
	msg, err := stream.GetMsg(ctx, end.seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		// Deleted by hand: what it was cannot be known, and the records
		// before it are all older than the cursor's batch or in it.
		return end, cur, nil
	}
	if err != nil {
		return tail{}, cur, fmt.Errorf("resume audit relay: read message %d of %s: %w", end.seq, s.top.AuditStream(), err)
	}
	if page := msg.Header.Get(HeaderAuditPage); page != "" {
		if k, n, ok := parsePart(msg.Header.Get(HeaderAuditPart)); ok && k < n {
			part := tail{seq: end.seq, id: msg.Header.Get(streams.HeaderMsgID)}
			return s.finishPage(ctx, batch, stream, relay, cur, page, k, n, part, log)
		}
	}
	id := pageEnd(msg)
	next, skipped, err := relay.Skip(ctx, cur, id)
	if err != nil {
		return tail{}, cur, fmt.Errorf("resume audit relay: %w", err)
	}
	if skipped {
		if err := relay.SaveCursor(ctx, next); err != nil {
			return tail{}, cur, fmt.Errorf("resume audit relay: %w", err)
		}
		log.Info().Str("record", id).Uint64("stream_seq", end.seq).
			Msg("audit relay resumed after records a previous leader published without saving its cursor")
	}
	return end, next, nil
}

// tail is where AX_AUDIT ends, as the leader knows it: its last sequence
// and, once this leader published, the id of its last record.
type tail struct {
	seq uint64
	id  string
}

// publish publishes a page of records, recs, as the messages
// [Service.messages] makes of it, and returns the stream's new tail.
func (s *Service) publish(ctx context.Context, batch *streams.AsyncBatch, recs []schemas.AuditRecord, t tail) (tail, error) {
	msgs, err := s.messages(recs)
	if err != nil {
		return t, err
	}
	if s.cutPage != nil {
		cut, crash := s.cutPage(msgs)
		if crash != nil {
			if _, err := s.send(ctx, batch, cut, t); err != nil {
				return t, err
			}
			return t, crash
		}
	}
	return s.send(ctx, batch, msgs, t)
}

// send publishes msgs asynchronously through batch (of the relay's
// streams.Publisher), awaits the acknowledgements together, and returns the
// stream's new tail. Each message expects the stream to end with the
// message before it (Nats-Expected-Last-Msg-Id); the first after resume,
// when the leader has published nothing yet, expects the stream's last
// sequence instead (Nats-Expected-Last-Sequence). A publisher whose idea of
// the tail is stale — a deposed leader — stores nothing, or only the
// messages that do come next in the outbox's fixed order: no record twice,
// none out of order. Any failure fails the batch; the messages stored
// before it are a prefix of msgs, which the next leader finds (see resume).
func (s *Service) send(ctx context.Context, batch *streams.AsyncBatch, msgs []auditMsg, t tail) (tail, error) {
	defer batch.Reset()
	for i, m := range msgs {
		expect := streams.Header{Key: jetstream.ExpectedLastMsgIDHeader, Value: t.id}
		switch {
		case i > 0:
			expect.Value = msgs[i-1].id
		case t.id == "":
			expect = streams.Header{Key: jetstream.ExpectedLastSeqHeader, Value: strconv.FormatUint(t.seq, 10)}
		}
		if m.part == "" {
			batch.AddData(m.subject, m.data, streams.Header{Key: streams.HeaderMsgID, Value: m.id}, expect)
			continue
		}
		batch.AddData(m.subject, m.data, streams.Header{Key: streams.HeaderMsgID, Value: m.id}, expect,
			streams.Header{Key: HeaderAuditPage, Value: m.page}, streams.Header{Key: HeaderAuditPart, Value: m.part})
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.AckTimeout)
	defer cancel()
	if err := batch.Await(ctx); err != nil {
		return t, fmt.Errorf("publish audit records up to %s: await acknowledgements: %w", msgs[len(msgs)-1].id, err)
	}
	for i := range msgs {
		ack, err := batch.Result(i)
		if err != nil {
			return t, fmt.Errorf("publish audit records up to %s: %w", msgs[i].id, err)
		}
		if want := t.seq + uint64(i) + 1; ack.Duplicate || ack.Sequence != want {
			return t, fmt.Errorf("publish audit records up to %s: stored at sequence %d (duplicate %t), want %d: another relay publishes too",
				msgs[i].id, ack.Sequence, ack.Duplicate, want)
		}
	}
	return tail{seq: t.seq + uint64(len(msgs)), id: msgs[len(msgs)-1].id}, nil
}
