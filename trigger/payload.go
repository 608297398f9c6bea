package trigger

import (
	"bytes"
	"encoding/json"
)

// setPayload keeps the payload of the task's cron trigger i, compacted,
// for its firings; an empty one (or JSON null) is none.
func (t *task) setPayload(i uint8, p []byte) {
	p = bytes.TrimSpace(p)
	if len(p) == 0 || string(p) == "null" {
		return
	}
	var b bytes.Buffer
	if err := json.Compact(&b, p); err != nil {
		// ParseTask accepts only JSON: keep what the store holds.
		b.Reset()
		b.Write(p)
	}
	if t.payloads == nil {
		t.payloads = make(map[uint8][]byte)
	}
	t.payloads[i] = b.Bytes()
}
