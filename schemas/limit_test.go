package schemas

import (
	"strings"
	"testing"
	"time"
)

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		d    time.Duration
		fail bool
	}{
		{"50/s", 50, time.Second, false},
		{"600/m", 600, time.Minute, false},
		{"1000/h", 1000, time.Hour, false},
		{"5/10s", 5, 10 * time.Second, false},
		{"0/s", 0, 0, true},
		{"50", 0, 0, true},
		{"50/day", 0, 0, true},
		{"5/1ms", 0, 0, true},
	} {
		n, d, err := ParseRate(tc.in)
		if (err != nil) != tc.fail || n != tc.n || d != tc.d {
			t.Errorf("ParseRate(%q) = %d, %v, %v; want %d, %v, failing %t", tc.in, n, d, err, tc.n, tc.d, tc.fail)
		}
	}
}

// TestLimitProblemsNameTheField: each mistake names the field to fix.
func TestLimitProblemsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		l     Limit
		field string
	}{
		{Limit{Name: "Bad Name", Concurrency: 1}, "name"},
		{Limit{Name: "x"}, "concurrency"},
		{Limit{Name: "x", Rate: "fast"}, "rate"},
		{Limit{Name: "x", Concurrency: 1, Key: "{{.tenant"}, "key"},
		{Limit{Name: "x", Concurrency: 1, Overrides: map[string]LimitOverride{"big": {Rate: "5/s"}}}, "overrides.big.rate"},
	} {
		p := tc.l.Problems()
		if len(p) == 0 || p[0].Field != tc.field || !strings.Contains(p[0].Message, " ") {
			t.Errorf("%+v: problems %v, want one on %s", tc.l, p, tc.field)
		}
	}
	if p := (&Limit{Name: "supplier-api", Rate: "50/s", Key: "{{.supplier}}"}).Problems(); p != nil {
		t.Errorf("a good limit has problems: %v", p)
	}
}
