package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// Task logs. Every line a handler logs through its context's logger
// ([Logger]) is handed to the worker's log shipper, which publishes it to
// AX_LOGS on ax.log.<instance_id>, one message per line. The handler's write
// only copies the line into a bounded ring buffer under a mutex: it never
// waits on NATS. One goroutine empties the buffer every LogFlushInterval, or
// as soon as logBatch lines wait, publishing a batch asynchronously and
// awaiting its acknowledgements together. A full buffer drops its oldest
// line and counts the drop; the next batch then carries, for each attempt
// that lost lines, a warning line "N log lines dropped".
//
// One message per line, not a batch of lines per message: a reader filters
// and resumes by stream sequence (a line is a message), a follower gets each
// line as it is stored, and the subject stays the instance's. The messages
// carry no Nats-Msg-Id: a line is never published twice, and the stream
// would otherwise remember an id per line for its duplicate window.

// logBatch is how many waiting lines make the shipper publish before its
// interval has passed, and the most lines it publishes in one batch.
const logBatch = 500

// maxLogLine is the largest line, in bytes of its message and encoded
// fields, that is shipped as it was logged. A longer line keeps the start
// of its message, loses its fields, and says how long it was (field
// truncated_from_bytes): the buffer holds at most LogBuffer × maxLogLine
// bytes of lines, and a message stays far below NATS's max payload.
const maxLogLine = 32 << 10

// logEntry is one line waiting in the buffer.
type logEntry struct {
	seq      uint64 // the order of writes, from 1
	instance int64
	attempt  int
	task     string
	level    slog.Level
	at       time.Time
	msg      string
	fields   json.RawMessage // a JSON object, or nil for none
}

// attemptKey names one attempt of an instance.
type attemptKey struct {
	instance int64
	attempt  int
}

// dropped counts the lines of one attempt lost since its last warning.
type dropped struct {
	task string
	n    int
	last time.Time // when the newest of them was written
}

// logShipper buffers handler log lines and publishes them to AX_LOGS. add
// and flush are safe for concurrent use; run is called once.
type logShipper struct {
	workerID string
	topo     streams.Topology
	interval time.Duration
	batchAt  int          // lines waiting that make a batch ship at once
	log      *slog.Logger // the worker's, for the shipper's own trouble

	urgent chan struct{} // a batch is full or a flush is awaited

	// Used by run alone: what warnDropped has not told yet, and when it
	// last told.
	unwarnedDropped, unwarnedRefused int
	warnedAt                         time.Time

	mu       sync.Mutex
	ring     []logEntry // circular, len(ring) is the capacity
	head     int        // index of the oldest entry
	n        int        // entries in the ring
	written  uint64     // seq of the newest entry ever added
	shipped  uint64     // every entry up to this seq is published or dropped
	progress chan struct{}
	drops    map[attemptKey]*dropped
	total    uint64 // lines dropped since the worker started
}

func newLogShipper(workerID string, topo streams.Topology, capacity int, interval time.Duration, log *slog.Logger) *logShipper {
	return &logShipper{
		workerID: workerID,
		topo:     topo,
		interval: interval,
		batchAt:  min(logBatch, capacity),
		log:      log,
		urgent:   make(chan struct{}, 1),
		ring:     make([]logEntry, capacity),
		progress: make(chan struct{}),
		drops:    make(map[attemptKey]*dropped),
	}
}

// add puts a line of an attempt of d into the buffer, dropping the oldest
// line when the buffer is full. It never blocks on NATS.
func (sh *logShipper) add(d *schemas.Dispatch, level slog.Level, at time.Time, msg string, fields []field) {
	e := logEntry{instance: d.InstanceID, attempt: d.Attempt, task: d.Task, level: level, at: at}
	e.msg, e.fields = fitLine(msg, fields)
	sh.mu.Lock()
	sh.written++
	e.seq = sh.written
	capacity := len(sh.ring)
	if sh.n == capacity {
		sh.dropLocked(&sh.ring[sh.head])
		sh.ring[sh.head] = e
		sh.head = (sh.head + 1) % capacity
	} else {
		sh.ring[(sh.head+sh.n)%capacity] = e
		sh.n++
	}
	full := sh.n >= sh.batchAt
	sh.mu.Unlock()
	if full {
		signal(sh.urgent)
	}
}

