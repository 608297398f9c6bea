package store

import (
	"reflect"
	"testing"

	"github.com/ax-scheduler/ax/schemas"
)

// TestRetryPoliciesDecodeEachRow: rows of two tasks' policies, one after
// the other, each get their own, and a row buffer reused after a decode
// does not change the policy kept.
func TestRetryPoliciesDecodeEachRow(t *testing.T) {
	one, two := 1.5, 60.0
	exp := schemas.Retry{MaxAttempts: 3, Backoff: "exp", InitialIntervalSec: &one}
	fixed := schemas.Retry{MaxAttempts: 5, MaxIntervalSec: &two}
	rows := []struct {
		raw  string
		want schemas.Retry
	}{
		{`{"max_attempts":3,"backoff":"exp","initial_interval_sec":1.5}`, exp},
		{`{"max_attempts":3,"backoff":"exp","initial_interval_sec":1.5}`, exp},
		{`{"max_attempts":5,"max_interval_sec":60}`, fixed},
		{`{}`, schemas.Retry{}},
		{`{"max_attempts":3,"backoff":"exp","initial_interval_sec":1.5}`, exp},
	}
	var p retryPolicies
	buf := make([]byte, 0, 128)
	for i, r := range rows {
		buf = append(buf[:0], r.raw...) // as a driver reusing its buffer
		got, err := p.decode(buf)
		if err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		for j := range buf {
			buf[j] = ' '
		}
		if !reflect.DeepEqual(got, r.want) {
			t.Errorf("row %d: policy %+v, want %+v", i, got, r.want)
		}
	}
	if _, err := p.decode([]byte(`{"max_attempts":`)); err == nil {
		t.Error("a truncated policy decoded without an error")
	}
}
