package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas/taskdef"
)

// TestImportCrontab imports crontab -l output from standard input: the
// report names each line's fate, --out writes definitions AX parses, and
// --apply registers them through the API under stable names.
func TestImportCrontab(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	crontab := "MAILTO=ops@example.com\n# nightly backup\n0 2 * * * /usr/bin/backup --full\n@reboot /usr/bin/boot\n"
	dir := t.TempDir()
	code, out, errOut := e.ax(crontab, "import", "crontab", "-", "--timezone", "Europe/Berlin", "--out", dir)
	if code != 0 || !strings.Contains(out, "stdin:3\timported\tcron-backup-full-") || !strings.Contains(out, "stdin:4\trefused") ||
		!strings.Contains(out, "1 imported, 0 changed, 1 refused") {
		t.Fatalf("exit %d, printed\n%s%s", code, out, errOut)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if len(files) != 1 {
		t.Fatalf("wrote %v, want one definition", files)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	task, err := taskdef.ParseTask(data)
	if err != nil || task.Owner != "ops@example.com" || task.Description != "nightly backup" || task.Triggers[0].Timezone != "Europe/Berlin" {
		t.Fatalf("definition %s: %+v, %v", data, task, err)
	}
	code, out, errOut = e.ax(crontab, "import", "crontab", "-", "--apply")
	name := strings.TrimSuffix(filepath.Base(files[0]), ".yaml")
	if code != 0 || !strings.Contains(errOut, "task "+name+" created") {
		t.Fatalf("--apply: exit %d\n%s%s", code, out, errOut)
	}
	if got := e.mustAx("task", "get", name, "-o", "json"); !strings.Contains(got, "/usr/bin/backup --full") {
		t.Errorf("applied task %s", got)
	}
	// For a crontab, shadow report lists the ticks AX would fire.
	out = e.mustAx("shadow", "report", name, "--timezone", "UTC", "--from", "2026-03-02T00:00:00Z", "--to", "2026-03-04T00:00:00Z")
	if !strings.Contains(out, name+" (AX's ticks computed: it recorded none in the window): 2 ticks\n    2026-03-02 02:00:00\n    2026-03-03 02:00:00\n") {
		t.Errorf("shadow report printed\n%s", out)
	}

	// --disabled: a new task is applied disabled, with its triggers.
	other := "0 3 * * * /usr/bin/other\n"
	code, out, errOut = e.ax(other, "import", "crontab", "-", "--apply", "--disabled")
	if code != 0 || !strings.Contains(errOut, "disabled (ax task enable") {
		t.Fatalf("--apply --disabled: exit %d\n%s%s", code, out, errOut)
	}
	var info wire.TaskInfo
	got := e.mustAx("task", "get", "-o", "json", strings.Fields(strings.SplitN(errOut, "task ", 2)[1])[0])
	if err := json.Unmarshal([]byte(got), &info); err != nil || info.Enabled || len(info.Task.Triggers) != 1 {
		t.Errorf("--disabled applied %s (%v)", got, err)
	}
}
