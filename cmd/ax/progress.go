package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
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
	filled := barWidth
	if p.total > 0 {
		filled = p.done * barWidth / p.total
	}
	digits := len(fmt.Sprint(p.total))
	fmt.Fprintf(p.w, "\r[%s%s] %*d/%d %s", strings.Repeat("#", filled), strings.Repeat("-", barWidth-filled),
		digits, p.done, p.total, p.what)
}
