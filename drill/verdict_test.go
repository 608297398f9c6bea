package drill

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestReportVerdict(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		checks []Check
		passed bool
	}{
		{"no checks", nil, false},
		{"only info", []Check{{Name: "idempotency", Info: true}}, false},
		{"all pass", []Check{{Name: "a", Pass: true}, {Name: "b", Pass: true, Warn: true}, {Name: "c", Info: true}}, true},
		{"one fails", []Check{{Name: "a", Pass: true}, {Name: "b"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &Report{Title: "t", Checks: tt.checks}
			if got := r.Passed(); got != tt.passed {
				t.Errorf("Passed() = %v, want %v", got, tt.passed)
			}
		})
	}
}

func TestReportTableAndJSON(t *testing.T) {
	t.Parallel()
	r := &Report{Title: "ax drill task hello"}
	r.Expect("node crash: retry started", "within 3s", "1.2s", true)
	r.Add(Check{Name: "cancellation: honoured", Expected: "within 5s", Observed: "ignored\nfor 10s"})
	r.Fact("instances", 4)
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"CHECK", "node crash: retry started", "pass", "ignored for 10s", "fail", "instances", "FAIL: cancellation: honoured"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Passed bool     `json:"passed"`
		Failed []string `json:"failed"`
		Checks []Check  `json:"checks"`
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Passed || len(got.Failed) != 1 || got.Failed[0] != "cancellation: honoured" || len(got.Checks) != 2 {
		t.Errorf("json = %s", b.String())
	}
}
