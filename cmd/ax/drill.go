package main

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/drill"
)

func newDrillCmd(g *cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "drill",
		Short: "Rehearse faults against a task or the whole system and give a verdict",
		Long: `Rehearse faults and print a verdict: a table of checks (check | expected |
observed | result), then the facts measured. ax drill exits 0 only when every
check passed, so CI can gate on it; -o json prints the same report as JSON.

  ax drill task NAME   fire one task on a running AX with faults injected (node
                       crash, database jitter, retry storm, duplicate delivery)
  ax drill system      the reliability battery against a sandbox it starts

See docs/drill.md for every check and how to read a verdict.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newDrillTaskCmd(g), newDrillSystemCmd(g))
	return cmd
}

// printVerdict ends a command that checks something and prints a
// [drill.Report] (ax drill task, ax conformance executor): given the
// report and the error of the run, it prints r as --output asks (JSON or
// YAML when asJSON, else its table) and returns an exit error naming the
// failed checks as "<subject> failed: ..." when one failed. An API that
// could not be reached is said as such.
func (g *cli) printVerdict(w io.Writer, asJSON bool, r *drill.Report, err error, subject string) error {
	if _, ok := errors.AsType[*url.Error](err); ok {
		return g.apiError(err)
	}
	if err != nil {
		return err
	}
	if asJSON {
		err = g.printData(w, r)
	} else {
		err = r.WriteTable(w)
	}
	if err != nil {
		return err
	}
	if !r.Passed() {
		return &exitError{code: exitNotSucceeded, err: fmt.Errorf("%s failed: %s", subject, strings.Join(r.Failed(), "; "))}
	}
	return nil
}
