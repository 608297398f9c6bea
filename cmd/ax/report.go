package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/schemas"
)

func newReportCmd(g *cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "report",
		Aliases: []string{"reports"},
		Short:   "Reports on the fleet",
		Args:    cobra.NoArgs,
	}
	cmd.AddCommand(newReportHealthCmd(g))
	return cmd
}

func newReportHealthCmd(g *cli) *cobra.Command {
	var q apiclient.HealthQuery
	cmd := &cobra.Command{
		Use:   "health",
		Short: "What needs a look: failing tasks, missed schedules, slow runs, tasks without an owner",
		Long: `Print the health report: the tasks whose latest instances failed in a row, the
cron triggers that did not fire when their schedule says they should have, the
tasks whose latest run took far longer than the runs before it, and the tasks
whose definition names no owner. Each section states its rule; the flags move
its thresholds.`,
		Example: `  ax report health
  ax report health --min-failures 3 --factor 3 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			rep, err := g.client().HealthReport(cmd.Context(), q)
			if err != nil {
				return g.apiError(err)
			}
			if asJSON {
				return g.printData(cmd.OutOrStdout(), rep)
			}
			return printHealth(cmd.OutOrStdout(), rep)
		},
	}
	f := cmd.Flags()
	f.IntVar(&q.MinFailures, "min-failures", 0, "the shortest streak of failures reported (default 2)")
	f.DurationVar(&q.Grace, "grace", 0, "how late a cron tick may be before it counts as missed (default 1m)")
	f.IntVar(&q.Runs, "runs", 0, "how many earlier runs a task's latest run is compared with (default 20)")
	f.IntVar(&q.MinRuns, "min-runs", 0, "how many earlier runs a task needs to be judged (default 5)")
	f.Float64Var(&q.Factor, "factor", 0, "how many times the p95 of the earlier runs makes a run an outlier (default 2)")
	return cmd
}

func printHealth(w io.Writer, rep schemas.HealthReport) error {
	section := func(title, rule string, n int) {
		fmt.Fprintf(w, "\n%s: %d\n  rule: %s\n", title, n, rule)
	}
	fmt.Fprintf(w, "Health report, %s\n", rep.GeneratedAt.Local().Format("2006-01-02 15:04:05"))

	section("Tasks failing in a row", rep.Rules.ConsecutiveFailures, len(rep.ConsecutiveFailures))
	if len(rep.ConsecutiveFailures) > 0 {
		tw := newTable(w)
		fmt.Fprintln(tw, "  TASK\tFAILURES\tSINCE\tLAST INSTANCE\tLAST ERROR")
		for _, f := range rep.ConsecutiveFailures {
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%d\t%s\n", f.Task, f.Failures, timeOrDash(&f.Since), f.LastInstanceID, oneLine(f.LastError))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	section("Missed schedules", rep.Rules.MissedSchedules, len(rep.MissedSchedules))
	if len(rep.MissedSchedules) > 0 {
		tw := newTable(w)
		fmt.Fprintln(tw, "  TASK\tTRIGGER\tSCHEDULE\tEXPECTED\tLAST TICK")
		for _, m := range rep.MissedSchedules {
			fmt.Fprintf(tw, "  %s\t%d\t%s (%s)\t%s\t%s\n", m.Task, m.TriggerIndex, m.Schedule, m.Timezone,
				timeOrDash(&m.ExpectedAt), timeOrDash(m.LastTick))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	section("Runs far longer than their history", rep.Rules.DurationOutliers, len(rep.DurationOutliers))
	if len(rep.DurationOutliers) > 0 {
		tw := newTable(w)
		fmt.Fprintln(tw, "  TASK\tINSTANCE\tDURATION\tMEDIAN\tP95\tRUNS")
		secs := func(s float64) string {
			return time.Duration(s * float64(time.Second)).Round(time.Millisecond).String()
		}
		for _, o := range rep.DurationOutliers {
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\t%d\n", o.Task, o.InstanceID, secs(o.DurationSeconds), secs(o.MedianSeconds),
				secs(o.P95Seconds), o.Runs)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	section("Tasks without an owner", rep.Rules.WithoutOwner, len(rep.WithoutOwner))
	if len(rep.WithoutOwner) > 0 {
		fmt.Fprintf(w, "  %s\n", strings.Join(rep.WithoutOwner, ", "))
	}
	return nil
}

// oneLine keeps the first line of s, at most 120 characters of it.
func oneLine(s string) string {
	s, _, cut := strings.Cut(s, "\n")
	if len(s) > 120 {
		s, cut = s[:120], true
	}
	if cut {
		s += "…"
	}
	return orDash(s)
}
