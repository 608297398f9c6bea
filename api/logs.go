package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
)

// Limits of GET /v1/instances/{id}/logs.
const (
	// DefaultLogLimit is how many lines one answer holds when the request
	// names no limit.
	DefaultLogLimit = 1000
	// MaxLogLimit is the largest limit a request may name.
	MaxLogLimit = 10000
)

// Timings of a followed log (follow=true).
const (
	// followIdle is how long no line may arrive, once the instance has
	// ended, before the stream ends.
	followIdle = time.Second
	// followHeartbeat is how often an idle stream sends a comment, so that
	// proxies and clients do not take it for dead.
	followHeartbeat = 15 * time.Second
	// readLogsTimeout bounds reading one page of lines.
	readLogsTimeout = 30 * time.Second
)

// logQuery is what a request for an instance's logs asks for.
type logQuery struct {
	attempt int
	since   time.Time
	limit   int
	after   uint64
	follow  bool
}

// instanceLogs answers GET /v1/instances/{id}/logs from AX_LOGS, so that
// the logs of an attempt outlive its executor. With follow=true it answers
// with server-sent events: the lines there are, then each new line as it is
// stored, until the instance has ended and no line came for followIdle.
func (s *Service) instanceLogs(w http.ResponseWriter, r *http.Request) error {
	id, e := instanceID(r)
	if e != nil {
		return e
	}
	q, e := s.logQuery(r)
	if e != nil {
		return e
	}
	in, err := s.opts.Store.GetInstance(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return instanceNotFound(id)
	}
	if err != nil {
		return internal(fmt.Sprintf("get instance %d", id), err)
	}
	if q.follow {
		return s.followLogs(w, r, in, q)
	}
	page, err := s.readLogs(r.Context(), in, q)
	if err != nil {
		return internal(fmt.Sprintf("read the logs of instance %d", id), err)
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

// logQuery reads the query of GET /v1/instances/{id}/logs, refusing unknown
// parameters: a misspelt filter must not silently show everything.
func (s *Service) logQuery(r *http.Request) (logQuery, *wire.Error) {
	q := logQuery{limit: DefaultLogLimit}
	v, e := s.readQuery(r, "attempt", "since", "limit", "after", "follow")
	if e != nil {
		return q, e
	}
	if a := v.Get("attempt"); a != "" {
		n, err := strconv.Atoi(a)
		if err != nil || n < 1 {
			return q, badRequest("invalid_parameter", "attempt", "attempt=%q is not an attempt number; attempts count from 1", a)
		}
		q.attempt = n
	}
	if q.since, e = v.time("since", time.Time{}); e != nil {
		return q, e
	}
	if f := v.Get("follow"); f != "" {
		b, err := strconv.ParseBool(f)
		if err != nil {
			return q, badRequest("invalid_parameter", "follow", "follow=%q is not a boolean; use follow=true to stream new lines as they come", f)
		}
		q.follow = b
	}
	if v.Get("limit") != "" && q.follow {
		return q, badRequest("invalid_parameter", "limit", "limit does not apply to follow=true, which streams every line; leave it out")
	}
	if n, e := v.limit("limit", MaxLogLimit); e != nil {
		return q, e
	} else if n != 0 {
		q.limit = n
	}
	after := v.Get("after")
	if after == "" && q.follow {
		// An EventSource that reconnects says where it was.
		after = r.Header.Get("Last-Event-ID")
	}
	if after != "" {
		n, err := strconv.ParseUint(after, 10, 64)
		if err != nil {
			return q, badRequest("invalid_parameter", "after", "after=%q is not a stream sequence; pass the next of the previous answer", after)
		}
		q.after = n
	}
	return q, nil
}

// keep reports whether a line passes the query's filters.
func (q *logQuery) keep(l *schemas.LogLine) bool {
	return (q.attempt == 0 || l.Attempt == q.attempt) && !l.Time.Before(q.since)
}

// logReader reads the lines of one instance from AX_LOGS with an ordered
// consumer filtered to its subject.
type logReader struct {
	s        *Service
	consumer jetstream.Consumer
	msgs     jetstream.MessagesContext
	// start is the stream sequence before the first line the query wants.
	start uint64
	// pending is how many lines of the subject were there past start when
	// the reader was made.
	pending uint64
}

// openLogs starts reading the lines of instance id from where q says:
// after a sequence, from a time, or from the first line. Close it when done.
func (s *Service) openLogs(ctx context.Context, id int64, q logQuery) (*logReader, error) {
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects:    s.opts.Topology.InstanceLogs(id),
		InactiveThreshold: time.Minute,
	}
	switch {
	case q.after > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, q.after+1
	case !q.since.IsZero():
		// Stored after it was written: no line from since on is stored earlier.
		since := q.since
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	c, err := s.js.OrderedConsumer(ctx, s.opts.Topology.LogsStream(), cfg)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", cfg.FilterSubjects[0], err)
	}
	msgs, err := c.Messages()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", cfg.FilterSubjects[0], err)
	}
	lr := &logReader{s: s, consumer: c, msgs: msgs}
	if info := c.CachedInfo(); info != nil {
		lr.start, lr.pending = info.Delivered.Stream, info.NumPending
	}
	return lr, nil
}

