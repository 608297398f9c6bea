package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
)

func TestPullOrder(t *testing.T) {
	got := pullOrder([]string{"default", "gpu"}, schemas.Priorities, []string{"a", "b"})
	want := []string{"default/urgent/a", "default/urgent/b", "gpu/urgent/a", "gpu/urgent/b",
		"default/normal/a", "default/normal/b", "gpu/normal/a", "gpu/normal/b",
		"default/low/a", "default/low/b", "gpu/low/a", "gpu/low/b"}
	if len(got) != len(want) {
		t.Fatalf("%d queues, want %d", len(got), len(want))
	}
	for i, q := range got {
		if s := q.pool + "/" + string(q.priority) + "/" + q.handler; s != want[i] {
			t.Errorf("queue %d is %s, want %s", i, s, want[i])
		}
	}
}

func TestEncodeOutput(t *testing.T) {
	tests := []struct {
		out  any
		want string
		err  bool
	}{
		{out: nil, want: ""},
		{out: map[string]int{"n": 1}, want: `{"n":1}`},
		{out: json.RawMessage(` {"a": 1} `), want: `{"a": 1}`},
		{out: json.RawMessage(`{`), err: true},
		{out: json.RawMessage(nil), want: ""},
		{out: []byte(`[1, 2]`), want: `[1, 2]`},
		{out: []byte("hi"), want: `"aGk="`},
		{out: (*struct{})(nil), want: ""},
		{out: "text", want: `"text"`},
		{out: make(chan int), err: true},
	}
	for _, tt := range tests {
		got, err := encodeOutput(tt.out)
		if (err != nil) != tt.err || string(got) != tt.want {
			t.Errorf("encodeOutput(%#v) = %s, %v; want %s (error %v)", tt.out, got, err, tt.want, tt.err)
		}
	}
}

func TestOutcome(t *testing.T) {
	s := &Service{opts: Options{WorkerID: "w", NowFunc: func() time.Time { return time.Unix(0, 0) }}}
	deadline := time.Unix(100, 0)
	a := &attempt{dispatch: schemas.Dispatch{InstanceID: 1, Attempt: 1}, task: &Job{Deadline: deadline}}
	timeout := timeoutError{d: time.Second}
	inTime, late := deadline.Add(-time.Millisecond), deadline.Add(1500*time.Millisecond)
	const handedBack = "handed back: worker w stopped and its shutdown timeout of 0s passed before the handler returned"
	tests := []struct {
		name      string
		out       any
		err       error
		cause     error
		at        time.Time
		kind      schemas.ReportKind
		msg       string
		permanent bool
	}{
		{"success", "ok", nil, nil, inTime, schemas.ReportSucceeded, "", false},
		{"success returned just before the deadline", "ok", nil, timeout, inTime, schemas.ReportSucceeded, "", false},
		{"success after the deadline", "ok", nil, timeout, late, schemas.ReportFailed,
			"timeout after 1s (the handler ignored its deadline and returned a result 1.5s after it)", false},
		{"error", nil, errors.New("no"), nil, inTime, schemas.ReportFailed, "no", false},
		{"permanent", nil, Permanent(errors.New("no")), nil, inTime, schemas.ReportFailed, "no", true},
		{"timeout", nil, context.DeadlineExceeded, timeout, late, schemas.ReportFailed, "timeout after 1s", false},
		{"timeout with another error", nil, errors.New("db down"), timeout, late, schemas.ReportFailed, "timeout after 1s (handler returned: db down)", false},
		{"abandoned after the timeout", nil, timeout, timeout, time.Time{}, schemas.ReportFailed, "timeout after 1s", false},
		{"permanent after cancel", nil, Permanent(context.Canceled), cancelError{"stop"}, inTime, schemas.ReportFailed, "cancelled: stop", false},
		{"shutdown", nil, errShuttingDown, errShuttingDown, inTime, schemas.ReportReleased, handedBack, false},
		{"shutdown with another error", nil, errors.New("db down"), errShuttingDown, inTime, schemas.ReportReleased,
			handedBack + " (handler returned: db down)", false},
		{"permanent after shutdown", nil, Permanent(errors.New("no")), errShuttingDown, inTime, schemas.ReportReleased,
			handedBack + " (handler returned: no)", false},
		{"abandoned after shutdown", nil, errShuttingDown, errShuttingDown, time.Time{}, schemas.ReportReleased, handedBack, false},
		{"success after shutdown", "ok", nil, errShuttingDown, late, schemas.ReportSucceeded, "", false},
		{"empty error", nil, errors.New(""), nil, inTime, schemas.ReportFailed, "the handler returned an error with an empty message", false},
	}
	for _, tt := range tests {
		r := s.outcome(a, tt.out, tt.err, tt.cause, tt.at)
		if r.Kind != tt.kind || r.Error != tt.msg || r.Permanent != tt.permanent {
			t.Errorf("%s: report %+v, want %s %q permanent %v", tt.name, r, tt.kind, tt.msg, tt.permanent)
		}
	}
}

// RetryAfter reaches the report as retry_after_ms, at least 1 ms, unless
// the failure is permanent or the context's end decided the outcome.
func TestOutcomeRetryAfter(t *testing.T) {
	s := &Service{opts: Options{WorkerID: "w", NowFunc: func() time.Time { return time.Unix(0, 0) }}}
	a := &attempt{dispatch: schemas.Dispatch{InstanceID: 1, Attempt: 1}, task: &Job{}}
	rateLimited := errors.New("429 too many requests")
	tests := []struct {
		name      string
		err       error
		cause     error
		msg       string
		ms        int64
		permanent bool
	}{
		{"retry after", RetryAfter(90*time.Second, rateLimited), nil, "429 too many requests", 90000, false},
		{"wrapped", fmt.Errorf("call api: %w", RetryAfter(time.Second, rateLimited)), nil, "call api: 429 too many requests", 1000, false},
		{"nil error", RetryAfter(5*time.Minute, nil), nil, "retry in 5m0s requested", 300000, false},
		{"zero is at once, not the backoff", RetryAfter(0, rateLimited), nil, "429 too many requests", 1, false},
		{"negative is zero", RetryAfter(-time.Hour, rateLimited), nil, "429 too many requests", 1, false},
		{"permanent outside", Permanent(RetryAfter(time.Second, rateLimited)), nil, "429 too many requests", 0, true},
		{"permanent inside", RetryAfter(time.Second, Permanent(rateLimited)), nil, "429 too many requests", 0, true},
		{"cancelled", RetryAfter(time.Second, rateLimited), cancelError{"stop"}, "cancelled: stop (handler returned: 429 too many requests)", 0, false},
	}
	for _, tt := range tests {
		r := s.outcome(a, nil, tt.err, tt.cause, time.Unix(0, 0))
		if r.Kind != schemas.ReportFailed || r.Error != tt.msg || r.RetryAfterMS != tt.ms || r.Permanent != tt.permanent {
			t.Errorf("%s: report %+v, want failed %q retry_after_ms %d permanent %v", tt.name, r, tt.msg, tt.ms, tt.permanent)
		}
	}
	if !errors.Is(RetryAfter(time.Second, rateLimited), rateLimited) {
		t.Error("errors.Is does not see through RetryAfter")
	}
}
