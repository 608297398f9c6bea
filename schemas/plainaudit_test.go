package schemas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"
)

var auditSamples = []AuditRecord{
	{ID: "t-41", Kind: AuditTransition, Task: "noop", InstanceID: 7, To: StateCreated, Attempt: 1, Operator: "event",
		At: time.Date(2026, 12, 3, 6, 40, 1, 123456789, time.UTC)},
	{ID: "t-42", Kind: AuditTransition, Task: "noop", InstanceID: 7, From: StateRunning, To: StateSucceeded, Attempt: 1,
		Operator: "worker:bench", Reason: "ok", At: time.Date(2026, 12, 3, 6, 40, 1, 0, time.FixedZone("", 3600)),
		Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		StartedAt:   time.Date(2026, 12, 3, 6, 40, 0, 987654321, time.UTC)},
	{ID: "t-43", Kind: AuditTransition, Task: "noop", InstanceID: 8, From: StateDispatched, To: StateRunning, Attempt: 1,
		Operator: "worker:bench", At: time.Date(2026, 12, 3, 6, 40, 2, 0, time.UTC),
		FiredAt: time.Date(2026, 12, 3, 6, 40, 0, 0, time.FixedZone("", -7200)), StartedAt: time.Date(2026, 12, 3, 6, 40, 1, 5, time.UTC)},
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
			func(r *AuditRecord) { r.Traceparent = s },
		} {
			r := base
			set(&r)
			writesAsMarshal(t, r, MarshalAuditRecord, appendPlainAuditRecord)
		}
	}
	for _, d := range []string{`{ }`, "[1,\n2]", `{"a":"<"}`, `"&"`, `{"a":`, `null`} {
		r := auditSamples[3]
		r.Details = json.RawMessage(d)
		writesAsMarshal(t, r, MarshalAuditRecord, appendPlainAuditRecord)
	}
	r := base
	r.At = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	writesAsMarshal(t, r, MarshalAuditRecord, appendPlainAuditRecord)
}

// FuzzMarshalAuditRecord checks that MarshalAuditRecord writes any record
// of fuzzed strings, numbers and details as json.Marshal does, and that the
// plain path reads it back as json.Unmarshal does.
func FuzzMarshalAuditRecord(f *testing.F) {
	f.Add("t-1", "transition", "noop", int64(7), "RUNNING", "SUCCEEDED", 1, "", "worker:w", "ok", []byte(nil), int64(1764635400123456789))
	f.Add("o-2", "action", "é", int64(0), "", "", 0, "apply", "a<b", "", []byte(`{"version": 3}`), int64(-1))
	f.Fuzz(func(t *testing.T, id, kind, task string, instance int64, from, to string, attempt int, action, operator, reason string,
		details []byte, at int64) {
		r := AuditRecord{ID: id, Kind: AuditKind(kind), Task: task, InstanceID: instance, From: State(from), To: State(to),
			Attempt: attempt, Action: OperatorAction(action), Operator: operator, Reason: reason, Details: details,
			At: time.Unix(0, at).In(time.FixedZone("", attempt%86400))}
		writesAsMarshal(t, r, MarshalAuditRecord, appendPlainAuditRecord)
		if data, err := json.Marshal(r); err == nil {
			plainReadsAsUnmarshal(t, data, decodePlainAuditRecord)
		}
	})
}

