// Package drill rehearses faults against a running AX and gives a verdict:
// [Task] drills one task (node crash, database jitter, retry storm,
// duplicate delivery), and package drill/system runs the reliability
// battery against a sandbox it starts itself. Both report a [Report]: a
// table of checks, each with what was expected, what was observed and
// whether it passed.
package drill

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Check is one line of a verdict: what a drill expected, what it observed,
// and whether that passed. A check that passed with a warning (Warn) still
// passes; a check that could not be made says so in Observed and fails
// unless the drill marks it informational (Info).
type Check struct {
	// Name names the check, "<fault>: <what>", e.g. "node crash: retry started".
	Name     string `json:"name"`
	Expected string `json:"expected"`
	Observed string `json:"observed"`
	Pass     bool   `json:"pass"`
	// Warn marks a passing check the reviewer should look at (a p99 run
	// time over half the timeout, say).
	Warn bool `json:"warn,omitempty"`
	// Info marks a check that reports a fact rather than judging it: it
	// never fails the report ("idempotency: not verified", say).
	Info bool `json:"info,omitempty"`
}

// Status is the last column of the table: pass, warn, fail or info.
func (c Check) Status() string {
	switch {
	case c.Info:
		return "info"
	case !c.Pass:
		return "fail"
	case c.Warn:
		return "warn"
	}
	return "pass"
}

// Fact is a figure the drill measured that is not itself a check (the
// instances it fired, the run-time distribution, …).
type Fact struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Report is a drill's verdict: its checks in the order they were made and
// the facts beside them. It is not safe for concurrent use.
type Report struct {
	// Title says what was drilled, e.g. "ax drill task hello".
	Title  string  `json:"title"`
	Checks []Check `json:"checks"`
	Facts  []Fact  `json:"facts,omitempty"`
}

// Add appends a check.
func (r *Report) Add(c Check) { r.Checks = append(r.Checks, c) }

// Expect appends a check that passed when pass is true.
func (r *Report) Expect(name, expected, observed string, pass bool) {
	r.Add(Check{Name: name, Expected: expected, Observed: observed, Pass: pass})
}

// Fact appends a fact; value is formatted with fmt.Sprint's rules.
func (r *Report) Fact(name string, value any) {
	r.Facts = append(r.Facts, Fact{Name: name, Value: fmt.Sprint(value)})
}

// Passed reports whether every check that judges passed: a drill exits 0
// only then. A report with no checks has not passed.
func (r *Report) Passed() bool {
	judged := 0
	for _, c := range r.Checks {
		if c.Info {
			continue
		}
		judged++
		if !c.Pass {
			return false
		}
	}
	return judged > 0
}

// Failed returns the names of the checks that failed.
func (r *Report) Failed() []string {
	var names []string
	for _, c := range r.Checks {
		if !c.Info && !c.Pass {
			names = append(names, c.Name)
		}
	}
	return names
}

// WriteTable writes the report as aligned columns — check | expected |
// observed | pass/fail — then the facts, then a last line with the verdict.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if r.Title != "" {
		fmt.Fprintf(tw, "%s\n\n", r.Title)
	}
	fmt.Fprintln(tw, "CHECK\tEXPECTED\tOBSERVED\tRESULT")
	for _, c := range r.Checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", cell(c.Name), cell(c.Expected), cell(c.Observed), c.Status())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Facts) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "FACT\tVALUE")
		for _, f := range r.Facts {
			fmt.Fprintf(tw, "%s\t%s\n", cell(f.Name), cell(f.Value))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	verdict := "PASS: every check passed"
	if !r.Passed() {
		if failed := r.Failed(); len(failed) > 0 {
			verdict = "FAIL: " + strings.Join(failed, "; ")
		} else {
			verdict = "FAIL: no check was made"
		}
	}
	_, err := fmt.Fprintf(w, "\n%s\n", verdict)
	return err
}

// cell keeps a table cell on one line.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.NewReplacer("\n", " ", "\t", " ").Replace(s)
}

// reportJSON is the JSON form of a Report: its fields plus the verdict.
type reportJSON struct {
	Title  string   `json:"title"`
	Passed bool     `json:"passed"`
	Failed []string `json:"failed,omitempty"`
	Checks []Check  `json:"checks"`
	Facts  []Fact   `json:"facts,omitempty"`
}

// MarshalJSON encodes the report with its verdict: passed and the names
// of the failed checks, for CI.
func (r *Report) MarshalJSON() ([]byte, error) {
	checks := r.Checks
	if checks == nil {
		checks = []Check{}
	}
	return json.Marshal(reportJSON{Title: r.Title, Passed: r.Passed(), Failed: r.Failed(), Checks: checks, Facts: r.Facts})
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}
