package relay

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// The headers of a version 2 audit message (a [schemas.AuditBatch]): where
// it belongs in the page the relay published it from. A new leader reads
// them on the stream's last message to learn whether the leader before it
// stopped within a page.
const (
	// HeaderAuditPage is the id of the page's last record.
	HeaderAuditPage = "Ax-Audit-Page"
	// HeaderAuditPart is "<k>/<n>": the message is the k-th of the page's
	// n messages.
	HeaderAuditPart = "Ax-Audit-Part"
)

// maxBatchBytes is the most bytes of records a version 2 message carries
// before the relay starts another for the same task: a quarter of the
// server's default max payload (1 MiB). A page of plain records (about
// 250 bytes each, 500 a page) fits in one message a task.
const maxBatchBytes = 256 << 10

// auditMsg is one message the relay publishes.
type auditMsg struct {
	subject string
	data    []byte
	// id is its Nats-Msg-Id: the id of its last record.
	id string
	// page and part are its HeaderAuditPage and HeaderAuditPart, empty in
	// version 1.
	page, part string
	// records is how many records it carries.
	records int
}

// messages makes the messages of a page of records, in the order they are
// published. In version 1 it is one message a record. In version 2 it is
// one message a task (more when its records exceed maxBatchBytes), the
// tasks in the order of their first record in the page: a task's records
// stay in the page's order, so those of an instance stay in the order of
// its transitions. The split depends on the page alone, so a new leader
// that reads the page again makes the same messages (see finishPage).
func (s *Service) messages(recs []schemas.AuditRecord) ([]auditMsg, error) {
	if s.opts.Version == 1 {
		msgs := make([]auditMsg, len(recs))
		for i, r := range recs {
			data, err := schemas.MarshalAuditRecord(r)
			if err != nil {
				return nil, fmt.Errorf("publish audit record %s: %w", r.ID, err)
			}
			msgs[i] = auditMsg{subject: s.top.Audit(r.Task), data: data, id: r.ID, records: 1}
		}
		return msgs, nil
	}
	var msgs []auditMsg
	for _, group := range byTask(recs) {
		task := group[0].Task
		for len(group) > 0 {
			n, size := 0, 0
			for n < len(group) && (n == 0 || size < maxBatchBytes) {
				size += 200 + len(group[n].Reason) + len(group[n].Details) + len(group[n].Operator)
				n++
			}
			data, err := schemas.AppendAuditBatch(make([]byte, 0, size+64), task, group[:n])
			if err != nil {
				return nil, fmt.Errorf("publish audit records %s to %s: %w", group[0].ID, group[n-1].ID, err)
			}
			msgs = append(msgs, auditMsg{subject: s.top.Audit(task), data: data, id: group[n-1].ID, page: recs[len(recs)-1].ID,
				records: n})
			group = group[n:]
		}
	}
	for i := range msgs {
		msgs[i].part = strconv.Itoa(i+1) + "/" + strconv.Itoa(len(msgs))
	}
	return msgs, nil
}

// byTask splits recs by task, in the order each task first appears, each
// group in recs' order. A page of one task (the common page) is recs
// itself; otherwise each group is sized once, not grown record by record
// (a record is a few hundred bytes).
func byTask(recs []schemas.AuditRecord) [][]schemas.AuditRecord {
	at := map[string]int{} // each task's group
	var sizes []int
	for i := range recs {
		k, ok := at[recs[i].Task]
		if !ok {
			k, at[recs[i].Task] = len(sizes), len(sizes)
			sizes = append(sizes, 0)
		}
		sizes[k]++
	}
	if len(sizes) == 1 {
		return [][]schemas.AuditRecord{recs}
	}
	groups := make([][]schemas.AuditRecord, len(sizes))
	for k, n := range sizes {
		groups[k] = make([]schemas.AuditRecord, 0, n)
	}
	for i := range recs {
		k := at[recs[i].Task]
		groups[k] = append(groups[k], recs[i])
	}
	return groups
}

// parsePart reads a HeaderAuditPart value.
func parsePart(v string) (k, n int, ok bool) {
	a, b, found := strings.Cut(v, "/")
	k, errK := strconv.Atoi(a)
	n, errN := strconv.Atoi(b)
	return k, n, found && errK == nil && errN == nil && k >= 1 && k <= n
}

// finishPage completes the page whose last record is page, of which the
// stream ends with part k of n (the message end.id): a leader stopped
// while it published that page, after its k-th message was stored. It reads
// the page again from where it began, makes the same messages, publishes
// the n-k the stream lacks after end, and saves the cursor past the page.
func (s *Service) finishPage(ctx context.Context, batch *streams.AsyncBatch, stream jetstream.Stream, relay *store.Relay,
	cur store.RelayCursor, page string, k, n int, end tail, log zerolog.Logger) (tail, store.RelayCursor, error) {
	cur, err := s.pageStart(ctx, stream, relay, cur, end.seq-uint64(k))
	if err != nil {
		return tail{}, cur, fmt.Errorf("resume audit relay: %w", err)
	}
	recs, next, found, err := relay.Through(ctx, cur, page)
	if err != nil {
		return tail{}, cur, fmt.Errorf("resume audit relay: %w", err)
	}
	if !found {
		// The cursor is past the page: nothing of it is left to publish.
		return end, cur, nil
	}
	msgs, err := s.messages(recs)
	if err != nil {
		return tail{}, cur, fmt.Errorf("resume audit relay: %w", err)
	}
	if len(msgs) != n || msgs[k-1].id != end.id {
		return tail{}, cur, fmt.Errorf("resume audit relay: the stream ends with part %d of %d of page %s (record %s), which this relay splits otherwise (%d parts): run every auditor with the same audit version",
			k, n, page, end.id, len(msgs))
	}
	if end, err = s.send(ctx, batch, msgs[k:], end); err != nil {
		return tail{}, cur, fmt.Errorf("resume audit relay: %w", err)
	}
	if err := relay.SaveCursor(ctx, next); err != nil {
		return tail{}, cur, fmt.Errorf("resume audit relay: %w", err)
	}
	for _, m := range msgs[k:] {
		s.recordsRelayed.Add(float64(m.records))
	}
	log.Info().Str("page", page).Int("parts_published", n-k).Uint64("stream_seq", end.seq).
		Msg("audit relay resumed within a page a previous leader had published in part")
	return end, next, nil
}

// pageStart returns the cursor where the page after message seq of AX_AUDIT
// began: past that message's page (its HeaderAuditPage; a version 1
// message's own record), when that lies after cur in cur's batch, else
// cur. The stored cursor cur may lie pages before it: the leader stores it
// once a SaveInterval within a batch.
func (s *Service) pageStart(ctx context.Context, stream jetstream.Stream, relay *store.Relay, cur store.RelayCursor,
	seq uint64) (store.RelayCursor, error) {
	if seq == 0 {
		return cur, nil
	}
	msg, err := stream.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return cur, nil // deleted by hand: the page is read from cur
	}
	if err != nil {
		return cur, fmt.Errorf("read message %d of %s: %w", seq, s.top.AuditStream(), err)
	}
	start, _, err := relay.Skip(ctx, cur, pageEnd(msg))
	return start, err
}

// pageEnd returns the id of the last record of the page msg, a message of
// AX_AUDIT, was published from: its HeaderAuditPage, or for a version 1
// message (a page's records a message each) its own record.
func pageEnd(msg *jetstream.RawStreamMsg) string {
	if page := msg.Header.Get(HeaderAuditPage); page != "" {
		return page
	}
	return msg.Header.Get(streams.HeaderMsgID)
}