// dropLocked counts e as lost. sh.mu is held.
func (sh *logShipper) dropLocked(e *logEntry) {
	sh.addDropsLocked(attemptKey{e.instance, e.attempt}, e.task, 1, e.at)
	sh.total++
}

// addDropsLocked adds n lost lines, the newest written at last, to the
// attempt k's next warning. sh.mu is held.
func (sh *logShipper) addDropsLocked(k attemptKey, task string, n int, last time.Time) {
	dr := sh.drops[k]
	if dr == nil {
		dr = &dropped{task: task}
		sh.drops[k] = dr
	}
	dr.n += n
	if last.After(dr.last) {
		dr.last = last
	}
}

// dropped returns how many lines were lost since the worker started: pushed
// out of a full buffer, or refused by NATS.
func (sh *logShipper) dropped() uint64 {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.total
}

// waiting reports whether lines written are not shipped yet: whether a
// flush would wait.
func (sh *logShipper) waiting() bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.shipped < sh.written
}

// flush waits until every line added before it was called is published
// (or dropped), or ctx ends.
func (sh *logShipper) flush(ctx context.Context) error {
	sh.mu.Lock()
	target, shipped := sh.written, sh.shipped
	sh.mu.Unlock()
	if shipped >= target {
		// Nothing waits: most attempts log nothing, and need not wake the shipper.
		return nil
	}
	signal(sh.urgent)
	for {
		sh.mu.Lock()
		if sh.shipped >= target {
			sh.mu.Unlock()
			return nil
		}
		progress := sh.progress
		sh.mu.Unlock()
		select {
		case <-progress:
		case <-ctx.Done():
			return fmt.Errorf("flush task log lines: %w", context.Cause(ctx))
		}
	}
}

// run ships the buffer every interval, or at once when a batch is full or a
// flush waits, until ctx ends; then it ships what is left and returns.
func (sh *logShipper) run(ctx context.Context, pub *streams.Publisher) {
	ticker := time.NewTicker(sh.interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			sh.ship(pub)
			return
		case <-ticker.C:
		case <-sh.urgent:
		}
		sh.ship(pub)
	}
}

// ship publishes every line in the buffer, a batch at a time, each batch
// led by the warnings of the attempts that lost lines. It stops early when
// NATS refuses lines: the rest waits for the next round.
func (sh *logShipper) ship(pub *streams.Publisher) {
	for {
		entries, warnings := sh.take()
		if len(entries) == 0 && len(warnings) == 0 {
			return
		}
		lines := make([]schemas.LogLine, 0, len(warnings)+len(entries))
		lost := 0
		for _, w := range warnings {
			lines = append(lines, w.line)
			lost += w.n
		}
		for i := range entries {
			lines = append(lines, sh.line(&entries[i]))
		}
		failed := sh.publish(pub, lines)
		sh.mu.Lock()
		for _, i := range failed {
			if i < len(warnings) {
				// Told again with the next batch.
				w := warnings[i]
				lost -= w.n
				sh.addDropsLocked(attemptKey{w.line.InstanceID, w.line.Attempt}, w.line.Task, w.n, w.line.Time)
				continue
			}
			// Counted like a line pushed out of the buffer, so that its
			// attempt's log says that lines are missing.
			sh.dropLocked(&entries[i-len(warnings)])
		}
		if n := len(entries); n > 0 {
			sh.shipped = max(sh.shipped, entries[n-1].seq)
		}
		close(sh.progress)
		sh.progress = make(chan struct{})
		sh.mu.Unlock()
		sh.warnDropped(lost, len(failed))
		if len(failed) > 0 {
			// The rest waits for the next round rather than spinning
			// against a NATS that refuses lines.
			return
		}
		if len(entries) == 0 {
			return
		}
	}
}

