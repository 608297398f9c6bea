package e2e_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ax-scheduler/ax/dispatcher"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// TestUnstorableReportsDelayNoOther sends, as the worker of four attempts,
// reports holding text PostgreSQL cannot store — a NUL character in a
// success's output, in a failure's error and in a progress message — a
// success whose output's number PostgreSQL refuses, and a good success, while a served task runs beside them. Before the reports
// were made storable, the first batch holding one failed for good and
// took every report batched with it down too. Now each bad report ends its
// attempt with a storable record that says what was wrong, the good report
// of the same batch is applied, and the served task's instances all end.
func TestUnstorableReportsDelayNoOther(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	s := newSystem(t, func(o *dispatcher.Options) { o.Metrics = reg })
	ctx := context.Background()
	top := s.srv.Topology

	mux := executor.NewMux()
	mux.HandleFunc("test.ok", func(ctx context.Context, task *executor.Job) (any, error) { return "ok", nil })
	// A Go handler whose output holds a NUL: the SDK refuses to send it.
	mux.HandleFunc("test.nul", func(ctx context.Context, task *executor.Job) (any, error) {
		return map[string]string{"note": "a\x00b"}, nil
	})
	s.executor("w-served", mux, 4)
	s.apply("task_name: ok\nexecution:\n  handler: test.ok\n")
	s.apply("task_name: nul\nexecution:\n  handler: test.nul\n")
	// No executor serves this handler: the test is its worker.
	s.apply("task_name: unserved\nexecution:\n  handler: test.unserved\n")

	ids := make([]int64, 5)
	for i := range ids {
		ids[i] = s.fire("unserved", nil)
	}
	for _, id := range ids {
		s.waitState(id, schemas.StateDispatched, time.Minute)
	}
	const worker = "w-proto"
	// Its record and grant keys, as an SDK writes them.
	s.putWorker(worker, map[string]any{"handlers": []string{"test.unserved"}})
	now := time.Now()
	reports := []schemas.Report{
		{InstanceID: ids[0], Kind: schemas.ReportSucceeded, Output: json.RawMessage(`{"note":"a\u0000b"}`)},
		{InstanceID: ids[1], Kind: schemas.ReportFailed, Error: "broke\x00here", Permanent: true},
		{InstanceID: ids[2], Kind: schemas.ReportProgress, Progress: &schemas.Progress{Done: 1, Total: 2, Message: "half\x00way"}},
		{InstanceID: ids[3], Kind: schemas.ReportSucceeded, Output: json.RawMessage(`{"note":"fine"}`)},
		// Valid JSON, no bad text, but beyond jsonb's numbers: only
		// PostgreSQL finds it, and splitting the batch finds the report.
		{InstanceID: ids[4], Kind: schemas.ReportSucceeded, Output: json.RawMessage(`{"n":1e1000000}`)},
	}
	for _, r := range reports {
		r.Attempt, r.WorkerID, r.StartedAt, r.At = 1, worker, now, time.Now()
		if _, err := streams.Publish(ctx, s.js, top.Report(schemas.DefaultPool, worker, r.InstanceID), "", r); err != nil {
			t.Fatal(err)
		}
	}
	okIDs := make([]int64, 10)
	for i := range okIDs {
		okIDs[i] = s.fire("ok", nil)
	}
	nul := s.fire("nul", nil)

	if in := s.waitState(ids[3], schemas.StateSucceeded, time.Minute); string(in.Output) != `{"note": "fine"}` && string(in.Output) != `{"note":"fine"}` {
		t.Errorf("the good report's output = %s; want {\"note\":\"fine\"}", in.Output)
	}
	in := s.waitState(ids[0], schemas.StateFailed, time.Minute)
	if len(in.Output) != 0 || !strings.Contains(in.Error, "output.note") || !strings.Contains(in.Error, "NUL") {
		t.Errorf("a success with a NUL in its output was recorded with output %s, error %q; want no output and an error naming output.note's NUL", in.Output, in.Error)
	}
	if in.Attempt != 1 {
		t.Errorf("the success with an unstorable output ended at attempt %d; want 1: its handler ran, so it must not run again", in.Attempt)
	}
	if in := s.waitState(ids[1], schemas.StateFailed, time.Minute); in.Error != "broke\uFFFDhere" {
		t.Errorf("a failure's error with a NUL was recorded as %q; want %q", in.Error, "broke\uFFFDhere")
	}
	in = s.waitState(ids[4], schemas.StateFailed, time.Minute)
	if len(in.Output) != 0 || !strings.Contains(in.Error, "PostgreSQL refused the succeeded report") || in.Attempt != 1 {
		t.Errorf("a success whose output PostgreSQL refuses ended at attempt %d with output %s, error %q; want attempt 1, no output and the refusal", in.Attempt, in.Output, in.Error)
	}
	waitFor(t, "the progress report with a NUL to be applied", time.Minute, func() (bool, error) {
		in, err := s.client.GetInstance(ctx, ids[2])
		if err != nil {
			return false, err
		}
		return in.Progress != nil && in.Progress.Message == "half\uFFFDway", nil
	})
	if n := counterValue(t, reg, "ax_dispatcher_unstorable_reports_total", "kind", "succeeded"); n < 2 {
		t.Errorf("ax_dispatcher_unstorable_reports_total{kind=succeeded} = %v; want at least 2 (one mended, one bare)", n)
	}
	for _, id := range okIDs {
		s.waitState(id, schemas.StateSucceeded, time.Minute)
	}
	in = s.waitState(nul, schemas.StateFailed, time.Minute)
	if !strings.Contains(in.Error, "note") || !strings.Contains(in.Error, "NUL") || in.Attempt != 1 {
		t.Errorf("a Go handler's output with a NUL ended at attempt %d with error %q; want attempt 1 and an error naming note's NUL", in.Attempt, in.Error)
	}
}
