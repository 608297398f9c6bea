// Package logtest holds the log sink of AX's tests: a buffer a service's
// logger (or a process's output) writes to while the test reads it.
package logtest

import (
	"bytes"
	"encoding/json"
	"io"
	"sync"
)

// Buffer collects what is written to it; its methods are safe for
// concurrent use. The zero value is ready to use.
type Buffer struct {
	// Echo, when set, gets a copy of every write as it comes (os.Stderr:
	// a process's output shows in the test's while it runs).
	Echo io.Writer

	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p, and copies it to Echo when set.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.Echo != nil {
		_, _ = b.Echo.Write(p)
	}
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Lines returns, decoded, the JSON log lines (zerolog's) whose message is
// msg, in the order they were written.
func (b *Buffer) Lines(msg string) []map[string]any {
	var out []map[string]any
	for _, line := range bytes.Split([]byte(b.String()), []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(line, &m) == nil && m["message"] == msg {
			out = append(out, m)
		}
	}
	return out
}
