package executor

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzSplitLine feeds the log shipper's line splitter whatever a handler
// may write: it never panics, the fields it keeps encode to one JSON object
// without AX's own keys, and a truncated line is short, valid JSON that says
// how long the line was.
func FuzzSplitLine(f *testing.F) {
	for _, s := range []string{
		`{"level":"info","message":"hello","n":1}`,
		`{"message":{"nested":true},"task":"x","worker_id":"evil"}`,
		`{"message":"a","message":"b"}`,
		`not json`, `{"a":`, `{"a":1}{"b":2}`, `[1,2]`, `{"a":"\ud800"}`, "{\"m\":\"\xff\"}", ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		msg, fields := splitLine(p)
		if len(msg) > len(p) {
			t.Fatalf("splitLine(%q) made a message longer than the line: %q", p, msg)
		}
		for _, fl := range fields {
			if reservedKey(fl.key) {
				t.Fatalf("splitLine(%q) kept the reserved key %q as a field", p, fl.key)
			}
		}
		if enc := encodeFields(fields); enc != nil {
			var m map[string]json.RawMessage
			if err := json.Unmarshal(enc, &m); err != nil {
				t.Fatalf("encodeFields of splitLine(%q) = %s is not a JSON object: %v", p, enc, err)
			}
		}
		long := append(bytes.Repeat([]byte(" "), maxLogLine), p...)
		short := truncateLine(long)
		var line struct {
			Message string `json:"message"`
			From    int    `json:"truncated_from_bytes"`
		}
		if err := json.Unmarshal(short, &line); err != nil {
			t.Fatalf("truncateLine gave %s, not JSON: %v", short, err)
		}
		if line.From != len(long) || len(short) > maxLogLine/2+64 {
			t.Fatalf("truncateLine of %d bytes gave %d bytes saying %d", len(long), len(short), line.From)
		}
		if !utf8.ValidString(strings.TrimSuffix(line.Message, "…")) && utf8.Valid(long) {
			t.Fatalf("truncateLine cut a valid line inside a character: %q", line.Message)
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
	s := &Service{}
	f.Fuzz(func(t *testing.T, tmpl string, payload []byte) {
		if len(tmpl) > 256 || len(payload) > 4096 {
			return // a task's templates are short; keep each run quick
		}
		key, err := s.renderMutexKey(tmpl, payload)
		if err != nil {
			if key != "" {
				t.Fatalf("renderMutexKey(%q, %q) returned %q with its error %v", tmpl, payload, key, err)
			}
			return
		}
		if err := checkKey(key); err != nil {
			t.Fatalf("renderMutexKey(%q, %q) = %q, which %v", tmpl, payload, key, err)
		}
	})
}
