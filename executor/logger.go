package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"time"
)

type loggerKey struct{}

// discard is the logger of a context that carries none.
var discard = slog.New(slog.DiscardHandler)

// Logger returns the logger the worker put in a handler's context: a
// standard library [*slog.Logger] whose records are the instance's task
// log. It returns a logger that discards everything when ctx carries none
// (a handler called outside a worker, as in a unit test; executortest.Call
// captures them), so its result is always safe to use.
//
// The worker ships each record — its level, message, time and attributes,
// groups as nested objects — to the AX_LOGS stream (ax.log.<instance_id>)
// as one log line (schemas.LogLine), where the API and `ax logs` read them
// while the attempt runs and after its executor is gone. The line names the
// attempt's task, instance, attempt and worker itself, so a top-level
// attribute or group of one of those names, or of level, message or time,
// is left out. Logging never blocks the handler: lines wait in a bounded buffer
// (Options.LogBuffer) that drops its oldest line when full, and are stored
// before the attempt's outcome is reported. Each line is also copied to
// the worker's own log at its level. See docs/operations.md, "Task logs".
//
// Levels map to the line's level names: below [slog.LevelDebug] is
// "trace", then "debug", "info", "warn", and [slog.LevelError] and above
// "error".
func Logger(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(loggerKey{}).(*slog.Logger); ok && l != nil {
		return l
	}
	return discard
}

// withLogger returns a context carrying l for [Logger].
func withLogger(ctx context.Context, l *slog.Logger) context.Context {
	return context.WithValue(ctx, loggerKey{}, l)
}

// lineSink takes the lines of one attempt's handler logger.
type lineSink interface {
	// enabled reports whether a line at level is wanted at all.
	enabled(level slog.Level) bool
	// line takes one line; fields are the record's attributes, encoded,
	// in their order. It must not block on the network.
	line(level slog.Level, at time.Time, msg string, fields []field)
}

// newTaskLogger returns a handler logger whose lines go to sink.
func newTaskLogger(sink lineSink) *slog.Logger { return slog.New(&taskHandler{sink: sink}) }

// levelName names a slog level as a log line does: trace (below
// debug), debug, info, warn or error.
func levelName(l slog.Level) string {
	switch {
	case l < slog.LevelDebug:
		return "trace"
	case l < slog.LevelInfo:
		return "debug"
	case l < slog.LevelWarn:
		return "info"
	case l < slog.LevelError:
		return "warn"
	}
	return "error"
}

// taskHandler is the slog.Handler of a handler's logger: it encodes each
// record's attributes once, into the fields of a log line, and hands the
// line to its sink. It is immutable; With* return copies.
type taskHandler struct {
	sink   lineSink
	top    []field     // attributes outside any group, from WithAttrs
	groups []openGroup // from WithGroup, outermost first
}

// openGroup is a group started by WithGroup, with the attributes added
// inside it since.
type openGroup struct {
	name   string
	fields []field
}

func (h *taskHandler) Enabled(_ context.Context, l slog.Level) bool {
	return h.sink.enabled(l)
}

func (h *taskHandler) WithAttrs(as []slog.Attr) slog.Handler {
	if len(as) == 0 {
		return h
	}
	c := h.clone()
	if n := len(c.groups); n > 0 {
		for _, a := range as {
			c.groups[n-1].fields = appendAttr(c.groups[n-1].fields, a, false)
		}
	} else {
		for _, a := range as {
			c.top = appendAttr(c.top, a, true)
		}
	}
	return c
}

func (h *taskHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := h.clone()
	c.groups = append(c.groups, openGroup{name: name})
	return c
}

// clone copies h so that appending to the copy never writes into h's arrays.
func (h *taskHandler) clone() *taskHandler {
	c := &taskHandler{sink: h.sink, top: slices.Clip(h.top), groups: slices.Clone(h.groups)}
	for i := range c.groups {
		c.groups[i].fields = slices.Clip(c.groups[i].fields)
	}
	return c
}

func (h *taskHandler) Handle(_ context.Context, r slog.Record) error {
	var fields []field
	r.Attrs(func(a slog.Attr) bool {
		fields = appendAttr(fields, a, len(h.groups) == 0)
		return true
	})
	// Close the groups from the innermost out; an empty one is left out.
	for i := len(h.groups) - 1; i >= 0; i-- {
		g := h.groups[i]
		inner := slices.Concat(g.fields, fields)
		fields = nil
		if len(inner) > 0 && (i > 0 || !reservedKey(g.name)) {
			fields = []field{{g.name, encodeFields(inner)}}
		}
	}
	fields = slices.Concat(h.top, fields) // never into h's arrays: Handle runs concurrently
	at := r.Time
	if at.IsZero() {
		at = time.Now()
	}
	h.sink.line(r.Level, at, r.Message, fields)
	return nil
}

// appendAttr appends the field of a, encoded, to fs. An empty attribute is
// left out, as slog's handlers do, and so is a group with no attributes;
// a group without a key is inlined. At the top level, a key that the log
// line has of its own is left out.
func appendAttr(fs []field, a slog.Attr, top bool) []field {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return fs
	}
	if a.Value.Kind() == slog.KindGroup {
		var inner []field
		for _, ga := range a.Value.Group() {
			inner = appendAttr(inner, ga, top && a.Key == "")
		}
		if a.Key == "" {
			return append(fs, inner...)
		}
		if len(inner) == 0 || top && reservedKey(a.Key) {
			return fs
		}
		return append(fs, field{a.Key, encodeFields(inner)})
	}
	if top && reservedKey(a.Key) {
		return fs
	}
	return append(fs, field{a.Key, encodeValue(a.Value)})
}

// encodeValue encodes a resolved, non-group slog value as JSON: numbers
// and booleans as such, a duration as its string ("1.5s"), a time in RFC
// 3339, an error as its message, and any other value as encoding/json
// encodes it, or as fmt prints it when that fails.
func encodeValue(v slog.Value) json.RawMessage {
	switch v.Kind() {
	case slog.KindString:
		return quote(v.String())
	case slog.KindInt64:
		return strconv.AppendInt(nil, v.Int64(), 10)
	case slog.KindUint64:
		return strconv.AppendUint(nil, v.Uint64(), 10)
	case slog.KindFloat64:
		if f := v.Float64(); !math.IsNaN(f) && !math.IsInf(f, 0) {
			return strconv.AppendFloat(nil, f, 'g', -1, 64)
		}
		return quote(v.String())
	case slog.KindBool:
		return strconv.AppendBool(nil, v.Bool())
	case slog.KindDuration:
		return quote(v.Duration().String())
	case slog.KindTime:
		return quote(v.Time().Format(time.RFC3339Nano))
	}
	x := v.Any()
	if err, ok := x.(error); ok {
		return quote(err.Error())
	}
	if data, err := json.Marshal(x); err == nil {
		return data
	}
	return quote(fmt.Sprint(x))
}

// quote encodes s as a JSON string.
func quote(s string) json.RawMessage {
	data, _ := json.Marshal(s)
	return data
}
