package taskdef

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/ax-scheduler/ax/schemas"
)

// SplitTriggerBatch returns the firings of a batch (see [schemas.IsTriggerBatch]),
// each one's JSON as it stands in data, for [ParseTriggerEvent] to read one
// by one: a bad firing is that firing's problem, not the batch's. The
// batch itself is refused, whole, with a *[schemas.ValidationError], when it is not
// valid JSON, not an array, or holds more than [schemas.MaxTriggerBatch] firings.
// It reads as json.Unmarshal does into a []json.RawMessage (the elements
// trimmed of white space), without its reflection.
func SplitTriggerBatch(data []byte) ([][]byte, error) {
	const what = "batch of firings"
	if !json.Valid(data) {
		_, problem := decodeJSON(data)
		if problem == nil {
			problem = &schemas.Problem{Message: "is not valid JSON"}
		}
		return nil, newValidationError(what, []schemas.Problem{*problem})
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '[' {
		return nil, newValidationError(what, []schemas.Problem{{Field: "", Message: "must be a JSON array of trigger events"}})
	}
	var out [][]byte
	i := skipSpace(data, 1)
	if data[i] == ']' {
		return nil, nil
	}
	for {
		end := valueEnd(data, i)
		out = append(out, data[i:end])
		if len(out) > schemas.MaxTriggerBatch {
			return nil, newValidationError(what, []schemas.Problem{{Field: "", Message: fmt.Sprintf(
				"holds %d firings; a batch holds at most %d (schemas.MaxTriggerBatch): split it into batches of %d or fewer",
				countValues(data), schemas.MaxTriggerBatch, schemas.MaxTriggerBatch)}})
		}
		i = skipSpace(data, end)
		if data[i] == ']' {
			return out, nil
		}
		i = skipSpace(data, i+1) // the comma
	}
}

// countValues counts the elements of the valid JSON array data.
func countValues(data []byte) int {
	n := 0
	i := skipSpace(data, 1)
	if data[i] == ']' {
		return 0
	}
	for {
		n++
		i = skipSpace(data, valueEnd(data, i))
		if data[i] == ']' {
			return n
		}
		i = skipSpace(data, i+1)
	}
}

func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// valueEnd returns the end of the JSON value that begins at data[i], in
// data that is valid JSON.
func valueEnd(data []byte, i int) int {
	depth := 0
	for ; i < len(data); i++ {
		switch data[i] {
		case '"':
			for i++; data[i] != '"'; i++ {
				if data[i] == '\\' {
					i++
				}
			}
			if depth == 0 {
				return i + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i
			}
			depth--
			if depth == 0 {
				return i + 1
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return i
			}
		}
	}
	return i
}
