package main

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
)

func newInstanceCmd(g *cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "instance",
		Aliases: []string{"instances"},
		Short:   "Inspect task instances: one firing of a task each",
		Example: `  ax instance list --task nightly-report --state FAILED
  ax instance get 42
  ax instance rerun 42 --wait`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newInstanceGetCmd(g), newInstanceListCmd(g), newInstanceRerunCmd(g), newInstanceCancelCmd(g))
	cmd.PersistentPreRunE = g.useCodec
	codecFlag(cmd, &g.codecKeyFile, true, "rerun --payload is encoded with it, payloads and outputs shown decoded")
	return cmd
}

func newInstanceRerunCmd(g *cli) *cobra.Command {
	var (
		wait        bool
		timeout     time.Duration
		payload     string
		payloadFile string
		bulk        bulkFlags
	)
	cmd := &cobra.Command{
		Use:   "rerun ID",
		Short: "Fire an instance's task again, with the same payload and priority",
		Long: `Fire the task of an instance again, as a new manual run by you (the name of
your API token) with the instance's payload, payload version and priority, and
print the id of the new instance. Its CREATED transition names you and says
"rerun of instance ID". The task must still exist and be enabled, and take the
payload (its schema_version and payload_schema). --payload (JSON, or @FILE)
or --payload-file FILE sends another payload instead of the instance's.

With --wait, ax then follows the new instance until it ends and prints its
final state; the exit codes are those of ax fire.`,
		Example: `  ax instance rerun 42
  ax instance rerun 42 --wait --timeout 10m && echo done
  ax instance rerun 42 --payload '{"day": "2025-03-02"}'
  ax instance rerun 42 --payload-file fixed.json
  ax instance rerun --where task=nightly-report --where state=FAILED --where since=24h --dry-run`,
		Args: bulkArgs(&bulk),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(bulk.where) > 0 {
				return runBulk(g, cmd, "rerun", &bulk, "")
			}
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			id, err := parseInstanceID(args[0])
			if err != nil {
				return err
			}
			if wait && timeout <= 0 {
				return fmt.Errorf("--timeout %s: use a positive duration such as 30s or 10m", timeout)
			}
			var req wire.RerunRequest
			switch {
			case payload != "" && payloadFile != "":
				return fmt.Errorf("--payload and --payload-file both give a payload; use one of them")
			case payloadFile != "":
				payload = "@" + payloadFile
				fallthrough
			case payload != "":
				if req.Payload, err = readPayload(cmd.InOrStdin(), payload); err != nil {
					return err
				}
			}
			client := g.client()
			res, err := client.RerunWith(cmd.Context(), id, req)
			if err != nil {
				return g.apiError(err)
			}
			return g.follow(cmd, client, res, wait, timeout, asJSON)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&wait, "wait", false, "wait until the new instance ends; the exit code tells how it ended")
	f.DurationVar(&timeout, "timeout", 5*time.Minute, "with --wait, how long to wait")
	f.StringVar(&payload, "payload", "", "payload instead of the instance's: JSON, or @FILE (@- for standard input)")
	f.StringVar(&payloadFile, "payload-file", "", "file holding the payload instead of the instance's (- for standard input)")
	addBulkFlags(cmd, &bulk, true)
	return cmd
}

func newInstanceCancelCmd(g *cli) *cobra.Command {
	var reason string
	var bulk bulkFlags
	cmd := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel an instance that has not ended; a running attempt is told to stop",
		Long: `Cancel an instance: it becomes CANCELLED (recorded with you as the operator and
the reason), a waiting or retrying one never runs again, and a running attempt's
worker is told to stop it at once. An instance that already ended is refused.`,
		Example: `  ax instance cancel 42
  ax instance cancel 42 --reason "wrong input file"
  ax instance cancel --where task=nightly-report --where state=WAITING --limit 5000 --yes`,
		Args: bulkArgs(&bulk),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(bulk.where) > 0 {
				return runBulk(g, cmd, "cancel", &bulk, reason)
			}
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			id, err := parseInstanceID(args[0])
			if err != nil {
				return err
			}
			in, err := g.client().Cancel(cmd.Context(), id, reason)
			if err != nil {
				return g.apiError(err)
			}
			if asJSON {
				return g.printData(cmd.OutOrStdout(), in)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "instance %d %s\n", id, in.State)
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded on the CANCELLED transition (default \"cancelled by <you>\")")
	addBulkFlags(cmd, &bulk, false)
	return cmd
}

func newInstanceGetCmd(g *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "Show an instance and its transitions",
		Long: `Show an instance (task, state, attempt, worker, its error or output) and every
transition it went through, oldest first: from and to state, attempt, who made
it (operator) and why. -o json prints the instance as the API returns it.`,
		Example: "  ax instance get 42\n  ax instance get 42 -o json | jq '.transitions[-1]'",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			id, err := parseInstanceID(args[0])
			if err != nil {
				return err
			}
			in, err := g.client().GetInstance(cmd.Context(), id)
			if err != nil {
				return g.apiError(err)
			}
			if asJSON {
				return g.printData(cmd.OutOrStdout(), in)
			}
			return printInstance(cmd.OutOrStdout(), in)
		},
	}
}

