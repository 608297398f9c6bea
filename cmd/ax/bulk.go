package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
)

// bulkFlags are the flags of ax instance rerun|cancel --where.
type bulkFlags struct {
	where  []string
	dryRun bool
	limit  int
	yes    bool
	patch  string
}

// addBulkFlags adds the --where flags to cmd.
func addBulkFlags(cmd *cobra.Command, b *bulkFlags, rerun bool) {
	f := cmd.Flags()
	f.StringArrayVar(&b.where, "where", nil, "act on every instance matching KEY=VALUE (repeat; keys: task, state, since, until, error, worker, error_class)")
	f.BoolVar(&b.dryRun, "dry-run", false, "with --where: list what matches, act on nothing")
	f.IntVar(&b.limit, "limit", 100, "with --where: the most instances acted on")
	f.BoolVar(&b.yes, "yes", false, "with --where: act although more instances than --limit match (on the first --limit)")
	if rerun {
		f.StringVar(&b.patch, "payload-patch", "", "with --where: a JSON merge patch applied to each payload")
	}
}

// bulkArgs takes one instance id, or none with --where.
func bulkArgs(b *bulkFlags) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(b.where) > 0 {
			if len(args) > 0 {
				return fmt.Errorf("give an instance id or --where, not both")
			}
			return nil
		}
		return cobra.ExactArgs(1)(cmd, args)
	}
}

// parseWhere reads the --where flags.
func parseWhere(items []string, now time.Time) (schemas.InstanceQuery, error) {
	var q schemas.InstanceQuery
	for _, item := range items {
		k, v, ok := strings.Cut(item, "=")
		if !ok {
			return q, fmt.Errorf("--where %q: use KEY=VALUE, e.g. --where task=nightly --where state=FAILED", item)
		}
		var err error
		switch k {
		case "task":
			q.Task = v
		case "state":
			for _, st := range strings.Split(strings.ToUpper(v), ",") {
				q.State = append(q.State, schemas.State(st))
			}
		case "since":
			q.Since, err = parseSince(v, now)
		case "until":
			q.Until, err = parseSince(v, now)
		case "error":
			q.Error = v
		case "worker":
			q.Worker = v
		case "error_class":
			q.ErrorClass = v
		default:
			return q, fmt.Errorf("--where %q: unknown key %q; use task, state, since, until, error, worker or error_class", item, k)
		}
		if err != nil {
			return q, fmt.Errorf("--where %q: %w", item, err)
		}
	}
	return q, nil
}

// runBulk runs ax instance rerun|cancel --where.
func runBulk(g *cli, cmd *cobra.Command, action string, b *bulkFlags, reason string) error {
	asJSON, err := g.json()
	if err != nil {
		return err
	}
	q, err := parseWhere(b.where, time.Now())
	if err != nil {
		return err
	}
	req := wire.BulkRequest{Where: q, DryRun: b.dryRun, Limit: b.limit, Confirm: b.yes, Reason: reason}
	if b.patch != "" {
		if !json.Valid([]byte(b.patch)) {
			return fmt.Errorf("--payload-patch is not JSON; give a merge patch like '{\"day\": \"2026-03-02\"}'")
		}
		req.PayloadPatch = json.RawMessage(b.patch)
	}
	var res wire.BulkResult
	if action == "rerun" {
		res, err = g.client().BulkRerun(cmd.Context(), req)
	} else {
		res, err = g.client().BulkCancel(cmd.Context(), req)
	}
	if err != nil {
		return g.apiError(err)
	}
	if asJSON {
		return g.printData(cmd.OutOrStdout(), res)
	}
	return printBulk(cmd.OutOrStdout(), action, res)
}

