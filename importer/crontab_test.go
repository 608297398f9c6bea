package importer_test

import (
	"bufio"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/importer"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
)

func importFile(t *testing.T, path string, opts importer.CrontabOptions) *importer.Report {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	opts.Name = path
	rep, err := importer.Crontab(f, opts)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestCrontabManualExample imports the example cron file of crontab(5)
// and checks each task's next 20 ticks against crontab(5)'s rules, its
// % handling and its environment.
func TestCrontabManualExample(t *testing.T) {
	t.Parallel()
	rep := importFile(t, "testdata/crontab5-example.cron", importer.CrontabOptions{Timezone: "Europe/Berlin"})
	if i, c, r := rep.Counts(); i != 6 || c != 0 || r != 0 {
		var b strings.Builder
		rep.Print(&b)
		t.Fatalf("imported %d, changed %d, refused %d, want 6 imported:\n%s", i, c, r, b.String())
	}
	checkTicks(t, rep, "Europe/Berlin")
	for _, e := range rep.Entries {
		if e.Task.Owner != "paul" {
			t.Errorf("%s: owner %q, want paul (MAILTO)", e.Source, e.Task.Owner)
		}
	}
	joe := shellPayload(t, rep.Entries[2].Task)
	if joe.Command != `mail -s "It's 10pm" joe` || joe.Stdin != "Joe,\n\nWhere are your kids?\n" {
		t.Errorf("%% split into command %q and stdin %q", joe.Command, joe.Stdin)
	}
	if got := rep.Entries[2].Task.Description; got != "run at 10 pm on weekdays, annoy Joe" {
		t.Errorf("description %q, want the comment above the line", got)
	}
	wax := shellPayload(t, rep.Entries[5].Task)
	if want := `expr $(date +%s) / 60 / 60 / 24 % 9 > /dev/null || echo Wax the floor.`; wax.Command != want || wax.Stdin != "" {
		t.Errorf("escaped %% gave command %q stdin %q, want %q and none", wax.Command, wax.Stdin, want)
	}
}

// TestCrontabForms imports a crontab -l output with every form
// crontab(5) describes: what AX's cron can say is imported and ticks as
// cron would; @reboot, a zone AX cannot name, a day rule AX reads
// differently and a bad field are refused with the reason.
func TestCrontabForms(t *testing.T) {
	t.Parallel()
	rep := importFile(t, "testdata/forms.cron", importer.CrontabOptions{Timezone: "UTC", Tags: []string{"web-1"}})
	var b strings.Builder
	rep.Print(&b)
	refused := map[string]string{}
	for _, e := range rep.Entries {
		if e.Outcome == importer.Refused {
			refused[strings.TrimSpace(e.Text)] = e.Notes[0]
		}
	}
	wantRefused := map[string]string{
		"@reboot /usr/bin/at-boot":             "@reboot runs once when cron starts",
		"CRON_TZ=Mars/Olympus":                 "not an IANA time zone name",
		"0 9 * * * /usr/bin/martian":           "not an IANA time zone name",
		"0 2 */3 * 1 /usr/bin/both-restricted": "matching both day-of-month",
		"61 1 * * * /usr/bin/bad-minute":       "out of range 0-59",
	}
	for text, want := range wantRefused {
		if got, ok := refused[text]; !ok || !strings.Contains(got, want) {
			t.Errorf("line %q: refused %v with %q, want a reason with %q", text, ok, got, want)
		}
	}
	if len(refused) != len(wantRefused) {
		t.Errorf("refused %d lines, want %d:\n%s", len(refused), len(wantRefused), b.String())
	}
	if i, c, _ := rep.Counts(); i+c != 16 {
		t.Errorf("imported %d+%d tasks, want 16:\n%s", i, c, b.String())
	}
	checkTicks(t, rep, "UTC")
	byCmd := map[string]*schemas.Task{}
	for _, task := range rep.Tasks() {
		byCmd[shellPayload(t, task).Command] = task
		if task.Owner != "ops@example.com" || len(task.Dispatch.Tags) != 1 || task.TaskType != "crontab" {
			t.Errorf("%s: owner %q, tags %v, type %q", task.TaskName, task.Owner, task.Dispatch.Tags, task.TaskType)
		}
	}
	poll := byCmd["/usr/local/bin/poll --quiet"]
	if poll == nil || poll.Description != "every fifth minute on weekdays in business hours" {
		t.Fatalf("poll task %+v", poll)
	}
	if p := shellPayload(t, poll); p.Env["PATH"] != "/usr/local/bin:/usr/bin:/bin" || p.Env["GREETING"] != "hello world" || p.Env["MAILTO"] != "" {
		t.Errorf("poll env %v", p.Env)
	}
	if tokyo := byCmd["/usr/bin/tokyo-morning"]; tokyo == nil || tokyo.Triggers[0].Timezone != "Asia/Tokyo" {
		t.Errorf("CRON_TZ not applied: %+v", tokyo)
	}
	cat := shellPayload(t, byCmd["cat > /tmp/out"])
	if cat.Stdin != "line one\nline two % percent\n" {
		t.Errorf("stdin %q", cat.Stdin)
	}
	// The name is stable: the same line imports under the same name.
	again := importFile(t, "testdata/forms.cron", importer.CrontabOptions{Timezone: "UTC"})
	for i, task := range again.Tasks() {
		if want := rep.Tasks()[i].TaskName; task.TaskName != want {
			t.Errorf("second import named %s, first %s", task.TaskName, want)
		}
	}
	if poll.TaskName != "cron-poll-quiet-"+poll.TaskName[len(poll.TaskName)-6:] {
		t.Errorf("poll task named %s", poll.TaskName)
	}
}

func shellPayload(t *testing.T, task *schemas.Task) schemas.ShellPayload {
	t.Helper()
	var p schemas.ShellPayload
	if err := json.Unmarshal(task.Triggers[0].Payload, &p); err != nil {
		t.Fatalf("%s: payload %s: %v", task.TaskName, task.Triggers[0].Payload, err)
	}
	return p
}

// checkTicks compares each imported task's next 20 ticks, as AX computes
// them, with crontab(5)'s rules applied by refCrontab to the line it came
// from, in zone (Asia/Tokyo for the line CRON_TZ sets it for).
func checkTicks(t *testing.T, rep *importer.Report, zone string) {
	t.Helper()
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for _, e := range rep.Entries {
		text := strings.TrimSpace(e.Text)
		if e.Task == nil {
			continue
		}
		zone := zone
		if tz := e.Task.Triggers[0].Timezone; tz != zone {
			if !strings.Contains(text, "tokyo") {
				t.Errorf("%s: zone %q, want %q", e.Source, tz, zone)
			}
			zone = tz
		}
		got, err := taskdef.NextFireTimes(e.Task.Triggers[0], start, 20)
		if err != nil {
			t.Fatalf("%s: %v", e.Source, err)
		}
		loc, _ := time.LoadLocation(zone)
		want := refCrontab(t, strings.TrimPrefix(text, "-"), loc, start, 20)
		if len(got) != len(want) {
			t.Fatalf("%s: %d ticks, want %d", e.Source, len(got), len(want))
		}
		for i := range want {
			if !got[i].Equal(want[i]) {
				t.Errorf("%s (%s): tick %d is %s, crontab(5) says %s", e.Source, e.Task.Triggers[0].Schedule, i, got[i], want[i])
				break
			}
		}
	}
}

// refCrontab is crontab(5) read from the manual, apart from the importer:
// the minutes after start whose local time matches minute, hour and
// month, and whose day matches day-of-month and day-of-week both when
// either field begins with '*', else either one.
func refCrontab(t *testing.T, line string, loc *time.Location, start time.Time, n int) []time.Time {
	t.Helper()
	nick := map[string]string{"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
		"@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
	sc := bufio.NewScanner(strings.NewReader(line))
	sc.Split(bufio.ScanWords)
	var f []string
	for sc.Scan() && len(f) < 5 {
		if len(f) == 0 && strings.HasPrefix(sc.Text(), "@") {
			f = strings.Fields(nick[sc.Text()])
			break
		}
		f = append(f, sc.Text())
	}
	names := []string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}
	days := []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}
	match := func(expr string, v, lo, hi int, nm []string, base int) bool {
		for _, el := range strings.Split(expr, ",") {
			r, st, _ := strings.Cut(el, "/")
			step := 1
			if st != "" {
				step, _ = strconv.Atoi(st)
			}
			num := func(s string) int {
				for i, x := range nm {
					if strings.EqualFold(s, x) {
						return i + base
					}
				}
				k, err := strconv.Atoi(s)
				if err != nil {
					t.Fatalf("reference: %q in %q", s, line)
				}
				return k
			}
			a, b := lo, hi
			if r != "*" {
				x, y, isRange := strings.Cut(r, "-")
				a = num(x)
				b = a
				if isRange {
					b = num(y)
				}
			}
			if v >= a && v <= b && (v-a)%step == 0 {
				return true
			}
		}
		return false
	}
	var out []time.Time
	for m := start.Truncate(time.Minute).Add(time.Minute); len(out) < n; m = m.Add(time.Minute) {
		l := m.In(loc)
		wd := int(l.Weekday())
		domOK := match(f[2], l.Day(), 1, 31, nil, 0)
		dowOK := match(f[4], wd, 0, 7, days, 0) || wd == 0 && match(f[4], 7, 0, 7, days, 0)
		dayOK := domOK || dowOK
		if strings.HasPrefix(f[2], "*") || strings.HasPrefix(f[4], "*") {
			dayOK = domOK && dowOK
		}
		switch {
		case !dayOK || !match(f[3], int(l.Month()), 1, 12, names, 1):
			// Skip to the day's last minute: the loop steps into the next.
			m = time.Date(l.Year(), l.Month(), l.Day()+1, 0, 0, 0, 0, loc).Add(-time.Minute)
		case !match(f[1], l.Hour(), 0, 23, nil, 0):
			m = m.Add(time.Duration(59-l.Minute()) * time.Minute)
		case match(f[0], l.Minute(), 0, 59, nil, 0):
			out = append(out, m)
		}
		if m.Sub(start) > 25*366*24*time.Hour {
			t.Fatalf("reference: %q has no %d ticks in 25 years", line, n)
		}
	}
	return out
}