func printInstance(w io.Writer, in schemas.Instance) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "ID\t%d\n", in.ID)
	fmt.Fprintf(tw, "TASK\t%s (version %d)\n", in.Task, in.TaskVersion)
	fmt.Fprintf(tw, "STATE\t%s\n", in.State)
	fmt.Fprintf(tw, "ATTEMPT\t%d of %d\n", in.Attempt, in.MaxAttempts)
	fmt.Fprintf(tw, "WORKER\t%s\n", orDash(in.WorkerID))
	if in.Wait != nil {
		fmt.Fprintf(tw, "WAITS\t%s since %s (%s)\n", in.Wait.Reason, timeOrDash(&in.Wait.Since), in.Wait.Kind)
		if in.Wait.Ends != "" {
			fmt.Fprintf(tw, "UNTIL\t%s\n", in.Wait.Ends)
		}
	}
	fmt.Fprintf(tw, "POOL\t%s (%s)\n", in.Pool, in.Priority)
	fmt.Fprintf(tw, "EVENT\t%s (%s)\n", in.EventID, in.Source)
	fmt.Fprintf(tw, "FIRED\t%s\n", timeOrDash(&in.FiredAt))
	fmt.Fprintf(tw, "STARTED\t%s\n", timeOrDash(in.StartedAt))
	fmt.Fprintf(tw, "FINISHED\t%s\n", timeOrDash(in.FinishedAt))
	if in.Progress != nil {
		p := *in.Progress
		if in.State == schemas.StateSucceeded && p.Total > 0 && p.Done < p.Total {
			// It did all its work, whatever it last reported.
			p.Done = p.Total
		}
		fmt.Fprintf(tw, "PROGRESS\t%s (attempt %d, at %s)\n", progressText(p), in.Progress.Attempt, timeOrDash(&in.Progress.At))
	}
	if len(in.Payload) > 0 {
		fmt.Fprintf(tw, "PAYLOAD\t%s\n", in.Payload)
	}
	if in.Error != "" {
		fmt.Fprintf(tw, "ERROR\t%s\n", in.Error)
	}
	if len(in.Output) > 0 {
		fmt.Fprintf(tw, "OUTPUT\t%s\n", in.Output)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = newTable(w)
	fmt.Fprintln(tw, "FROM\tTO\tATTEMPT\tOPERATOR\tREASON\tAT")
	for _, t := range in.Transitions {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", orDash(string(t.From)), t.To, t.Attempt,
			orDash(t.Operator), orDash(t.Reason), t.At.Local().Format("2006-01-02 15:04:05.000"))
	}
	if err := tw.Flush(); err != nil || len(in.Events) == 0 {
		return err
	}
	// Events changed no state: a table of their own, not rows of the state machine's.
	fmt.Fprintln(w)
	tw = newTable(w)
	fmt.Fprintln(tw, "EVENT\tATTEMPT\tOPERATOR\tREASON\tAT")
	for _, e := range in.Events {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", e.Kind, e.Attempt, orDash(e.Operator), orDash(e.Reason),
			e.At.Local().Format("2006-01-02 15:04:05.000"))
	}
	return tw.Flush()
}

func newInstanceListCmd(g *cli) *cobra.Command {
	var (
		q            apiclient.InstanceQuery
		state        string
		since, until string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List instances, newest first",
		Long: `List instances, newest first, optionally of one task and in one state. To read
the next page, pass the last id shown as --before. With --archived, list the
instances that ended long enough ago to leave the hot tables, from the
partitioned history and the archive (see docs/operations.md).`,
		Example: `  ax instance list
  ax instance list --task nightly-report --state failed --limit 10
  ax instance list --archived --task nightly-report --since 2026-01-01T00:00:00Z
  ax instance list --since 2h --state failed
  ax instance list --before 1200`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			q.State = schemas.State(state)
			for _, f := range []struct {
				flag, value string
				at          *time.Time
			}{{"--since", since, &q.Since}, {"--until", until, &q.Until}} {
				if f.value == "" {
					continue
				}
				if *f.at, err = parseSince(f.value, time.Now()); err != nil {
					return fmt.Errorf("%s %q: %w", f.flag, f.value, err)
				}
			}
			list, err := g.client().ListInstances(cmd.Context(), q)
			if err != nil {
				return g.apiError(err)
			}
			if asJSON {
				return g.printData(cmd.OutOrStdout(), list)
			}
			tw := newTable(cmd.OutOrStdout())
			fmt.Fprintln(tw, "ID\tTASK\tSTATE\tATTEMPT\tWORKER\tFIRED\tFINISHED\tWAITS")
			for _, in := range list {
				waits := "-"
				if in.Wait != nil {
					waits = string(in.Wait.Kind)
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\n", in.ID, in.Task, in.State, in.Attempt, in.MaxAttempts,
					orDash(in.WorkerID), timeOrDash(&in.FiredAt), timeOrDash(in.FinishedAt), waits)
			}
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&q.Task, "task", "", "only the instances of this task")
	f.StringVar(&state, "state", "", "only the instances in this state (CREATED, WAITING, DISPATCHED, RUNNING, RETRYING, SUCCEEDED, FAILED, SKIPPED, CANCELLED, SHADOW)")
	f.IntVar(&q.Limit, "limit", 50, "most instances to show (1-500)")
	f.Int64Var(&q.Before, "before", 0, "only the instances with a lower id (the next page)")
	f.StringVar(&since, "since", "", "only the instances fired since this time: RFC 3339, or a duration back from now (2h)")
	f.StringVar(&until, "until", "", "only the instances fired before this time: RFC 3339, or a duration back from now")
	f.BoolVar(&q.Archived, "archived", false, "list the instances moved to the history or the archive instead of the recent ones")
	return cmd
}

// parseInstanceID reads an instance id given on the command line.
func parseInstanceID(arg string) (int64, error) {
	return parseID(arg, "an instance", "that ax fire or ax instance list printed")
}

// parseID reads the id of what (e.g. "an alert") given on the command line;
// where says where the user finds one.
func parseID(arg, what, where string) (int64, error) {
	id, err := strconv.ParseInt(arg, 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("%q is not %s id: use the number %s", arg, what, where)
	}
	return id, nil
}
