package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/importer"
	"github.com/ax-scheduler/ax/schemas/taskdef"
)

// importedTypes are the task types ax import gives the tasks it makes.
var importedTypes = []string{"crontab", "xxl-job", "quartz"} // not importer.StoppedXXLJobType

func newShadowCmd(g *cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "shadow",
		Short: "Hold imported tasks beside the old scheduler, compare, then cut over",
		Long: `Shadow mode is the time between an import and the cut-over, while the old
scheduler still runs the jobs: the imported tasks are disabled in AX (they fire
nothing), and ax shadow report compares, tick by tick, the ticks AX's triggers
would have fired in a window with the runs the old scheduler logged
(xxl_job_log): extra (AX would fire, the old did not run), missing (the old
ran, AX would not fire) and late (the old ran it after the tolerance). ax
shadow stop --cut-over enables the tasks: stop the jobs in the old scheduler
at the same time. See docs/migrate.md.`,
		Example: `  ax shadow start --imported
  ax shadow report --against xxl-job --dsn 'mysql://reader:secret@db:3306/xxl_job' --timezone Asia/Shanghai
  ax shadow stop --imported --cut-over`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newShadowStartCmd(g), newShadowStopCmd(g), newShadowReportCmd(g))
	return cmd
}

// shadowTasks returns the tasks named, or with imported every task ax
// import made, sorted by name.
func shadowTasks(ctx context.Context, client *apiclient.Client, names []string, imported bool) ([]wire.TaskInfo, error) {
	if len(names) > 0 == imported {
		return nil, fmt.Errorf("name the tasks, or give --imported for every task ax import made")
	}
	var out []wire.TaskInfo
	if imported {
		all, err := client.ListTasks(ctx)
		if err != nil {
			return nil, err
		}
		for _, t := range all {
			if t.Task != nil && slices.Contains(importedTypes, t.Task.TaskType) {
				out = append(out, t)
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("no imported task (task_type crontab, xxl-job or quartz): import some with ax import")
		}
		return out, nil
	}
	for _, n := range names {
		t, err := client.GetTask(ctx, n)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

func newShadowStartCmd(g *cli) *cobra.Command {
	var imported bool
	cmd := &cobra.Command{
		Use:   "start TASK…|--imported",
		Short: "Put tasks in shadow: disabled in AX while the old scheduler runs them",
		Example: `  ax shadow start --imported
  ax shadow start xxl-10-settlehandler xxl-12-ledgerhandler`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.setShadow(cmd, args, imported, false,
				"task %s in shadow: disabled in AX while the old scheduler runs it; compare with ax shadow report\n")
		},
	}
	cmd.Flags().BoolVar(&imported, "imported", false, "every task ax import made")
	return cmd
}

func newShadowStopCmd(g *cli) *cobra.Command {
	var imported, cutOver bool
	cmd := &cobra.Command{
		Use:   "stop TASK…|--imported --cut-over",
		Short: "End shadow mode: --cut-over enables the tasks (stop them in the old scheduler now)",
		Example: `  ax shadow stop --imported --cut-over
  ax shadow stop xxl-10-settlehandler --cut-over`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := g.json(); err != nil {
				return err
			}
			if !cutOver {
				return fmt.Errorf("give --cut-over to enable the tasks in AX (stop their jobs in the old scheduler at the same time); to give up, leave them disabled or ax task delete them")
			}
			return g.setShadow(cmd, args, imported, true,
				"task %s cut over: enabled in AX; stop its job in the old scheduler now\n")
		},
	}
	cmd.Flags().BoolVar(&imported, "imported", false, "every task ax import made")
	cmd.Flags().BoolVar(&cutOver, "cut-over", false, "enable the tasks: AX fires them from their next tick")
	return cmd
}

func (g *cli) setShadow(cmd *cobra.Command, names []string, imported, enabled bool, done string) error {
	if _, err := g.json(); err != nil {
		return err
	}
	client := g.client()
	tasks, err := shadowTasks(cmd.Context(), client, names, imported)
	if err != nil {
		return g.apiError(err)
	}
	for _, t := range tasks {
		if _, err := client.SetTaskEnabled(cmd.Context(), t.Task.TaskName, enabled); err != nil {
			return g.apiError(err)
		}
		fmt.Fprintf(cmd.OutOrStdout(), done, t.Task.TaskName)
	}
	return nil
}

func newShadowReportCmd(g *cli) *cobra.Command {
	var (
		against, dsn, zone, fromText, toText string
		tolerance                            time.Duration
		imported                             bool
	)
	cmd := &cobra.Command{
		Use:   "report [TASK…] [--against xxl-job --dsn …]",
		Short: "Compare the ticks AX would fire with the old scheduler's runs",
		Long: `For each task (those named, else every imported one), list the ticks its cron
triggers fire in the window [--from, --to) (default the last 24 hours) and,
with --against xxl-job, compare them tick by tick with the scheduled runs in
xxl_job_log of the job it was imported from: extra, missing and late ticks.
Without --against it lists AX's ticks, for a crontab user to compare with the
host's cron log. Exits 1 when a difference was found.`,
		Example: `  ax shadow report --against xxl-job --dsn 'mysql://reader:secret@db:3306/xxl_job' --timezone Asia/Shanghai
  ax shadow report cron-backup-full-1a2b3c --from 2026-03-02T00:00:00Z --to 2026-03-03T00:00:00Z`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			to := time.Now().Truncate(time.Minute)
			if toText != "" {
				if to, err = time.Parse(time.RFC3339, toText); err != nil {
					return fmt.Errorf("--to %q: want an RFC 3339 time such as 2026-03-03T00:00:00Z", toText)
				}
			}
			from := to.Add(-24 * time.Hour)
			if fromText != "" {
				if from, err = time.Parse(time.RFC3339, fromText); err != nil {
					return fmt.Errorf("--from %q: want an RFC 3339 time such as 2026-03-02T00:00:00Z", fromText)
				}
			}
			if !from.Before(to) {
				return fmt.Errorf("--from %s is not before --to %s", from.Format(time.RFC3339), to.Format(time.RFC3339))
			}
			if against != "" && against != "xxl-job" {
				return fmt.Errorf("--against %q: ax shadow report compares with xxl-job (or, without --against, lists AX's ticks)", against)
			}
			loc, err := time.LoadLocation(zone)
			if err != nil {
				return fmt.Errorf("--timezone %q: %w", zone, err)
			}
			tasks, err := shadowTasks(cmd.Context(), g.client(), args, len(args) == 0 || imported)
			if err != nil {
				return g.apiError(err)
			}
			reports, err := shadowReports(cmd.Context(), tasks, against, dsn, from, to, loc, tolerance)
			if err != nil {
				return err
			}
			diffs := 0
			for _, r := range reports {
				if against != "" {
					diffs += len(r.Diffs)
				}
			}
			if asJSON {
				if err := g.printData(cmd.OutOrStdout(), reports); err != nil {
					return err
				}
			} else {
				printShadow(cmd.OutOrStdout(), reports, against != "", from, to, loc)
			}
			if diffs > 0 {
				return &exitError{code: exitFailed, err: fmt.Errorf("shadow report: %d differences", diffs)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&against, "against", "", "the old scheduler to compare with: xxl-job")
	f.StringVar(&dsn, "dsn", "", "with --against xxl-job: its admin database, mysql://user:password@host:port/database")
	f.StringVar(&zone, "timezone", hostZone(), "the zone XXL-JOB's admin ran in (xxl_job_log holds wall-clock times), and of the times printed")
	f.StringVar(&fromText, "from", "", "the window's start, RFC 3339 (default 24 hours before --to)")
	f.StringVar(&toText, "to", "", "the window's end, RFC 3339 (default now)")
	f.DurationVar(&tolerance, "tolerance", 5*time.Second, "how long after a tick the old scheduler's run still counts as on time")
	f.BoolVar(&imported, "imported", false, "every task ax import made (the default when no task is named)")
	return cmd
}

// shadowReports computes each task's ticks in [from, to) and, against
// XXL-JOB, compares them with its job's runs.
func shadowReports(ctx context.Context, tasks []wire.TaskInfo, against, dsn string, from, to time.Time, loc *time.Location, tolerance time.Duration) ([]importer.ShadowReport, error) {
	var reports []importer.ShadowReport
	var db *sql.DB
	if against == "xxl-job" {
		if dsn == "" {
			return nil, fmt.Errorf("--against xxl-job reads xxl_job_log: give its database with --dsn mysql://user:password@host:port/database")
		}
		var err error
		if db, err = importer.OpenMySQL(dsn); err != nil {
			return nil, err
		}
		defer db.Close()
	}
	for _, info := range tasks {
		t := info.Task
		r := importer.ShadowReport{Task: t.TaskName}
		var ticks []time.Time
		for _, tr := range t.Triggers {
			if tr.Type != "cron" {
				continue
			}
			for at := from.Add(-time.Nanosecond); ; {
				next, err := taskdef.NextFireTimes(tr, at, 1)
				if err != nil {
					return nil, fmt.Errorf("task %s: %w", t.TaskName, err)
				}
				if len(next) == 0 || !next[0].Before(to) {
					break
				}
				ticks = append(ticks, next[0])
				at = next[0]
			}
		}
		slices.SortFunc(ticks, time.Time.Compare)
		r.Ticks = len(ticks)
		if db != nil {
			id, ok := importer.XXLJobID(t.TaskName)
			if !ok {
				continue
			}
			r.Source = fmt.Sprintf("xxl_job_info id=%d", id)
			runs, err := importer.XXLJobRuns(ctx, db, id, from, to, loc)
			if err != nil {
				return nil, err
			}
			r.Runs = len(runs)
			r.Diffs = importer.CompareTicks(ticks, runs, tolerance)
		} else {
			for _, tick := range ticks {
				r.Diffs = append(r.Diffs, importer.ShadowDiff{Kind: "tick", Tick: tick})
			}
		}
		reports = append(reports, r)
	}
	return reports, nil
}

func printShadow(w io.Writer, reports []importer.ShadowReport, compared bool, from, to time.Time, loc *time.Location) {
	fmt.Fprintf(w, "window %s – %s (%s)\n", from.In(loc).Format(time.DateTime), to.In(loc).Format(time.DateTime), loc)
	extra, missing, late := 0, 0, 0
	for _, r := range reports {
		if !compared {
			fmt.Fprintf(w, "%s: %d ticks\n", r.Task, r.Ticks)
			for _, d := range r.Diffs {
				fmt.Fprintf(w, "    %s\n", d.Tick.In(loc).Format(time.DateTime))
			}
			continue
		}
		fmt.Fprintf(w, "%s (%s): %d ticks, %d runs, %d differences\n", r.Task, r.Source, r.Ticks, r.Runs, len(r.Diffs))
		for _, d := range r.Diffs {
			switch d.Kind {
			case importer.ShadowExtra:
				extra++
				fmt.Fprintf(w, "    extra    tick %s: AX fires it, the old scheduler did not run it\n", d.Tick.In(loc).Format(time.DateTime))
			case importer.ShadowMissing:
				missing++
				fmt.Fprintf(w, "    missing  run  %s: the old scheduler ran it, AX has no tick\n", d.Ran.In(loc).Format(time.DateTime))
			case importer.ShadowLate:
				late++
				fmt.Fprintf(w, "    late     tick %s: the old scheduler ran it at %s\n", d.Tick.In(loc).Format(time.DateTime), d.Ran.In(loc).Format(time.DateTime))
			}
		}
	}
	if compared {
		fmt.Fprintf(w, "%d extra, %d missing, %d late\n", extra, missing, late)
	}
}
