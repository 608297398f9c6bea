package taskdef

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/ax-scheduler/ax/schemas"
)

// cronParser reads 5 fields, 6 with seconds first, and the descriptors.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// allHours is the bits of a schedule's hour field that match every hour.
const allHours = 1<<24 - 1

// CronSchedule is a cron trigger's schedule read in its time zone: the ticks
// at which the trigger fires. Make one with [ParseCronSchedule]. It is
// immutable and safe for concurrent use.
//
// Ticks fall on whole seconds. "@every d" ticks at the multiples of d since
// the Unix epoch (1970-01-01T00:00:00Z), whatever the zone: "@every 15m" fires
// at :00, :15, :30 and :45 of every hour in UTC, and every trigger service
// replica computes the same ticks.
//
// Daylight saving time. A schedule that names hours of the day (its hour
// field is not "*": "30 2 * * *", @daily) reads them as local wall-clock
// times:
//
//   - a local time that does not exist (the clocks spring forward over it)
//     fires once, at the first instant after the gap: "30 2 * * *" in
//     America/New_York fires at 03:00 EDT on the day the clocks skip 02:00–03:00
//     (several times in one gap, such as "*/15 2 * * *", fire once together);
//   - a local time that occurs twice (the clocks fall back over it) fires
//     once, at its first occurrence: "30 1 * * *" fires at 01:30 EDT, not again
//     at 01:30 EST.
//
// A schedule whose hour field matches every hour ("*", "0-23", @hourly, "*/5 *
// * * *") names no local time of day but a cadence, and keeps it in elapsed
// time, as Vixie cron does for such jobs: "0 * * * *" fires every 60 minutes
// through both changes (01:00 EST then 03:00 EDT; 01:00 EDT then 01:00 EST).
// robfig/cron's own Next skips a nonexistent time and fires a repeated one
// twice; [CronSchedule.Next] corrects both.
type CronSchedule struct {
	expr string
	loc  *time.Location
	// every is the period of an "@every" schedule, else zero.
	every time.Duration
	// spec is the schedule in loc; wall is the same fields in UTC, which
	// tells whether a wall-clock time matches without a zone in the way.
	spec, wall *cron.SpecSchedule
	// fixedHours is set when some hour of the day does not match: the
	// schedule names local times, and the DST rules apply.
	fixedHours bool
}

// ParseCronSchedule reads a cron trigger's schedule in the IANA time zone
// timezone ("" means [schemas.DefaultTimezone]). A schedule is 5 fields (minute hour
// day-of-month month day-of-week), 6 with seconds first, or a descriptor:
// @yearly (@annually), @monthly, @weekly, @daily (@midnight), @hourly, or
// "@every <Go duration>" of whole seconds, at least 1s. Fields take numbers,
// ranges (1-5), steps (*/15, 10-50/10), lists (1,15) and names (jan, mon);
// "?" means "*". A rejection is a *[schemas.ValidationError] ("cron trigger") whose
// problems name the field "schedule" or "timezone", with the reason in
// plain words. A schedule that no date ever matches (30 February) is rejected.
func ParseCronSchedule(schedule, timezone string) (*CronSchedule, error) {
	var problems []schemas.Problem
	loc, msg := loadZone(timezone)
	if msg != "" {
		problems = append(problems, schemas.Problem{Field: "timezone", Message: msg})
		loc = time.UTC
	}
	s, msg := parseCron(schedule, loc)
	if msg != "" {
		problems = append(problems, schemas.Problem{Field: "schedule", Message: msg})
	}
	if len(problems) > 0 {
		return nil, newValidationError("cron trigger", problems)
	}
	return s, nil
}

// loadZone loads an IANA time zone, or says what is wrong with its name.
func loadZone(name string) (*time.Location, string) {
	switch name {
	case "":
		return time.UTC, ""
	case "Local":
		return nil, `must be an IANA time zone name such as UTC, Europe/Berlin or America/New_York; "Local" depends on the machine the trigger service runs on`
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Sprintf("must be an IANA time zone name such as UTC, Europe/Berlin or America/New_York (names are case-sensitive): %q is not one", name)
	}
	return loc, ""
}

