package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

// newFiringCmd is ax firing: the delayed firings that wait for their due
// time (ax fire --delay / --at), which have no instance yet.
func newFiringCmd(g *cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "firing",
		Aliases: []string{"firings"},
		Short:   "List, cancel or fire now the delayed firings that wait for their time",
		Example: `  ax firing list
  ax firing list --task nightly-report
  ax firing cancel nightly-report 2026-12-06
  ax firing now nightly-report 2026-12-06`,
		Args: cobra.NoArgs,
	}
	var task string
	var limit int
	list := &cobra.Command{
		Use:   "list",
		Short: "List the pending delayed firings, soonest due first",
		Long: `List the delayed firings (ax fire --delay or --at, run_at in the API) that
wait for their due time: no instance exists for them until then, so ax
instance list does not show them.`,
		Example: `  ax firing list
  ax firing list --task nightly-report -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			out, err := g.client().ListFirings(cmd.Context(), task, limit)
			if err != nil {
				return g.apiError(err)
			}
			if asJSON {
				return g.printData(cmd.OutOrStdout(), out.Firings)
			}
			if len(out.Firings) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no delayed firings wait")
				return nil
			}
			tw := newTable(cmd.OutOrStdout())
			fmt.Fprintln(tw, "TASK\tEVENT\tDUE\tIN\tFIRED\tOPERATOR")
			now := time.Now()
			for _, f := range out.Firings {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", f.Task, f.EventID, timeOrDash(&f.RunAt),
					f.RunAt.Sub(now).Round(time.Second), timeOrDash(&f.FiredAt), orDash(f.Operator))
			}
			if out.Truncated {
				fmt.Fprintln(tw, "…\t(more wait: narrow with --task or raise --limit)")
			}
			return tw.Flush()
		},
	}
	list.Flags().StringVar(&task, "task", "", "only the firings of this task")
	list.Flags().IntVar(&limit, "limit", 0, "the most firings listed (default 100, at most 1000)")
	cancel := &cobra.Command{
		Use:     "cancel TASK EVENT_ID",
		Short:   "Cancel a delayed firing: it never fires",
		Example: `  ax firing cancel nightly-report 2026-12-06`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			f, err := g.client().CancelFiring(cmd.Context(), args[0], args[1])
			if err != nil {
				return g.apiError(err)
			}
			if asJSON {
				return g.printData(cmd.OutOrStdout(), f)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "cancelled the firing %s of %s, which was due at %s\n", f.EventID, f.Task, timeOrDash(&f.RunAt))
			return nil
		},
	}
	now := &cobra.Command{
		Use:     "now TASK EVENT_ID",
		Short:   "Fire a delayed firing now, under its event id",
		Example: `  ax firing now nightly-report 2026-12-06`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			res, err := g.client().FireNow(cmd.Context(), args[0], args[1])
			if err != nil {
				return g.apiError(err)
			}
			if asJSON {
				return g.printData(cmd.OutOrStdout(), res)
			}
			if res.InstanceID != 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "fired %s event %s now: instance %d (%s)\n", res.Task, res.EventID, res.InstanceID, res.State)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "fired %s event %s now; its instance is not made yet: ax instance list --task %s\n", res.Task, res.EventID, res.Task)
			return nil
		},
	}
	cmd.AddCommand(list, cancel, now)
	return cmd
}