// warnEvery is how often at most the shipper logs that it lost lines.
const warnEvery = 10 * time.Second

// warnDropped tells the worker's log that lines were lost (dropped, told
// in a batch that was just published) or refused (failed to publish now),
// at most once per warnEvery with the sums since. Only run calls it.
func (sh *logShipper) warnDropped(dropped, refused int) {
	sh.unwarnedDropped += dropped
	sh.unwarnedRefused += refused
	if sh.unwarnedDropped+sh.unwarnedRefused == 0 || time.Since(sh.warnedAt) < warnEvery {
		return
	}
	sh.log.Warn("task log lines lost: the log buffer was full, or NATS refused them (they count as dropped)", "dropped", sh.unwarnedDropped, "refused", sh.unwarnedRefused, "buffer", len(sh.ring))
	sh.warnedAt, sh.unwarnedDropped, sh.unwarnedRefused = time.Now(), 0, 0
}

// dropWarning is the line that tells an attempt's log how many of its
// lines were lost.
type dropWarning struct {
	line schemas.LogLine
	n    int
}

// take removes up to logBatch of the oldest entries from the buffer, and
// the pending drop warnings. With nothing left, it marks every line written
// so far as shipped.
func (sh *logShipper) take() ([]logEntry, []dropWarning) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var warnings []dropWarning
	for k, dr := range sh.drops {
		warnings = append(warnings, dropWarning{n: dr.n, line: schemas.LogLine{
			InstanceID: k.instance,
			Task:       dr.task,
			Attempt:    k.attempt,
			WorkerID:   sh.workerID,
			Level:      levelName(slog.LevelWarn),
			Message:    fmt.Sprintf("%d log lines dropped", dr.n),
			Time:       dr.last,
			Fields:     json.RawMessage(fmt.Sprintf(`{"dropped":%d}`, dr.n)),
		}})
		delete(sh.drops, k)
	}
	n := min(sh.n, logBatch)
	if n == 0 {
		sh.shipped = sh.written
		return nil, warnings
	}
	entries := make([]logEntry, n)
	capacity := len(sh.ring)
	for i := range n {
		j := (sh.head + i) % capacity
		entries[i] = sh.ring[j]
		sh.ring[j] = logEntry{} // let the line's bytes go
	}
	sh.head = (sh.head + n) % capacity
	sh.n -= n
	return entries, warnings
}

// line makes the wire message of an entry.
func (sh *logShipper) line(e *logEntry) schemas.LogLine {
	return schemas.LogLine{
		InstanceID: e.instance,
		Task:       e.task,
		Attempt:    e.attempt,
		WorkerID:   sh.workerID,
		Level:      levelName(e.level),
		Message:    e.msg,
		Time:       e.at,
		Fields:     e.fields,
	}
}

// publish publishes lines asynchronously, in order, and awaits their
// acknowledgements together. It returns the indexes of the lines that
// were not stored.
func (sh *logShipper) publish(pub *streams.Publisher, lines []schemas.LogLine) (failed []int) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	b := pub.Batch()
	sent := make([]int, 0, len(lines)) // the line of each of b's messages
	for i, l := range lines {
		data, err := json.Marshal(l)
		if err != nil {
			failed = append(failed, i)
			continue
		}
		sent = append(sent, i)
		b.AddData(sh.topo.Log(l.InstanceID, sh.workerID), data)
	}
	_ = b.Await(ctx) // a line it did not wait for has an error
	for j, i := range sent {
		if _, err := b.Result(j); err != nil {
			failed = append(failed, i)
		}
	}
	return failed
}

