package taskdef

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
)

// BenchmarkParseTriggerEvent measures ParseTriggerEvent on a firing as the
// benchmarks and the trigger service encode it, beside the decode and
// re-encode through encoding/json that its fast path made before.
func BenchmarkParseTriggerEvent(b *testing.B) {
	data, err := json.Marshal(schemas.TriggerEvent{EventID: "bench-17", FiredAt: time.Date(2026, 12, 2, 0, 30, 0, 123456789, time.UTC)})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("ParseTriggerEvent", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ParseTriggerEvent(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Unmarshal+json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var ev schemas.TriggerEvent
			if err := json.Unmarshal(data, &ev); err != nil {
				b.Fatal(err)
			}
			if _, err := json.Marshal(ev); err != nil {
				b.Fatal(err)
			}
		}
	})
}
