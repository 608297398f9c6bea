package schemas

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"
)

var reportSamples = []Report{
	{InstanceID: 1, Attempt: 1, WorkerID: "exec-1", Kind: ReportSucceeded, At: time.Date(2026, 12, 2, 0, 30, 0, 123456789, time.UTC),
		StartedAt: time.Date(2026, 12, 2, 0, 30, 0, 23456789, time.UTC), Output: json.RawMessage(`{"rows":10}`)},
	{InstanceID: math.MaxInt64, Attempt: math.MaxInt32, WorkerID: "é-日本", Kind: ReportFailed,
		At: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("", 3600)), StartedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("", -34200)),
		Error: "boom: the database said no", Permanent: true},
	{InstanceID: 5, Attempt: 2, Kind: ReportFailed, Error: "try later", RetryAfterMS: 1500},
	{InstanceID: 5, Attempt: 2, Kind: ReportReleased, Error: "handed back"},
	{InstanceID: 5, Attempt: 2, Kind: ReportSucceeded, Output: json.RawMessage(`null`)},
	{InstanceID: 5, Attempt: 2, Kind: ReportSucceeded, Output: json.RawMessage(`[1,"a,b}",{"c":[]}]`)},
	{InstanceID: 5, Attempt: 2, Kind: ReportStarted},
	{InstanceID: -7, Attempt: -2, RetryAfterMS: -1},
	{},
}

// reportCorpus is plain encodings of reports, leases and batches, and what
// json.Unmarshal reads otherwise or refuses.
func reportCorpus() [][]byte {
	var corpus [][]byte
	add := func(data []byte) {
		corpus = append(corpus, data)
		for _, cut := range []int{0, 1, len(data) / 3, len(data) / 2, len(data) - 1} {
			corpus = append(corpus, data[:cut])
		}
		corpus = append(corpus, append(bytes.Clone(data), '}'), append(bytes.Clone(data), " x"...), append([]byte(" \n"), data...))
	}
	for _, rep := range reportSamples {
		data, _ := json.Marshal(rep)
		add(data)
		indented, _ := json.MarshalIndent(rep, "", "  ")
		corpus = append(corpus, indented)
	}
	batch, _ := json.Marshal(ReportBatch{Reports: reportSamples})
	add(batch)
	indented, _ := json.MarshalIndent(ReportBatch{Reports: reportSamples[:2]}, "", "  ")
	corpus = append(corpus, indented)
	lease, _ := json.Marshal(Lease{InstanceID: 42, Attempt: 3, WorkerID: "exec-1", AcquiredAt: time.Date(2026, 12, 2, 0, 30, 0, 1, time.UTC)})
	add(lease)
	for _, s := range []string{
		`{}`, `[]`, `null`, `{"kind":null}`, `{"output":null}`, `{"output":nul}`, `{"output": null }`, `{"error":null}`,
		`{"permanent":null}`, `{"permanent":tru}`, `{"permanent":false}`, `{"permanent":1}`, `{"retry_after_ms":1.5}`,
		`{"progress":{"done":1,"total":2}}`, `{"progress":null}`, `{"Kind":"succeeded"}`, `{"pool":"p"}`, `{"Pool":"p"}`,
		`{"kind":"a","kind":"b"}`, `{"output":{"a":1},"output":2}`, `{"error":"a\u00e9"}`, `{"error":"a<b"}`, `{"worker_id":"a\"b"}`,
		`{"at":"2026-12-02T00:30:00Z"}`, `{"at":"2026-12-02 00:30:00"}`, `{"started_at":1}`, `{"acquired_at":"2026-12-02T00:30:00+01:00"}`,
		`{"instance_id":01}`, `{"attempt":9223372036854775808}`, `{"instance_id":"1"}`,
		`{"reports":[]}`, `{"reports":[ ]}`, `{"reports":null}`, `{"reports":{}}`, `{"reports":[{}]}`, `{"reports":[{},]}`,
		`{"reports":[{} {}]}`, `{"reports":[{}],"reports":[{}]}`, `{"reports":[{"instance_id":1}],"other":1}`, `{"Reports":[]}`,
		`{"reports":[1]}`, `{"reports":[null]}`, `{"reports":[{"instance_id":1}`, `{"reports":[{"instance_id":1}]`,
		`{"reports":[{"instance_id":1},{"instance_id":2,"progress":{}}]}`, `{"reports":[{"output":[1,2]},{"output":"]"}]}`,
		`{"reports": [ {"instance_id": 1} , {"attempt": 2} ] }`, `{"reports":[{"instance_id":1}]}}`,
	} {
		corpus = append(corpus, []byte(s))
	}
	return corpus
}

