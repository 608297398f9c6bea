package main

import (
	"io"
	"os"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/term"
)

// consoleWriter is the console log format writing to out: coloured only
// when out is a terminal and NO_COLOR is unset (https://no-color.org), so
// that a log written to a file or a pipe carries no ANSI codes.
func consoleWriter(out io.Writer) zerolog.ConsoleWriter {
	return zerolog.ConsoleWriter{Out: out, TimeFormat: time.TimeOnly, NoColor: !colourOn(out)}
}

// colourOn reports whether log lines written to out may be coloured.
func colourOn(out io.Writer) bool {
	f, ok := out.(*os.File)
	return ok && os.Getenv("NO_COLOR") == "" && term.IsTerminal(int(f.Fd()))
}
