package schemas

import "encoding/json"

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
	w.b = append(w.b, '}')
	return w.b, w.ok
}
