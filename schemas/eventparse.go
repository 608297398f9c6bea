package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// ParseTriggerEvent reads a trigger event (JSON) strictly: it must satisfy
// trigger.schema.json, and a field the event does not know is rejected by
// name. It also checks what the schema leaves to code: delay is a duration
// Go can hold, and run_at and delay, like event_id and idempotency_key, are
// alternatives (a golden message sets every field, so the schema cannot
// forbid the pairs), and no string, the payload's included, holds text
// PostgreSQL cannot store (see [TextProblems]). Every field is optional, so
// an empty body and "{}" are valid events. Any rejection is a
// *[ValidationError]. It is safe for concurrent use. The events AX encodes
// itself take a fast path that reads them the same (see
// parseCanonicalTriggerEvent).
func ParseTriggerEvent(data []byte) (TriggerEvent, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return TriggerEvent{}, nil
	}
	if ev, ok := parseCanonicalTriggerEvent(data); ok {
		return ev, nil
	}
	return parseTriggerEventBySchema(data)
}

// parseTriggerEventBySchema is [ParseTriggerEvent]'s full path, for any
// non-empty data: the generic decode, the schema, then the typed decode.
func parseTriggerEventBySchema(data []byte) (TriggerEvent, error) {
	const what = "trigger event"
	doc, problem := decodeJSON(data)
	if problem != nil {
		return TriggerEvent{}, newValidationError(what, []Problem{*problem})
	}
	if problems := TextProblems(data); len(problems) > 0 {
		// PostgreSQL would refuse the instance; Go would alter the text.
		return TriggerEvent{}, newValidationError(what, problems)
	}
	s, err := compiledSchemas()
	if err != nil {
		return TriggerEvent{}, err
	}
	if err := s.trigger.Validate(doc); err != nil {
		return TriggerEvent{}, newValidationError(what, s.problems(err, doc, ""))
	}
	var ev TriggerEvent
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ev); err != nil {
		var perr *time.ParseError
		if errors.As(err, &perr) {
			// The schema's date-time accepts a few RFC 3339 forms Go does not
			// (a leap second, a lower-case 't').
			return TriggerEvent{}, newValidationError(what, timeProblems(doc, "fired_at", "run_at"))
		}
		return TriggerEvent{}, newValidationError(what, []Problem{decodeProblem(err)})
	}
	if problems := ev.problems(); len(problems) > 0 {
		return TriggerEvent{}, newValidationError(what, problems)
	}
	if len(ev.Parents) == 0 {
		// An empty object is no parents, as its encoding (omitted) says.
		ev.Parents = nil
	}
	return ev, nil
}

// problems checks the rules of a trigger event that its schema leaves to code.
func (ev *TriggerEvent) problems() []Problem {
	var out []Problem
	if ev.Delay != "" {
		if _, err := time.ParseDuration(ev.Delay); err != nil {
			out = append(out, Problem{"delay", "must be a duration Go can hold, such as 90s, 15m or 2h (at most about 290 years)"})
		}
		if !ev.RunAt.IsZero() {
			out = append(out, Problem{"delay", "must be left out when run_at is set: give run_at (a time) or delay (a duration), not both"})
		}
	}
	out = append(out, ev.timeBoundProblems()...)
	if ev.IdempotencyKey != "" && ev.EventID != "" {
		out = append(out, Problem{"event_id", "must be left out when idempotency_key is set: the firing's event id is then " +
			IdempotencyEventIDPrefix + "<idempotency_key>; give one of them, not both"})
	}
	return out
}

// timeProblems names the fields of doc, among names, whose value Go cannot
// read as an RFC 3339 time.
func timeProblems(doc any, names ...string) []Problem {
	obj, _ := doc.(map[string]any)
	var out []Problem
	for _, name := range names {
		if v, ok := obj[name].(string); ok {
			if _, err := time.Parse(time.RFC3339, v); err != nil {
				out = append(out, Problem{name, "must be an RFC 3339 time such as 2024-05-01T12:00:00Z"})
			}
		}
	}
	if len(out) == 0 {
		out = append(out, Problem{"", "holds a time that is not RFC 3339; write times such as 2024-05-01T12:00:00Z"})
	}
	return out
}

// MaxEventIDLength is the most characters an event id may have
// (trigger.schema.json's event_id maxLength).
const MaxEventIDLength = 200

// EventIDProblem says what is wrong with id as an event id by the rules
// trigger.schema.json sets for a body's event_id — 1 to
// [MaxEventIDLength] characters, no spaces, tabs or line breaks — or ""
// when nothing is. It is for an id taken from elsewhere than a body the
// schema checks: a message's Nats-Msg-Id header.
func EventIDProblem(id string) string {
	switch {
	case id == "":
		return "is empty"
	case utf8.RuneCountInString(id) > MaxEventIDLength:
		return fmt.Sprintf("has %d characters, more than %d", utf8.RuneCountInString(id), MaxEventIDLength)
	case !noSpace(id):
		return "must not contain spaces, tabs or line breaks, since it becomes a message id and part of a NATS subject"
	}
	return ""
}
