package taskdef

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the tests name zones; do not depend on the machine's zoneinfo

	"github.com/robfig/cron/v3"

	"github.com/ax-scheduler/ax/schemas"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestParseCronScheduleAccepts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		expr, zone string
		after      string
		next       string // the first tick after after, UTC
	}{
		{"0 2 * * *", "", "2024-05-01T00:00:00Z", "2024-05-01T02:00:00Z"},
		{"0 2 * * *", "UTC", "2024-05-01T02:00:00Z", "2024-05-02T02:00:00Z"},
		{"0 2 * * *", "Europe/Berlin", "2024-05-01T00:00:00Z", "2024-05-02T00:00:00Z"},
		{"*/10 * * * * *", "", "2024-05-01T00:00:01Z", "2024-05-01T00:00:10Z"},
		{"30 0 2 * * *", "", "2024-05-01T00:00:00Z", "2024-05-01T02:00:30Z"},
		{"0 9 * * mon-fri", "America/New_York", "2024-05-04T00:00:00Z", "2024-05-06T13:00:00Z"},
		{"0 0 1 jan,jul ?", "", "2024-05-01T00:00:00Z", "2024-07-01T00:00:00Z"},
		{"0 0 29 2 *", "", "2024-03-01T00:00:00Z", "2028-02-29T00:00:00Z"},
		{" 15 3 * * * ", "", "2024-05-01T00:00:00Z", "2024-05-01T03:15:00Z"},
		{"@yearly", "", "2024-05-01T00:00:00Z", "2025-01-01T00:00:00Z"},
		{"@annually", "Asia/Tokyo", "2024-05-01T00:00:00Z", "2024-12-31T15:00:00Z"},
		{"@monthly", "", "2024-05-01T00:00:00Z", "2024-06-01T00:00:00Z"},
		{"@weekly", "", "2024-05-01T00:00:00Z", "2024-05-05T00:00:00Z"},
		{"@daily", "", "2024-05-01T00:00:00Z", "2024-05-02T00:00:00Z"},
		{"@midnight", "Asia/Kolkata", "2024-05-01T00:00:00Z", "2024-05-01T18:30:00Z"},
		{"@hourly", "", "2024-05-01T00:30:00Z", "2024-05-01T01:00:00Z"},
		{"@every 30s", "", "2024-05-01T00:00:10Z", "2024-05-01T00:00:30Z"},
		{"@every 1h30m", "Europe/Berlin", "2024-05-01T00:00:00Z", "2024-05-01T01:30:00Z"},
	} {
		s, err := ParseCronSchedule(tc.expr, tc.zone)
		if err != nil {
			t.Errorf("ParseCronSchedule(%q, %q): %v", tc.expr, tc.zone, err)
			continue
		}
		if got := s.Next(utc(tc.after)); !got.Equal(utc(tc.next)) {
			t.Errorf("%q in %q: Next(%s) = %s, want %s", tc.expr, tc.zone, tc.after, got.UTC().Format(time.RFC3339), tc.next)
		}
		if s.Expr() != tc.expr {
			t.Errorf("Expr() = %q, want %q", s.Expr(), tc.expr)
		}
	}
}

func TestParseCronScheduleRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		expr, zone string
		field, msg string
	}{
		{"", "", "schedule", "is not a valid cron expression: it is empty; write 5 fields"},
		{"* *", "", "schedule", "is not a valid cron expression: it has the wrong number of fields (found 2: [* *]); write 5 fields"},
		{"* * * * * * *", "", "schedule", "wrong number of fields (found 7"},
		{"x * * * *", "", "schedule", `is not a valid cron expression: "x" is not a number or a month or weekday name`},
		{"0 24 * * *", "", "schedule", "is not a valid cron expression: end of range (24) above maximum (23): 24"},
		{"60 * * * * *", "", "schedule", "end of range (60) above maximum (59)"},
		{"*/0 * * * *", "", "schedule", "step of range should be a positive number"},
		{"1-2-3 * * * *", "", "schedule", "too many hyphens"},
		{"@fortnightly", "", "schedule", "is not a valid cron expression: @fortnightly is not a descriptor"},
		{"@every 5x", "", "schedule", `failed to parse duration @every 5x: time: unknown unit "x"`},
		{"@every 500ms", "", "schedule", `must be "@every" a whole number of seconds, at least 1s`},
		{"@every 1500ms", "", "schedule", "a whole number of seconds"},
		{"@every -1m", "", "schedule", "at least 1s"},
		{"0 0 30 2 *", "", "schedule", "never fires: no date matches it (such as 30 February or 31 April)"},
		{"0 0 31 4,6 *", "", "schedule", "never fires"},
		{"TZ=UTC 0 2 * * *", "", "schedule", "must not name a time zone (TZ=… or CRON_TZ=…); set the trigger's timezone instead"},
		{"CRON_TZ=Europe/Berlin 0 2 * * *", "", "schedule", "must not name a time zone"},
		{"TZ=", "", "schedule", "must not name a time zone"}, // robfig/cron panics on this one
		{"0 2 * * *", "Mars/Olympus_Mons", "timezone", `must be an IANA time zone name such as UTC, Europe/Berlin or America/New_York (names are case-sensitive): "Mars/Olympus_Mons" is not one`},
		{"0 2 * * *", "europe/berlin", "timezone", "is not one"},
		{"0 2 * * *", "Local", "timezone", `"Local" depends on the machine`},
		{"0 2 * * *", "../etc/passwd", "timezone", "is not one"},
	} {
		_, err := ParseCronSchedule(tc.expr, tc.zone)
		requireProblem(t, err, "cron trigger", tc.field, tc.msg)
	}
	// Both fields wrong: both problems, sorted by field.
	_, err := ParseCronSchedule("* *", "Nowhere/Land")
	var verr *schemas.ValidationError
	if !errors.As(err, &verr) || len(verr.Problems) != 2 || verr.Problems[0].Field != "schedule" || verr.Problems[1].Field != "timezone" {
		t.Errorf("ParseCronSchedule with both wrong = %v, want a problem for schedule and one for timezone", err)
	}
}

var cronTaskAccepts = []struct {
	name string
	in   string
	want []schemas.Trigger
}{
	{"cron minimal", root(`"triggers":[{"type":"cron","schedule":"0 2 * * *"}]`), []schemas.Trigger{{Type: schemas.TriggerTypeCron, Schedule: "0 2 * * *"}}},
	{"cron every field", root(`"triggers":[{"type":"cron","schedule":"*/10 * * * * *","timezone":"Europe/Berlin","misfire":"catch_up","max_catch_up":1000}]`),
		[]schemas.Trigger{{Type: schemas.TriggerTypeCron, Schedule: "*/10 * * * * *", Timezone: "Europe/Berlin", Misfire: schemas.MisfireCatchUp, MaxCatchUp: 1000}}},
	{"cron catch_up default max", root(`"triggers":[{"type":"cron","schedule":"@daily","misfire":"catch_up"}]`),
		[]schemas.Trigger{{Type: schemas.TriggerTypeCron, Schedule: "@daily", Misfire: schemas.MisfireCatchUp}}},
	{"cron fire_once", root(`"triggers":[{"type":"cron","schedule":"@every 30s","misfire":"fire_once"}]`),
		[]schemas.Trigger{{Type: schemas.TriggerTypeCron, Schedule: "@every 30s", Misfire: schemas.MisfireFireOnce}}},
	{"cron beside event", "task_name: demo\nexecution: {handler: h}\ntriggers:\n  - type: event\n  - type: cron\n    schedule: '30 2 * * *'\n    timezone: America/New_York\n    misfire: skip\n",
		[]schemas.Trigger{{Type: schemas.TriggerTypeEvent}, {Type: schemas.TriggerTypeCron, Schedule: "30 2 * * *", Timezone: "America/New_York", Misfire: schemas.MisfireSkip}}},
}

func TestParseTaskCronAccepts(t *testing.T) {
	t.Parallel()
	for _, tc := range cronTaskAccepts {
		task, err := ParseTask([]byte(tc.in))
		if err != nil {
			t.Errorf("%s: ParseTask: %v", tc.name, err)
			continue
		}
		if !reflect.DeepEqual(task.Triggers, tc.want) {
			t.Errorf("%s: triggers = %+v, want %+v", tc.name, task.Triggers, tc.want)
		}
	}
}

