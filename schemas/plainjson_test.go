package schemas

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"testing"
	"time"
)

// sameAsUnmarshal fails the test when DecodeDispatch reads data otherwise
// than json.Unmarshal: another value, or an error where it has none or the
// reverse. It reports whether the plain path took data.
func sameAsUnmarshal(t *testing.T, data []byte) bool {
	t.Helper()
	var want Dispatch
	wantErr := json.Unmarshal(data, &want)
	got, err := DecodeDispatch(data)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("%q: DecodeDispatch error %v, json.Unmarshal error %v", data, err, wantErr)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: DecodeDispatch reads\n%+v\njson.Unmarshal\n%+v", data, got, want)
	}
	return plainReadsAsUnmarshal(t, data, decodePlainDispatch)
}

// plainReadsAsUnmarshal fails the test when the plain decoder accepts data
// and json.Unmarshal refuses it or reads it otherwise. It reports whether
// the plain decoder took data.
func plainReadsAsUnmarshal[T any](t *testing.T, data []byte, plain func([]byte) (T, bool)) bool {
	t.Helper()
	got, ok := plain(data)
	if ok {
		var want T
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("%q: the plain path accepts what json.Unmarshal refuses: %v", data, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: the plain path reads\n%+v\njson.Unmarshal\n%+v", data, got, want)
		}
	}
	return ok
}

var dispatchSamples = []Dispatch{
	{InstanceID: 1, Task: "noop", TaskVersion: 1, Handler: "noop", Attempt: 1, MaxAttempts: 3, EventID: "bench-17",
		Priority: PriorityNormal, Pool: DefaultPool, TimeoutMS: 30000, FiredAt: time.Date(2026, 12, 2, 0, 30, 0, 123456789, time.UTC),
		DispatchedAt: time.Date(2026, 12, 2, 0, 30, 0, 223000000, time.UTC), RunID: "run-1", Protocol: ExecutorProtocol, ReportBatches: true},
	{InstanceID: math.MaxInt64, Task: "t", Attempt: math.MaxInt32, MaxAttempts: math.MaxInt32, EventID: "é-ü-日本",
		Payload: json.RawMessage(`{"order":42,"items":[1,2,{"a":"b\"}"}],"s":"x,y}","n":null,"t":true}`), TimeoutMS: math.MaxInt64,
		MutexTemplate: "{{.order}}", FiredAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("", 3600)),
		DispatchedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("", -34200)), ShardIndex: 3, ShardCount: 8},
	{InstanceID: 5, Attempt: 2, Payload: json.RawMessage(`"just-a-string"`)},
	{InstanceID: 5, Attempt: 2, Payload: json.RawMessage(`-12.5e3`)},
	{InstanceID: 5, Attempt: 2, Payload: json.RawMessage(`[]`)},
	{InstanceID: 5, Attempt: 2, Payload: json.RawMessage(`false`)},
	{InstanceID: -7, TaskVersion: -1, Attempt: -2},
	{},
}

