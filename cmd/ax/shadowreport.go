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
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
)

func newShadowReportCmd(g *cli) *cobra.Command {
	var (
		against, dsn, zone, fromText, toText string
		tolerance                            time.Duration
		imported                             bool
	)
	cmd := &cobra.Command{
		Use:   "report [TASK…] [--against xxl-job --dsn …]",
		Short: "Compare the ticks AX fired with the old scheduler's runs",
		Long: `For each task (those named, else every imported one), take the ticks AX fired
in the window [--from, --to) (default the last 24 hours): the instances its
cron triggers recorded (SHADOW in shadow mode), from the task's shadow start
when that falls in the window; or, when the window holds no instance of it,
the ticks its cron triggers compute. With --against xxl-job, compare them
tick by tick with the scheduled runs in xxl_job_log of the job it was
imported from: extra, missing and late ticks. Without --against it lists
AX's ticks, for a crontab user to compare with the host's cron log. Exits 1
when a difference was found.`,
		Example: `  ax shadow report --against xxl-job --dsn 'mysql://reader:secret@db:3306/xxl_job' --timezone Asia/Shanghai
  ax shadow report cron-backup-full-1a2b3c --from 2026-03-02T00:00:00Z --to 2026-03-03T00:00:00Z`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			from, to, err := shadowWindow(fromText, toText)
			if err != nil {
				return err
			}
			if against != "" && against != "xxl-job" {
				return fmt.Errorf("--against %q: ax shadow report compares with xxl-job (or, without --against, lists AX's ticks)", against)
			}
			loc, err := time.LoadLocation(zone)
			if err != nil {
				return fmt.Errorf("--timezone %q: %w", zone, err)
			}
			client := g.client()
			tasks, err := shadowTasks(cmd.Context(), client, args, len(args) == 0 || imported)
			if err != nil {
				return g.apiError(err)
			}
			reports, err := shadowReports(cmd.Context(), client, tasks, against, dsn, from, to, loc, tolerance)
			if err != nil {
				return g.apiError(err)
			}
			return g.printShadowReports(cmd, reports, against != "", from, to, loc, asJSON)
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

// shadowWindow reads --from and --to: by default the 24 hours up to now.
func shadowWindow(fromText, toText string) (from, to time.Time, err error) {
	to = time.Now().Truncate(time.Minute)
	if toText != "" {
		if to, err = time.Parse(time.RFC3339, toText); err != nil {
			return from, to, fmt.Errorf("--to %q: want an RFC 3339 time such as 2026-03-03T00:00:00Z", toText)
		}
	}
	from = to.Add(-24 * time.Hour)
	if fromText != "" {
		if from, err = time.Parse(time.RFC3339, fromText); err != nil {
			return from, to, fmt.Errorf("--from %q: want an RFC 3339 time such as 2026-03-02T00:00:00Z", fromText)
		}
	}
	if !from.Before(to) {
		return from, to, fmt.Errorf("--from %s is not before --to %s", from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	return from, to, nil
}

func (g *cli) printShadowReports(cmd *cobra.Command, reports []importer.ShadowReport, compared bool, from, to time.Time,
	loc *time.Location, asJSON bool) error {
	diffs := 0
	for _, r := range reports {
		if compared {
			diffs += len(r.Diffs)
		}
	}
	if asJSON {
		if err := g.printData(cmd.OutOrStdout(), reports); err != nil {
			return err
		}
	} else {
		printShadow(cmd.OutOrStdout(), reports, compared, from, to, loc)
	}
	if diffs > 0 {
		return &exitError{code: exitFailed, err: fmt.Errorf("shadow report: %d differences", diffs)}
	}
	return nil
}

// axTicks is AX's side of a shadow report: the ticks of a task in a window
// and the instance recorded on each (by tick, in Unix nanoseconds).
type axTicks struct {
	basis     string
	from, to  time.Time
	ticks     []time.Time
	instances map[int64]int64
}

// firedTicks returns the ticks AX fired for the task in [from, to): those
// of its ledger that made an instance. The window starts at the task's
// shadow start when that falls inside it (before it, AX fired nothing to
// compare), and ends at the first tick not yet due. ok is false when the
// window holds no instance of the task.
func firedTicks(ctx context.Context, client *apiclient.Client, info wire.TaskInfo, from, to time.Time) (axTicks, bool, error) {
	if s := info.ShadowSince; s != nil && s.After(from) && s.Before(to) {
		from = *s
	}
	l, err := client.Ledger(ctx, info.Task.TaskName, from, to)
	if err != nil {
		return axTicks{}, false, err
	}
	if l.Summary.Instances == 0 {
		return axTicks{}, false, nil
	}
	out := axTicks{basis: importer.BasisRecorded, from: from, to: to, instances: map[int64]int64{}}
	for _, tk := range l.Ticks {
		if tk.InstanceID == 0 && tk.Status == schemas.TickDue {
			out.to = tk.Tick
			break
		}
		if tk.InstanceID != 0 {
			out.ticks = append(out.ticks, tk.Tick)
			out.instances[tk.Tick.UnixNano()] = tk.InstanceID
		}
	}
	return out, true, nil
}

// computedTicks returns the ticks the task's cron triggers give in [from, to).
func computedTicks(t *schemas.Task, from, to time.Time) (axTicks, error) {
	out := axTicks{basis: importer.BasisComputed, from: from, to: to}
	for _, tr := range t.Triggers {
		if tr.Type != schemas.TriggerTypeCron {
			continue
		}
		for at := from.Add(-time.Nanosecond); ; {
			next, err := taskdef.NextFireTimes(tr, at, 1)
			if err != nil {
				return out, fmt.Errorf("task %s: %w", t.TaskName, err)
			}
			if len(next) == 0 || !next[0].Before(to) {
				break
			}
			out.ticks = append(out.ticks, next[0])
			at = next[0]
		}
	}
	slices.SortFunc(out.ticks, time.Time.Compare)
	return out, nil
}

// shadowReports takes AX's ticks of each task in [from, to) (see
// firedTicks, computedTicks) and, against XXL-JOB, compares them with its
// job's runs.
func shadowReports(ctx context.Context, client *apiclient.Client, tasks []wire.TaskInfo, against, dsn string,
	from, to time.Time, loc *time.Location, tolerance time.Duration) ([]importer.ShadowReport, error) {
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
	var reports []importer.ShadowReport
	for _, info := range tasks {
		ax, ok, err := firedTicks(ctx, client, info, from, to)
		if err == nil && !ok {
			ax, err = computedTicks(info.Task, from, to)
		}
		if err != nil {
			return nil, err
		}
		r := importer.ShadowReport{Task: info.Task.TaskName, Basis: ax.basis, From: ax.from, To: ax.to, Ticks: len(ax.ticks)}
		if db == nil {
			for _, tick := range ax.ticks {
				r.Diffs = append(r.Diffs, importer.ShadowDiff{Kind: "tick", Tick: tick, InstanceID: ax.instances[tick.UnixNano()]})
			}
			reports = append(reports, r)
			continue
		}
		id, ok := importer.XXLJobID(r.Task)
		if !ok {
			continue
		}
		r.Source = fmt.Sprintf("xxl_job_info id=%d", id)
		runs, err := importer.XXLJobRuns(ctx, db, id, ax.from, ax.to, loc)
		if err != nil {
			return nil, err
		}
		r.Runs = len(runs)
		r.Diffs = importer.CompareTicks(ax.ticks, runs, tolerance)
		for i, d := range r.Diffs {
			r.Diffs[i].InstanceID = ax.instances[d.Tick.UnixNano()]
		}
		reports = append(reports, r)
	}
	return reports, nil
}

func printShadow(w io.Writer, reports []importer.ShadowReport, compared bool, from, to time.Time, loc *time.Location) {
	wall := func(t time.Time) string { return t.In(loc).Format(time.DateTime) }
	fmt.Fprintf(w, "window %s – %s (%s)\n", wall(from), wall(to), loc)
	extra, missing, late := 0, 0, 0
	for _, r := range reports {
		basis := "AX's recorded instances"
		if r.Basis == importer.BasisComputed {
			basis = "AX's ticks computed: it recorded none in the window"
		}
		if !r.From.Equal(from) || !r.To.Equal(to) {
			basis += fmt.Sprintf(", compared %s – %s", wall(r.From), wall(r.To))
		}
		if !compared {
			fmt.Fprintf(w, "%s (%s): %d ticks\n", r.Task, basis, r.Ticks)
			for _, d := range r.Diffs {
				fmt.Fprintf(w, "    %s%s\n", wall(d.Tick), instanceNote(d))
			}
			continue
		}
		fmt.Fprintf(w, "%s (%s; %s): %d ticks, %d runs, %d differences\n", r.Task, r.Source, basis, r.Ticks, r.Runs, len(r.Diffs))
		for _, d := range r.Diffs {
			switch d.Kind {
			case importer.ShadowExtra:
				extra++
				fmt.Fprintf(w, "    extra    tick %s: AX fires it, the old scheduler did not run it%s\n", wall(d.Tick), instanceNote(d))
			case importer.ShadowMissing:
				missing++
				fmt.Fprintf(w, "    missing  run  %s: the old scheduler ran it, AX has no tick\n", wall(d.Ran))
			case importer.ShadowLate:
				late++
				fmt.Fprintf(w, "    late     tick %s: the old scheduler ran it at %s%s\n", wall(d.Tick), wall(d.Ran), instanceNote(d))
			}
		}
	}
	if compared {
		fmt.Fprintf(w, "%d extra, %d missing, %d late\n", extra, missing, late)
	}
}

// instanceNote names the instance AX recorded on a tick, if any.
func instanceNote(d importer.ShadowDiff) string {
	if d.InstanceID == 0 {
		return ""
	}
	return fmt.Sprintf(" (instance %d)", d.InstanceID)
}