// TestCrontabRefusesLinesWithNUL reads a crontab whose MAILTO= and one
// command hold a NUL character, which PostgreSQL cannot store: each such
// line is refused with the reason, and the other lines import as tasks AX
// takes (the fuzzer found MAILTO=0\x00 making every task's owner one AX
// refuses).
func TestCrontabRefusesLinesWithNUL(t *testing.T) {
	t.Parallel()
	text := "MAILTO=ops\x00\n0 1 * * * echo a\x00b\n0 2 * * * /usr/bin/backup\n"
	rep, err := importer.Crontab(strings.NewReader(text), importer.CrontabOptions{Timezone: "UTC"})
	if err != nil {
		t.Fatal(err)
	}
	if i, c, r := rep.Counts(); i != 1 || c != 0 || r != 2 {
		var b strings.Builder
		rep.Print(&b)
		t.Fatalf("imported %d, changed %d, refused %d, want 1 imported and 2 refused:\n%s", i, c, r, b.String())
	}
	for _, e := range rep.Entries {
		if e.Task == nil {
			if len(e.Notes) == 0 || !strings.Contains(e.Notes[0], "NUL character") {
				t.Errorf("%s refused with %q, want the NUL character named", e.Source, e.Notes)
			}
			continue
		}
		data, err := json.Marshal(e.Task)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := taskdef.ParseTask(data); err != nil || e.Task.Owner != "" {
			t.Errorf("%s imported a task AX refuses (%v) or with the refused MAILTO's owner %q", e.Source, err, e.Task.Owner)
		}
	}
}
