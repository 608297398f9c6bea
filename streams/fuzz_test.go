package streams

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
)

// FuzzParseLeaseKey holds ParseLeaseKey to LeaseKey: a key it accepts is the
// one key LeaseKey makes for those numbers, so an expiry of any other key
// (an executor may write any key it likes) cannot fence out a live attempt.
func FuzzParseLeaseKey(f *testing.F) {
	for _, s := range []string{"1.1", "42.3", "01.1", "+1.1", "-1.1", "1.-1", "0.1", "1.0", "1.1.1", "1", ".", "9223372036854775807.1", "9223372036854775808.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		id, attempt, ok := ParseLeaseKey(key)
		if !ok {
			if id != 0 || attempt != 0 {
				t.Fatalf("ParseLeaseKey(%q) = %d, %d, false: a refused key gives zeros", key, id, attempt)
			}
			return
		}
		if id <= 0 || attempt <= 0 {
			t.Fatalf("ParseLeaseKey(%q) = %d, %d: not a positive instance and attempt", key, id, attempt)
		}
		if back := LeaseKey(id, attempt); back != key {
			t.Fatalf("ParseLeaseKey(%q) = %d, %d, but LeaseKey gives %q for them", key, id, attempt, back)
		}
	})
}

// FuzzDecode decodes arbitrary bodies as the messages the services consume:
// no body may panic a decoder, and what decodes survives a round trip, so a
// message relayed or re-published means what it meant.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"instance_id":6,"attempt":1,"worker_id":"w","kind":"succeeded","output":{"x":1}}`,
		`{"instance_id":1,"task":"t","attempt":2,"payload":{"a":[1,2]},"timeout":"30s"}`,
		`{"task":"t","event_id":"e","source":"event","payload":null}`,
		`{"id":"t-42","kind":"transition","task":"noop","instance_id":7,"from":"RUNNING","to":"SUCCEEDED","attempt":1,"operator":"worker:w","at":"2026-12-03T06:40:01.123456789Z"}`,
		`{"id":"o-3","kind":"action","task":"etl","action":"apply","operator":"alice","details":{"version":3},"at":"2026-12-03T06:40:01Z"}`,
		`{"output":{"&":0}}`, `{"instance_id":"6"}`, `[]`, `null`, `{"kind":1e400}`, "\x00", `{"output":{"a":"\ud800"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		roundTrip[schemas.Report](t, body)
		roundTrip[schemas.Dispatch](t, body)
		roundTrip[schemas.TriggerEvent](t, body)
		roundTrip[schemas.AuditRecord](t, body)
	})
}

// TestDecodeAuditRecordWithoutReflection: Decode reads an audit record as
// the relay publishes it by schemas.DecodeAuditRecord, in the allocations
// of its strings, not json.Unmarshal's reflection (12 allocations), and
// names the subject when the body is not a record.
func TestDecodeAuditRecordWithoutReflection(t *testing.T) {
	rec := schemas.AuditRecord{ID: "t-42", Kind: schemas.AuditTransition, Task: "noop", InstanceID: 7, From: schemas.StateRunning,
		To: schemas.StateSucceeded, Attempt: 1, Operator: "worker:w", At: time.Date(2026, 12, 3, 6, 40, 1, 123456789, time.UTC)}
	m, err := NewMsg("ax.audit.noop", "", rec)
	if err != nil {
		t.Fatal(err)
	}
	var got schemas.AuditRecord
	// The id, the task and the operator.
	if n := testing.AllocsPerRun(100, func() { got, err = Decode[schemas.AuditRecord](m.Subject, m.Data) }); err != nil || n > 3 {
		t.Errorf("Decode: %v allocations, %v; want at most 3", n, err)
	}
	if !reflect.DeepEqual(got, rec) {
		t.Errorf("Decode = %+v, want %+v", got, rec)
	}
	if _, err := Decode[schemas.AuditRecord]("ax.audit.noop", []byte(`{"id":1}`)); err == nil || !strings.Contains(err.Error(), "ax.audit.noop") {
		t.Errorf("Decode of a bad record: %v, want an error naming the subject", err)
	}
}

// roundTrip decodes body as a T and, when it decodes, checks that encoding
// is a fixed point: the message encoded, decoded and encoded again is the
// same bytes (raw JSON fields may be re-spelled once, as in "\u0026" for "&").
func roundTrip[T any](t *testing.T, body []byte) {
	t.Helper()
	v, err := Decode[T]("ax.fuzz", body)
	if err != nil {
		return
	}
	once, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("%T decoded from %q does not encode: %v", v, body, err)
	}
	w, err := Decode[T]("ax.fuzz", once)
	if err != nil {
		t.Fatalf("%T re-encoded as %s does not decode: %v", v, once, err)
	}
	twice, err := json.Marshal(w)
	if err != nil {
		t.Fatalf("%T decoded from %s does not encode: %v", w, once, err)
	}
	if !bytes.Equal(once, twice) {
		t.Fatalf("%T changed in a round trip:\n%s\n%s", v, once, twice)
	}
}