var cronTaskRejects = []struct {
	name, in, field, msg string
}{
	{"schedule missing", root(`"triggers":[{"type":"cron"}]`), "triggers[0].schedule", "is required"},
	{"schedule empty", root(`"triggers":[{"type":"cron","schedule":""}]`), "triggers[0].schedule", "must not be empty"},
	{"schedule not a string", root(`"triggers":[{"type":"cron","schedule":5}]`), "triggers[0].schedule", "must be a string, not a number"},
	{"schedule bad", root(`"triggers":[{"type":"event"},{"type":"cron","schedule":"0 25 * * *"}]`), "triggers[1].schedule",
		"is not a valid cron expression: end of range (25) above maximum (23): 25; write 5 fields"},
	{"timezone bad", root(`"triggers":[{"type":"cron","schedule":"@daily","timezone":"CEST"}]`), "triggers[0].timezone",
		"must be an IANA time zone name"},
	{"timezone empty", root(`"triggers":[{"type":"cron","schedule":"@daily","timezone":""}]`), "triggers[0].timezone", "must not be empty"},
	{"misfire unknown", root(`"triggers":[{"type":"cron","schedule":"@daily","misfire":"run_all"}]`), "triggers[0].misfire", "must be one of skip, fire_once, catch_up"},
	{"max_catch_up without catch_up", root(`"triggers":[{"type":"cron","schedule":"@daily","max_catch_up":5}]`), "triggers[0].max_catch_up",
		"must be left out unless misfire is catch_up; remove it or set misfire: catch_up"},
	{"max_catch_up with skip", root(`"triggers":[{"type":"cron","schedule":"@daily","misfire":"skip","max_catch_up":5}]`), "triggers[0].max_catch_up",
		"must be left out unless misfire is catch_up"},
	{"max_catch_up zero", root(`"triggers":[{"type":"cron","schedule":"@daily","misfire":"catch_up","max_catch_up":0}]`), "triggers[0].max_catch_up", "must be at least 1"},
	{"max_catch_up too big", root(`"triggers":[{"type":"cron","schedule":"@daily","misfire":"catch_up","max_catch_up":1001}]`), "triggers[0].max_catch_up", "must be at most 1000"},
	{"schedule on event", root(`"triggers":[{"type":"event","schedule":"@daily"}]`), "triggers[0].schedule", "must be left out unless type is cron; remove it or set type: cron"},
	{"timezone on manual", root(`"triggers":[{"type":"manual","timezone":"UTC"}]`), "triggers[0].timezone", "must be left out unless type is cron"},
	{"misfire on event", root(`"triggers":[{"type":"event","misfire":"skip"}]`), "triggers[0].misfire", "must be left out unless type is cron"},
	{"unknown cron field", root(`"triggers":[{"type":"cron","schedule":"@daily","jitter":"5s"}]`), "triggers[0]",
		`unknown field "jitter"; remove it (allowed: cron, max_catch_up, misfire, payload, schedule, timezone, type)`},
}

func TestParseTaskCronRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range cronTaskRejects {
		task, err := ParseTask([]byte(tc.in))
		if err == nil {
			t.Errorf("%s: ParseTask accepted %s as %+v", tc.name, tc.in, task)
			continue
		}
		requireProblem(t, err, "task definition", tc.field, tc.msg)
	}
}

func TestTriggerWithDefaults(t *testing.T) {
	t.Parallel()
	task, err := ParseTask([]byte(root(`"triggers":[{"type":"event"},{"type":"cron","schedule":"@daily"},{"type":"cron","schedule":"@hourly","misfire":"catch_up"},{"type":"cron","schedule":"@hourly","timezone":"Asia/Tokyo","misfire":"catch_up","max_catch_up":3}]`)))
	if err != nil {
		t.Fatal(err)
	}
	want := []schemas.Trigger{
		{Type: schemas.TriggerTypeEvent},
		{Type: schemas.TriggerTypeCron, Schedule: "@daily", Timezone: "UTC", Misfire: schemas.MisfireSkip},
		{Type: schemas.TriggerTypeCron, Schedule: "@hourly", Timezone: "UTC", Misfire: schemas.MisfireCatchUp, MaxCatchUp: 10},
		{Type: schemas.TriggerTypeCron, Schedule: "@hourly", Timezone: "Asia/Tokyo", Misfire: schemas.MisfireCatchUp, MaxCatchUp: 3},
	}
	d := task.WithDefaults()
	if !reflect.DeepEqual(d.Triggers, want) {
		t.Errorf("WithDefaults().Triggers = %+v, want %+v", d.Triggers, want)
	}
	if task.Triggers[1].Timezone != "" {
		t.Error("WithDefaults changed the task it was called on")
	}
	// A definition with its defaults filled in is still valid.
	if _, err := ParseTask(mustJSON(t, d)); err != nil {
		t.Errorf("the defaults make the task invalid: %v", err)
	}
}

