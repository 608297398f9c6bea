package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"golang.org/x/term"
	"sigs.k8s.io/yaml"
)

// The values of --output.
const (
	outputTable = "table"
	outputJSON  = "json"
	outputYAML  = "yaml"
)

// json reports whether the output is structured (JSON or YAML, which
// printData writes) rather than a table, or says how to fix --output.
func (g *cli) json() (bool, error) {
	switch g.output {
	case outputTable:
		return false, nil
	case outputJSON, outputYAML:
		return true, nil
	}
	return false, fmt.Errorf("--output %q: use table, json or yaml", g.output)
}

// printData writes v as --output asks: indented JSON, or YAML converted
// from that JSON so that both show the same field names.
func (g *cli) printData(w io.Writer, v any) error {
	if g.output != outputYAML {
		return printJSON(w, v)
	}
	return printYAML(w, v)
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// printYAML writes v as YAML, by way of its JSON form.
func printYAML(w io.Writer, v any) error {
	data, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Errorf("format as yaml: %w", err)
	}
	_, err = w.Write(data)
	return err
}

// tableWriter collects the rows of a table written as tab-separated lines,
// the first its header, and renders them aligned on Flush: each column as
// wide as its widest cell, two spaces apart, no trailing spaces.
type tableWriter struct {
	w       io.Writer
	pending bytes.Buffer
}

// newTable returns a table writer over w: write one line per row, cells
// separated by tabs, then Flush it.
func newTable(w io.Writer) *tableWriter { return &tableWriter{w: w} }

// Write buffers p; nothing reaches the output before Flush.
func (t *tableWriter) Write(p []byte) (int, error) { return t.pending.Write(p) }

// Flush renders the rows written so far and forgets them.
func (t *tableWriter) Flush() error {
	var aligned bytes.Buffer
	tw := tabwriter.NewWriter(&aligned, 0, 0, 2, ' ', 0)
	_, _ = tw.Write(t.pending.Bytes()) // a bytes.Buffer takes every write
	_ = tw.Flush()
	t.pending.Reset()
	var b strings.Builder
	for line := range strings.Lines(aligned.String()) {
		b.WriteString(strings.TrimRight(line, " \n"))
		b.WriteByte('\n')
	}
	_, err := io.WriteString(t.w, b.String())
	return err
}

// isTerminal reports whether w is a terminal, where ax may draw progress
// bars; anywhere else it prints plain lines.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
