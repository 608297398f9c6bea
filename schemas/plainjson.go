package schemas

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// plainReader reads a JSON object of the plain form json.Marshal writes for
// AX's own messages, without reflection: exact keys, strings without
// escapes, integers, times and raw values. It does not say why it stops:
// any other input (an escape, a null, a key in another case, a fraction,
// whitespace where it is unusual) sets bad, and the caller decodes the data
// with encoding/json instead, which reads it as it always has and words the
// error. What it does read it reads as encoding/json would.
type plainReader struct {
	data         []byte
	pos          int
	open, closed bool // the braces were read
	bad          bool
}

func (r *plainReader) space() {
	for r.pos < len(r.data) {
		switch r.data[r.pos] {
		case ' ', '\t', '\n', '\r':
			r.pos++
		default:
			return
		}
	}
}

// next moves to the object's next member and returns its key, or returns
// false at the object's end (or when the input is not plain). The first
// call reads the opening brace.
func (r *plainReader) next() ([]byte, bool) {
	if r.bad || r.closed {
		return nil, false
	}
	r.space()
	switch {
	case !r.open:
		r.open = true
		if !r.eat('{') {
			r.bad = true
			return nil, false
		}
		r.space()
		if r.eat('}') {
			r.closed = true
			return nil, false
		}
	case r.eat(','):
		r.space()
	case r.eat('}'):
		r.closed = true
		return nil, false
	default:
		r.bad = true
		return nil, false
	}
	key, ok := r.rawString()
	r.space()
	if !ok || !r.eat(':') {
		r.bad = true
		return nil, false
	}
	r.space()
	return key, true
}

// members reads the object's members in turn: member gets each key and
// reads its value (or sets bad).
func (r *plainReader) members(member func(key []byte)) {
	for {
		key, more := r.next()
		if !more {
			return
		}
		member(key)
	}
}

// eat reads c if it is the next byte.
func (r *plainReader) eat(c byte) bool {
	if r.pos < len(r.data) && r.data[r.pos] == c {
		r.pos++
		return true
	}
	return false
}

// end reports whether the object read is all of the input, and plain.
func (r *plainReader) end() bool {
	r.space()
	return r.closed && !r.bad && r.pos == len(r.data)
}