// ticks returns the first n ticks of s after from, as RFC 3339 UTC strings.
func ticks(s interface{ Next(time.Time) time.Time }, from time.Time, n int) []string {
	var out []string
	for range n {
		from = s.Next(from)
		out = append(out, from.UTC().Format(time.RFC3339))
	}
	return out
}

// dstCases are the daylight saving time rules of CronSchedule, in the two
// zones most users meet and three unusual ones. In 2024 America/New_York
// springs forward on 10 March at 02:00 EST (07:00Z) and falls back on 3
// November at 02:00 EDT (06:00Z); Europe/Berlin springs forward on 31 March at
// 02:00 CET (01:00Z) and falls back on 27 October at 03:00 CEST (01:00Z).
var dstCases = []struct {
	name, zone, expr, from string
	// robfig is what robfig/cron's SpecSchedule.Next gives, for the record;
	// want is what CronSchedule.Next gives.
	robfig, want []string
}{
	{"New York spring: 02:30 does not exist, fires at 03:00 EDT",
		"America/New_York", "30 2 * * *", "2024-03-09T12:00:00Z",
		[]string{"2024-03-11T06:30:00Z", "2024-03-12T06:30:00Z"},
		[]string{"2024-03-10T07:00:00Z", "2024-03-11T06:30:00Z", "2024-03-12T06:30:00Z"}},
	{"New York spring: every quarter of the missing hour fires once",
		"America/New_York", "*/15 2 * * *", "2024-03-10T05:00:00Z",
		[]string{"2024-03-11T06:00:00Z"},
		[]string{"2024-03-10T07:00:00Z", "2024-03-11T06:00:00Z", "2024-03-11T06:15:00Z"}},
	{"New York spring: the gap's end is also a tick, fires once",
		"America/New_York", "0 2,3 * * *", "2024-03-10T05:00:00Z",
		[]string{"2024-03-10T07:00:00Z", "2024-03-11T06:00:00Z"},
		[]string{"2024-03-10T07:00:00Z", "2024-03-11T06:00:00Z", "2024-03-11T07:00:00Z"}},
	{"New York spring: an hourly cadence stays hourly",
		"America/New_York", "0 * * * *", "2024-03-10T05:30:00Z",
		[]string{"2024-03-10T06:00:00Z", "2024-03-10T07:00:00Z", "2024-03-10T08:00:00Z"},
		[]string{"2024-03-10T06:00:00Z", "2024-03-10T07:00:00Z", "2024-03-10T08:00:00Z"}},
	{"New York fall: 01:30 occurs twice, fires once",
		"America/New_York", "30 1 * * *", "2024-11-02T12:00:00Z",
		[]string{"2024-11-03T05:30:00Z", "2024-11-03T06:30:00Z", "2024-11-04T06:30:00Z"},
		[]string{"2024-11-03T05:30:00Z", "2024-11-04T06:30:00Z"}},
	{"New York fall: a repeated hour's minutes fire once each",
		"America/New_York", "*/20 1 * * *", "2024-11-03T04:30:00Z",
		[]string{"2024-11-03T05:00:00Z", "2024-11-03T05:20:00Z", "2024-11-03T05:40:00Z", "2024-11-03T06:00:00Z"},
		[]string{"2024-11-03T05:00:00Z", "2024-11-03T05:20:00Z", "2024-11-03T05:40:00Z", "2024-11-04T06:00:00Z"}},
	{"New York fall: an hourly cadence stays hourly",
		"America/New_York", "0 * * * *", "2024-11-03T04:30:00Z",
		[]string{"2024-11-03T05:00:00Z", "2024-11-03T06:00:00Z", "2024-11-03T07:00:00Z"},
		[]string{"2024-11-03T05:00:00Z", "2024-11-03T06:00:00Z", "2024-11-03T07:00:00Z"}},
	{"New York fall: seconds in the repeated hour fire once",
		"America/New_York", "0 0 1 * * *", "2024-11-03T04:30:00Z",
		[]string{"2024-11-03T05:00:00Z", "2024-11-03T06:00:00Z"},
		[]string{"2024-11-03T05:00:00Z", "2024-11-04T06:00:00Z"}},
	{"Berlin spring: 02:30 does not exist, fires at 03:00 CEST",
		"Europe/Berlin", "30 2 * * *", "2024-03-30T12:00:00Z",
		[]string{"2024-04-01T00:30:00Z"},
		[]string{"2024-03-31T01:00:00Z", "2024-04-01T00:30:00Z"}},
	{"Berlin fall: 02:30 occurs twice, fires once",
		"Europe/Berlin", "30 2 * * *", "2024-10-26T12:00:00Z",
		[]string{"2024-10-27T00:30:00Z", "2024-10-27T01:30:00Z"},
		[]string{"2024-10-27T00:30:00Z", "2024-10-28T01:30:00Z"}},
	{"Berlin fall: @daily is untouched",
		"Europe/Berlin", "@daily", "2024-10-26T12:00:00Z",
		[]string{"2024-10-26T22:00:00Z", "2024-10-27T23:00:00Z"},
		[]string{"2024-10-26T22:00:00Z", "2024-10-27T23:00:00Z"}},
	{"Sao Paulo 2018: midnight does not exist, @daily fires at 01:00 -02",
		"America/Sao_Paulo", "@daily", "2018-11-03T12:00:00Z",
		[]string{"2018-11-05T02:00:00Z"},
		[]string{"2018-11-04T03:00:00Z", "2018-11-05T02:00:00Z"}},
	{"Lord Howe spring: a 30-minute gap",
		"Australia/Lord_Howe", "15 2 * * *", "2024-10-05T00:00:00Z",
		[]string{"2024-10-06T15:15:00Z"},
		[]string{"2024-10-05T15:30:00Z", "2024-10-06T15:15:00Z"}},
	{"Lord Howe fall: a 30-minute repeat",
		"Australia/Lord_Howe", "45 1 * * *", "2024-04-06T00:00:00Z",
		[]string{"2024-04-06T14:45:00Z", "2024-04-06T15:15:00Z"},
		[]string{"2024-04-06T14:45:00Z", "2024-04-07T15:15:00Z"}},
}

