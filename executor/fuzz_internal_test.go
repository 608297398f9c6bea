package executor

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzTaskLogger logs whatever a handler may: the fields of its line
// always encode to one JSON object without the line's own keys at the top,
// and a line too long is cut to a short one that says how long it was.
func FuzzTaskLogger(f *testing.F) {
	for _, s := range [][3]string{
		{"hello", "n", "1"}, {"", "task", "evil"}, {"a", "", "x"}, {"\xff", "k\x00", "\xed\xa0\x80"}, {"m", "message", "b"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, msg, key, value string) {
		var got []capturedLine
		log := newTaskLogger(&captureSink{min: slog.LevelDebug - 8, lines: &got})
		log.With(key, value).WithGroup(key).Info(msg, key, value, slog.Group(value, key, []byte(value)))
		if len(got) != 1 || got[0].msg != msg {
			t.Fatalf("logged %+v, want one line with message %q", got, msg)
		}
		if got[0].fields != "" {
			var m map[string]json.RawMessage
			if err := json.Unmarshal([]byte(got[0].fields), &m); err != nil {
				t.Fatalf("fields %s are not a JSON object: %v", got[0].fields, err)
			}
			for k := range m {
				if reservedKey(k) {
					t.Fatalf("fields %s keep the line's own key %q", got[0].fields, k)
				}
			}
		}
		long := strings.Repeat(msg+" ", maxLogLine/max(len(msg), 1)+1)
		short, fields := fitLine(long, []field{{key, quote(value)}})
		var trunc struct {
			From int `json:"truncated_from_bytes"`
		}
		if err := json.Unmarshal(fields, &trunc); err != nil || trunc.From <= maxLogLine || len(short) > maxLogLine/2+8 {
			t.Fatalf("fitLine of %d bytes gave a message of %d bytes and fields %s", len(long), len(short), fields)
		}
		if !utf8.ValidString(strings.TrimSuffix(short, "…")) && utf8.ValidString(long) {
			t.Fatalf("fitLine cut a valid line inside a character: %q", short)
		}
	})
}

// FuzzRenderMutexKey renders mutex key templates over arbitrary payloads: a
// key it returns is always a valid KV key, whatever the payload holds (dots,
// wildcards, spaces, NUL), and a bad payload is an error, never a panic.
func FuzzRenderMutexKey(f *testing.F) {
	for _, s := range []struct{ tmpl, payload string }{
		{"order-{{.shop_id}}", `{"shop_id":42}`},
		{"order-{{.shop_id}}", `{"shop_id":"a.b"}`},
		{"order-{{.shop_id}}", `{"shop_id":"*"}`},
		{"order-{{.shop_id}}", `{"shop_id":">"}`},
		{"{{.a}}.{{.b}}", `{"a":"","b":"x"}`},
		{"{{range .}}{{.}}{{end}}", `[1,2,3]`},
		{"k-{{.x}}", `{}`},
		{"k-{{.x}}", `not json`},
		{"k-{{.x}}", `{"x":"\u0000"}`},
	} {
		f.Add(s.tmpl, []byte(s.payload))
	}
	m := &mutexLocks{}
	f.Fuzz(func(t *testing.T, tmpl string, payload []byte) {
		if len(tmpl) > 256 || len(payload) > 4096 {
			return // a task's templates are short; keep each run quick
		}
		key, err := m.render(tmpl, payload)
		if err != nil {
			if key != "" {
				t.Fatalf("render(%q, %q) returned %q with its error %v", tmpl, payload, key, err)
			}
			return
		}
		if err := checkKey(key); err != nil {
			t.Fatalf("render(%q, %q) = %q, which %v", tmpl, payload, key, err)
		}
	})
}
