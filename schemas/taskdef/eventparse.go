package taskdef

import (
	"bytes"
	"encoding/json"
	"errors"
	"time"

	"github.com/ax-scheduler/ax/schemas"
)

// ParseTriggerEvent reads a trigger event (JSON) strictly: it must satisfy
// trigger.schema.json, and a field the event does not know is rejected by
// name. It also checks what the schema leaves to code: delay is a duration
// Go can hold, and run_at and delay, like event_id and idempotency_key, are
// alternatives (a golden message sets every field, so the schema cannot
// forbid the pairs), and no string, the payload's included, holds text
// PostgreSQL cannot store (see [schemas.TextProblems]). Every field is optional, so
// an empty body and "{}" are valid events. Any rejection is a
// *[schemas.ValidationError]. It is safe for concurrent use. The events AX encodes
// itself take a fast path that reads them the same (see
// ParseCanonicalTriggerEvent).
func ParseTriggerEvent(data []byte) (schemas.TriggerEvent, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return schemas.TriggerEvent{}, nil
	}
	if ev, ok := schemas.ParseCanonicalTriggerEvent(data); ok {
		return ev, nil
	}
	return parseTriggerEventBySchema(data)
}

// parseTriggerEventBySchema is [ParseTriggerEvent]'s full path, for any
// non-empty data: the generic decode, the schema, then the typed decode.
func parseTriggerEventBySchema(data []byte) (schemas.TriggerEvent, error) {
	const what = "trigger event"
	doc, problem := decodeJSON(data)
	if problem != nil {
		return schemas.TriggerEvent{}, newValidationError(what, []schemas.Problem{*problem})
	}
	if problems := schemas.TextProblems(data); len(problems) > 0 {
		// PostgreSQL would refuse the instance; Go would alter the text.
		return schemas.TriggerEvent{}, newValidationError(what, problems)
	}
	s, err := compiledSchemas()
	if err != nil {
		return schemas.TriggerEvent{}, err
	}
	if err := s.trigger.Validate(doc); err != nil {
		return schemas.TriggerEvent{}, newValidationError(what, s.problems(err, doc, ""))
	}
	var ev schemas.TriggerEvent
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ev); err != nil {
		var perr *time.ParseError
		if errors.As(err, &perr) {
			// The schema's date-time accepts a few RFC 3339 forms Go does not
			// (a leap second, a lower-case 't').
			return schemas.TriggerEvent{}, newValidationError(what, timeProblems(doc, "fired_at", "run_at"))
		}
		return schemas.TriggerEvent{}, newValidationError(what, []schemas.Problem{decodeProblem(err)})
	}
	if problems := ev.Problems(); len(problems) > 0 {
		return schemas.TriggerEvent{}, newValidationError(what, problems)
	}
	if len(ev.Parents) == 0 {
		// An empty object is no parents, as its encoding (omitted) says.
		ev.Parents = nil
	}
	return ev, nil
}

// timeProblems names the fields of doc, among names, whose value Go cannot
// read as an RFC 3339 time.
func timeProblems(doc any, names ...string) []schemas.Problem {
	obj, _ := doc.(map[string]any)
	var out []schemas.Problem
	for _, name := range names {
		if v, ok := obj[name].(string); ok {
			if _, err := time.Parse(time.RFC3339, v); err != nil {
				out = append(out, schemas.Problem{Field: name, Message: "must be an RFC 3339 time such as 2024-05-01T12:00:00Z"})
			}
		}
	}
	if len(out) == 0 {
		out = append(out, schemas.Problem{Field: "", Message: "holds a time that is not RFC 3339; write times such as 2024-05-01T12:00:00Z"})
	}
	return out
}
