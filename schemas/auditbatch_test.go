package schemas

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestAuditBatchWritesAsMarshalDoes: AppendAuditBatch writes what
// json.Marshal writes for the batch, plain records or not, and
// DecodeAuditMessage reads the records back.
func TestAuditBatchWritesAsMarshalDoes(t *testing.T) {
	t.Parallel()
	odd := auditSamples[1]
	odd.Reason = "a<b"
	for _, recs := range [][]AuditRecord{auditSamples, auditSamples[:1], {odd, auditSamples[0]}} {
		got, err := AppendAuditBatch([]byte("x"), "noop", recs)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(AuditBatch{Version: AuditBatchVersion, Task: "noop", Records: recs})
		if !bytes.Equal(got[1:], want) || got[0] != 'x' {
			t.Errorf("AppendAuditBatch wrote\n%s\njson.Marshal\n%s", got, want)
		}
		back, err := DecodeAuditMessage(got[1:])
		if err != nil {
			t.Fatal(err)
		}
		var viaJSON AuditBatch
		if err := json.Unmarshal(want, &viaJSON); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, viaJSON.Records) {
			t.Errorf("DecodeAuditMessage read %+v, json.Unmarshal %+v", back, viaJSON.Records)
		}
	}
}

// TestDecodeAuditMessageReadsBothVersions: a version 1 message (one
// record, no "v") and a version 2 batch read as their records, plain or
// indented; an unknown version is refused with the versions it knows.
func TestDecodeAuditMessageReadsBothVersions(t *testing.T) {
	t.Parallel()
	v1, _ := MarshalAuditRecord(auditSamples[1])
	v1indented, _ := json.MarshalIndent(auditSamples[0], "", "  ")
	v2, _ := AppendAuditBatch(nil, "noop", auditSamples[:2])
	v2indented, _ := json.MarshalIndent(AuditBatch{Version: 2, Task: "noop", Records: auditSamples[:2]}, "", " ")
	for _, c := range []struct {
		data []byte
		want []AuditRecord
	}{
		{v1, auditSamples[1:2]}, {v1indented, auditSamples[0:1]}, {v2, auditSamples[:2]}, {v2indented, auditSamples[:2]},
	} {
		got, err := DecodeAuditMessage(c.data)
		if err != nil {
			t.Fatalf("%s: %v", c.data, err)
		}
		for i := range got { // times compare by instant
			if !got[i].At.Equal(c.want[i].At) {
				t.Errorf("%s: record %d at %v, want %v", c.data, i, got[i].At, c.want[i].At)
			}
			got[i].At = c.want[i].At
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: read %+v, want %+v", c.data, got, c.want)
		}
	}
	for _, bad := range []string{`{"v":3,"task":"a","records":[]}`, `{"v":"2","records":[]}`, `{"task":"a","v":1}`} {
		if _, err := DecodeAuditMessage([]byte(bad)); err == nil || !strings.Contains(err.Error(), "knows versions 1") {
			t.Errorf("DecodeAuditMessage(%s) = %v, want the versions it knows", bad, err)
		}
	}
	if _, err := DecodeAuditMessage([]byte(`{"v":2,"records":[`)); err == nil {
		t.Error("a cut batch was read")
	}
}

// FuzzDecodeAuditMessage checks that the plain batch path reads any bytes
// it takes as json.Unmarshal reads the batch.
func FuzzDecodeAuditMessage(f *testing.F) {
	v2, _ := AppendAuditBatch(nil, "noop", auditSamples)
	f.Add(v2)
	f.Add([]byte(`{"v":2,"task":"a","records":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, ok := decodePlainAuditBatch(data)
		if !ok {
			return
		}
		var want AuditBatch
		if err := json.Unmarshal(data, &want); err != nil || want.Version != AuditBatchVersion || !reflect.DeepEqual(recs, want.Records) {
			t.Errorf("plain read %q as %+v; json.Unmarshal %+v, %v", data, recs, want, err)
		}
	})
}
