package importer

import (
	"fmt"
	"strings"
)

// Quartz's cron fields (XXL-JOB's and Quartz's CronExpression): seconds
// first, day-of-week 1-7 with 1 for Sunday, an optional year last.
var (
	quartzSecond = field{name: "second", min: 0, max: 59, wrap: true}
	quartzMinute = field{name: "minute", min: 0, max: 59, wrap: true}
	quartzHour   = field{name: "hour", min: 0, max: 23, wrap: true}
	quartzDom    = field{name: "day-of-month", min: 1, max: 31, wrap: true}
	quartzMonth  = field{name: "month", min: 1, max: 12, names: monthNames, wrap: true}
	quartzDow    = field{name: "day-of-week", min: 1, max: 7, names: quartzDayNames, wrap: true}
)

// QuartzCron translates a Quartz cron expression (seconds minutes hours
// day-of-month month day-of-week [year]) into AX's 6-field cron, by
// Quartz's rules: '?' leaves a day field to the other (one of the two
// must be '?'), day-of-week 1 is Sunday, "a/n" starts at a. What AX's
// cron cannot say is refused with the reason: L, W and # (last day,
// nearest weekday, nth weekday of the month), and a year other than *.
func QuartzCron(expr string) (string, error) {
	f := strings.Fields(strings.ToUpper(expr))
	if len(f) != 6 && len(f) != 7 {
		return "", fmt.Errorf("a Quartz cron expression has 6 or 7 fields (seconds minutes hours day-of-month month day-of-week [year]); %q has %d", expr, len(f))
	}
	if len(f) == 7 && f[6] != "*" && f[6] != "?" {
		return "", fmt.Errorf("its year field %q limits it to some years; AX's cron repeats every year: import it without the year and disable the task when its last year ends", f[6])
	}
	for i, name := range []string{"second", "minute", "hour", "day-of-month", "month", "day-of-week"} {
		if usesLW(f[i]) {
			return "", fmt.Errorf("its %s field %q uses Quartz's L, W or # (last day, nearest weekday, nth weekday of the month), which AX's cron cannot say", name, f[i])
		}
	}
	domAny, dowAny := f[3] == "?", f[5] == "?"
	switch {
	case domAny && dowAny:
		return "", fmt.Errorf("Quartz refuses '?' in both day fields; give one of day-of-month or day-of-week")
	case !domAny && !dowAny:
		return "", fmt.Errorf("Quartz refuses a day-of-month (%q) and a day-of-week (%q) together: one of them must be '?'", f[3], f[5])
	}
	specs := []field{quartzSecond, quartzMinute, quartzHour, quartzDom, quartzMonth}
	out := make([]string, 6)
	for i, spec := range specs {
		if i == 3 && domAny {
			out[i] = "*"
			continue
		}
		set, err := parseSet(f[i], spec)
		if err != nil {
			return "", fmt.Errorf("its schedule is not a valid Quartz cron expression: %w", err)
		}
		out[i] = formatSet(set, spec.min, spec.max, true)
	}
	out[5] = "*"
	if !dowAny {
		set, err := parseSet(f[5], quartzDow)
		if err != nil {
			return "", fmt.Errorf("its schedule is not a valid Quartz cron expression: %w", err)
		}
		// Quartz's 1 (Sunday) to 7 (Saturday) is AX's 0 to 6.
		out[5] = formatSet(set>>1, 0, 6, true)
	}
	// The day field Quartz reads is the only one: the other is '*' in
	// AX's cron, which then requires both, that is this one.
	return strings.Join(out, " "), nil
}

// usesLW reports whether a field uses L, W or # other than inside a
// month or day name (JUL, WED).
func usesLW(s string) bool {
	for _, part := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '-' || r == '/' }) {
		low := strings.ToLower(part)
		if _, ok := quartzDayNames[low]; ok {
			continue
		}
		if _, ok := monthNames[low]; ok {
			continue
		}
		if strings.ContainsAny(part, "LW#") {
			return true
		}
	}
	return false
}
