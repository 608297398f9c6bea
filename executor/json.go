package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"

	"github.com/ax-scheduler/ax/schemas"
)

// JSON adapts fn, which takes the payload decoded into an In and returns
// an Out, to a [Handler]. Decoding is strict by default: a field of the
// payload that In does not have is an error, and so is a value of the wrong
// type or data after the JSON value; [Lenient] ignores unknown fields
// instead. A payload that does not decode fails the attempt permanently (a
// retry would not fix it) with an error that names the task and what is
// wrong. An absent payload decodes as JSON null: In keeps its zero value.
//
// The Out fn returns is the attempt's output, JSON-encoded into the report
// as [Handler] says; with an error it is dropped. Out is any for a handler
// whose output has no one type; a function returning (any, error) infers
// it, so JSON(fn) reads the same for both.
//
// JSON panics when fn or an option is nil.
func JSON[In, Out any](fn func(ctx context.Context, t *Job, payload In) (Out, error), opts ...JSONOption) Handler {
	if fn == nil {
		panic("executor: JSON with a nil function")
	}
	var cfg jsonConfig
	for _, opt := range opts {
		if opt == nil {
			panic("executor: JSON with a nil option")
		}
		opt(&cfg)
	}
	return HandlerFunc(func(ctx context.Context, t *Job) (any, error) {
		var p In
		if err := decodePayload(t.Payload, &p, cfg.lenient); err != nil {
			return nil, Permanent(fmt.Errorf("task %q: payload does not fit %s: %w", t.Name, reflect.TypeFor[In](), err))
		}
		out, err := fn(ctx, t, p)
		if err != nil {
			return nil, err
		}
		return out, nil
	})
}

// JSONOption changes how [JSON] decodes a payload.
type JSONOption func(*jsonConfig)

type jsonConfig struct {
	lenient bool
}

// Lenient makes [JSON] ignore the payload's fields that its type does not
// have, as [json.Unmarshal] does, instead of failing the attempt: for a
// payload that other programs extend, where a field added upstream must not
// fail the handlers that do not know it yet. A value of the wrong type, or
// data after the JSON value, still fails.
func Lenient() JSONOption { return func(c *jsonConfig) { c.lenient = true } }

// decodePayload decodes one JSON value from data into v, rejecting trailing
// data and, unless lenient, unknown fields. Empty data is JSON null.
func decodePayload(data []byte, v any, lenient bool) error {
	if len(bytes.TrimSpace(data)) == 0 {
		data = []byte("null")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if !lenient {
		dec.DisallowUnknownFields()
	}
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
	if problems := schemas.OutputProblems(data); problems != "" {
		return nil, errors.New("encode output: " + problems)
	}
	return json.RawMessage(bytes.Clone(data)), nil
}
