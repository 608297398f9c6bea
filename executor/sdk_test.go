package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/executor"
)

func TestPermanent(t *testing.T) {
	t.Parallel()
	if executor.Permanent(nil) != nil {
		t.Error("Permanent(nil) is not nil")
	}
	base := fmt.Errorf("open config: %w", fs.ErrNotExist)
	err := executor.Permanent(base)
	if !executor.IsPermanent(err) || err.Error() != base.Error() {
		t.Errorf("Permanent(%v) = %v, permanent %v", base, err, executor.IsPermanent(err))
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Error("errors.Is does not see through Permanent")
	}
	var pathErr *fs.PathError
	if errors.As(executor.Permanent(&fs.PathError{Op: "open", Path: "x", Err: fs.ErrNotExist}), &pathErr) == false || pathErr.Path != "x" {
		t.Error("errors.As does not see through Permanent")
	}
	if wrapped := fmt.Errorf("step 2: %w", err); !executor.IsPermanent(wrapped) {
		t.Error("a wrapped permanent error is not permanent")
	}
	if executor.Permanent(err) != err {
		t.Error("Permanent marks a permanent error again")
	}
	if executor.IsPermanent(base) || executor.IsPermanent(nil) {
		t.Error("a plain error is permanent")
	}
}

type point struct {
	X int `json:"x"`
	Y int `json:"y"`
}

func TestJSON(t *testing.T) {
	t.Parallel()
	h := executor.JSON(func(_ context.Context, _ *executor.Job, p point) (any, error) {
		return p.X + p.Y, nil
	})
	tests := []struct {
		payload string
		want    any
		err     string
	}{
		{payload: `{"x": 1, "y": 2}`, want: 3},
		{payload: ``, want: 0},
		{payload: `null`, want: 0},
		{payload: `{"x": 1, "z": 2}`, err: `task "plot": payload does not fit executor_test.point: json: unknown field "z"`},
		{payload: `{"x": "one"}`, err: `cannot unmarshal string into Go struct field point.x of type int`},
		{payload: `[1, 2]`, err: `cannot unmarshal array`},
		{payload: `{"x": 1} {"y": 2}`, err: `unexpected data after the JSON value`},
	}
	for _, tt := range tests {
		out, err := h.HandleTask(context.Background(), &executor.Job{Name: "plot", Payload: json.RawMessage(tt.payload)})
		switch {
		case tt.err == "" && (err != nil || out != tt.want):
			t.Errorf("payload %s: got %v, %v; want %v", tt.payload, out, err, tt.want)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err) || !executor.IsPermanent(err)):
			t.Errorf("payload %s: error %v, want a permanent error containing %q", tt.payload, err, tt.err)
		}
	}
}

// A typed output is the handler's output; an error drops it. Lenient takes
// unknown fields but not wrong types or trailing data.
func TestJSONTypedOutput(t *testing.T) {
	t.Parallel()
	sum := func(_ context.Context, _ *executor.Job, p point) (point, error) {
		if p.X < 0 {
			return point{X: -1}, errors.New("negative")
		}
		return point{X: p.X + p.Y}, nil
	}
	strict, lenient := executor.JSON(sum), executor.JSON(sum, executor.Lenient())
	call := func(h executor.Handler, payload string) (any, error) {
		return h.HandleTask(context.Background(), &executor.Job{Name: "plot", Payload: json.RawMessage(payload)})
	}
	if out, err := call(strict, `{"x": 1, "y": 2}`); err != nil || out != (point{X: 3}) {
		t.Errorf("strict: %v, %v; want {3 0}", out, err)
	}
	if out, err := call(strict, `{"x": -1}`); err == nil || out != nil {
		t.Errorf("an error with an output: got %v, %v; want no output", out, err)
	}
	if out, err := call(lenient, `{"x": 1, "z": 2}`); err != nil || out != (point{X: 1}) {
		t.Errorf("lenient with an unknown field: %v, %v; want {1 0}", out, err)
	}
	for _, payload := range []string{`{"x": "one"}`, `{"x": 1} {"y": 2}`} {
		if _, err := call(lenient, payload); !executor.IsPermanent(err) {
			t.Errorf("lenient %s: %v, want a permanent error", payload, err)
		}
	}
}

func TestLoggerWithoutWorker(t *testing.T) {
	t.Parallel()
	l := executor.Logger(context.Background())
	if l == nil || l.Enabled(context.Background(), slog.LevelError) {
		t.Errorf("Logger of a bare context logs: %v", l)
	}
	l.Info("goes nowhere")
}