// cronHelp closes every message about a bad schedule.
const cronHelp = `; write 5 fields (minute hour day-of-month month day-of-week, e.g. "0 2 * * *"), ` +
	`6 with seconds first (e.g. "*/10 * * * * *") or a descriptor (@hourly, @daily, @weekly, @monthly, @yearly, @every 30s)`

// parseCron parses expr in loc, or says what is wrong with it.
func parseCron(expr string, loc *time.Location) (*CronSchedule, string) {
	trimmed := strings.TrimSpace(expr)
	if strings.HasPrefix(trimmed, "TZ=") || strings.HasPrefix(trimmed, "CRON_TZ=") {
		return nil, "must not name a time zone (TZ=… or CRON_TZ=…); set the trigger's timezone instead"
	}
	sched, err := parseRobfig(trimmed)
	if err != nil {
		return nil, "is not a valid cron expression: " + robfigReason(err) + cronHelp
	}
	s := &CronSchedule{expr: expr, loc: loc}
	switch sched := sched.(type) {
	case cron.ConstantDelaySchedule:
		d, err := time.ParseDuration(strings.TrimSpace(strings.TrimPrefix(trimmed, "@every")))
		if err != nil || d < time.Second || d%time.Second != 0 {
			return nil, `must be "@every" a whole number of seconds, at least 1s, such as "@every 30s" or "@every 1h30m"`
		}
		s.every = d
		return s, ""
	case *cron.SpecSchedule:
		spec := *sched
		spec.Location = loc
		wall := spec
		wall.Location = time.UTC
		s.spec, s.wall = &spec, &wall
		s.fixedHours = spec.Hour&allHours != allHours
		// Five years from 2000 hold every day of the month and year, 29
		// February included: a schedule that fires never fires there either.
		if wall.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
			return nil, "never fires: no date matches it (such as 30 February or 31 April); check the day-of-month and month fields"
		}
		return s, ""
	}
	return nil, "is not a valid cron expression" + cronHelp
}

// parseRobfig parses with robfig/cron, turning its rare panics on odd input
// into errors.
func parseRobfig(expr string) (sched cron.Schedule, err error) {
	defer func() {
		if r := recover(); r != nil {
			sched, err = nil, fmt.Errorf("cannot be read (%v)", r)
		}
	}()
	return cronParser.Parse(expr)
}

// robfigReason rewords robfig/cron's errors where they are terse.
func robfigReason(err error) string {
	msg := err.Error()
	switch {
	case msg == "empty spec string":
		return "it is empty"
	case strings.HasPrefix(msg, "expected 5 to 6 fields"):
		return "it has the wrong number of fields (" + strings.TrimPrefix(msg, "expected 5 to 6 fields, ") + ")"
	case strings.HasPrefix(msg, "failed to parse int from "):
		// "failed to parse int from x: strconv.Atoi: parsing "x": invalid syntax"
		v, _, _ := strings.Cut(strings.TrimPrefix(msg, "failed to parse int from "), ": ")
		return fmt.Sprintf("%q is not a number or a month or weekday name", v)
	case strings.HasPrefix(msg, "unrecognized descriptor: "):
		return fmt.Sprintf("%s is not a descriptor", strings.TrimPrefix(msg, "unrecognized descriptor: "))
	}
	return msg
}

// Expr returns the schedule as written.
func (s *CronSchedule) Expr() string { return s.expr }

// Location returns the time zone the schedule is read in.
func (s *CronSchedule) Location() *time.Location { return s.loc }

// Every returns the period of an "@every" schedule, or zero for the others.
func (s *CronSchedule) Every() time.Duration { return s.every }

// String returns the schedule and its zone: "0 2 * * * (Europe/Berlin)".
func (s *CronSchedule) String() string { return s.expr + " (" + s.loc.String() + ")" }

