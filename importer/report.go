package importer

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
)

// Outcome is what became of one source row.
type Outcome string

// The outcomes.
const (
	// Imported: the task does what the row did.
	Imported Outcome = "imported"
	// Changed: imported, but AX does something differently; Notes say what.
	Changed Outcome = "changed"
	// Refused: not imported; Notes[0] says why and what to do.
	Refused Outcome = "refused"
)

// Entry is one row of the source (a crontab line, an XXL-JOB job) and
// what became of it.
type Entry struct {
	// Source names the row: "FILE:LINE" or "xxl_job_info id=7".
	Source string `json:"source"`
	// Text is the row as the source holds it (a crontab line, a job's cron).
	Text    string  `json:"text,omitempty"`
	Outcome Outcome `json:"outcome"`
	// Task is the definition made from the row; nil when refused.
	Task *schemas.Task `json:"task,omitempty"`
	// Disabled says the row was stopped in its source: the task should be
	// disabled once applied.
	Disabled bool `json:"disabled,omitempty"`
	// Notes say each thing AX does differently, or why the row was refused.
	Notes []string `json:"notes,omitempty"`
}

// Report is what an import made of its source, row by row.
type Report struct {
	// Notes concern the whole source (a setting every task shares).
	Notes   []string `json:"notes,omitempty"`
	Entries []Entry  `json:"entries"`
}

// Tasks returns the definitions of the entries not refused, in order.
func (r *Report) Tasks() []*schemas.Task {
	var out []*schemas.Task
	for _, e := range r.Entries {
		if e.Task != nil {
			out = append(out, e.Task)
		}
	}
	return out
}

// Counts returns how many entries were imported, changed and refused.
func (r *Report) Counts() (imported, changed, refused int) {
	for _, e := range r.Entries {
		switch e.Outcome {
		case Imported:
			imported++
		case Changed:
			changed++
		case Refused:
			refused++
		}
	}
	return
}

// Print writes the report for a reader: one block per row, then the totals.
func (r *Report) Print(w io.Writer) {
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	for _, e := range r.Entries {
		name := "-"
		if e.Task != nil {
			name = e.Task.TaskName
		}
		fmt.Fprintf(w, "%s\t%s\t%s", e.Source, e.Outcome, name)
		if e.Disabled {
			fmt.Fprint(w, "\t(stopped in the source: disable it)")
		}
		fmt.Fprintln(w)
		if e.Text != "" {
			fmt.Fprintf(w, "    | %s\n", strings.ReplaceAll(e.Text, "\n", "\n    | "))
		}
		for _, n := range e.Notes {
			fmt.Fprintf(w, "    - %s\n", n)
		}
	}
	i, c, f := r.Counts()
	fmt.Fprintf(w, "%d imported, %d changed, %d refused\n", i, c, f)
}

// finish checks e's task with AX's own parser and sets the outcome: a
// definition AX would refuse refuses the row with AX's words.
func finish(e Entry) Entry {
	if e.Task == nil {
		e.Outcome = Refused
		return e
	}
	data, err := json.Marshal(e.Task)
	if err == nil {
		_, err = taskdef.ParseTask(data)
	}
	if err != nil {
		e.Task, e.Outcome = nil, Refused
		e.Notes = []string{"AX refuses the definition made from it: " + err.Error()}
		return e
	}
	e.Outcome = Imported
	if len(e.Notes) > 0 {
		e.Outcome = Changed
	}
	return e
}

// slug turns s into a piece of a task name: lower-case letters, digits
// and '-', at most n characters, no '-' at either end.
func slug(s string, n int) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9'
		if !ok {
			dash = b.Len() > 0
			continue
		}
		if dash {
			b.WriteByte('-')
			dash = false
		}
		b.WriteRune(r)
		if b.Len() >= n {
			break
		}
	}
	return strings.Trim(b.String(), "-")
}
