package taskdef

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/schemas"
)

var batchSeeds = []string{
	`[]`, ` [ ] `, `[{}]`, `[{"event_id":"a"},{"event_id":"b"}]`,
	"\n[ {\"payload\": [1, {\"x\": \"]\"}]} ,\t{} ]\n",
	`[1, "x", null, true, [2]]`, `["a\"]b", {"payload": "\\"}]`,
	`[{"event_id":"a"} {"event_id":"b"}]`, `[{"event_id":"a"},]`, `[`, `{}`, `"[]"`, ``, `[{}]x`, `null`, ` null`,
}

// FuzzSplitTriggerBatch checks SplitTriggerBatch against json.Unmarshal
// into a []json.RawMessage: both accept the same arrays (of at most
// MaxTriggerBatch elements; null, which json.Unmarshal reads as no slice,
// is no batch) and find the same elements.
func FuzzSplitTriggerBatch(f *testing.F) {
	for _, s := range batchSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		items, err := SplitTriggerBatch(data)
		var want []json.RawMessage
		werr := json.Unmarshal(data, &want)
		if werr == nil && want == nil && !schemas.IsTriggerBatch(data) {
			werr = errors.New("null is no array") // json.Unmarshal's nil slice
		}
		if werr != nil || len(want) > schemas.MaxTriggerBatch {
			if err == nil {
				t.Fatalf("SplitTriggerBatch(%q) = %q, json.Unmarshal: %v (%d elements)", data, items, werr, len(want))
			}
			var verr *schemas.ValidationError
			if !errors.As(err, &verr) || len(verr.Problems) == 0 {
				t.Fatalf("error %v (%T) is not a *ValidationError with problems", err, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("SplitTriggerBatch(%q): %v, json.Unmarshal took it", data, err)
		}
		if len(items) != len(want) {
			t.Fatalf("SplitTriggerBatch(%q): %d elements, json.Unmarshal %d", data, len(items), len(want))
		}
		for i := range items {
			if !bytes.Equal(items[i], bytes.TrimSpace(want[i])) {
				t.Fatalf("element %d of %q: %q, json.Unmarshal %q", i, data, items[i], want[i])
			}
		}
	})
}

func TestSplitTriggerBatch(t *testing.T) {
	items, err := SplitTriggerBatch([]byte(` [ {"event_id": "a"}, {"payload": {"s": "],\"["}} ] `))
	if err != nil || len(items) != 2 || string(items[0]) != `{"event_id": "a"}` || string(items[1]) != `{"payload": {"s": "],\"["}}` {
		t.Fatalf("SplitTriggerBatch = %q, %v", items, err)
	}
	if !schemas.IsTriggerBatch([]byte(" \n[{}]")) || schemas.IsTriggerBatch([]byte(`{}`)) || schemas.IsTriggerBatch(nil) {
		t.Fatal("IsTriggerBatch tells batches from single events wrongly")
	}
	for _, bad := range []struct{ in, want string }{
		{`[{"event_id":"a"},]`, "is not valid JSON"},
		{`[{}] x`, "is not valid JSON"},
		{`{}`, "must be a JSON array"},
	} {
		_, err := SplitTriggerBatch([]byte(bad.in))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "batch of firings") {
			t.Errorf("SplitTriggerBatch(%q) = %v, want an error saying %q", bad.in, err, bad.want)
		}
	}
}

// TestTriggerBatchLimit: a batch of MaxTriggerBatch firings is taken, one
// more is refused whole, with an error that names the limit.
func TestTriggerBatchLimit(t *testing.T) {
	batch := func(n int) []byte {
		evs := make([]schemas.TriggerEvent, n)
		for i := range evs {
			evs[i].EventID = fmt.Sprintf("e%d", i)
		}
		b, err := schemas.MarshalTriggerBatch(evs)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if items, err := SplitTriggerBatch(batch(schemas.MaxTriggerBatch)); err != nil || len(items) != schemas.MaxTriggerBatch {
		t.Fatalf("a batch of %d: %d firings, %v", schemas.MaxTriggerBatch, len(items), err)
	}
	_, err := SplitTriggerBatch(batch(schemas.MaxTriggerBatch + 1))
	if err == nil || !strings.Contains(err.Error(), "holds 1001 firings; a batch holds at most 1000 (schemas.MaxTriggerBatch)") {
		t.Fatalf("a batch of %d: %v, want it refused naming the limit", schemas.MaxTriggerBatch+1, err)
	}
}

// TestTriggerBatchSchema: trigger-batch.schema.json states the same limit,
// and takes what MarshalTriggerBatch writes.
func TestTriggerBatchSchema(t *testing.T) {
	s, err := compiledSchemas()
	if err != nil {
		t.Fatal(err)
	}
	sch := s.byName["trigger-batch.schema.json"]
	if sch == nil || sch.MaxItems == nil || *sch.MaxItems != schemas.MaxTriggerBatch {
		t.Fatalf("trigger-batch.schema.json maxItems is not MaxTriggerBatch (%d)", schemas.MaxTriggerBatch)
	}
	b, err := schemas.MarshalTriggerBatch([]schemas.TriggerEvent{{EventID: "a", Payload: json.RawMessage(`{"n":1}`)}, {Priority: schemas.PriorityUrgent}})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `[{"event_id":"a","payload":{"n":1}},{"priority":"urgent"}]` {
		t.Fatalf("MarshalTriggerBatch = %s", b)
	}
	doc, problem := decodeJSON(b)
	if problem != nil {
		t.Fatal(problem)
	}
	if err := sch.Validate(doc); err != nil {
		t.Fatalf("the schema refuses %s: %v", b, err)
	}
	doc, _ = decodeJSON([]byte(`[{"event_id":"a","nope":1}]`))
	if sch.Validate(doc) == nil {
		t.Fatal("the schema takes a firing with an unknown field")
	}
}
