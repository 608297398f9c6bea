package executor

import (
	"encoding/json"
	"fmt"
	"maps"

	"github.com/ax-scheduler/ax/schemas"
)

// openTask decodes the attempt's encoded payload, and its parents' encoded
// outputs, with the worker's codec, so that the handler sees plaintext. An
// envelope the worker cannot open (no codec, an unknown key) fails the
// attempt permanently: another attempt would not have the key either.
func (s *Service) openTask(t *Job) error {
	var err error
	if t.Payload, err = s.open(t.Payload); err != nil {
		return fmt.Errorf("task %q: payload: %w", t.Name, err)
	}
	if len(t.Parents) == 0 {
		return nil
	}
	parents := maps.Clone(t.Parents)
	for name, p := range parents {
		if p.Output, err = s.open(p.Output); err != nil {
			return fmt.Errorf("task %q: output of parent %q: %w", t.Name, name, err)
		}
		parents[name] = p
	}
	t.Parents = parents
	return nil
}

// open decodes one value with the worker's codec.
func (s *Service) open(v json.RawMessage) (json.RawMessage, error) {
	if s.opts.Codec != nil {
		return s.opts.Codec.Decode(v)
	}
	if env, ok := schemas.ParseEnvelope(v); ok {
		return nil, fmt.Errorf("is encoded (%s) and this worker has no codec to decode it; give the worker the key (executor.Options.Codec, ax executor --codec-key-file)", env)
	}
	return v, nil
}

// sealOutput encodes a handler's output with the worker's codec, if it has one.
func (s *Service) sealOutput(out json.RawMessage) (json.RawMessage, error) {
	if s.opts.Codec == nil || len(out) == 0 {
		return out, nil
	}
	sealed, err := s.opts.Codec.Encode(out)
	if err != nil {
		return nil, fmt.Errorf("encode output with the worker's codec: %w", err)
	}
	return sealed, nil
}
