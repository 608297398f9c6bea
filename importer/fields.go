package importer

import (
	"fmt"
	"strconv"
	"strings"
)

// field is one field of a cron expression: its bounds and its names.
type field struct {
	name     string
	min, max int
	names    map[string]int
	// wrap allows ranges that wrap past max (Quartz's 22-2).
	wrap bool
}

var (
	monthNames = map[string]int{"jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6,
		"jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12}
	// dayNames are crontab's: Sunday is 0 (and 7).
	dayNames = map[string]int{"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}
	// quartzDayNames are Quartz's: Sunday is 1, Saturday 7.
	quartzDayNames = map[string]int{"sun": 1, "mon": 2, "tue": 3, "wed": 4, "thu": 5, "fri": 6, "sat": 7}
)

// parseSet reads a field of numbers, names, ranges (a-b), steps (*/n,
// a-b/n, a/n meaning a-max/n) and lists into the set of values it
// matches, bit v for value v.
func parseSet(expr string, f field) (uint64, error) {
	if expr == "" {
		return 0, fmt.Errorf("%s field is empty", f.name)
	}
	var set uint64
	for _, part := range strings.Split(expr, ",") {
		rng, stepText, hasStep := strings.Cut(part, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepText)
			if err != nil || n < 1 {
				return 0, fmt.Errorf("%s field %q: the step %q must be a whole number of at least 1", f.name, part, stepText)
			}
			step = n
		}
		var lo, hi int
		switch {
		case rng == "*":
			lo, hi = f.min, f.max
		default:
			a, b, isRange := strings.Cut(rng, "-")
			var err error
			if lo, err = value(a, f); err != nil {
				return 0, err
			}
			hi = lo
			if isRange {
				if hi, err = value(b, f); err != nil {
					return 0, err
				}
			} else if hasStep {
				hi = f.max
			}
		}
		if hi < lo && !f.wrap {
			return 0, fmt.Errorf("%s field %q: the range runs backwards (%d after %d)", f.name, part, lo, hi)
		}
		n := hi - lo
		if hi < lo {
			n = hi + (f.max - f.min + 1) - lo
		}
		for i := 0; i <= n; i += step {
			v := lo + i
			if v > f.max {
				v -= f.max - f.min + 1
			}
			set |= 1 << uint(v)
		}
	}
	return set, nil
}

// value reads one number or name of field f.
func value(s string, f field) (int, error) {
	if v, ok := f.names[strings.ToLower(s)]; ok {
		return v, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%s field: %q is not a number between %d and %d%s", f.name, s, f.min, f.max, nameHint(f))
	}
	if v < f.min || v > f.max {
		return 0, fmt.Errorf("%s field: %d is out of range %d-%d", f.name, v, f.min, f.max)
	}
	return v, nil
}

func nameHint(f field) string {
	if len(f.names) == 0 {
		return ""
	}
	if _, ok := f.names["jan"]; ok {
		return " or a month name (jan-dec)"
	}
	return " or a day name (sun-sat)"
}

// full reports whether set holds every value of [min, max].
func full(set uint64, min, max int) bool {
	want := (uint64(1)<<uint(max-min+1) - 1) << uint(min)
	return set&want == want
}

// formatSet writes set as AX's cron reads it: "*" when starOK and it is
// full, else a list of values and ranges ("1-5,7").
func formatSet(set uint64, min, max int, starOK bool) string {
	if starOK && full(set, min, max) {
		return "*"
	}
	var parts []string
	for v := min; v <= max; {
		if set&(1<<uint(v)) == 0 {
			v++
			continue
		}
		end := v
		for end+1 <= max && set&(1<<uint(end+1)) != 0 {
			end++
		}
		switch {
		case end == v:
			parts = append(parts, strconv.Itoa(v))
		case end == v+1:
			parts = append(parts, strconv.Itoa(v), strconv.Itoa(end))
		default:
			parts = append(parts, strconv.Itoa(v)+"-"+strconv.Itoa(end))
		}
		v = end + 1
	}
	return strings.Join(parts, ",")
}