func TestBuiltins(t *testing.T) {
	t.Parallel()
	m := executor.NewMux()
	executor.RegisterBuiltins(m)
	run := func(ctx context.Context, name, payload string) (string, error) {
		h, _ := m.Handler(name)
		out, err := h.HandleTask(ctx, &executor.Job{Name: "t", Payload: json.RawMessage(payload)})
		if err != nil {
			return "", err
		}
		data, _ := json.Marshal(out)
		return string(data), nil
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name, payload string
		ctx           context.Context
		want          string
		err           string
		permanent     bool
	}{
		{name: executor.BuiltinEcho, payload: `{"a": [1, 2]}`, want: `{"a":[1,2]}`},
		{name: executor.BuiltinEcho, payload: ``, want: `null`},
		{name: executor.BuiltinSleep, payload: `{"seconds": 0.01}`, want: `{"slept_seconds":0.01}`},
		{name: executor.BuiltinSleep, payload: `{"seconds": 0}`, want: `{"slept_seconds":0}`},
		{name: executor.BuiltinSleep, payload: `{"seconds": 60}`, ctx: cancelled, err: "context canceled"},
		{name: executor.BuiltinSleep, payload: `{"seconds": -1}`, err: `"seconds" is -1`, permanent: true},
		{name: executor.BuiltinSleep, payload: `{}`, err: `needs "seconds"`, permanent: true},
		{name: executor.BuiltinSleep, payload: `{"seconds": "1"}`, err: "cannot unmarshal", permanent: true},
		{name: executor.BuiltinFail, payload: ``, err: "builtin.fail: failed as asked"},
		{name: executor.BuiltinFail, payload: `{"message": "disk full"}`, err: "disk full"},
		{name: executor.BuiltinFail, payload: `[1]`, err: "payload ignored"},
	}
	for _, tt := range tests {
		ctx := tt.ctx
		if ctx == nil {
			ctx = context.Background()
		}
		got, err := run(ctx, tt.name, tt.payload)
		if tt.err == "" {
			if err != nil || got != tt.want {
				t.Errorf("%s %s = %s, %v; want %s", tt.name, tt.payload, got, err, tt.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.err) || executor.IsPermanent(err) != tt.permanent {
			t.Errorf("%s %s: error %v (permanent %v), want one containing %q (permanent %v)",
				tt.name, tt.payload, err, executor.IsPermanent(err), tt.err, tt.permanent)
		}
	}
	if _, err := run(cancelled, executor.BuiltinSleep, `{"seconds": 60}`); !errors.Is(err, context.Canceled) {
		t.Errorf("interrupted sleep returned %v, want it to wrap context.Canceled", err)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	valid := func() executor.Options { return executor.Options{Conn: w.nc, Mux: builtins()} }
	tests := []struct {
		name   string
		change func(o *executor.Options)
		err    string
	}{
		{"no conn", func(o *executor.Options) { o.Conn = nil }, "Conn is required"},
		{"no mux", func(o *executor.Options) { o.Mux = nil }, "Mux is required"},
		{"empty mux", func(o *executor.Options) { o.Mux = executor.NewMux() }, "at least one handler"},
		{"worker id with a dot", func(o *executor.Options) { o.WorkerID = "a.b" }, `worker id "a.b"`},
		{"pool with a space", func(o *executor.Options) { o.Pools = []string{"eu gpu"} }, `pool "eu gpu"`},
		{"pool twice", func(o *executor.Options) { o.Pools = []string{"a", "a"} }, `pool "a" is listed twice`},
		{"negative slots", func(o *executor.Options) { o.Slots = -1 }, "Slots is -1"},
		{"negative idle wait", func(o *executor.Options) { o.IdleWait = -time.Second }, "IdleWait is -1s"},
	}
	for _, tt := range tests {
		o := valid()
		tt.change(&o)
		if _, err := executor.New(o); err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%s: New = %v, want an error containing %q", tt.name, err, tt.err)
		}
	}
	s, err := executor.New(valid())
	if err != nil {
		t.Fatal(err)
	}
	if s.Slots() != executor.DefaultSlots || s.Busy() != 0 || !strings.Contains(s.WorkerID(), "-") {
		t.Errorf("defaults: slots %d, busy %d, worker id %q", s.Slots(), s.Busy(), s.WorkerID())
	}
}
