package schemas

import (
	"fmt"
	"time"
	"unicode/utf8"
)

// Problems checks the rules of a trigger event that its schema leaves to
// code: delay is a duration Go can hold and not given with run_at, the
// times are not before [EarliestTime], and event_id is not given with
// idempotency_key. [github.com/ax-scheduler/ax/schemas/taskdef.ParseTriggerEvent]
// refuses an event with any.
func (ev *TriggerEvent) Problems() []Problem {
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
