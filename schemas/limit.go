package schemas

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"time"
)

// Limit is a named limit as a user applies it (ax limit apply -f, PUT
// /v1/limits/{name}): a bound that tasks share by naming it in their
// limits. An attempt of such a task starts only when every limit it names
// admits it; otherwise its instance is WAITING, with the limit and key it
// waits for as the reason, until the dispatchers promote it.
type Limit struct {
	// Name names the limit; tasks name it in their limits. The task name's
	// rules apply.
	Name string `json:"name"`
	// Description says what the limit protects ("the supplier's API").
	Description string `json:"description,omitempty"`
	// Concurrency is the most attempts of one key running at once
	// (DISPATCHED, RUNNING or RETRYING); 0 means no bound on concurrency.
	Concurrency int `json:"concurrency,omitempty"`
	// Rate is the most attempts of one key admitted per interval, written
	// N/UNIT: "50/s", "600/m", "1000/h" or N/<Go duration> ("5/10s");
	// empty means no bound on the rate. Admissions are counted over a
	// sliding window of the interval.
	Rate string `json:"rate,omitempty"`
	// Key is a Go text/template over the payload that names the key each
	// attempt counts against ("{{.tenant}}"), with missingkey=error: each
	// key has its own concurrency and rate. Empty: one key for all.
	Key string `json:"key,omitempty"`
	// Paused limits admit nothing until resumed; their attempts wait.
	Paused bool `json:"paused,omitempty"`
	// Overrides replaces the concurrency or rate of single keys
	// ("big": {"concurrency": 20}).
	Overrides map[string]LimitOverride `json:"overrides,omitempty"`
}

// LimitOverride is one key's own bounds; a zero field keeps the limit's.
type LimitOverride struct {
	Concurrency int    `json:"concurrency,omitempty"`
	Rate        string `json:"rate,omitempty"`
}

// LimitUsage is a limit with how it is used now, as ax limit list and GET
// /v1/limits show it.
type LimitUsage struct {
	Limit
	// Running counts the attempts that hold a slot, over every key.
	Running int `json:"running"`
	// Waiting counts the WAITING instances, over every key.
	Waiting int `json:"waiting"`
	// AdmittedLastSecond counts the admissions in the last second, over
	// every key.
	AdmittedLastSecond int `json:"admitted_last_second"`
	// Keys are the busiest keys, most running and waiting first (at most
	// 20).
	Keys []LimitKeyUsage `json:"keys,omitempty"`
	// UpdatedAt is when the limit was last applied, paused or resumed.
	UpdatedAt time.Time `json:"updated_at"`
}

// LimitKeyUsage is one key's use of a limit.
type LimitKeyUsage struct {
	Key     string `json:"key"`
	Running int    `json:"running"`
	Waiting int    `json:"waiting"`
}

var limitNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// ParseRate parses a limit's rate, N/UNIT, into N and the interval.
func ParseRate(s string) (int, time.Duration, error) {
	num, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	n, err := strconv.Atoi(strings.TrimSpace(num))
	if !ok || err != nil || n <= 0 {
		return 0, 0, fmt.Errorf(`rate %q: must be N/UNIT with N a positive whole number, e.g. "50/s", "600/m" or "5/10s"`, s)
	}
	var d time.Duration
	switch unit = strings.TrimSpace(unit); unit {
	case "s", "sec", "second":
		d = time.Second
	case "m", "min", "minute":
		d = time.Minute
	case "h", "hour":
		d = time.Hour
	default:
		if d, err = time.ParseDuration(unit); err != nil {
			return 0, 0, fmt.Errorf(`rate %q: the unit after / must be s, m, h or a Go duration such as 10s`, s)
		}
	}
	if d < 10*time.Millisecond || d > time.Hour {
		return 0, 0, fmt.Errorf(`rate %q: the interval must be between 10ms and 1h`, s)
	}
	return n, d, nil
}

// ParseLimitKey parses a limit's key template (see [Limit.Key]); it
// renders as a mutex key does ([ParseMutexKey]).
func ParseLimitKey(text string) (*template.Template, error) {
	return template.New("key").Option("missingkey=error").Parse(text)
}

// Problems lists what is wrong with l, each naming the field to fix; nil
// when l may be applied.
func (l *Limit) Problems() []Problem {
	var out []Problem
	if !limitNameRE.MatchString(l.Name) {
		out = append(out, Problem{Field: "name", Message: "must match ^[a-z0-9][a-z0-9_-]{0,63}$: lower-case letters, digits, '_' and '-', starting with a letter or digit"})
	}
	if l.Concurrency < 0 {
		out = append(out, Problem{Field: "concurrency", Message: "must be 0 (no bound) or more"})
	}
	if l.Rate != "" {
		if _, _, err := ParseRate(l.Rate); err != nil {
			out = append(out, Problem{Field: "rate", Message: err.Error()})
		}
	}
	if l.Concurrency == 0 && l.Rate == "" && !l.Paused {
		out = append(out, Problem{Field: "concurrency", Message: `a limit needs concurrency, rate or both, e.g. concurrency: 3 or rate: "50/s"`})
	}
	if l.Key != "" {
		if _, err := ParseLimitKey(l.Key); err != nil {
			out = append(out, Problem{Field: "key", Message: fmt.Sprintf(`must be a Go text/template over the payload such as "{{.tenant}}": %v`, err)})
		}
	}
	keys := make([]string, 0, len(l.Overrides))
	for k := range l.Overrides {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		o := l.Overrides[k]
		f := "overrides." + k
		if o.Concurrency < 0 {
			out = append(out, Problem{Field: f + ".concurrency", Message: "must be 0 (the limit's own) or more"})
		}
		if o.Rate != "" {
			if _, _, err := ParseRate(o.Rate); err != nil {
				out = append(out, Problem{Field: f + ".rate", Message: err.Error()})
			}
		}
		if o.Concurrency > 0 && l.Concurrency == 0 {
			out = append(out, Problem{Field: f + ".concurrency", Message: "the limit has no concurrency of its own; set one to override it per key"})
		}
		if o.Rate != "" && l.Rate == "" {
			out = append(out, Problem{Field: f + ".rate", Message: "the limit has no rate of its own; set one to override it per key"})
		}
	}
	return out
}