// rawString reads a string without escapes or control characters, in
// valid UTF-8, and returns its bytes between the quotes.
func (r *plainReader) rawString() ([]byte, bool) {
	if r.pos >= len(r.data) || r.data[r.pos] != '"' {
		return nil, false
	}
	start := r.pos + 1
	ascii := true
	for i := start; i < len(r.data); i++ {
		switch c := r.data[i]; {
		case c == '"':
			s := r.data[start:i]
			if !ascii && !utf8.Valid(s) {
				return nil, false
			}
			r.pos = i + 1
			return s, true
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

// str reads a string value.
func (r *plainReader) str() string {
	s, ok := r.rawString()
	if !ok {
		r.bad = true
		return ""
	}
	return string(s)
}

// strAs reads a string value: known itself when the value equals it,
// else a copy.
func (r *plainReader) strAs(known string) string {
	s, ok := r.rawString()
	if !ok {
		r.bad = true
		return ""
	}
	if string(s) == known {
		return known
	}
	return string(s)
}

// int reads an integer value that fits in bits bits, as encoding/json
// reads one into an int of that size; anything else (a fraction, an
// exponent, an overflow) is not plain.
func (r *plainReader) int(bits uint) int64 {
	i := r.pos
	neg := i < len(r.data) && r.data[i] == '-'
	if neg {
		i++
	}
	start := i
	limit := uint64(1)<<(bits-1) - 1 // the largest that fits; its negation too
	var n uint64
	for ; i < len(r.data) && r.data[i] >= '0' && r.data[i] <= '9'; i++ {
		d := uint64(r.data[i] - '0')
		if n > (limit-d)/10 {
			r.bad = true
			return 0
		}
		n = n*10 + d
	}
	digits := i - start
	if digits == 0 || (digits > 1 && r.data[start] == '0') {
		r.bad = true
		return 0
	}
	if i < len(r.data) {
		switch r.data[i] {
		case ',', '}', ' ', '\t', '\n', '\r':
		default:
			r.bad = true
			return 0
		}
	}
	r.pos = i
	if neg {
		return -int64(n)
	}
	return int64(n)
}

// boolean reads true or false.
func (r *plainReader) boolean() bool {
	for _, lit := range []string{"true", "false"} {
		if bytes.HasPrefix(r.data[r.pos:], []byte(lit)) {
			r.pos += len(lit)
			return lit == "true"
		}
	}
	r.bad = true
	return false
}

// time reads a time value as encoding/json does: time.Time's UnmarshalJSON
// of the quoted literal.
func (r *plainReader) time() time.Time {
	start := r.pos
	if _, ok := r.rawString(); !ok {
		r.bad = true
		return time.Time{}
	}
	var t time.Time
	if t.UnmarshalJSON(r.data[start:r.pos]) != nil {
		r.bad = true
	}
	return t
}

// raw reads any value but null and returns a copy of its bytes, as
// encoding/json fills a json.RawMessage.
func (r *plainReader) raw() json.RawMessage {
	if r.pos >= len(r.data) || r.data[r.pos] == 'n' {
		r.bad = true
		return nil
	}
	start, depth := r.pos, 0
	i := r.pos
scan:
	for ; i < len(r.data); i++ {
		switch r.data[i] {
		case '"':
			for i++; i < len(r.data) && r.data[i] != '"'; i++ {
				if r.data[i] == '\\' {
					i++
				}
			}
			if depth == 0 {
				i++
				break scan
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth < 0 {
				break scan
			}
			if depth == 0 {
				i++
				break scan
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				break scan
			}
		}
	}
	if i > len(r.data) {
		i = len(r.data)
	}
	v := r.data[start:i]
	if !json.Valid(v) {
		r.bad = true
		return nil
	}
	r.pos = i
	return append(json.RawMessage(nil), v...)
}

// DecodeDispatch decodes a dispatch message's body as json.Unmarshal does,
// without its reflection for the plain encoding the dispatcher writes (no
// parents); any other body is decoded by json.Unmarshal itself.
func DecodeDispatch(data []byte) (Dispatch, error) {
	return decodePlainOr(data, decodePlainDispatch)
}

// decodePlainOr decodes data with plain, or with json.Unmarshal where
// plain does not take it.
func decodePlainOr[T any](data []byte, plain func([]byte) (T, bool)) (T, error) {
	if v, ok := plain(data); ok {
		return v, nil
	}
	var v T
	err := json.Unmarshal(data, &v)
	return v, err
}

// Each plain decoder (decodePlainDispatch, decodePlainTriggerEvent, and
// plainreport.go's for reports, report batches and leases) spells out one
// switch from key to field, and each append function one line per member,
// on purpose: the switch is the table, read at a glance against the
// struct's json tags, and it sets a field of its own type with no
// reflection, closure or offset in between. A table-driven decoder shared
// by them would need a setter per field (or reflection, which is what these
// avoid) and be harder to hold to encoding/json, against which the Fuzz
// targets of plainjson_test.go and plainreport_test.go check each.
func decodePlainDispatch(data []byte) (d Dispatch, ok bool) {
	r := plainReader{data: data}
	r.members(func(key []byte) {
		switch string(key) {
		case "instance_id":
			d.InstanceID = r.int(64)
		case "task":
			d.Task = r.str()
		case "task_version":
			d.TaskVersion = int(r.int(strconv.IntSize))
		case "handler":
			d.Handler = r.str()
		case "attempt":
			d.Attempt = int(r.int(strconv.IntSize))
		case "max_attempts":
			d.MaxAttempts = int(r.int(strconv.IntSize))
		case "event_id":
			d.EventID = r.str()
		case "priority":
			d.Priority = Priority(r.str())
		case "pool":
			d.Pool = r.str()
		case "payload":
			d.Payload = r.raw()
		case "timeout_ms":
			d.TimeoutMS = r.int(64)
		case "mutex_template":
			d.MutexTemplate = r.str()
		case "fired_at":
			d.FiredAt = r.time()
		case "dispatched_at":
			d.DispatchedAt = r.time()
		case "run_id":
			d.RunID = r.str()
		case "shard_index":
			d.ShardIndex = int(r.int(strconv.IntSize))
		case "shard_count":
			d.ShardCount = int(r.int(strconv.IntSize))
		case "protocol":
			d.Protocol = int(r.int(strconv.IntSize))
		case "report_batches":
			d.ReportBatches = r.boolean()
		case "republished":
			d.Republished = r.boolean()
		case "slots":
			d.Slots = int(r.int(strconv.IntSize))
		default: // parents, or a key encoding/json matches otherwise
			r.bad = true
		}
	})
	if !r.end() {
		return Dispatch{}, false
	}
	return d, true
}

// MarshalDispatch encodes d as json.Marshal does, byte for byte, without
// its reflection when d is plain: strings and a payload that encode as
// they are (no escapes, a compact payload) and no parents. Any other d is
// encoded by json.Marshal itself.
func MarshalDispatch(d Dispatch) ([]byte, error) {
	if b, ok := appendPlainDispatch(make([]byte, 0, 512), &d); ok {
		return b, nil
	}
	return json.Marshal(d)
}

func appendPlainDispatch(b []byte, d *Dispatch) ([]byte, bool) {
	if len(d.Parents) > 0 || !plainRaw(d.Payload) {
		return nil, false
	}
	w := plainWriter{b: b, ok: true}
	w.int(`{"instance_id":`, d.InstanceID)
	w.str(`,"task":`, d.Task)
	w.int(`,"task_version":`, int64(d.TaskVersion))
	w.str(`,"handler":`, d.Handler)
	w.int(`,"attempt":`, int64(d.Attempt))
	w.int(`,"max_attempts":`, int64(d.MaxAttempts))
	w.str(`,"event_id":`, d.EventID)
	w.str(`,"priority":`, string(d.Priority))
	w.str(`,"pool":`, d.Pool)
	if len(d.Payload) > 0 {
		w.b = append(append(w.b, `,"payload":`...), d.Payload...)
	}
	w.int(`,"timeout_ms":`, d.TimeoutMS)
	if d.MutexTemplate != "" {
		w.str(`,"mutex_template":`, d.MutexTemplate)
	}
	w.time(`,"fired_at":`, d.FiredAt)
	w.time(`,"dispatched_at":`, d.DispatchedAt)
	if d.RunID != "" {
		w.str(`,"run_id":`, d.RunID)
	}
	if d.ShardIndex != 0 {
		w.int(`,"shard_index":`, int64(d.ShardIndex))
	}
	if d.ShardCount != 0 {
		w.int(`,"shard_count":`, int64(d.ShardCount))
	}
	if d.Protocol != 0 {
		w.int(`,"protocol":`, int64(d.Protocol))
	}
	if d.ReportBatches {
		w.b = append(w.b, `,"report_batches":true`...)
	}
	if d.Republished {
		w.b = append(w.b, `,"republished":true`...)
	}
	if d.Slots != 0 {
		w.int(`,"slots":`, int64(d.Slots))
	}
	w.b = append(w.b, '}')
	return w.b, w.ok
}

// plainWriter appends the members of a JSON object as json.Marshal writes
// them; ok turns false at a value it would write otherwise.
type plainWriter struct {
	b  []byte
	ok bool
}

func (w *plainWriter) int(key string, v int64) {
	w.b = strconv.AppendInt(append(w.b, key...), v, 10)
}

func (w *plainWriter) str(key, s string) {
	if !plainString(s) {
		w.ok = false
		return
	}
	w.b = append(append(append(append(w.b, key...), '"'), s...), '"')
}

func (w *plainWriter) time(key string, t time.Time) {
	w.b = append(append(w.b, key...), '"')
	var err error
	if w.b, err = t.AppendText(w.b); err != nil {
		w.ok = false
	}
	w.b = append(w.b, '"')
}

// plainString reports whether json.Marshal writes s as it is between
// quotes: valid UTF-8 without control characters, quotes, backslashes,
// the characters it escapes for HTML (<, >, &) and U+2028, U+2029.
func plainString(s string) bool {
	ascii := true
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return ascii || (utf8.ValidString(s) && !strings.ContainsRune(s, '\u2028') && !strings.ContainsRune(s, '\u2029'))
}

// plainRaw reports whether json.Marshal writes the raw value v as it is:
// valid JSON without whitespace (its compaction would drop it) or the
// characters it escapes for HTML. An empty v is omitted, and plain.
func plainRaw(v json.RawMessage) bool {
	if len(v) == 0 {
		return true
	}
	for _, c := range v {
		switch c {
		case ' ', '\t', '\n', '\r', '<', '>', '&':
			return false
		}
	}
	return !bytes.Contains(v, []byte("\u2028")) && !bytes.Contains(v, []byte("\u2029")) && json.Valid(v)
}

// decodePlainTriggerEvent reads a trigger event as json.Unmarshal does,
// without its reflection, when data is plain (see plainReader) and holds
// no parents and no cancel order; ok is false for anything else.
func decodePlainTriggerEvent(data []byte) (ev TriggerEvent, ok bool) {
	r := plainReader{data: data}
	r.members(func(key []byte) {
		switch string(key) {
		case "event_id":
			ev.EventID = r.str()
		case "task":
			ev.Task = r.str()
		case "source":
			ev.Source = Source(r.str())
		case "operator":
			ev.Operator = r.str()
		case "payload":
			ev.Payload = r.rawOrNull()
		case "payload_version":
			ev.PayloadVersion = int(r.int(strconv.IntSize))
		case "priority":
			ev.Priority = Priority(r.str())
		case "fired_at":
			ev.FiredAt = r.time()
		case "retry":
			ev.Retry = r.retryOf()
		case "reason":
			ev.Reason = r.str()
		case "idempotency_key":
			ev.IdempotencyKey = r.str()
		case "run_at":
			ev.RunAt = r.time()
		case "delay":
			ev.Delay = r.str()
		case "run_id":
			ev.RunID = r.str()
		default: // cancel, parents, or a key encoding/json matches otherwise
			r.bad = true
		}
	})
	if !r.end() {
		return TriggerEvent{}, false
	}
	return ev, true
}

// rawOrNull is raw, and reads null as encoding/json fills a
// json.RawMessage with it: the four bytes.
func (r *plainReader) rawOrNull() json.RawMessage {
	if bytes.HasPrefix(r.data[r.pos:], []byte("null")) {
		end := r.pos + len("null")
		if end == len(r.data) || bytes.IndexByte([]byte(",} \t\n\r"), r.data[end]) >= 0 {
			r.pos = end
			return json.RawMessage("null")
		}
	}
	return r.raw()
}

// retryOf reads a RetryOf object value.
func (r *plainReader) retryOf() *RetryOf {
	in := plainReader{data: r.data, pos: r.pos}
	var v RetryOf
	in.members(func(key []byte) {
		switch string(key) {
		case "instance_id":
			v.InstanceID = in.int(64)
		case "attempt":
			v.Attempt = int(in.int(strconv.IntSize))
		default:
			in.bad = true
		}
	})
	if in.bad || !in.closed {
		r.bad = true
		return nil
	}
	r.pos = in.pos
	return &v
}

// MarshalTriggerEvent encodes ev as json.Marshal does, byte for byte,
// without its reflection when ev is plain: strings and a payload that
// encode as they are, no parents and no cancel order. Any other ev is
// encoded by json.Marshal itself.
func MarshalTriggerEvent(ev TriggerEvent) ([]byte, error) {
	if b, ok := appendPlainTriggerEvent(make([]byte, 0, 256), &ev); ok {
		return b, nil
	}
	return json.Marshal(ev)
}

func appendPlainTriggerEvent(b []byte, ev *TriggerEvent) ([]byte, bool) {
	if ev.Cancel != nil || len(ev.Parents) > 0 || !plainRaw(ev.Payload) {
		return nil, false
	}
	w := plainWriter{b: append(b, '{'), ok: true}
	w.optStr(`"event_id":`, ev.EventID)
	w.optStr(`"task":`, ev.Task)
	w.optStr(`"source":`, string(ev.Source))
	w.optStr(`"operator":`, ev.Operator)
	if len(ev.Payload) > 0 {
		w.sep()
		w.b = append(append(w.b, `"payload":`...), ev.Payload...)
	}
	if ev.PayloadVersion != 0 {
		w.sep()
		w.int(`"payload_version":`, int64(ev.PayloadVersion))
	}
	w.optStr(`"priority":`, string(ev.Priority))
	if !ev.FiredAt.IsZero() {
		w.sep()
		w.time(`"fired_at":`, ev.FiredAt)
	}
	if ev.Retry != nil {
		w.sep()
		w.int(`"retry":{"instance_id":`, ev.Retry.InstanceID)
		w.int(`,"attempt":`, int64(ev.Retry.Attempt))
		w.b = append(w.b, '}')
	}
	w.optStr(`"reason":`, ev.Reason)
	w.optStr(`"idempotency_key":`, ev.IdempotencyKey)
	if !ev.RunAt.IsZero() {
		w.sep()
		w.time(`"run_at":`, ev.RunAt)
	}
	w.optStr(`"delay":`, ev.Delay)
	w.optStr(`"run_id":`, ev.RunID)
	w.b = append(w.b, '}')
	return w.b, w.ok
}

// sep writes the comma before a member that is not the object's first.
func (w *plainWriter) sep() {
	if w.b[len(w.b)-1] != '{' {
		w.b = append(w.b, ',')
	}
}

// optStr writes a string member that json.Marshal omits when empty.
func (w *plainWriter) optStr(key, s string) {
	if s != "" {
		w.sep()
		w.str(key, s)
	}
}
