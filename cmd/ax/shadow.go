package main

import (
	"context"
	"fmt"
	"slices"

	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/api/wire"
)

// importedTypes are the task types ax import gives the tasks it makes.
var importedTypes = []string{"crontab", "xxl-job", "quartz"} // not importer.StoppedXXLJobType

func newShadowCmd(g *cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "shadow",
		Short: "Hold imported tasks beside the old scheduler, compare, then cut over",
		Long: `Shadow mode is the time between an import and the cut-over, while the old
scheduler still runs the jobs: the tasks in shadow fire on their schedules in
AX, and each firing is recorded as an instance in state SHADOW that nothing
runs (no worker gets it; the ledger marks it), for as long as you like. ax
shadow report compares, tick by tick, what AX fired (the SHADOW instances;
the computed ticks when a window has none) with the runs the old scheduler
logged (xxl_job_log): extra (AX fired, the old did not run), missing (the
old ran, AX did not fire) and late (the old ran it after the tolerance). ax
shadow stop --cut-over makes the tasks live: stop the jobs in the old
scheduler at the same time. See docs/migrate.md.`,
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
		Short: "Put tasks in shadow: AX fires and records them, runs nothing",
		Example: `  ax shadow start --imported
  ax shadow start xxl-10-settlehandler xxl-12-ledgerhandler`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.setShadow(cmd, args, imported, func(ctx context.Context, c *apiclient.Client, name string) error {
				_, err := c.StartShadow(ctx, name)
				return err
			}, "task %s in shadow: it fires on its schedules, each firing recorded SHADOW and not run; compare with ax shadow report\n")
		},
	}
	cmd.Flags().BoolVar(&imported, "imported", false, "every task ax import made")
	return cmd
}

func newShadowStopCmd(g *cli) *cobra.Command {
	var imported, cutOver bool
	cmd := &cobra.Command{
		Use:   "stop TASK…|--imported [--cut-over]",
		Short: "End shadow mode: --cut-over makes the tasks live (stop them in the old scheduler now)",
		Long: `With --cut-over the tasks leave shadow mode enabled: their next firing runs.
Stop their jobs in the old scheduler at the same time. Without it they leave
shadow mode disabled: AX fires nothing, the old scheduler carries on.`,
		Example: `  ax shadow stop --imported --cut-over
  ax shadow stop xxl-10-settlehandler --cut-over`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			stop := func(ctx context.Context, c *apiclient.Client, name string) error {
				_, err := c.StopShadow(ctx, name, cutOver)
				return err
			}
			if !cutOver {
				return g.setShadow(cmd, args, imported, stop,
					"task %s out of shadow: disabled in AX, the old scheduler still runs it\n")
			}
			return g.setShadow(cmd, args, imported, stop,
				"task %s cut over: live in AX from its next firing; stop its job in the old scheduler now\n")
		},
	}
	cmd.Flags().BoolVar(&imported, "imported", false, "every task ax import made")
	cmd.Flags().BoolVar(&cutOver, "cut-over", false, "make the tasks live: AX runs them from their next tick (else they are disabled)")
	return cmd
}

// setShadow applies set to each task named, or with imported to every
// task ax import made, printing done for each.
func (g *cli) setShadow(cmd *cobra.Command, names []string, imported bool,
	set func(context.Context, *apiclient.Client, string) error, done string) error {
	if _, err := g.json(); err != nil {
		return err
	}
	client := g.client()
	tasks, err := shadowTasks(cmd.Context(), client, names, imported)
	if err != nil {
		return g.apiError(err)
	}
	for _, t := range tasks {
		if err := set(cmd.Context(), client, t.Task.TaskName); err != nil {
			return g.apiError(err)
		}
		fmt.Fprintf(cmd.OutOrStdout(), done, t.Task.TaskName)
	}
	return nil
}
