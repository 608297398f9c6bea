package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestHelpExamplesParse reads the Example of every command, as --help
// prints it, and parses the flags of each ax command line there with that
// command: an example a reader copies never fails on an unknown flag.
func TestHelpExamplesParse(t *testing.T) {
	var walk func(c *cobra.Command)
	checked := 0
	walk = func(c *cobra.Command) {
		for line := range strings.Lines(c.Example) {
			args := exampleArgs(line)
			if args == nil {
				continue
			}
			cmd, rest, err := newRootCmd().Find(args)
			if err != nil {
				t.Errorf("%s --help: example %q: %v", c.CommandPath(), strings.TrimSpace(line), err)
				continue
			}
			if err := cmd.ParseFlags(rest); err != nil && !errors.Is(err, pflag.ErrHelp) {
				t.Errorf("%s --help: example %q: %v", c.CommandPath(), strings.TrimSpace(line), err)
			}
			checked++
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
	if checked < 20 {
		t.Errorf("checked %d example lines, want the many of ax --help", checked)
	}
}

// exampleArgs returns the arguments after "ax" (or a path ending in /ax)
// of a shell line, up to the first operator or comment; nil for a line
// without an ax command.
func exampleArgs(line string) []string {
	var (
		tokens []string
		cur    strings.Builder
		quote  rune
		inTok  bool
	)
	flush := func() {
		if inTok {
			tokens = append(tokens, cur.String())
		}
		cur.Reset()
		inTok = false
	}
loop:
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inTok = r, true
		case r == ' ' || r == '\t' || r == '\n':
			flush()
		case strings.ContainsRune("|&;#<>()$`", r) && !inTok:
			break loop
		case strings.ContainsRune("|&;<>", r):
			flush()
			break loop
		default:
			cur.WriteRune(r)
			inTok = true
		}
	}
	flush()
	for i, tok := range tokens {
		switch {
		case strings.Contains(tok, "="):
			// An environment assignment before the command.
		case tok == "ax" || strings.HasSuffix(tok, "/ax"):
			return append([]string{}, tokens[i+1:]...)
		default:
			return nil
		}
	}
	return nil
}