// next returns the next line and its stream sequence, waiting for it until
// ctx ends. ok is false for a message that is not a log line, which it skips.
func (lr *logReader) next(ctx context.Context) (line logLine, seq, pending uint64, ok bool, err error) {
	m, err := lr.msgs.Next(jetstream.NextContext(ctx))
	if err != nil {
		return line, 0, 0, false, err
	}
	meta, err := m.Metadata()
	if err != nil {
		return line, 0, 0, false, fmt.Errorf("read log line: %w", err)
	}
	if err := json.Unmarshal(m.Data(), &line.LogLine); err != nil {
		lr.s.opts.Logger.Warn().Err(err).Str("subject", m.Subject()).Uint64("seq", meta.Sequence.Stream).
			Msg("message on a log subject is not a log line; skipping it")
		return line, meta.Sequence.Stream, meta.NumPending, false, nil
	}
	// The subject names the worker that shipped the line, as its
	// credential allows; the body's worker is its word only.
	if w, ok := lr.s.opts.Topology.LogFrom(m.Subject()); ok && w != "" {
		line.WorkerID, line.shipped = w, true
	}
	return line, meta.Sequence.Stream, meta.NumPending, true, nil
}

// logLine is a task log line as read: shipped is true when its subject
// names the worker that shipped it (then its WorkerID).
type logLine struct {
	schemas.LogLine
	shipped bool
}

// logVerdict is what a log reader does with a line (see [logWriters]).
type logVerdict int

const (
	showLine logVerdict = iota
	dropLine            // shipped by a worker that held none of the instance's attempts
	holdLine            // not yet known: the current attempt has no holder recorded
)

// logWriters are the workers whose task log lines an instance shows: those
// that held one of its attempts (a started or final report of theirs
// recorded it). A line's worker is the one its subject names
// (ax.log.<instance>.<worker>, which NATS permissions bind to the
// shipping credential), so another worker's lines — a forged line on an
// instance it never ran — are dropped. While the current attempt has no
// holder recorded yet (its lines may come before its first report), a
// line of an unknown worker is held until one is, or the instance ends.
type logWriters struct {
	held    map[string]bool
	pending bool
}

func writersOf(in schemas.Instance) logWriters {
	lw := logWriters{held: map[string]bool{}}
	for _, t := range in.Transitions {
		if w, ok := strings.CutPrefix(t.Operator, store.WorkerOperator("")); ok && w != "" {
			lw.held[w] = true
		}
	}
	// The current attempt's holder; none yet while it is DISPATCHED (each
	// attempt starts with no worker).
	if in.WorkerID != "" {
		lw.held[in.WorkerID] = true
	}
	lw.pending = in.WorkerID == "" && !in.State.Terminal()
	return lw
}

// judge says what to do with line.
func (lw logWriters) judge(line *logLine) logVerdict {
	switch {
	case !line.shipped || lw.held[line.WorkerID]:
		// A line of an executor older than the worker token has no
		// worker in its subject; no executor credential may publish there.
		return showLine
	case lw.pending:
		return holdLine
	}
	return dropLine
}

// close stops the reader and deletes its consumer.
func (lr *logReader) close() {
	lr.msgs.Stop()
	info := lr.consumer.CachedInfo()
	if info == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Left alone it would go after its inactive threshold.
	_ = lr.s.js.DeleteConsumer(ctx, lr.s.opts.Topology.LogsStream(), info.Name)
}

