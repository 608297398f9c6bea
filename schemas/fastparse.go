package schemas

import (
	"bytes"
	"regexp"
	"strings"
	"unicode/utf8"
)

// The patterns of trigger.schema.json that the fast path checks itself.
var (
	taskNameRE       = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	idempotencyKeyRE = regexp.MustCompile(`^[^\s\x00-\x1f\x7f]+$`)
)

// ParseCanonicalTriggerEvent is the fast path of
// [github.com/ax-scheduler/ax/schemas/taskdef.ParseTriggerEvent], for the
// events AX encodes itself (the trigger service's ticks, the API's firings, the
// dispatcher's retries): data that is exactly json.Marshal's encoding of
// the event it decodes to. That encoding has no unknown or repeated key,
// no null and no present zero value, so the schema's checks come down to
// those of the values below, made here without the generic decode and the
// schema walk. ok is false when data is anything else, or holds parents,
// a cancel order or a delay: the full path then decides, and words the
// problems.
//
// Both the decode and the encoding it is compared with are made without
// reflection (decodePlainTriggerEvent, appendPlainTriggerEvent: they read
// and write as encoding/json does, which their tests check).
func ParseCanonicalTriggerEvent(data []byte) (ev TriggerEvent, ok bool) {
	if ev, ok = decodePlainTriggerEvent(data); !ok || ev.Delay != "" {
		return TriggerEvent{}, false
	}
	var buf [512]byte
	if enc, ok := appendPlainTriggerEvent(buf[:0], &ev); !ok || !bytes.Equal(enc, data) {
		return TriggerEvent{}, false
	}
	// The plain decode takes strings without escapes or control
	// characters, in valid UTF-8: only the payload may hold text
	// PostgreSQL cannot store.
	if len(TextProblems(ev.Payload)) > 0 || !canonicalFieldsValid(&ev) || len(ev.Problems()) > 0 {
		return TriggerEvent{}, false
	}
	return ev, true
}

// noSpace is the schema's pattern ^\S+$ (RE2's \s: tab, newline, form
// feed, carriage return and space) without the regexp machine.
func noSpace(s string) bool {
	return s != "" && !strings.ContainsAny(s, "\t\n\f\r ")
}

// canonicalFieldsValid checks ev's fields against trigger.schema.json,
// where a zero value is an absent field.
func canonicalFieldsValid(ev *TriggerEvent) bool {
	maxRunes := func(s string, n int) bool { return utf8.RuneCountInString(s) <= n }
	switch {
	case ev.EventID != "" && (!maxRunes(ev.EventID, 200) || !noSpace(ev.EventID)),
		ev.Task != "" && !taskNameRE.MatchString(ev.Task),
		!maxRunes(ev.Operator, 256),
		ev.PayloadVersion < 0 || ev.PayloadVersion > 2147483647,
		!maxRunes(ev.Reason, 1024),
		ev.IdempotencyKey != "" && (!maxRunes(ev.IdempotencyKey, 195) || !idempotencyKeyRE.MatchString(ev.IdempotencyKey)),
		ev.RunID != "" && (!maxRunes(ev.RunID, 128) || !noSpace(ev.RunID)),
		ev.Retry != nil && (ev.Retry.InstanceID < 1 || ev.Retry.Attempt < 1 || ev.Retry.Attempt > 2147483647):
		return false
	}
	switch ev.Source {
	case "", SourceEvent, SourceManual, SourceRetry, SourceCron, SourceChain:
	default:
		return false
	}
	switch ev.Priority {
	case "", PriorityUrgent, PriorityNormal, PriorityLow:
	default:
		return false
	}
	return true
}
