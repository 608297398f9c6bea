package main

import (
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/ax-scheduler/ax/schemas"
)

// progressBar reports how many of a known number of things are done. On a
// terminal it redraws one line, "[#####-----]  12/50 ended"; elsewhere it
// prints each event's own line, which logs and pipes read better. It is
// safe for concurrent use.
type progressBar struct {
	mu       sync.Mutex
	w        io.Writer
	terminal bool
	what     string
	total    int
	done     int
	// drawn is the length of the line drawn last, to blank what a
	// shorter one leaves.
	drawn int
}

// barWidth is the number of cells of a drawn bar.
const barWidth = 30

// newProgressBar returns a bar over w of total things; what names the
// state they reach ("ended"). terminal says whether to draw the bar.
func newProgressBar(w io.Writer, terminal bool, total int, what string) *progressBar {
	p := &progressBar{w: w, terminal: terminal, total: total, what: what}
	p.draw()
	return p
}

// Step counts one more thing done; line is what to print for it when the
// output is not a terminal.
func (p *progressBar) Step(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	if !p.terminal {
		fmt.Fprintln(p.w, line)
		return
	}
	p.draw()
}

// Set sets how many things of how many are done (total 0: unknown) and
// what follows the bar (a message); line is what to print instead when the
// output is not a terminal.
func (p *progressBar) Set(done, total int, what, line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done, p.total, p.what = done, total, what
	if !p.terminal {
		fmt.Fprintln(p.w, line)
		return
	}
	p.draw()
}

// Finish ends the drawn bar's line; it does nothing off a terminal.
func (p *progressBar) Finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.terminal {
		fmt.Fprintln(p.w)
	}
}

// draw redraws the bar in place; p.mu is held or p not yet shared.
func (p *progressBar) draw() {
	if !p.terminal {
		return
	}
	filled, total := 0, "?"
	if p.total > 0 {
		filled, total = min(max(p.done, 0)*barWidth/p.total, barWidth), fmt.Sprint(p.total)
	}
	line := fmt.Sprintf("[%s%s] %*d/%s %s", strings.Repeat("#", filled), strings.Repeat("-", barWidth-filled),
		len(total), p.done, total, p.what)
	pad := max(p.drawn-len(line), 0)
	p.drawn = len(line)
	fmt.Fprintf(p.w, "\r%s%s", line, strings.Repeat(" ", pad))
}

// progressText says an instance's progress in words: "420/1200 (35%):
// uploading", "42 done" when the total is unknown.
func progressText(p schemas.InstanceProgress) string {
	s := fmt.Sprintf("%d done", p.Done)
	if p.Total > 0 {
		s = fmt.Sprintf("%d/%d (%d%%)", p.Done, p.Total, p.Done*100/p.Total)
	}
	if p.Message != "" {
		s += ": " + p.Message
	}
	return s
}
