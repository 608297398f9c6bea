package schemas

import (
	"encoding/json"
)

// MaxTriggerBatch is the most firings one trigger message may carry: a
// batch of more is refused whole. A thousand firings is River's InsertMany
// batch and about 50 KiB of plain firings, well inside the server's max
// payload (1 MiB by default), and one message the dispatcher creates in
// one statement.
const MaxTriggerBatch = 1000

// IsTriggerBatch reports whether data, the body of a trigger message, is a
// batch of firings: a JSON array (its first byte that is not white space is
// '['). A single trigger event is an object.
func IsTriggerBatch(data []byte) bool {
	for _, c := range data {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c == '['
	}
	return false
}

// MarshalTriggerBatch encodes firings as a batch: a JSON array of their
// encodings by [MarshalTriggerEvent].
func MarshalTriggerBatch(firings []TriggerEvent) ([]byte, error) {
	b := make([]byte, 0, 2+len(firings)*64)
	b = append(b, '[')
	for i := range firings {
		if i > 0 {
			b = append(b, ',')
		}
		if plain, ok := appendPlainTriggerEvent(b, &firings[i]); ok {
			b = plain
			continue
		}
		enc, err := json.Marshal(firings[i])
		if err != nil {
			return nil, err
		}
		b = append(b, enc...)
	}
	return append(b, ']'), nil
}