// readLogs reads one page of the lines of instance in, those of the
// workers that held its attempts (see [logWriters]). The page ends before
// a line it must hold, which the next read shows or drops.
func (s *Service) readLogs(ctx context.Context, in schemas.Instance, q logQuery) (wire.LogPage, error) {
	id := in.ID
	page := wire.LogPage{Lines: []schemas.LogLine{}, Next: q.after}
	ctx, cancel := context.WithTimeout(ctx, readLogsTimeout)
	defer cancel()
	lr, err := s.openLogs(ctx, id, q)
	if err != nil {
		return page, err
	}
	defer lr.close()
	writers, reread := writersOf(in), false
	for pending := lr.pending; pending > 0; {
		if len(page.Lines) == q.limit {
			page.More = true
			break
		}
		line, seq, left, ok, err := lr.next(ctx)
		if err != nil {
			return page, fmt.Errorf("read the logs of instance %d: %w", id, err)
		}
		verdict := writers.judge(&line)
		if ok && verdict == holdLine && !reread {
			// The instance as it is now: the line's worker may have
			// reported since the request read it.
			if in, err = s.opts.Store.GetInstance(ctx, id); err != nil {
				return page, err
			}
			writers, reread = writersOf(in), true
			verdict = writers.judge(&line)
		}
		if ok && verdict == holdLine {
			break
		}
		page.Next, pending = seq, left
		if ok && verdict == showLine && q.keep(&line.LogLine) {
			page.Lines = append(page.Lines, line.LogLine)
		}
	}
	return page, nil
}

// followLogs streams the lines of instance in as server-sent events: each
// line is an event "id: <seq>\ndata: <json>", and the stream ends with an
// event "end" whose data names the instance's final state, once the
// instance has ended and no line came for followIdle. A client that lost
// the stream resumes with after (or the Last-Event-ID header) = the last id.
// It returns an error only before it has written the stream's header.
func (s *Service) followLogs(w http.ResponseWriter, r *http.Request, in schemas.Instance, q logQuery) error {
	ctx := r.Context()
	lr, err := s.openLogs(ctx, in.ID, q)
	if err != nil {
		return internal(fmt.Sprintf("read the logs of instance %d", in.ID), err)
	}
	defer lr.close()
	msgs, stopReading := s.readFollowed(ctx, lr, in.ID)
	defer stopReading()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: pass each event on at once
	w.WriteHeader(http.StatusOK)
	f := &follower{s: s, w: w, rc: http.NewResponseController(w), id: in.ID, q: q}
	if !f.send(": following the logs of instance %d\n\n", in.ID) {
		return nil
	}

	heartbeat := time.NewTicker(followHeartbeat)
	defer heartbeat.Stop()
	idle := time.NewTicker(followIdle / 4)
	defer idle.Stop()
	f.last, f.lastAt = lr.start, time.Now()
	f.writers = writersOf(in)
	for {
		select {
		case <-ctx.Done():
			return nil
		case m, open := <-msgs:
			if !open || !f.take(m) {
				return nil
			}
		case <-heartbeat.C:
			if !f.send(": heartbeat\n\n") {
				return nil
			}
		case <-idle.C:
			if !f.idle(ctx) {
				return nil
			}
		}
	}
}

// followMsg is a message of a followed log: a line (ok false for a
// message that is not one) and its stream sequence.
type followMsg struct {
	line logLine
	seq  uint64
	ok   bool
}

// readFollowed reads lr's messages into the channel it returns, closed
// when reading fails or ends; stop ends the reading and waits for it.
func (s *Service) readFollowed(ctx context.Context, lr *logReader, id int64) (msgs <-chan followMsg, stop func()) {
	out := make(chan followMsg)
	readCtx, stopReading := context.WithCancel(ctx)
	read := make(chan struct{})
	go func() {
		defer close(read)
		defer close(out)
		for {
			line, seq, _, ok, err := lr.next(readCtx)
			if err != nil {
				if readCtx.Err() == nil {
					s.opts.Logger.Warn().Err(err).Int64("instance_id", id).Msg("follow task logs; ending the stream")
				}
				return
			}
			select {
			case out <- followMsg{line, seq, ok}:
			case <-readCtx.Done():
				return
			}
		}
	}()
	return out, func() {
		stopReading()
		<-read
	}
}