// auditCorpus is plain encodings and what json.Unmarshal reads otherwise
// or refuses.
func auditCorpus() [][]byte {
	var corpus [][]byte
	for _, r := range auditSamples {
		data, _ := json.Marshal(r)
		corpus = append(corpus, data)
		for _, cut := range []int{0, 1, len(data) / 3, len(data) / 2, len(data) - 1} {
			corpus = append(corpus, data[:cut])
		}
		corpus = append(corpus, append(bytes.Clone(data), '}'), append([]byte(" \n"), data...))
		indented, _ := json.MarshalIndent(r, "", "  ")
		corpus = append(corpus, indented)
	}
	for _, s := range []string{
		`{}`, `[]`, `null`, `{"id":null}`, `{"details":null}`, `{"details":nul}`, `{"details":null }`, `{"details": null}`,
		`{"details":{"a":[1,"}"]}}`, `{"details":"x"}`, `{"details":{"a":1}`, `{"ID":"t-1"}`, `{"id":"t-1","id":"t-2"}`,
		`{"id":"t-\u0031"}`, `{"task":"é"}`, `{"task":"a<b"}`, `{"instance_id":01}`, `{"instance_id":1.5}`,
		`{"instance_id":9223372036854775808}`, `{"attempt":-1}`, `{"attempt":"1"}`, `{"kind":"transition"}`, `{"kind":"other"}`,
		`{"from":"RUNNING","to":"SUCCEEDED"}`, `{"to":"running"}`, `{"to":""}`, `{"at":"2026-12-03T06:40:01Z"}`,
		`{"at":"2026-12-03T06:40:01.000+01:00"}`, `{"at":"2026-12-03 06:40:01"}`, `{"at":null}`, `{"extra":1}`,
	} {
		corpus = append(corpus, []byte(s))
	}
	return corpus
}

func TestDecodePlainAuditRecordReadsAsUnmarshalDoes(t *testing.T) {
	t.Parallel()
	for _, r := range auditSamples {
		data, err := MarshalAuditRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		if !plainReadsAsUnmarshal(t, data, decodePlainAuditRecord) {
			t.Errorf("%s took json.Unmarshal", data)
		}
	}
	for _, data := range auditCorpus() {
		plainReadsAsUnmarshal(t, data, decodePlainAuditRecord)
	}
	for _, s := range []string{`{"id":"t-\u0031"}`, `{"ID":"t-1"}`, `{"at":null}`, `{"extra":1}`} {
		if plainReadsAsUnmarshal(t, []byte(s), decodePlainAuditRecord) {
			t.Errorf("%s took the plain path", s)
		}
	}
	// DecodeAuditRecord reads what json.Unmarshal reads, plain or not, and
	// refuses what it refuses.
	for _, data := range auditCorpus() {
		got, err := DecodeAuditRecord(data)
		var want AuditRecord
		wantErr := json.Unmarshal(data, &want)
		if (err != nil) != (wantErr != nil) || err == nil && !reflect.DeepEqual(got, want) {
			t.Errorf("DecodeAuditRecord(%q) = %+v, %v; json.Unmarshal %+v, %v", data, got, err, want, wantErr)
		}
	}
}

// FuzzDecodePlainAuditRecord checks that the plain path reads any bytes it
// takes as json.Unmarshal does.
func FuzzDecodePlainAuditRecord(f *testing.F) {
	for _, in := range auditCorpus() {
		f.Add(in)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		plainReadsAsUnmarshal(t, data, decodePlainAuditRecord)
	})
}

// BenchmarkDecodeAuditRecord measures DecodeAuditRecord on a transition
// record as the relay publishes it, beside json.Unmarshal.
func BenchmarkDecodeAuditRecord(b *testing.B) {
	data, err := MarshalAuditRecord(auditSamples[1])
	if err != nil {
		b.Fatal(err)
	}
	b.Run("DecodeAuditRecord", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeAuditRecord(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r AuditRecord
			if err := json.Unmarshal(data, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDecodeAuditBatch measures DecodeAuditMessage on a batch of 500
// transition records of one task, the relay's full page.
func BenchmarkDecodeAuditBatch(b *testing.B) {
	recs := make([]AuditRecord, 500)
	for i := range recs {
		recs[i] = auditSamples[1]
		recs[i].ID = fmt.Sprintf("t-%d", i+1)
		recs[i].InstanceID = int64(i + 1)
	}
	data, err := AppendAuditBatch(nil, recs[0].Task, recs)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if got, err := DecodeAuditMessage(data); err != nil || len(got) != len(recs) {
			b.Fatalf("DecodeAuditMessage = %d records, %v; want %d", len(got), err, len(recs))
		}
	}
}
