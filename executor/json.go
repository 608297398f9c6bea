package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
)

// JSON adapts fn, which takes the payload decoded into a T, to a [Handler].
// Decoding is strict: a field of the payload that T does not have is an
// error, and so is a value of the wrong type. A payload that does not decode
// fails the attempt permanently (a retry would not fix it) with an error that
// names the task and what is wrong. An absent payload decodes as JSON null:
// T keeps its zero value.
//
// JSON panics when fn is nil.
func JSON[T any](fn func(ctx context.Context, t *Task, payload T) (any, error)) Handler {
	if fn == nil {
		panic("executor: JSON with a nil function")
	}
	return HandlerFunc(func(ctx context.Context, t *Task) (any, error) {
		var p T
		if err := decodeStrict(t.Payload, &p); err != nil {
			return nil, Permanent(fmt.Errorf("task %q: payload does not fit %s: %w", t.Name, reflect.TypeFor[T](), err))
		}
		return fn(ctx, t, p)
	})
}

// decodeStrict decodes one JSON value from data into v, rejecting unknown
// fields and trailing data.
func decodeStrict(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		data = []byte("null")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("unexpected data after the JSON value")
	}
	return nil
}

// encodeOutput turns a handler's output into the report's JSON. nil (and
// JSON null) means no output.
func encodeOutput(out any) (json.RawMessage, error) {
	var data []byte
	switch v := out.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		if len(v) == 0 {
			return nil, nil
		}
		if !json.Valid(v) {
			return nil, errors.New("encode output: a json.RawMessage that is not valid JSON")
		}
		data = v
	case []byte:
		if len(v) == 0 {
			return nil, nil
		}
		if json.Valid(v) {
			data = v
		}
	}
	if data == nil {
		var err error
		if data, err = json.Marshal(out); err != nil {
			return nil, fmt.Errorf("encode output: %w", err)
		}
	}
	data = bytes.TrimSpace(data)
	if string(data) == "null" {
		return nil, nil
	}
	return json.RawMessage(bytes.Clone(data)), nil
}