// shipSink is the sink of a handler's logger on a worker: it hands each
// line to the shipper and copies it to the worker's own log, which keeps
// its own level.
type shipSink struct {
	sh       *logShipper
	d        *schemas.Dispatch
	minLevel slog.Level   // the least level shipped
	worker   *slog.Logger // the worker's logger of the attempt
}

func (w *shipSink) enabled(level slog.Level) bool {
	return level >= w.minLevel || w.worker.Enabled(context.Background(), level)
}

// line ships the line and copies it to the worker's log when that takes
// its level. It never blocks on NATS.
func (w *shipSink) line(level slog.Level, at time.Time, msg string, fields []field) {
	if level >= w.minLevel {
		w.sh.add(w.d, level, at, msg, fields)
	}
	if ctx := context.Background(); w.worker.Enabled(ctx, level) {
		r := slog.NewRecord(at, level, msg, 0)
		for _, f := range fields {
			r.AddAttrs(slog.Any(f.key, json.RawMessage(f.value)))
		}
		_ = w.worker.Handler().Handle(ctx, r) // the worker's log has no one to tell
	}
}

// handlerLogger returns the logger a handler gets for the attempt d: its
// lines ship to AX_LOGS (from Options.TaskLogLevel up) and are copied to
// workerLog, the worker's logger of the attempt, at their own level.
func (s *Service) handlerLogger(d *schemas.Dispatch, workerLog *slog.Logger) *slog.Logger {
	return newTaskLogger(&shipSink{sh: s.logs, d: d, minLevel: s.opts.TaskLogLevel.Level(), worker: workerLog})
}

// flushLogs ships the lines logged so far before the attempt's final report
// is published, so that whoever sees the instance end finds its logs. A
// flush that NATS holds up does not hold the report up for long.
func (s *Service) flushLogs(a *attempt) {
	if !s.logs.waiting() {
		// Most attempts log nothing: no timeout (a timer and a context) to make.
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := s.logs.flush(ctx); err != nil {
		a.log.Warn("reporting the attempt before all of its log lines are stored", "error", err)
	}
}

// LogLinesDropped returns how many task log lines the worker lost since it
// started: pushed out of its full buffer (Options.LogBuffer) or refused by
// NATS. The log of each attempt that lost lines says how many in a warning
// line "N log lines dropped".
func (s *Service) LogLinesDropped() uint64 { return s.logs.dropped() }

// field is one key and JSON value of a log line.
type field struct {
	key   string
	value json.RawMessage
}

// reservedKey reports whether a top-level attribute key names a LogLine
// field of its own, or a tag the line carries from its attempt; the
// worker's copy of the line has them too.
func reservedKey(k string) bool {
	switch k {
	case "message", "level", "time", "task", "instance_id", "attempt", "worker_id":
		return true
	}
	return false
}

// encodeFields writes fields as a JSON object in their order, or nil for none.
func encodeFields(fields []field) json.RawMessage {
	if len(fields) == 0 {
		return nil
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range fields {
		if i > 0 {
			b.WriteByte(',')
		}
		key, _ := json.Marshal(f.key)
		b.Write(key)
		b.WriteByte(':')
		if err := json.Compact(&b, f.value); err != nil {
			b.WriteString("null")
		}
	}
	b.WriteByte('}')
	return b.Bytes()
}

// fitLine returns the message and encoded fields of a line: as they are
// when they fit maxLogLine, else the start of the message and a field
// truncated_from_bytes saying how long the line was.
func fitLine(msg string, fields []field) (string, json.RawMessage) {
	size := len(msg)
	for _, f := range fields {
		size += len(f.key) + len(f.value) + 4
	}
	if size <= maxLogLine {
		return msg, encodeFields(fields)
	}
	if limit := maxLogLine / 2; len(msg) > limit {
		for limit > 0 && !utf8.RuneStart(msg[limit]) {
			limit--
		}
		msg = msg[:limit] + "…"
	}
	return msg, encodeFields([]field{{"truncated_from_bytes", json.RawMessage(fmt.Sprint(size))}})
}
