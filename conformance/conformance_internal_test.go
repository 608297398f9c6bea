package conformance

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// TestCheckReport checks the kit's judgement of one report as it came:
// the subject, the body and the Nats-Msg-Id each make it fail.
func TestCheckReport(t *testing.T) {
	o := &observer{top: streams.Default(), pool: "js"}
	body := `{"instance_id":7,"attempt":2,"worker_id":"w1","kind":"%s","at":"2026-12-02T05:00:01Z","started_at":"2026-12-02T05:00:00Z"}`
	report := func(subject, msgID, kind string) wireReport {
		w := wireReport{seen: seen{subject: subject, msgID: msgID, data: []byte(strings.ReplaceAll(body, "%s", kind))}}
		w.err = json.Unmarshal(w.data, &w.r)
		return w
	}
	for _, tc := range []struct {
		name, subject, msgID, kind, wrong string
	}{
		{"started", "ax.report.js.w1.7", "7-2-started-abc", "started", ""},
		{"final", "ax.report.js.w1.7", "7-2-final-abc", "failed", ""},
		{"another pool", "ax.report.default.w1.7", "7-2-final-abc", "succeeded", "want ax.report.js.w1.7"},
		{"another worker", "ax.report.js.w2.7", "7-2-final-abc", "succeeded", "want ax.report.js.w1.7"},
		{"no nonce", "ax.report.js.w1.7", "7-2-final", "succeeded", "Nats-Msg-Id"},
		{"started id on a final", "ax.report.js.w1.7", "7-2-started-abc", "succeeded", "Nats-Msg-Id"},
		{"another attempt's id", "ax.report.js.w1.7", "7-1-final-abc", "succeeded", "Nats-Msg-Id"},
		{"unknown kind", "ax.report.js.w1.7", "7-2-final-abc", "done", "kind"},
		{"progress without its progress", "ax.report.js.w1.7", "", "progress", "has no progress"},
		{"progress, no Nats-Msg-Id", "ax.report.js.w1.7", "", `progress","progress":{"done":3,"total":10},"note":"`, ""},
		{"progress past its total", "ax.report.js.w1.7", "", `progress","progress":{"done":11,"total":10},"note":"`, "must not exceed total"},
		{"progress on a final", "ax.report.js.w1.7", "7-2-final-abc", `succeeded","progress":{"done":1,"total":1},"note":"`, "carries progress"},
		{"in a batch", "ax.report.js.w1.batch", "batch-3-abc", "succeeded", ""},
		{"in another worker's batch", "ax.report.js.w2.batch", "batch-3-abc", "succeeded", "want ax.report.js.w1.batch"},
		{"in another pool's batch", "ax.report.default.w1.batch", "batch-3-abc", "succeeded", "want ax.report.js.w1.batch"},
		{"started in a batch", "ax.report.js.w1.batch", "batch-3-abc", "started", "final reports only"},
		{"a batch without its id", "ax.report.js.w1.batch", "7-2-final-abc", "failed", "Nats-Msg-Id"},
	} {
		got := o.checkReport(report(tc.subject, tc.msgID, tc.kind), 7)
		if (tc.wrong == "") != (got == "") || !strings.Contains(got, tc.wrong) {
			t.Errorf("%s: checkReport = %q, want %q", tc.name, got, tc.wrong)
		}
	}
}

// TestTaskNamesAndTags checks the kit's task names and pool tags: a pool
// of tags is its tags, a name stays a task name however long the pool.
func TestTaskNamesAndTags(t *testing.T) {
	if tags, err := poolTags("eu+gpu"); err != nil || strings.Join(tags, ",") != "eu,gpu" {
		t.Errorf("poolTags(eu+gpu) = %v, %v", tags, err)
	}
	if tags, err := poolTags(schemas.DefaultPool); err != nil || tags != nil {
		t.Errorf("poolTags(default) = %v, %v", tags, err)
	}
	if _, err := poolTags("gpu+eu"); err == nil {
		t.Error("poolTags(gpu+eu): no error for tags out of order")
	}
	long := strings.Repeat("abcdefgh+", 7) + "z"
	for _, pool := range []string{"js", "eu+gpu", long} {
		if name := taskName(pool, Permanent); len(name) > 64 || !strings.HasPrefix(name, "conformance-permanent-") {
			t.Errorf("taskName(%s) = %q", pool, name)
		}
	}
}
