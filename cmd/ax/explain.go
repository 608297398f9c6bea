package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/schemas"
)

func newExplainCmd(g *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "explain TASK@INSTANT|INSTANCE",
		Short: "Why a tick did or did not run, or an instance's decision timeline, in words",
		Long: `Explain a task's tick (TASK@INSTANT, the instant in RFC 3339) or an instance
(its id): a verdict in one sentence, then the decision timeline read from what AX
recorded — the trigger that schedules the tick and how daylight saving time shaped
it, the pauses and disables around it, the trigger's misfire decisions, the
instance its firing made: its routing and dispatch, waits (a max_running_instances
slot, a mutex key held by another instance), starts, lease expiries and retries
with their backoff, reports refused as stale, and how it ended.`,
		Example: `  ax explain nightly-settlement@2026-03-29T02:30:00+02:00
  ax explain 4711
  ax explain 4711 -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			var x schemas.Explanation
			if task, instant, ok := strings.Cut(args[0], "@"); ok {
				at, perr := time.Parse(time.RFC3339Nano, instant)
				if perr != nil {
					return fmt.Errorf("%q: the instant after @ is not an RFC 3339 time such as 2026-03-29T02:30:00+02:00", args[0])
				}
				x, err = g.client().ExplainTick(cmd.Context(), task, at)
			} else {
				id, perr := strconv.ParseInt(args[0], 10, 64)
				if perr != nil || id <= 0 {
					return fmt.Errorf("%q: give TASK@INSTANT (nightly@2026-03-29T02:30:00+02:00) or an instance id", args[0])
				}
				x, err = g.client().ExplainInstance(cmd.Context(), id)
			}
			if err != nil {
				return g.apiError(err)
			}
			if asJSON {
				return g.printData(cmd.OutOrStdout(), x)
			}
			return printExplanation(cmd.OutOrStdout(), x)
		},
	}
}

// printExplanation writes the verdict, then one line per step.
func printExplanation(w io.Writer, x schemas.Explanation) error {
	fmt.Fprintf(w, "%s: %s\n\n", x.Subject, x.Verdict)
	for _, s := range x.Steps {
		at := strings.Repeat(" ", 24)
		if !s.At.IsZero() {
			at = fmt.Sprintf("%-24s", s.At.UTC().Format("2006-01-02 15:04:05.000Z"))
		}
		actor := ""
		if s.Actor != "" {
			actor = " [" + s.Actor + "]"
		}
		if _, err := fmt.Fprintf(w, "%s %-14s %s%s\n", at, s.Kind, s.Text, actor); err != nil {
			return err
		}
	}
	return nil
}
