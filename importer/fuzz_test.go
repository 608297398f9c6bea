package importer_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/importer"
	"github.com/ax-scheduler/ax/schemas/taskdef"
)

// FuzzCrontab feeds the crontab reader any text: it never panics, and
// every task it imports is one AX accepts with a payload that decodes.
func FuzzCrontab(f *testing.F) {
	for _, s := range []string{
		"*/5 9-17 * * mon-fri /usr/bin/poll\n", "@daily x\n@reboot y\n", "CRON_TZ=Asia/Tokyo\n0 9 * * 7 a%b%c\\%d\n",
		"0 2 */3 * 1 x\n", "61 * * * * x\n", "A = 'b'\nMAILTO=x\n# c\n1-5/2,7 */2 1,15 jan-mar sun-sat echo\n", "-0 1 * * * q\n",
	} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, text string, system bool) {
		rep, err := importer.Crontab(strings.NewReader(text), importer.CrontabOptions{System: system, Timezone: "UTC"})
		if err != nil {
			return
		}
		for _, task := range rep.Tasks() {
			data, err := json.Marshal(task)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := taskdef.ParseTask(data); err != nil {
				t.Fatalf("imported a task AX refuses: %v\n%s", err, data)
			}
		}
	})
}

// FuzzQuartzCron translates any expression without panicking, and what
// it translates is a schedule AX's cron reads.
func FuzzQuartzCron(f *testing.F) {
	for _, s := range []string{"0 0 0 * * ? *", "0 0/15 9-17 ? * MON-FRI", "5/20 */7 1-23/4 1,15 * ?", "0 0 22-2 ? * *", "0 0 12 L * ?", "0 0 12 ? * 6#3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		sched, err := importer.QuartzCron(expr)
		if err != nil {
			return
		}
		if _, err := taskdef.ParseCronSchedule(sched, "UTC"); err != nil && !strings.Contains(err.Error(), "never fires") {
			t.Fatalf("%q became %q, which AX refuses: %v", expr, sched, err)
		}
	})
}
