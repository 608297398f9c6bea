package api

import (
	"context"

	"github.com/ax-scheduler/ax/schemas"
)

// redact hides, in place, the fields that the tasks' redact paths name in
// the payloads and outputs of ins, and in the outputs of their parents
// (with the parent task's paths). Every answer that carries a payload or an
// output goes through it, whoever asks: no token sees a redacted field
// through the API (docs/security.md). An error leaves nothing to answer.
func (s *Service) redact(ctx context.Context, ins []schemas.Instance) error {
	if len(ins) == 0 {
		return nil
	}
	seen := make(map[string]bool)
	var names []string
	add := func(name string) {
		if !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	for i := range ins {
		add(ins[i].Task)
		for name := range ins[i].Parents {
			add(name)
		}
	}
	stored, err := s.opts.Store.RedactPaths(ctx, names)
	if err != nil {
		return err
	}
	if len(stored) == 0 {
		return nil
	}
	paths := make(map[string][]schemas.RedactPath, len(stored))
	for name, ps := range stored {
		paths[name] = schemas.RedactPaths(ps)
	}
	for i := range ins {
		in := &ins[i]
		if p := paths[in.Task]; len(p) > 0 {
			in.Payload = schemas.Redact(in.Payload, p)
			in.Output = schemas.Redact(in.Output, p)
		}
		for name, pr := range in.Parents {
			if p := paths[name]; len(p) > 0 && len(pr.Output) > 0 {
				pr.Output = schemas.Redact(pr.Output, p)
				in.Parents[name] = pr
			}
		}
	}
	return nil
}

// redactOne is [Service.redact] of one instance.
func (s *Service) redactOne(ctx context.Context, in *schemas.Instance) error {
	ins := []schemas.Instance{*in}
	if err := s.redact(ctx, ins); err != nil {
		return err
	}
	*in = ins[0]
	return nil
}
