package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/schemas"
)

func newAuditCmd(g *cli) *cobra.Command {
	var (
		q     apiclient.AuditQuery
		since string
	)
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Read the audit trail: instance transitions and operator actions, newest first",
		Long: `Read the audit trail from the API: every transition of every instance (who or
what made it, and why) and every operator action (apply, enable, disable, fire,
…, with the operator's name), newest first. The auditor also relays each record,
exactly once, to the AX_AUDIT stream (subject ax.audit.<task>). To read the next
page, pass the last id shown as --before.`,
		Example: `  ax audit --since 1h
  ax audit --task nightly-report --operator alice
  ax audit --instance 42 -o json
  ax audit --since 2025-03-01T00:00:00Z --limit 1000 --before t-9120`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			if since != "" {
				if q.Since, err = parseSince(since, time.Now()); err != nil {
					return fmt.Errorf("--since %q: %w", since, err)
				}
			}
			recs, err := g.client().Audit(cmd.Context(), q)
			if err != nil {
				return g.apiError(err)
			}
			if asJSON {
				return g.printData(cmd.OutOrStdout(), recs)
			}
			return printAudit(cmd.OutOrStdout(), recs)
		},
	}
	f := cmd.Flags()
	f.StringVar(&q.Task, "task", "", "only the records of this task")
	f.Int64Var(&q.InstanceID, "instance", 0, "only the records of this instance: its transitions and the actions on it")
	f.StringVar(&q.Operator, "operator", "", `only the records of this operator ("alice", "dispatcher", "worker:w-1", …)`)
	f.StringVar(&since, "since", "", "only the records written since then: a duration back from now (90m, 24h) or an RFC 3339 time")
	f.IntVar(&q.Limit, "limit", 100, "most records to show (1-1000)")
	f.StringVar(&q.Before, "before", "", "only the records after this one (the next page): the last ID shown")
	return cmd
}

// parseSince reads --since: a positive duration back from now, or an RFC
// 3339 time.
func parseSince(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("use a duration back from now (90m, 24h) or an RFC 3339 time (2025-03-01T12:00:00Z)")
}

func printAudit(w io.Writer, recs []schemas.AuditRecord) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "AT\tID\tTASK\tINSTANCE\tWHAT\tOPERATOR\tREASON")
	for _, r := range recs {
		instance := "-"
		if r.InstanceID != 0 {
			instance = fmt.Sprint(r.InstanceID)
		}
		what := string(r.Action)
		if r.Kind == schemas.AuditTransition {
			what = fmt.Sprintf("%s→%s (attempt %d)", orDash(string(r.From)), r.To, r.Attempt)
		} else if len(r.Details) > 0 {
			what += " " + string(r.Details)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.At.Local().Format("2006-01-02 15:04:05.000"), r.ID, r.Task,
			instance, what, orDash(r.Operator), orDash(r.Reason))
	}
	return tw.Flush()
}