// follower is one stream of followLogs: what it has sent (last, at
// lastAt) and the lines it holds until the instance records their worker
// or ends (see [logWriters]), in order; a held line holds those after it.
// Its methods return false when the stream is to end.
type follower struct {
	s       *Service
	w       http.ResponseWriter
	rc      *http.ResponseController
	id      int64
	q       logQuery
	writers logWriters
	held    []followMsg
	last    uint64
	lastAt  time.Time
}

// send writes an event and flushes it.
func (f *follower) send(format string, args ...any) bool {
	if _, err := fmt.Fprintf(f.w, format, args...); err != nil {
		return false
	}
	return f.rc.Flush() == nil
}

// show sends the line of m if it is one the query keeps.
func (f *follower) show(m followMsg) bool {
	if !m.ok || !f.q.keep(&m.line.LogLine) {
		return true
	}
	data, _ := json.Marshal(m.line.LogLine)
	return f.send("id: %d\ndata: %s\n\n", m.seq, data)
}

// flush sends the held lines the writers now show, drops those they drop,
// and stops at the first they still hold.
func (f *follower) flush() bool {
	for len(f.held) > 0 {
		switch f.writers.judge(&f.held[0].line) {
		case holdLine:
			return true
		case showLine:
			if !f.show(f.held[0]) {
				return false
			}
		}
		f.held = f.held[1:]
	}
	return true
}

// take sends, holds or drops the message m read.
func (f *follower) take(m followMsg) bool {
	f.last, f.lastAt = m.seq, time.Now()
	if len(f.held) > 0 || (m.ok && f.writers.judge(&m.line) == holdLine) {
		f.held = append(f.held, m)
		return true
	}
	if m.ok && f.writers.judge(&m.line) == dropLine {
		return true
	}
	return f.show(m)
}

// idle, on each tick of the idle ticker, releases the held lines the
// instance now has a worker for, or, once no line came for followIdle,
// ends the stream with the event "end" if the instance has ended.
func (f *follower) idle(ctx context.Context) bool {
	if len(f.held) > 0 {
		now, err := f.s.opts.Store.GetInstance(ctx, f.id)
		if err != nil {
			if ctx.Err() == nil {
				f.s.opts.Logger.Error().Err(err).Int64("instance_id", f.id).Msg("follow task logs; ending the stream")
			}
			return false
		}
		f.writers = writersOf(now)
		if !f.flush() {
			return false
		}
		f.lastAt = time.Now()
		return true
	}
	if time.Since(f.lastAt) < followIdle {
		return true
	}
	state, done, err := f.s.logsDone(ctx, f.id, f.last)
	if err != nil {
		if ctx.Err() == nil {
			f.s.opts.Logger.Error().Err(err).Int64("instance_id", f.id).Msg("follow task logs; ending the stream")
		}
		return false
	}
	if done {
		data, _ := json.Marshal(map[string]schemas.State{"state": state})
		f.send("event: end\ndata: %s\n\n", data)
		return false
	}
	f.lastAt = time.Now()
	return true
}

// logsDone reports whether the instance id has ended and its last line,
// if any, is at stream sequence last or before.
func (s *Service) logsDone(ctx context.Context, id int64, last uint64) (schemas.State, bool, error) {
	in, err := s.opts.Store.GetInstance(ctx, id)
	if err != nil {
		return "", false, err
	}
	if !in.State.Terminal() {
		return in.State, false, nil
	}
	// The executor stores an attempt's lines before its final report, so
	// once the instance has ended, the subject's last message is its last line.
	stream, err := s.js.Stream(ctx, s.opts.Topology.LogsStream())
	if err != nil {
		return "", false, fmt.Errorf("look up stream %s: %w", s.opts.Topology.LogsStream(), err)
	}
	for _, subject := range s.opts.Topology.InstanceLogs(id) {
		m, err := stream.GetLastMsgForSubject(ctx, subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return "", false, fmt.Errorf("read the last message of %s: %w", subject, err)
		}
		if m.Sequence > last {
			return in.State, false, nil
		}
	}
	return in.State, true, nil
}