func TestCronScheduleDST(t *testing.T) {
	t.Parallel()
	for _, tc := range dstCases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ParseCronSchedule(tc.expr, tc.zone)
			if err != nil {
				t.Fatal(err)
			}
			if got := ticks(s, utc(tc.from), len(tc.want)); !slices.Equal(got, tc.want) {
				t.Errorf("ticks = %v, want %v", got, tc.want)
			}
			// What robfig/cron does alone, so that a change in it shows here.
			raw, err := cronParser.Parse(tc.expr)
			if err != nil {
				t.Fatal(err)
			}
			loc, _ := time.LoadLocation(tc.zone)
			raw.(*cron.SpecSchedule).Location = loc
			if got := ticks(raw, utc(tc.from), len(tc.robfig)); !slices.Equal(got, tc.robfig) {
				t.Errorf("robfig/cron's ticks = %v, want %v", got, tc.robfig)
			}
		})
	}
}

func TestCronScheduleNextIsInZone(t *testing.T) {
	t.Parallel()
	for _, expr := range []string{"0 2 * * *", "@every 1h"} {
		s, err := ParseCronSchedule(expr, "Asia/Tokyo")
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Next(utc("2024-05-01T00:00:00Z")).Location().String(); got != "Asia/Tokyo" {
			t.Errorf("%q: Next is in %s, want Asia/Tokyo", expr, got)
		}
	}
}

func TestEveryIsAnchoredAtTheEpoch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		expr, zone, after, want string
	}{
		{"@every 1s", "", "2024-05-01T00:00:00.5Z", "2024-05-01T00:00:01Z"},
		{"@every 15m", "Asia/Kolkata", "2024-05-01T10:07:00Z", "2024-05-01T10:15:00Z"},
		{"@every 100s", "", "1970-01-01T00:01:40Z", "1970-01-01T00:03:20Z"},
		{"@every 7m", "", "1970-01-01T00:00:00Z", "1970-01-01T00:07:00Z"},
		{"@every 7m", "", "1969-12-31T23:55:00Z", "1970-01-01T00:00:00Z"},
		{"@every 7m", "", "1969-12-31T23:52:00Z", "1969-12-31T23:53:00Z"},
		{"@every 24h", "America/New_York", "2024-03-10T12:00:00Z", "2024-03-11T00:00:00Z"},
	} {
		s, err := ParseCronSchedule(tc.expr, tc.zone)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Next(utc(tc.after)); !got.Equal(utc(tc.want)) {
			t.Errorf("%q: Next(%s) = %s, want %s", tc.expr, tc.after, got.UTC().Format(time.RFC3339Nano), tc.want)
		}
		if s.Every() == 0 {
			t.Errorf("%q: Every() = 0", tc.expr)
		}
	}
	// Two schedules parsed apart tick together.
	a, _ := ParseCronSchedule("@every 45s", "")
	b, _ := ParseCronSchedule("@every 45s", "Europe/Berlin")
	from := utc("2024-05-01T12:34:56Z")
	if x, y := ticks(a, from, 5), ticks(b, from.Add(-30*time.Second), 6)[1:]; !slices.Equal(x, y) {
		t.Errorf("replicas disagree: %v and %v", x, y)
	}
}

