package e2e_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/shell"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/trigger/triggertest"
)

// TestShellRunsTheDefinitionsCommand runs an imported crontab line's
// task end to end: the cron trigger fires, the dispatcher gives the
// instance its trigger's payload from the definition, and builtin.shell
// runs the command. A cron firing published on the task's subject with
// another payload (anyone who may fire can publish one) runs the
// definition's command too, never its own.
func TestShellRunsTheDefinitionsCommand(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	dir := t.TempDir()
	payload, _ := json.Marshal(schemas.ShellPayload{Command: `echo "$MSG" >> ` + filepath.Join(dir, "ran"), Env: map[string]string{"MSG": "from the definition"}})
	s.apply(fmt.Sprintf(`
task_name: cron-shell
execution: {handler: builtin.shell}
triggers:
  - {type: cron, schedule: "0 * * * * *", payload: %s}
`, payload))
	mux := executor.NewMux()
	shell.Register(mux)
	s.executor("shell-1", mux, 2)

	// A forged tick of the same schedule, with a command of its own.
	forged, _ := json.Marshal(schemas.TriggerEvent{EventID: schemas.CronEventID("cron-shell", 0, time.Date(2024, 5, 1, 9, 0, 0, 0, time.UTC)),
		Task: "cron-shell", Source: schemas.SourceCron, FiredAt: time.Date(2024, 5, 1, 9, 0, 0, 0, time.UTC),
		Payload: json.RawMessage(`{"command": "touch ` + filepath.Join(dir, "forged") + `"}`)})
	nc, _ := s.srv.Connect()
	if err := nc.Publish(s.srv.Topology.Trigger("cron-shell"), forged); err != nil {
		t.Fatal(err)
	}

	clock := triggertest.NewClock(time.Date(2024, 5, 1, 10, 0, 30, 0, time.UTC))
	s.trigger("trigger", clock)
	clock.Step(t, 1) // to 10:01:00
	waitFor(t, "two instances succeeded", 60*time.Second, func() (bool, error) {
		list := s.instances("cron-shell")
		done := 0
		for _, in := range list {
			if in.State == schemas.StateFailed {
				return false, fmt.Errorf("instance %d failed: %s", in.ID, in.Error)
			}
			if in.State == schemas.StateSucceeded {
				done++
			}
		}
		return done == 2, nil
	})
	got, err := os.ReadFile(filepath.Join(dir, "ran"))
	if err != nil || string(got) != "from the definition\nfrom the definition\n" {
		t.Errorf("the definition's command wrote %q (%v), want two lines", got, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "forged")); !os.IsNotExist(err) {
		t.Errorf("the forged firing's command ran (%v)", err)
	}
}