func printBulk(w io.Writer, action string, res wire.BulkResult) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tTASK\tSTATE\tFIRED\tWORKER\tERROR")
	for _, m := range res.Instances {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", m.ID, m.Task, m.State, m.FiredAt.Format(time.RFC3339), m.Worker, firstLine(m.Error, 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if res.DryRun {
		_, err := fmt.Fprintf(w, "dry run: %d instances match; the first %d would be %s\n", res.Matched, len(res.Instances), pastTense(action))
		return err
	}
	_, err := fmt.Fprintf(w, "%d of %d matching instances %s (audit record %d)\n", res.Acted, res.Matched, pastTense(action), res.AuditID)
	return err
}

func pastTense(action string) string {
	if action == "cancel" {
		return "cancelled"
	}
	return "rerun"
}

func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

func newDeadLettersCmd(g *cli) *cobra.Command {
	var task string
	cmd := &cobra.Command{
		Use:     "dead-letters",
		Aliases: []string{"dead"},
		Short:   "Instances that failed for good, grouped by task and error class; replay a group",
		Long: `List the instances whose last attempt failed (FAILED, not rerun since),
grouped by task and error class: the error's first line with its numbers
written N and quoted strings elided, so that one cause with different ids falls
in one group. Each group shows its count and when it was first and last seen.
ax dead-letters replay reruns a group, optionally with a payload patch.`,
		Example: `  ax dead-letters
  ax dead-letters --task nightly-report
  ax dead-letters replay --task nightly-report --class 'timeout after Ns' --dry-run
  ax dead-letters replay --task nightly-report --class 'bad day "…"' --payload-patch '{"day": "2026-03-02"}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			groups, err := g.client().DeadLetters(cmd.Context(), task)
			if err != nil {
				return g.apiError(err)
			}
			if asJSON {
				return g.printData(cmd.OutOrStdout(), groups)
			}
			tw := newTable(cmd.OutOrStdout())
			fmt.Fprintln(tw, "TASK\tCOUNT\tFIRST SEEN\tLAST SEEN\tLATEST\tERROR CLASS")
			for _, gr := range groups {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\n", gr.Task, gr.Count, gr.FirstSeen.Format(time.RFC3339),
					gr.LastSeen.Format(time.RFC3339), gr.LatestID, gr.ErrorClass)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&task, "task", "", "only this task's dead letters")
	cmd.AddCommand(newDeadLettersReplayCmd(g))
	return cmd
}

func newDeadLettersReplayCmd(g *cli) *cobra.Command {
	var (
		task, class, patch string
		dryRun, yes        bool
		limit              int
	)
	cmd := &cobra.Command{
		Use:     "replay",
		Short:   "Rerun a dead-letter group, optionally with a payload patch (audited once)",
		Example: `  ax dead-letters replay --task nightly-report --class 'timeout after Ns' --payload-patch '{"retry": true}'`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			req := wire.ReplayRequest{Task: task, ErrorClass: class, DryRun: dryRun, Limit: limit, Confirm: yes}
			if patch != "" {
				if !json.Valid([]byte(patch)) {
					return fmt.Errorf("--payload-patch is not JSON; give a merge patch like '{\"day\": \"2026-03-02\"}'")
				}
				req.PayloadPatch = json.RawMessage(patch)
			}
			res, err := g.client().ReplayDeadLetters(cmd.Context(), req)
			if err != nil {
				return g.apiError(err)
			}
			if asJSON {
				return g.printData(cmd.OutOrStdout(), res)
			}
			return printBulk(cmd.OutOrStdout(), "rerun", res)
		},
	}
	f := cmd.Flags()
	f.StringVar(&task, "task", "", "the group's task")
	f.StringVar(&class, "class", "", "the group's error class, as ax dead-letters prints it")
	f.StringVar(&patch, "payload-patch", "", "a JSON merge patch applied to each payload")
	f.BoolVar(&dryRun, "dry-run", false, "list the group's instances, rerun nothing")
	f.IntVar(&limit, "limit", 100, "the most instances rerun")
	f.BoolVar(&yes, "yes", false, "rerun although the group holds more than --limit (the first --limit)")
	_ = cmd.MarkFlagRequired("task")
	_ = cmd.MarkFlagRequired("class")
	return cmd
}