func TestNextFireTimes(t *testing.T) {
	t.Parallel()
	got, err := NextFireTimes(schemas.Trigger{Type: schemas.TriggerTypeCron, Schedule: "30 2 * * *", Timezone: "America/New_York"}, utc("2024-03-09T12:00:00Z"), 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"2024-03-10T03:00:00-04:00", "2024-03-11T02:30:00-04:00", "2024-03-12T02:30:00-04:00"}
	var gotS []string
	for _, g := range got {
		gotS = append(gotS, g.Format(time.RFC3339))
	}
	if !slices.Equal(gotS, want) {
		t.Errorf("NextFireTimes = %v, want %v (in the zone)", gotS, want)
	}
	if got, err := NextFireTimes(schemas.Trigger{Type: schemas.TriggerTypeCron, Schedule: "@daily"}, utc("2024-05-01T10:00:00Z"), 1); err != nil ||
		len(got) != 1 || got[0].Location() != time.UTC || !got[0].Equal(utc("2024-05-02T00:00:00Z")) {
		t.Errorf("NextFireTimes without a zone = %v, %v; want 2024-05-02T00:00:00Z in UTC", got, err)
	}
	if got, err := NextFireTimes(schemas.Trigger{Type: schemas.TriggerTypeCron, Schedule: "@daily"}, time.Now(), 0); err != nil || len(got) != 0 {
		t.Errorf("NextFireTimes(0) = %v, %v", got, err)
	}
	if _, err := NextFireTimes(schemas.Trigger{Type: schemas.TriggerTypeEvent}, time.Now(), 5); err == nil || !strings.Contains(err.Error(), "only cron triggers") {
		t.Errorf("NextFireTimes of an event trigger = %v, want an error", err)
	}
	_, err = NextFireTimes(schemas.Trigger{Type: schemas.TriggerTypeCron, Schedule: "@daily", Timezone: "Nowhere"}, time.Now(), 5)
	requireProblem(t, err, "cron trigger", "timezone", "must be an IANA time zone name")
}

func TestCronEventID(t *testing.T) {
	t.Parallel()
	tick := time.Date(2024, 5, 1, 4, 0, 0, 0, time.FixedZone("CEST", 2*3600))
	if got, want := schemas.CronEventID("nightly-report", 2, tick), "cron:nightly-report:2:2024-05-01T02:00:00Z"; got != want {
		t.Errorf("CronEventID = %q, want %q", got, want)
	}
	// The id is a valid trigger event id.
	if _, err := ParseTriggerEvent([]byte(`{"event_id":"` + schemas.CronEventID(strings.Repeat("t", 64), 31, tick) + `","source":"cron"}`)); err != nil {
		t.Errorf("a cron event id is not a valid event id: %v", err)
	}
}

// FuzzParseCronSchedule feeds ParseCronSchedule arbitrary schedules and
// zones. It must never panic, must reject with a *ValidationError, and an
// accepted schedule's ticks must rise strictly from any instant.
func FuzzParseCronSchedule(f *testing.F) {
	for _, tc := range dstCases {
		f.Add(tc.expr, tc.zone, utc(tc.from).Unix())
	}
	for _, s := range []string{"@every 90s", "*/7 1-5 * * mon", "TZ=", "TZ=0", "0 0 30 2 *", "? ? ? ? ? ?"} {
		f.Add(s, "UTC", int64(0))
	}
	f.Fuzz(func(t *testing.T, expr, zone string, from int64) {
		s, err := ParseCronSchedule(expr, zone)
		if err != nil {
			var verr *schemas.ValidationError
			if !errors.As(err, &verr) || len(verr.Problems) == 0 {
				t.Fatalf("error %v (%T) is not a *ValidationError with problems", err, err)
			}
			return
		}
		// Keep within the years time.Time and UnixNano handle well.
		at := time.Unix(from%(200*365*24*3600), 0)
		for range 5 {
			next := s.Next(at)
			if next.IsZero() {
				return
			}
			if !next.After(at) {
				t.Fatalf("%q in %q: Next(%v) = %v, not after it", expr, zone, at, next)
			}
			at = next
		}
	})
}

func mustJSON(t *testing.T, v *schemas.Task) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