// Next returns the schedule's first tick strictly after t, in the
// schedule's zone, under the rules of [CronSchedule]. It returns the zero time
// when no tick falls within five years after t.
func (s *CronSchedule) Next(t time.Time) time.Time {
	if s.every > 0 {
		d := int64(s.every)
		n := t.UnixNano()
		k := n / d
		if n < 0 && n%d != 0 {
			k-- // floor, not truncation, before the epoch
		}
		return time.Unix(0, (k+1)*d).In(s.loc)
	}
	for {
		n := s.spec.Next(t)
		if n.IsZero() {
			return n
		}
		n = n.In(s.loc)
		if !s.fixedHours {
			return n
		}
		if g := s.gapTick(t, n); !g.IsZero() {
			return g
		}
		if !repeated(n) {
			return n
		}
		t = n // the second occurrence of a local time that already fired
	}
}

// gapTick returns the end of the first spring-forward gap after t, up to n,
// in which a local time of the schedule does not exist; else the zero time.
// robfig/cron steps over such a gap, so its n lies beyond it.
func (s *CronSchedule) gapTick(t, n time.Time) time.Time {
	cur := t.In(s.loc)
	for {
		_, end := cur.ZoneBounds()
		if end.IsZero() || end.After(n) {
			return time.Time{}
		}
		_, before := cur.Zone()
		_, after := end.Zone()
		if after > before {
			// The wall clock jumps from gapFrom to gapTo; read both as UTC.
			gapFrom := time.Unix(end.Unix()+int64(before), 0).UTC()
			gapTo := gapFrom.Add(time.Duration(after-before) * time.Second)
			if m := s.wall.Next(gapFrom.Add(-time.Second)); !m.IsZero() && m.Before(gapTo) {
				return end
			}
		}
		cur = end
	}
}

// repeated reports whether n is the second occurrence of its local time: it
// lies within the hour (or so) that the clocks fell back over.
func repeated(n time.Time) bool {
	start, _ := n.ZoneBounds()
	if start.IsZero() {
		return false
	}
	_, before := start.Add(-time.Second).Zone()
	_, after := n.Zone()
	return before > after && n.Sub(start) < time.Duration(before-after)*time.Second
}

// NextFireTimes returns the next n ticks of a cron trigger strictly after
// after, in the trigger's time zone (call UTC on them for UTC), oldest first;
// fewer when the schedule has no more within five years of the last one. The
// trigger's timezone defaults to UTC. It is an error (a *[schemas.ValidationError]
// for a bad schedule or zone) when t is not a valid cron trigger.
func NextFireTimes(t schemas.Trigger, after time.Time, n int) ([]time.Time, error) {
	if t.Type != schemas.TriggerTypeCron {
		return nil, fmt.Errorf("next fire times: trigger type %q has no schedule; only cron triggers do", t.Type)
	}
	s, err := ParseCronSchedule(t.Schedule, t.Timezone)
	if err != nil {
		return nil, err
	}
	out := make([]time.Time, 0, max(n, 0))
	for range n {
		after = s.Next(after)
		if after.IsZero() {
			break
		}
		out = append(out, after)
	}
	return out, nil
}

// problems checks what task.schema.json cannot: that a cron trigger's
// schedule and zone parse. field is the trigger's path ("triggers[2]").
func triggerProblems(t schemas.Trigger, field string) []schemas.Problem {
	if t.Type != schemas.TriggerTypeCron || t.Schedule == "" {
		return nil // the schema has said what is missing
	}
	_, err := ParseCronSchedule(t.Schedule, t.Timezone)
	var verr *schemas.ValidationError
	if !errors.As(err, &verr) {
		return nil
	}
	out := make([]schemas.Problem, len(verr.Problems))
	for i, p := range verr.Problems {
		out[i] = schemas.Problem{Field: field + "." + p.Field, Message: p.Message}
	}
	return out
}
