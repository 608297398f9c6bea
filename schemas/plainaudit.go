package schemas

import (
	"encoding/json"
	"strconv"
)

// MarshalAuditRecord encodes an audit record exactly as json.Marshal does,
// without its reflection for the records the relay publishes: four a
// no-op instance, on the audit's one publishing loop. A record whose
// strings or details json.Marshal would escape or compact goes through
// json.Marshal.
func MarshalAuditRecord(r AuditRecord) ([]byte, error) {
	if b, ok := appendPlainAuditRecord(make([]byte, 0, 256), &r); ok {
		return b, nil
	}
	return json.Marshal(r)
}

func appendPlainAuditRecord(b []byte, r *AuditRecord) ([]byte, bool) {
	if !plainRaw(r.Details) {
		return nil, false
	}
	w := plainWriter{b: b, ok: true}
	w.str(`{"id":`, r.ID)
	w.str(`,"kind":`, string(r.Kind))
	w.str(`,"task":`, r.Task)
	if r.InstanceID != 0 {
		w.int(`,"instance_id":`, r.InstanceID)
	}
	if r.From != "" {
		w.str(`,"from":`, string(r.From))
	}
	if r.To != "" {
		w.str(`,"to":`, string(r.To))
	}
	if r.Attempt != 0 {
		w.int(`,"attempt":`, int64(r.Attempt))
	}
	if r.Action != "" {
		w.str(`,"action":`, string(r.Action))
	}
	w.str(`,"operator":`, r.Operator)
	if r.Reason != "" {
		w.str(`,"reason":`, r.Reason)
	}
	if len(r.Details) > 0 {
		w.b = append(append(w.b, `,"details":`...), r.Details...)
	}
	w.time(`,"at":`, r.At)
	if r.Traceparent != "" {
		w.str(`,"traceparent":`, r.Traceparent)
	}
	if !r.FiredAt.IsZero() {
		w.time(`,"fired_at":`, r.FiredAt)
	}
	if !r.StartedAt.IsZero() {
		w.time(`,"started_at":`, r.StartedAt)
	}
	w.b = append(w.b, '}')
	return w.b, w.ok
}

// states are the instance states, which records' from and to hold.
var states = []State{StateCreated, StateWaiting, StateDispatched, StateRunning, StateRetrying,
	StateSucceeded, StateFailed, StateSkipped, StateCancelled, StateShadow}

// DecodeAuditRecord decodes an audit record as json.Unmarshal does,
// without its reflection for the plain encoding MarshalAuditRecord writes:
// the monitor reads four records a no-op instance. Any other data is
// decoded by json.Unmarshal itself.
func DecodeAuditRecord(data []byte) (AuditRecord, error) {
	return decodePlainOr(data, decodePlainAuditRecord)
}

// decodePlainAuditRecord reads an audit record as json.Unmarshal does when
// data is plain (see plainReader); ok is false for anything else.
func decodePlainAuditRecord(data []byte) (rec AuditRecord, ok bool) {
	r := plainReader{data: data}
	rec = r.auditRecord(&AuditRecord{})
	if !r.end() {
		return AuditRecord{}, false
	}
	return rec, true
}

// auditRecord reads an audit record object from the reader's position.
// Its task, operator and reason are prev's strings where they are equal
// (the records of a batch share them), else copies.
func (r *plainReader) auditRecord(prev *AuditRecord) (rec AuditRecord) {
	r.members(func(key []byte) {
		switch string(key) {
		case "id":
			rec.ID = r.str()
		case "kind":
			rec.Kind = knownString(r, AuditTransition, AuditAction)
		case "task":
			rec.Task = r.strAs(prev.Task)
		case "instance_id":
			rec.InstanceID = r.int(64)
		case "from":
			rec.From = knownString(r, states...)
		case "to":
			rec.To = knownString(r, states...)
		case "attempt":
			rec.Attempt = int(r.int(strconv.IntSize))
		case "action":
			rec.Action = OperatorAction(r.str())
		case "operator":
			rec.Operator = r.strAs(prev.Operator)
		case "reason":
			rec.Reason = r.strAs(prev.Reason)
		case "details":
			rec.Details = r.rawOrNull()
		case "at":
			rec.At = r.time()
		case "traceparent":
			rec.Traceparent = r.str()
		case "fired_at":
			rec.FiredAt = r.time()
		case "started_at":
			rec.StartedAt = r.time()
		default: // a key encoding/json matches otherwise
			r.bad = true
		}
	})
	return rec
}

// knownString reads a string value: one of known is that constant, any
// other value a string of its own.
func knownString[S ~string](r *plainReader, known ...S) S {
	s, ok := r.rawString()
	if !ok {
		r.bad = true
		return ""
	}
	for _, k := range known {
		if string(s) == string(k) {
			return k
		}
	}
	return S(s)
}