func TestTheDispatchesAXEncodesTakeThePlainPath(t *testing.T) {
	t.Parallel()
	for _, d := range dispatchSamples {
		data, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		if !sameAsUnmarshal(t, data) {
			t.Errorf("%s took json.Unmarshal", data)
		}
		indented, err := json.MarshalIndent(d, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if !sameAsUnmarshal(t, indented) {
			t.Errorf("%s took json.Unmarshal", indented)
		}
	}
}

func TestDecodeDispatchReadsAsUnmarshalDoes(t *testing.T) {
	t.Parallel()
	withParents := Dispatch{InstanceID: 9, Attempt: 1, Parents: map[string]ParentResult{
		"extract": {InstanceID: 3, State: StateSucceeded, Output: json.RawMessage(`{"rows":10}`)}}}
	data, err := json.Marshal(withParents)
	if err != nil {
		t.Fatal(err)
	}
	if sameAsUnmarshal(t, data) {
		t.Errorf("%s took the plain path, which does not read parents", data)
	}
	for _, in := range dispatchCorpus() {
		sameAsUnmarshal(t, in)
	}
}

// dispatchCorpus is plain encodings and what json.Unmarshal reads
// otherwise or refuses: escapes, nulls, keys in another case, unknown keys,
// numbers that do not fit, truncations and bad tails.
func dispatchCorpus() [][]byte {
	var corpus [][]byte
	for _, d := range dispatchSamples {
		data, _ := json.Marshal(d)
		corpus = append(corpus, data)
		for _, cut := range []int{0, 1, len(data) / 3, len(data) / 2, len(data) - 1} {
			corpus = append(corpus, data[:cut])
		}
		corpus = append(corpus, append(bytes.Clone(data), '}'), append(bytes.Clone(data), " x"...), append([]byte(" \n"), data...))
	}
	for _, s := range []string{
		`{}`, ` { } `, `[]`, `null`, `"s"`, `{,}`, `{"task":"a",}`, `{"task" "a"}`, `{"task":"a" "handler":"b"}`,
		`{"task":"a\"b"}`, `{"task":"a\u00e9"}`, `{"task":"\u0000"}`, "{\"task\":\"a\tb\"}", "{\"task\":\"\xff\"}",
		`{"task":null}`, `{"instance_id":null}`, `{"payload":null}`, `{"fired_at":null}`, `{"parents":null}`,
		`{"Task":"a"}`, `{"INSTANCE_ID":4}`, `{"other":1,"task":"a"}`, `{"task":"a","task":"b"}`,
		`{"instance_id":01}`, `{"instance_id":-0}`, `{"instance_id":-}`, `{"instance_id":1.0}`, `{"instance_id":1e3}`,
		`{"instance_id":9223372036854775807}`, `{"instance_id":9223372036854775808}`, `{"instance_id":-9223372036854775808}`,
		`{"instance_id":123456789012345678}`, `{"instance_id":1234567890123456789}`, `{"attempt":"1"}`, `{"task":1}`,
		`{"attempt":true}`, `{"fired_at":"2026-12-02T00:30:00Z"}`, `{"fired_at":"2026-12-02 00:30:00"}`,
		`{"fired_at":"2026-12-02T00:30:00.Z"}`, `{"fired_at":1}`, `{"dispatched_at":"2026-12-02T24:00:00Z"}`,
		`{"payload":{"a":1}}`, `{"payload":{"a":1}`, `{"payload":{"a":}}`, `{"payload":[1,2,]}`, `{"payload":tru}`,
		`{"payload":"a\\"}`, `{"payload":"a\\\"b"}`, `{"payload":{"a":"}"}}`, `{"payload":{"a":"\\u00zz"}}`,
		`{"payload": {"a" : [ 1 , 2 ] } }`, `{"payload":1,}`, `{"payload":-}`, `{"payload":01}`, `{"payload":"\u0001"}`,
		`{"priority":"urgent","pool":"gpu","run_id":"r","mutex_template":"m","shard_index":1,"shard_count":2,"protocol":1}`,
		`{"task":"a"}}`, `{"task":"a"},`, `{"task":"a"`, `{"task":`, `{"task"`, `{"`, `{`,
	} {
		corpus = append(corpus, []byte(s))
	}
	return corpus
}

// FuzzDecodeDispatch checks that DecodeDispatch reads any bytes as
// json.Unmarshal does.
func FuzzDecodeDispatch(f *testing.F) {
	for _, in := range dispatchCorpus() {
		f.Add(in)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sameAsUnmarshal(t, data)
	})
}

