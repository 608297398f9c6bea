package api_test

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
)

// TestDesignTaskApplies applies the design's own task definition,
// examples/design-task.json, as it is written: a timeout of 1800 seconds
// given as a number, and a cron trigger whose schedule is named cron.
func TestDesignTaskApplies(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	data, err := os.ReadFile("../examples/design-task.json")
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.client.ApplyTask(t.Context(), data, "application/json")
	if err != nil {
		t.Fatalf("apply examples/design-task.json: %v", err)
	}
	task := res.Task
	if task.TaskName != "daily-settlement" || task.Execution.Timeout != "1800s" || task.TimeoutDuration() != 30*time.Minute {
		t.Errorf("applied %s with timeout %q (%v), want daily-settlement with 1800s (30m)", task.TaskName, task.Execution.Timeout, task.TimeoutDuration())
	}
	want := schemas.Trigger{Type: schemas.TriggerTypeCron, Schedule: "0 2 * * *", Timezone: "Asia/Shanghai", Misfire: schemas.MisfireFireOnce}
	if len(task.Triggers) == 0 || !reflect.DeepEqual(task.Triggers[0], want) {
		t.Errorf("triggers = %+v, want the first %+v", task.Triggers, want)
	}
	// 02:00 in Shanghai (UTC+8, no daylight saving time) is 18:00 UTC.
	info, err := e.client.GetTask(t.Context(), "daily-settlement")
	if err != nil {
		t.Fatal(err)
	}
	if len(info.NextFireTimes) == 0 || len(info.NextFireTimes[0].UTC) == 0 {
		t.Fatalf("next fire times = %+v, want those of the cron trigger", info.NextFireTimes)
	}
	for _, at := range info.NextFireTimes[0].UTC {
		if h, m, _ := at.Clock(); h != 18 || m != 0 {
			t.Errorf("next firing at %v, want 18:00 UTC (02:00 Asia/Shanghai)", at)
		}
	}
}

// TestEveryExampleApplies applies each task definition of examples/
// through the API.
func TestEveryExampleApplies(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	files := exampleFiles(t)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		contentType := "application/yaml"
		if filepath.Ext(f) == ".json" {
			contentType = "application/json"
		}
		if _, err := e.client.ApplyTask(t.Context(), data, contentType); err != nil {
			t.Errorf("apply %s: %v", f, err)
		}
	}
	tasks, err := e.client.ListTasks(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != len(files) {
		t.Errorf("%d tasks from %d example files: each file defines one task of its own", len(tasks), len(files))
	}
}

// exampleFiles lists the task definitions in examples/.
func exampleFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, pattern := range []string{"../examples/*.yaml", "../examples/*.json"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	slices.Sort(files)
	if len(files) < 10 {
		t.Fatalf("found %d example files, want the dozen in examples/", len(files))
	}
	return files
}
