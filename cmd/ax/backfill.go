package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
)

func newBackfillCmd(g *cli) *cobra.Command {
	var (
		from, to, priority, overlap string
		maxRunning, trigger         int
		rate                        float64
	)
	cmd := &cobra.Command{
		Use:   "backfill TASK",
		Short: "Run a task's schedule over a past range; list, pause, resume, cancel backfills",
		Long: `Fire the ticks of a task's cron schedule from --from to --to (both included,
RFC 3339 times or dates, in the past) as the schedule fired them or would have:
each tick carries its own event id, so a tick that already ran is not run again
and running the same backfill twice creates nothing. The trigger service fires
them at --priority (default low, below live work), at most --max-running in
flight and --rate a second. --overlap skip waits while any instance of the task
is in flight. The backfill's instances say "backfill N" on their CREATED
transition.`,
		Example: `  ax backfill nightly-report --from 2026-03-01 --to 2026-03-31
  ax backfill nightly-report --from 2026-03-01 --to 2026-03-31 --max-running 4
  ax backfill list
  ax backfill get 7
  ax backfill pause 7 && ax backfill resume 7
  ax backfill cancel 7`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			req := wire.BackfillRequest{Priority: priority, MaxRunning: maxRunning, Overlap: overlap, Rate: rate}
			if req.From, err = parseDay(from); err != nil {
				return fmt.Errorf("--from %q: %w", from, err)
			}
			if req.To, err = parseDay(to); err != nil {
				return fmt.Errorf("--to %q: %w", to, err)
			}
			if !strings.Contains(to, "T") {
				req.To = req.To.Add(24*time.Hour - time.Second) // a date covers its whole day
			}
			if cmd.Flags().Changed("trigger") {
				req.Trigger = &trigger
			}
			b, err := g.client().Backfill(cmd.Context(), args[0], req)
			if err != nil {
				return g.apiError(err)
			}
			if asJSON {
				return g.printData(cmd.OutOrStdout(), b)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "backfill %d of %s: %d ticks from %s to %s, %s\n", b.ID, b.Task, b.Total,
				b.From.Format(time.RFC3339), b.To.Format(time.RFC3339), b.State)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "first instant of the range: an RFC 3339 time or a date (2026-03-01, UTC)")
	f.StringVar(&to, "to", "", "last instant of the range: an RFC 3339 time or a date (its whole day, UTC)")
	f.StringVar(&priority, "priority", "low", "priority of the backfill's instances: urgent, normal or low")
	f.IntVar(&maxRunning, "max-running", 1, "most ticks of the backfill in flight at once")
	f.StringVar(&overlap, "overlap", "allow", "allow: run beside other runs of the task; skip: wait while any is in flight")
	f.Float64Var(&rate, "rate", 10, "most ticks fired a second")
	f.IntVar(&trigger, "trigger", 0, "index of the cron trigger among the task's triggers (default: the first cron trigger)")
	_ = cmd.MarkFlagRequired("from")
	_ = cmd.MarkFlagRequired("to")
	cmd.AddCommand(newBackfillListCmd(g), newBackfillGetCmd(g))
	for _, action := range []string{"pause", "resume", "cancel"} {
		cmd.AddCommand(newBackfillActionCmd(g, action))
	}
	return cmd
}

// parseDay reads an RFC 3339 time or a date (UTC midnight).
func parseDay(v string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("use an RFC 3339 time (2026-03-01T00:00:00Z) or a date (2026-03-01)")
}

func newBackfillListCmd(g *cli) *cobra.Command {
	var task string
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List backfills with their progress, newest first",
		Example: "  ax backfill list --task nightly-report",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			list, err := g.client().ListBackfills(cmd.Context(), task)
			if err != nil {
				return g.apiError(err)
			}
			if asJSON {
				return g.printData(cmd.OutOrStdout(), list)
			}
			return printBackfills(cmd.OutOrStdout(), list)
		},
	}
	cmd.Flags().StringVar(&task, "task", "", "only this task's backfills")
	return cmd
}

func newBackfillGetCmd(g *cli) *cobra.Command {
	return &cobra.Command{
		Use:     "get ID",
		Short:   "Show a backfill and its progress",
		Example: "  ax backfill get 7 -o json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return backfillAction(g, cmd, args[0], "")
		},
	}
}

func newBackfillActionCmd(g *cli, action string) *cobra.Command {
	return &cobra.Command{
		Use:     action + " ID",
		Short:   strings.ToUpper(action[:1]) + action[1:] + " a backfill (audited)",
		Example: "  ax backfill " + action + " 7",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return backfillAction(g, cmd, args[0], action)
		},
	}
}

// backfillAction gets backfill raw, or moves it by action, and prints it.
func backfillAction(g *cli, cmd *cobra.Command, raw, action string) error {
	asJSON, err := g.json()
	if err != nil {
		return err
	}
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id <= 0 {
		return fmt.Errorf("%q is not a backfill id: use the number ax backfill printed", raw)
	}
	var b schemas.Backfill
	if action == "" {
		b, err = g.client().GetBackfill(cmd.Context(), id)
	} else {
		b, err = g.client().SetBackfill(cmd.Context(), id, action)
	}
	if err != nil {
		return g.apiError(err)
	}
	if asJSON {
		return g.printData(cmd.OutOrStdout(), b)
	}
	return printBackfills(cmd.OutOrStdout(), []schemas.Backfill{b})
}

func printBackfills(w io.Writer, list []schemas.Backfill) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tTASK\tFROM\tTO\tSTATE\tFIRED\tFOUND RUN\tTOTAL\tSUCCEEDED\tFAILED\tIN FLIGHT")
	for _, b := range list {
		inFlight := 0
		for _, st := range []schemas.State{schemas.StateCreated, schemas.StateWaiting, schemas.StateDispatched, schemas.StateRunning, schemas.StateRetrying} {
			inFlight += b.Instances[st]
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", b.ID, b.Task, b.From.Format(time.RFC3339),
			b.To.Format(time.RFC3339), b.State, b.Fired, b.Existing, b.Total, b.Instances[schemas.StateSucceeded], b.Instances[schemas.StateFailed], inFlight)
	}
	return tw.Flush()
}
