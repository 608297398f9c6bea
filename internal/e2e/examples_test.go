package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/examples/executor/handlers"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
)

// exampleRuns says, for the task of each file in examples/, what a first
// firing sends and how its instance reaches an end (or, for a task that
// retries for minutes, the state that shows it runs as meant).
var exampleRuns = map[string]struct {
	payload string
	want    schemas.State
}{
	"hello":            {`{"name": "world"}`, schemas.StateSucceeded},
	"flush-caches":     {``, schemas.StateSucceeded},
	"ledger-close":     {`{"seconds": 0}`, schemas.StateSucceeded},
	"shop-sync":        {`{"shop_id": 42}`, schemas.StateSucceeded},
	"nightly-report":   {``, schemas.StateSucceeded},
	"fx-rates":         {``, schemas.StateSucceeded},
	"report-publish":   {``, schemas.StateSucceeded},
	"order-reminder":   {`{"order_id": 42, "email": "ann@example.com"}`, schemas.StateSucceeded},
	"disk-backup":      {``, schemas.StateSucceeded},
	"import-prices":    {``, schemas.StateRetrying}, // builtin.fail: retried by its policy
	"order-enrich":     {`{"customer_id": 7}`, schemas.StateSucceeded},
	"rebuild-index":    {``, schemas.StateSucceeded},
	"daily-settlement": {``, schemas.StateSucceeded},
	"ledger":           {``, schemas.StateSucceeded},
	"ledger-unsafe":    {``, schemas.StateSucceeded},
	"sleepy":           {`{"seconds": 0}`, schemas.StateSucceeded},
}

// TestExamplesRunAsShipped applies every task definition of examples/
// through the API and fires each task, with two example executors
// (examples/executor: the built-in handlers and the examples' own) as the
// workers, one of them the worker examples/pinned-worker.yaml names.
func TestExamplesRunAsShipped(t *testing.T) {
	s := newSystem(t)
	mux := builtinsMux()
	handlers.Register(mux)
	s.worker(executor.Options{WorkerID: "backup-host-1", Mux: mux, Version: "1.4.0", Slots: 16})
	s.worker(executor.Options{WorkerID: "example-2", Mux: mux, Version: "1.4.0", Slots: 16})

	var files []string
	for _, pattern := range []string{"../../examples/*.yaml", "../../examples/*.json"} {
		m, _ := filepath.Glob(pattern)
		files = append(files, m...)
	}
	var names []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		contentType := "application/yaml"
		if filepath.Ext(f) == ".json" {
			contentType = "application/json"
		}
		res, err := s.client.ApplyTask(context.Background(), data, contentType)
		if err != nil {
			t.Fatalf("apply %s: %v", f, err)
		}
		names = append(names, res.Task.TaskName)
		if _, ok := exampleRuns[res.Task.TaskName]; !ok {
			t.Errorf("%s defines task %s, which this test does not run: add it to exampleRuns", f, res.Task.TaskName)
		}
	}
	for name := range exampleRuns {
		if !slices.Contains(names, name) {
			t.Errorf("no file of examples/ defines task %s", name)
		}
	}

	ids := map[string]int64{}
	for _, name := range names {
		if name == "report-publish" || name == "fx-rates" {
			continue // the chain, below
		}
		ids[name] = s.fireExample(name, wire.FireRequest{Payload: json.RawMessage(exampleRuns[name].payload)})
	}
	// The chain: fx-rates fired into nightly-report's run completes the
	// join, and report-publish fires in that run.
	run := fmt.Sprintf("run-%d", ids["nightly-report"])
	ids["fx-rates"] = s.fireExample("fx-rates", wire.FireRequest{RunID: run})
	for name, id := range ids {
		inst := s.waitState(id, exampleRuns[name].want, time.Minute)
		if name == "disk-backup" && inst.WorkerID != "backup-host-1" {
			t.Errorf("disk-backup ran on %q, want backup-host-1", inst.WorkerID)
		}
	}
	waitFor(t, "report-publish to succeed in "+run, time.Minute, func() (bool, error) {
		list, err := s.store.ListInstances(context.Background(), store.InstanceFilter{Task: "report-publish"})
		if err != nil {
			return false, err
		}
		for _, inst := range list {
			if inst.RunID == run && inst.State.Terminal() {
				if inst.State != schemas.StateSucceeded {
					return false, fmt.Errorf("report-publish ended %s: %s", inst.State, inst.Error)
				}
				return true, nil
			}
		}
		return false, nil
	})
}

// fireExample fires a task through the API and returns its instance, once
// the dispatcher has made it.
func (s *system) fireExample(task string, req wire.FireRequest) int64 {
	s.t.Helper()
	res, err := s.client.Fire(context.Background(), task, req)
	if err != nil {
		s.t.Fatalf("fire %s: %v", task, err)
	}
	id := res.InstanceID
	waitFor(s.t, "the instance of "+task, time.Minute, func() (bool, error) {
		if id != 0 {
			return true, nil
		}
		inst, err := s.store.InstanceByEvent(context.Background(), task, res.EventID)
		if errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		id = inst.ID
		return err == nil, err
	})
	return id
}