// decodesAsUnmarshal fails the test when decode reads data otherwise than
// json.Unmarshal: another value, or an error where it has none or the
// reverse.
func decodesAsUnmarshal[T any](t *testing.T, data []byte, decode func([]byte) (T, error)) {
	t.Helper()
	var want T
	wantErr := json.Unmarshal(data, &want)
	got, err := decode(data)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("%q: the plain decode's error %v, json.Unmarshal's %v", data, err, wantErr)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: the plain decode reads\n%+v\njson.Unmarshal\n%+v", data, got, want)
	}
}

// readsAsUnmarshal checks data with every decoder of this file.
func readsAsUnmarshal(t *testing.T, data []byte) {
	t.Helper()
	decodesAsUnmarshal(t, data, DecodeReport)
	plainReadsAsUnmarshal(t, data, decodePlainReport)
	decodesAsUnmarshal(t, data, DecodeReportBatch)
	plainReadsAsUnmarshal(t, data, decodePlainReportBatch)
	decodesAsUnmarshal(t, data, DecodeLease)
	plainReadsAsUnmarshal(t, data, decodePlainLease)
	decodesAsUnmarshal(t, data, func(data []byte) (Lease, error) { return DecodeLeaseFrom(data, "w-1") })
}

// A lease of the worker named to DecodeLeaseFrom holds that string.
func TestDecodeLeaseFromSharesTheWorkerID(t *testing.T) {
	t.Parallel()
	worker := strings.Clone("w-1")
	l, err := DecodeLeaseFrom([]byte(`{"instance_id":7,"attempt":1,"worker_id":"w-1","acquired_at":"2026-12-02T23:20:00Z"}`), worker)
	if err != nil || l.WorkerID != worker || unsafe.StringData(l.WorkerID) != unsafe.StringData(worker) {
		t.Fatalf("lease %+v (%v): its worker id is not the string given", l, err)
	}
	l, err = DecodeLeaseFrom([]byte(`{"instance_id":7,"attempt":1,"worker_id":"w-2"}`), worker)
	if err != nil || l.WorkerID != "w-2" {
		t.Fatalf("lease %+v (%v), want worker w-2", l, err)
	}
}

func TestTheReportsExecutorsEncodeTakeThePlainPath(t *testing.T) {
	t.Parallel()
	for _, rep := range reportSamples {
		if !writesAsMarshal(t, rep, MarshalReport, appendPlainReport) {
			t.Errorf("%+v took json.Marshal", rep)
		}
		data, err := MarshalReport(rep)
		if err != nil {
			t.Fatal(err)
		}
		if !plainReadsAsUnmarshal(t, data, decodePlainReport) {
			t.Errorf("%s took json.Unmarshal", data)
		}
	}
	batch, err := json.Marshal(ReportBatch{Reports: reportSamples})
	if err != nil {
		t.Fatal(err)
	}
	if !plainReadsAsUnmarshal(t, batch, decodePlainReportBatch) {
		t.Errorf("%s took json.Unmarshal", batch)
	}
	lease := Lease{InstanceID: 42, Attempt: 3, WorkerID: "exec-1", AcquiredAt: time.Date(2026, 12, 2, 0, 30, 0, 1, time.UTC)}
	data, err := MarshalLease(lease)
	if want, _ := json.Marshal(lease); err != nil || !bytes.Equal(data, want) {
		t.Fatalf("MarshalLease writes %s (error %v), json.Marshal %s", data, err, want)
	}
	if !plainReadsAsUnmarshal(t, data, decodePlainLease) {
		t.Errorf("%s took json.Unmarshal", data)
	}
}

func TestPlainReportsReadAsUnmarshalDoes(t *testing.T) {
	t.Parallel()
	for _, data := range reportCorpus() {
		readsAsUnmarshal(t, data)
	}
	for _, s := range []string{`{"progress":{"done":1,"total":2}}`, `{"reports":[{"progress":{"done":1,"total":2}}]}`} {
		if plainReadsAsUnmarshal(t, []byte(s), decodePlainReport) || plainReadsAsUnmarshal(t, []byte(s), decodePlainReportBatch) {
			t.Errorf("%s took the plain path, which reads no progress", s)
		}
	}
}

