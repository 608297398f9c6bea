package schemas

import (
	"encoding/json"
	"testing"
	"time"
)

var auditSamples = []AuditRecord{
	{ID: "t-41", Kind: AuditTransition, Task: "noop", InstanceID: 7, To: StateCreated, Attempt: 1, Operator: "event",
		At: time.Date(2026, 12, 3, 6, 40, 1, 123456789, time.UTC)},
	{ID: "t-42", Kind: AuditTransition, Task: "noop", InstanceID: 7, From: StateRunning, To: StateSucceeded, Attempt: 1,
		Operator: "worker:bench", Reason: "ok", At: time.Date(2026, 12, 3, 6, 40, 1, 0, time.FixedZone("", 3600))},
	{ID: "o-3", Kind: AuditAction, Task: "etl", Action: ActionApply, Operator: "alice", Details: json.RawMessage(`{"version":3}`),
		At: time.Date(2026, 12, 3, 6, 40, 1, 5, time.UTC)},
	{ID: "o-4", Kind: AuditAction, Task: "etl", Action: ActionFire, Operator: "", At: time.Time{}},
}

func TestMarshalAuditRecordWritesAsMarshalDoes(t *testing.T) {
	t.Parallel()
	for _, r := range auditSamples {
		if !writesAsMarshal(t, r, MarshalAuditRecord, appendPlainAuditRecord) {
			t.Errorf("%+v took json.Marshal", r)
		}
	}
	base := auditSamples[1]
	for _, s := range []string{"a<b", "a>b", "a&b", `a"b`, `a\b`, "a\nb", "a\x00b", "a\x7fb", "\xff", "a\u2028b", "é"} {
		for _, set := range []func(*AuditRecord){
			func(r *AuditRecord) { r.ID = s }, func(r *AuditRecord) { r.Kind = AuditKind(s) },
			func(r *AuditRecord) { r.Task = s }, func(r *AuditRecord) { r.From = State(s) },
			func(r *AuditRecord) { r.To = State(s) }, func(r *AuditRecord) { r.Action = OperatorAction(s) },
			func(r *AuditRecord) { r.Operator = s }, func(r *AuditRecord) { r.Reason = s },
		} {
			r := base
			set(&r)
			writesAsMarshal(t, r, MarshalAuditRecord, appendPlainAuditRecord)
		}
	}
	for _, d := range []string{`{ }`, "[1,\n2]", `{"a":"<"}`, `"&"`, `{"a":`, `null`} {
		r := auditSamples[2]
		r.Details = json.RawMessage(d)
		writesAsMarshal(t, r, MarshalAuditRecord, appendPlainAuditRecord)
	}
	r := base
	r.At = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	writesAsMarshal(t, r, MarshalAuditRecord, appendPlainAuditRecord)
}

// FuzzMarshalAuditRecord checks that MarshalAuditRecord writes any record
// of fuzzed strings, numbers and details as json.Marshal does.
func FuzzMarshalAuditRecord(f *testing.F) {
	f.Add("t-1", "transition", "noop", int64(7), "RUNNING", "SUCCEEDED", 1, "", "worker:w", "ok", []byte(nil), int64(1764635400123456789))
	f.Add("o-2", "action", "é", int64(0), "", "", 0, "apply", "a<b", "", []byte(`{"version": 3}`), int64(-1))
	f.Fuzz(func(t *testing.T, id, kind, task string, instance int64, from, to string, attempt int, action, operator, reason string,
		details []byte, at int64) {
		r := AuditRecord{ID: id, Kind: AuditKind(kind), Task: task, InstanceID: instance, From: State(from), To: State(to),
			Attempt: attempt, Action: OperatorAction(action), Operator: operator, Reason: reason, Details: details,
			At: time.Unix(0, at).In(time.FixedZone("", attempt%86400))}
		writesAsMarshal(t, r, MarshalAuditRecord, appendPlainAuditRecord)
	})
}
