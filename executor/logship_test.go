package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/executortest"
	"github.com/ax-scheduler/ax/internal/logtest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// logLines reads the task log lines of an instance from AX_LOGS, in order.
func (w *world) logLines(instanceID int64) []schemas.LogLine {
	w.t.Helper()
	s, err := w.js.Stream(w.t.Context(), w.topo.LogsStream())
	if err != nil {
		w.t.Fatal(err)
	}
	var lines []schemas.LogLine
	for seq := uint64(1); ; {
		m, err := s.GetMsg(w.t.Context(), seq, jetstream.WithGetMsgSubject(w.topo.Log(instanceID, "*")))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return lines
		}
		if err != nil {
			w.t.Fatal(err)
		}
		l, err := streams.Decode[schemas.LogLine](m.Subject, m.Data)
		if err != nil {
			w.t.Fatal(err)
		}
		lines = append(lines, l)
		seq = m.Sequence + 1
	}
}

// TestHandlerLogsShipToAXLogs checks the lines of a handler's logger: they
// reach AX_LOGS structured, in order, before the final report — the flush
// interval is an hour, so only the flush at the attempt's end ships them —
// and the worker's own log keeps those its level takes.
func TestHandlerLogsShipToAXLogs(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	mux := executor.NewMux()
	mux.HandleFunc("logs", func(ctx context.Context, task *executor.Job) (any, error) {
		log := executor.Logger(ctx)
		log.Info("charging", "order", "A-1", "cents", 1200)
		sub := log.With("step", "receipt")
		sub.Warn("receipt not sent", "error", errors.New("smtp timeout"))
		log.Debug("done")
		return nil, nil
	})
	workerLog := &logtest.Buffer{}
	opts := w.options(mux)
	opts.Logger = slog.New(zerolog.NewSlogHandler(zerolog.New(workerLog).Level(zerolog.WarnLevel)))
	opts.LogFlushInterval = time.Hour
	worker := executortest.Run(t, opts)

	before := time.Now()
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 42, Attempt: 2, Task: "checkout", Handler: "logs"})
	w.succeeded(42)

	lines := w.logLines(42)
	want := []struct{ level, msg, fields string }{
		{"info", "charging", `{"order":"A-1","cents":1200}`},
		{"warn", "receipt not sent", `{"step":"receipt","error":"smtp timeout"}`},
		{"debug", "done", ``},
	}
	if len(lines) != len(want) {
		t.Fatalf("AX_LOGS holds %d lines of the instance when its final report is out, want %d: %+v", len(lines), len(want), lines)
	}
	prev := before
	for i, l := range lines {
		if l.InstanceID != 42 || l.Task != "checkout" || l.Attempt != 2 || l.WorkerID != "w1" ||
			l.Level != want[i].level || l.Message != want[i].msg || string(l.Fields) != want[i].fields {
			t.Errorf("line %d = %+v, want %+v", i, l, want[i])
		}
		if l.Time.Before(prev) || l.Time.After(time.Now()) {
			t.Errorf("line %d written at %v, not after the previous line at %v", i, l.Time, prev)
		}
		prev = l.Time
	}

	// The worker's log, at warn, has the warning with the attempt's tags,
	// not the info line.
	var copied map[string]any
	out := workerLog.String()
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("worker log line %q: %v", line, err)
		}
		if m["message"] == "charging" {
			t.Errorf("the worker's log at warn has the info line %q", line)
		}
		if m["message"] == "receipt not sent" {
			copied = m
		}
	}
	if copied == nil || copied["level"] != "warn" || copied["service"] != "executor" || copied["worker_id"] != "w1" ||
		copied["task"] != "checkout" || copied["instance_id"] != 42.0 || copied["attempt"] != 2.0 ||
		copied["step"] != "receipt" || copied["error"] != "smtp timeout" {
		t.Errorf("worker log copy of the warning = %v\nworker log:\n%s", copied, out)
	}
	if n := worker.LogLinesDropped(); n != 0 {
		t.Errorf("LogLinesDropped = %d, want 0", n)
	}
}

// TestTaskLogsShipInBatchesAndOnTime: with an interval of an hour, 1000
// lines ship as two full batches while the handler still runs; with a
// short interval, a single line ships within it.
func TestTaskLogsShipInBatchesAndOnTime(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		lines    int
		interval time.Duration
	}{
		{"batches of 500", 1000, time.Hour},
		{"interval", 1, 20 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			release := make(chan struct{})
			mux := executor.NewMux()
			mux.HandleFunc("chatty", func(ctx context.Context, task *executor.Job) (any, error) {
				for i := range tt.lines {
					executor.Logger(ctx).Info("working", "i", i)
				}
				<-release
				return nil, nil
			})
			opts := w.options(mux)
			opts.Logger = nil
			opts.LogFlushInterval = tt.interval
			executortest.Run(t, opts)
			w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 7, Handler: "chatty"})
			w.nextOf(schemas.ReportStarted, 7)
			eventually(t, fmt.Sprintf("%d lines in AX_LOGS while the handler runs", tt.lines), func() bool {
				return len(w.logLines(7)) == tt.lines
			})
			close(release)
			w.nextOf(schemas.ReportSucceeded, 7)
			lines := w.logLines(7)
			for i, l := range lines {
				if string(l.Fields) != fmt.Sprintf(`{"i":%d}`, i) {
					t.Fatalf("line %d has fields %s: lines are out of order", i, l.Fields)
				}
			}
		})
	}
}

// TestTaskLogLevelAndPanics: lines below TaskLogLevel do not ship, and a
// handler's panic is a line of its log.
func TestTaskLogLevelAndPanics(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	mux := executor.NewMux()
	mux.HandleFunc("panics", func(ctx context.Context, task *executor.Job) (any, error) {
		executor.Logger(ctx).Debug("hidden")
		executor.Logger(ctx).Info("shown")
		panic("out of cheese")
	})
	opts := w.options(mux)
	opts.TaskLogLevel = slog.LevelInfo
	executortest.Run(t, opts)
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 9, Handler: "panics"})
	w.nextOf(schemas.ReportStarted, 9)
	w.nextOf(schemas.ReportFailed, 9)
	lines := w.logLines(9)
	if len(lines) != 2 || lines[0].Message != "shown" || lines[1].Message != "handler panicked" || lines[1].Level != "error" {
		t.Fatalf("lines = %+v, want shown and handler panicked", lines)
	}
	var f struct{ Panic, Stack string }
	if err := json.Unmarshal(lines[1].Fields, &f); err != nil || f.Panic != "out of cheese" || !strings.Contains(f.Stack, "goroutine") {
		t.Errorf("panic line fields = %s (%v)", lines[1].Fields, err)
	}
}

func TestLogOptions(t *testing.T) {
	t.Parallel()
	nc := newWorld(t).nc
	for _, tt := range []struct {
		opts executor.Options
		want string
	}{
		{executor.Options{LogBuffer: -1}, "executor options: LogBuffer is -1; use a positive number of lines or 0 for the default"},
		{executor.Options{LogFlushInterval: -time.Second}, "executor options: LogFlushInterval is -1s; use a positive duration or 0 for the default"},
	} {
		tt.opts.Conn, tt.opts.Mux = nc, builtins()
		if _, err := executor.New(tt.opts); err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("New(%+v) = %v, want %q", tt.opts, err, tt.want)
		}
	}
}