// BenchmarkDecodeDispatch compares DecodeDispatch with json.Unmarshal on a
// dispatch as the dispatcher encodes it.
func BenchmarkDecodeDispatch(b *testing.B) {
	data, err := json.Marshal(dispatchSamples[0])
	if err != nil {
		b.Fatal(err)
	}
	b.Run("DecodeDispatch", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeDispatch(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var d Dispatch
			if err := json.Unmarshal(data, &d); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// sameAsMarshal fails the test when MarshalDispatch encodes d otherwise
// than json.Marshal. It reports whether the plain path took d.
func sameAsMarshal(t *testing.T, d Dispatch) bool {
	t.Helper()
	return writesAsMarshal(t, d, MarshalDispatch, appendPlainDispatch)
}

// writesAsMarshal fails the test when marshal or the plain encoder it
// takes when it can (plain's ok) encodes v otherwise than json.Marshal. It
// reports whether the plain encoder took v.
func writesAsMarshal[T any](t *testing.T, v T, marshal func(T) ([]byte, error), plain func([]byte, *T) ([]byte, bool)) bool {
	t.Helper()
	want, wantErr := json.Marshal(v)
	got, err := marshal(v)
	if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
		t.Fatalf("%+v: the plain marshal writes %s (error %v), json.Marshal %s (error %v)", v, got, err, want, wantErr)
	}
	got, ok := plain(nil, &v)
	if ok && (wantErr != nil || !bytes.Equal(got, want)) {
		t.Fatalf("%+v: the plain path writes %s, json.Marshal %s (error %v)", v, got, want, wantErr)
	}
	return ok
}

func TestMarshalDispatchWritesAsMarshalDoes(t *testing.T) {
	t.Parallel()
	for _, d := range dispatchSamples {
		if !sameAsMarshal(t, d) {
			t.Errorf("%+v took json.Marshal", d)
		}
	}
	base := dispatchSamples[0]
	for _, s := range []string{"a<b", "a>b", "a&b", `a"b`, `a\b`, "a\nb", "a\x00b", "a\x7fb", "\xff", "a\u2028b", "a\u2029b", "é", "日本"} {
		for _, set := range []func(*Dispatch){
			func(d *Dispatch) { d.Task = s }, func(d *Dispatch) { d.Handler = s }, func(d *Dispatch) { d.EventID = s },
			func(d *Dispatch) { d.Priority = Priority(s) }, func(d *Dispatch) { d.Pool = s },
			func(d *Dispatch) { d.MutexTemplate = s }, func(d *Dispatch) { d.RunID = s },
		} {
			d := base
			set(&d)
			sameAsMarshal(t, d)
		}
	}
	for _, p := range []string{`{}`, `{ }`, "[1,\n2]", `{"a":"<"}`, `{"a":"\u003c"}`, `"&"`, "\"\u2028\"", `{"a":`, `nul`, `null`, `1 2`, `{"a":"é"}`} {
		d := base
		d.Payload = json.RawMessage(p)
		sameAsMarshal(t, d)
	}
	for _, at := range []time.Time{{}, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", 59))} {
		d := base
		d.FiredAt, d.DispatchedAt = at, at
		sameAsMarshal(t, d)
	}
	d := base
	d.Parents = map[string]ParentResult{"a": {InstanceID: 1, State: StateSucceeded}}
	if sameAsMarshal(t, d) {
		t.Error("a dispatch with parents took the plain path")
	}
}

// FuzzMarshalDispatch checks that MarshalDispatch writes any dispatch of
// fuzzed strings, numbers and payload as json.Marshal does, and that
// DecodeDispatch reads it back as json.Unmarshal does.
func FuzzMarshalDispatch(f *testing.F) {
	f.Add(int64(1), "noop", "noop", "bench-1", "normal", "default", []byte(`{"a":1}`), "", "run-1", 1, int64(1764635400123456789))
	f.Add(int64(-1), "a<b", "é", "\xff", "", "", []byte("[1, 2]"), "{{.k}}", "", 0, int64(0))
	f.Fuzz(func(t *testing.T, id int64, task, handler, eventID, priority, pool string, payload []byte, mutex, runID string, n int, at int64) {
		d := Dispatch{InstanceID: id, Task: task, TaskVersion: n, Handler: handler, Attempt: n, MaxAttempts: -n, EventID: eventID,
			Priority: Priority(priority), Pool: pool, Payload: payload, TimeoutMS: id / 3, MutexTemplate: mutex,
			FiredAt: time.Unix(0, at).UTC(), DispatchedAt: time.Unix(at, 0).In(time.FixedZone("", n%86400)),
			RunID: runID, ShardIndex: n, ShardCount: n / 2, Protocol: n % 3}
		sameAsMarshal(t, d)
		if data, err := json.Marshal(d); err == nil {
			sameAsUnmarshal(t, data)
		}
	})
}

var triggerSamples = []TriggerEvent{
	{EventID: "bench-17", FiredAt: time.Date(2026, 12, 2, 0, 30, 0, 123456789, time.UTC)},
	{EventID: "retry-92-2", Task: "t", Source: SourceRetry, FiredAt: time.Date(2026, 12, 2, 0, 30, 0, 0, time.FixedZone("", -3600)),
		Retry: &RetryOf{InstanceID: math.MaxInt64, Attempt: math.MaxInt32}},
	{EventID: "é-日本", Task: "t", Source: SourceManual, Operator: "alice@example.com",
		Payload: json.RawMessage(`{"order":42,"items":[1,2,{"a":"b\"}"}],"s":"x,y}","n":null,"t":true}`), PayloadVersion: 2,
		Priority: PriorityUrgent, Reason: "misfire catch_up: tick 1 of 3", RunID: "run-7"},
	{IdempotencyKey: "order-42", RunAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Delay: "90s", Payload: json.RawMessage(`null`)},
	{Payload: json.RawMessage(`"just-a-string"`), PayloadVersion: -3, Retry: &RetryOf{}},
	{Payload: json.RawMessage(`-12.5e3`)},
	{},
}

// triggerCorpus is plain encodings and what json.Unmarshal reads otherwise
// or refuses.
func triggerCorpus() [][]byte {
	var corpus [][]byte
	for _, ev := range triggerSamples {
		data, _ := json.Marshal(ev)
		corpus = append(corpus, data)
		for _, cut := range []int{0, 1, len(data) / 3, len(data) / 2, len(data) - 1} {
			corpus = append(corpus, data[:cut])
		}
		corpus = append(corpus, append(bytes.Clone(data), '}'), append([]byte(" \n"), data...))
		indented, _ := json.MarshalIndent(ev, "", "  ")
		corpus = append(corpus, indented)
	}
	for _, s := range []string{
		`{}`, `[]`, `null`, `{"event_id":null}`, `{"payload":null}`, `{"payload":nul}`, `{"payload":nullx}`, `{"payload":null }`,
		`{"payload": null}`, `{"retry":null}`, `{"retry":{}}`, `{"retry":{"instance_id":1}}`, `{"retry":{"attempt":1,"instance_id":2}}`,
		`{"retry":{"instance_id":1,"other":2}}`, `{"retry":{"instance_id":1}`, `{"retry":{"instance_id":1},}`, `{"retry":[]}`,
		`{"retry":{"instance_id":"1"}}`, `{"retry":{"instance_id":1.5}}`, `{"retry":{"INSTANCE_ID":1}}`, `{"retry":{"instance_id":1}}}`,
		`{"cancel":{"instance_id":1}}`, `{"parents":{}}`, `{"Event_ID":"a"}`, `{"event_id":"a","event_id":"b"}`,
		`{"event_id":"a\u00e9"}`, `{"event_id":"a<b"}`, `{"payload_version":01}`, `{"payload_version":9223372036854775808}`,
		`{"fired_at":"2026-12-02T00:30:00Z"}`, `{"fired_at":"2026-12-02T00:30:00.000Z"}`, `{"fired_at":"2026-12-02T00:30:00+00:00"}`,
		`{"run_at":"2026-12-02 00:30:00"}`, `{"delay":"1s"}`, `{"priority":"urgent","source":"cron"}`, `{"source":"cron","priority":"urgent"}`,
	} {
		corpus = append(corpus, []byte(s))
	}
	return corpus
}

func TestDecodePlainTriggerEventReadsAsUnmarshalDoes(t *testing.T) {
	t.Parallel()
	for _, ev := range triggerSamples {
		data, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if !plainReadsAsUnmarshal(t, data, decodePlainTriggerEvent) {
			t.Errorf("%s took json.Unmarshal", data)
		}
	}
	for _, data := range triggerCorpus() {
		plainReadsAsUnmarshal(t, data, decodePlainTriggerEvent)
	}
	for _, s := range []string{`{"cancel":{"instance_id":1}}`, `{"parents":{"a":{"instance_id":1,"state":"SUCCEEDED"}}}`} {
		if plainReadsAsUnmarshal(t, []byte(s), decodePlainTriggerEvent) {
			t.Errorf("%s took the plain path, which reads no parents and no cancel order", s)
		}
	}
}

func TestMarshalTriggerEventWritesAsMarshalDoes(t *testing.T) {
	t.Parallel()
	for _, ev := range triggerSamples {
		if !writesAsMarshal(t, ev, MarshalTriggerEvent, appendPlainTriggerEvent) {
			t.Errorf("%+v took json.Marshal", ev)
		}
	}
	base := triggerSamples[2]
	for _, s := range []string{"a<b", "a>b", "a&b", `a"b`, `a\b`, "a\nb", "a\x00b", "a\x7fb", "\xff", "a\u2028b", "é"} {
		for _, set := range []func(*TriggerEvent){
			func(ev *TriggerEvent) { ev.EventID = s }, func(ev *TriggerEvent) { ev.Task = s },
			func(ev *TriggerEvent) { ev.Source = Source(s) }, func(ev *TriggerEvent) { ev.Operator = s },
			func(ev *TriggerEvent) { ev.Priority = Priority(s) }, func(ev *TriggerEvent) { ev.Reason = s },
			func(ev *TriggerEvent) { ev.IdempotencyKey = s }, func(ev *TriggerEvent) { ev.Delay = s },
			func(ev *TriggerEvent) { ev.RunID = s },
		} {
			ev := base
			set(&ev)
			writesAsMarshal(t, ev, MarshalTriggerEvent, appendPlainTriggerEvent)
		}
	}
	for _, p := range []string{`{ }`, "[1,\n2]", `{"a":"<"}`, `"&"`, `{"a":`, `null`} {
		ev := base
		ev.Payload = json.RawMessage(p)
		writesAsMarshal(t, ev, MarshalTriggerEvent, appendPlainTriggerEvent)
	}
	for _, at := range []time.Time{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", 59))} {
		ev := base
		ev.FiredAt, ev.RunAt = at, at
		writesAsMarshal(t, ev, MarshalTriggerEvent, appendPlainTriggerEvent)
	}
	for _, ev := range []TriggerEvent{
		{Cancel: &CancelOf{InstanceID: 1}},
		{Parents: map[string]ParentResult{"a": {InstanceID: 1, State: StateSucceeded}}},
	} {
		if writesAsMarshal(t, ev, MarshalTriggerEvent, appendPlainTriggerEvent) {
			t.Errorf("%+v took the plain path", ev)
		}
	}
	if !writesAsMarshal(t, TriggerEvent{Parents: map[string]ParentResult{}}, MarshalTriggerEvent, appendPlainTriggerEvent) {
		t.Error("an event with an empty parents map (omitted) took json.Marshal")
	}
}

// FuzzDecodePlainTriggerEvent checks that the plain path reads any bytes
// it takes as json.Unmarshal does.
func FuzzDecodePlainTriggerEvent(f *testing.F) {
	for _, in := range triggerCorpus() {
		f.Add(in)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		plainReadsAsUnmarshal(t, data, decodePlainTriggerEvent)
	})
}

// FuzzMarshalTriggerEvent checks that MarshalTriggerEvent writes any event
// of fuzzed strings, numbers and payload as json.Marshal does, and that
// the plain path reads it back as json.Unmarshal does.
func FuzzMarshalTriggerEvent(f *testing.F) {
	f.Add("bench-1", "noop", "event", "", []byte(`{"a":1}`), 1, "", "run-1", int64(1764635400123456789), true)
	f.Add("a<b", "é", "\xff", "op", []byte("[1, 2]"), -1, "k", "", int64(0), false)
	f.Fuzz(func(t *testing.T, eventID, task, source, operator string, payload []byte, n int, key, runID string, at int64, retry bool) {
		ev := TriggerEvent{EventID: eventID, Task: task, Source: Source(source), Operator: operator, Payload: payload,
			PayloadVersion: n, Priority: Priority(source), FiredAt: time.Unix(0, at).UTC(), Reason: operator,
			IdempotencyKey: key, RunAt: time.Unix(at, 0).In(time.FixedZone("", n%86400)), Delay: key, RunID: runID}
		if retry {
			ev.Retry = &RetryOf{InstanceID: at, Attempt: n}
		}
		writesAsMarshal(t, ev, MarshalTriggerEvent, appendPlainTriggerEvent)
		if data, err := json.Marshal(ev); err == nil {
			plainReadsAsUnmarshal(t, data, decodePlainTriggerEvent)
		}
	})
}