func TestMarshalReportWritesAsMarshalDoes(t *testing.T) {
	t.Parallel()
	base := reportSamples[1]
	for _, s := range []string{"a<b", "a>b", "a&b", `a"b`, `a\b`, "a\nb", "a\x00b", "a\x7fb", "\xff", "a\u2028b", "a\u2029b", "é", "日本"} {
		for _, set := range []func(*Report){
			func(r *Report) { r.WorkerID = s }, func(r *Report) { r.Kind = ReportKind(s) }, func(r *Report) { r.Error = s },
		} {
			rep := base
			set(&rep)
			writesAsMarshal(t, rep, MarshalReport, appendPlainReport)
		}
		l := Lease{WorkerID: s}
		writesAsMarshal(t, l, MarshalLease, func(b []byte, l *Lease) ([]byte, bool) {
			data, err := MarshalLease(*l)
			return data, err == nil
		})
	}
	for _, p := range []string{`{}`, `{ }`, "[1,\n2]", `{"a":"<"}`, `"&"`, "\"\u2028\"", `{"a":`, `nul`, `null`, `1 2`, `{"a":"é"}`} {
		rep := base
		rep.Output = json.RawMessage(p)
		writesAsMarshal(t, rep, MarshalReport, appendPlainReport)
	}
	for _, at := range []time.Time{{}, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", 59))} {
		rep := base
		rep.At, rep.StartedAt = at, at
		writesAsMarshal(t, rep, MarshalReport, appendPlainReport)
		if got, err := MarshalLease(Lease{AcquiredAt: at}); err == nil {
			if want, _ := json.Marshal(Lease{AcquiredAt: at}); !bytes.Equal(got, want) {
				t.Errorf("MarshalLease writes %s, json.Marshal %s", got, want)
			}
		} else if _, err := json.Marshal(Lease{AcquiredAt: at}); err == nil {
			t.Errorf("MarshalLease refuses %v, json.Marshal does not", at)
		}
	}
	rep := base
	rep.Progress = &Progress{Done: 1, Total: 2}
	if writesAsMarshal(t, rep, MarshalReport, appendPlainReport) {
		t.Error("a report with progress took the plain path")
	}
}

// FuzzDecodePlainReports checks that the report, batch and lease decoders
// read any bytes as json.Unmarshal does.
func FuzzDecodePlainReports(f *testing.F) {
	for _, in := range reportCorpus() {
		f.Add(in)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		readsAsUnmarshal(t, data)
	})
}

// FuzzMarshalReport checks that MarshalReport and MarshalLease write any
// report and lease of fuzzed strings, numbers and output as json.Marshal
// does, and that the plain decoders read them back as json.Unmarshal does.
func FuzzMarshalReport(f *testing.F) {
	f.Add(int64(1), "exec-1", "succeeded", []byte(`{"a":1}`), "", false, 1, int64(1764635400123456789))
	f.Add(int64(-1), "a<b", "\xff", []byte("[1, 2]"), "é", true, -1, int64(0))
	f.Fuzz(func(t *testing.T, id int64, worker, kind string, output []byte, errText string, permanent bool, n int, at int64) {
		rep := Report{InstanceID: id, Attempt: n, WorkerID: worker, Kind: ReportKind(kind), At: time.Unix(0, at).UTC(),
			StartedAt: time.Unix(at, 0).In(time.FixedZone("", n%86400)), Output: output, Error: errText, Permanent: permanent,
			RetryAfterMS: id / 7}
		writesAsMarshal(t, rep, MarshalReport, appendPlainReport)
		if data, err := json.Marshal(rep); err == nil {
			readsAsUnmarshal(t, data)
			if batch, err := json.Marshal(ReportBatch{Reports: []Report{rep, rep}}); err == nil {
				readsAsUnmarshal(t, batch)
			}
		}
		l := Lease{InstanceID: id, Attempt: n, WorkerID: worker, AcquiredAt: time.Unix(0, at).In(time.FixedZone("", n%86400))}
		got, err := MarshalLease(l)
		want, wantErr := json.Marshal(l)
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("%+v: MarshalLease writes %s (error %v), json.Marshal %s (error %v)", l, got, err, want, wantErr)
		}
		if wantErr == nil {
			readsAsUnmarshal(t, want)
		}
	})
}

// BenchmarkReportCodec compares the plain encode and decode of a final
// report, as an executor writes it, with encoding/json's.
func BenchmarkReportCodec(b *testing.B) {
	rep := reportSamples[0]
	data, err := json.Marshal(rep)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("MarshalReport+DecodeReport", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := MarshalReport(rep); err != nil {
				b.Fatal(err)
			}
			if _, err := DecodeReport(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Marshal+json.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(rep); err != nil {
				b.Fatal(err)
			}
			var r Report
			if err := json.Unmarshal(data, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
