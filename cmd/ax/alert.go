package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
)

func newAlertCmd(g *cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "alert",
		Aliases: []string{"alerts"},
		Short:   "List and acknowledge alerts; manage alert rules and channels",
		Long: `The auditor checks the alert rules and notifies the alert channels: a webhook
(JSON), a WeCom group robot, or a Slack incoming webhook. An alert opens when its
rule's condition holds for a task, a pool or the whole fleet; it is notified at
once, then at most once per the rule's throttle with its repeats grouped, and its
resolution is notified once. Acknowledging an alert stops its notifications until
it resolves.

Default rules: P0 no_live_executor and failing_tasks, P1 consecutive_failures,
timeout_rate and quarantined, P2 backlog and duration_jitter. See
docs/operations.md.`,
		Example: `  ax alert list --state firing
  ax alert ack 17
  ax alert rule set consecutive_failures --params '{"failures": 5}'
  ax alert channel add --kind slack --url https://hooks.slack.com/services/T0/B0/x`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newAlertListCmd(g), newAlertAckCmd(g), newAlertRuleCmd(g), newAlertChannelCmd(g))
	return cmd
}

func newAlertListCmd(g *cli) *cobra.Command {
	var (
		q     apiclient.AlertQuery
		state string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List alerts, newest first",
		Example: `  ax alert list
  ax alert list --state firing -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			q.State = schemas.AlertState(state)
			alerts, err := g.client().ListAlerts(cmd.Context(), q)
			if err != nil {
				return g.apiError(err)
			}
			if asJSON {
				return g.printData(cmd.OutOrStdout(), alerts)
			}
			return printAlerts(cmd.OutOrStdout(), alerts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&state, "state", "", "only alerts in this state: firing, acked or resolved")
	f.IntVar(&q.Limit, "limit", 100, "most alerts to show (1-1000)")
	f.Int64Var(&q.Before, "before", 0, "only alerts older than this id (the next page)")
	return cmd
}

func printAlerts(w io.Writer, alerts []schemas.Alert) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tLEVEL\tSTATE\tRULE\tKEY\tINSTANCE\tCOUNT\tLAST SEEN\tREASON")
	for _, a := range alerts {
		instance := "-"
		if a.InstanceID != 0 {
			instance = strconv.FormatInt(a.InstanceID, 10)
		}
		state := string(a.State)
		if a.State == schemas.AlertAcked {
			state += " by " + a.AckedBy
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", a.ID, a.Level, state, a.Rule, orDash(a.Key), instance,
			a.Count, timeOrDash(&a.LastSeen), a.Reason)
	}
	return tw.Flush()
}

func newAlertAckCmd(g *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "ack ID",
		Short: "Acknowledge an alert: no more notifications until it resolves",
		Long: `Acknowledge a firing alert (operator role): it stays open, and its rule keeps
counting it, but no notification goes out for it until it resolves. Its
resolution is still notified.`,
		Example: `  ax alert ack 17`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			id, err := parseID(args[0], "an alert", "ax alert list shows")
			if err != nil {
				return err
			}
			a, err := g.client().AckAlert(cmd.Context(), id)
			if err != nil {
				return g.apiError(err)
			}
			if asJSON {
				return g.printData(cmd.OutOrStdout(), a)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "alert %d (%s %s %s) acknowledged by %s\n", a.ID, a.Level, a.Rule, orDash(a.Key), a.AckedBy)
			return nil
		},
	}
}

func newAlertRuleCmd(g *cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "rule",
		Aliases: []string{"rules"},
		Short:   "List and change alert rules",
		Args:    cobra.NoArgs,
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the alert rules",
		Example: `  ax alert rule list
  ax alert rule list -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			rules, err := g.client().ListAlertRules(cmd.Context())
			if err != nil {
				return g.apiError(err)
			}
			if asJSON {
				return g.printData(cmd.OutOrStdout(), rules)
			}
			tw := newTable(cmd.OutOrStdout())
			fmt.Fprintln(tw, "NAME\tKIND\tLEVEL\tENABLED\tPARAMS")
			for _, r := range rules {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%t\t%s\n", r.Name, r.Kind, r.Level, r.Enabled, r.Params)
			}
			return tw.Flush()
		},
	}
	cmd.AddCommand(list, newAlertRuleSetCmd(g))
	return cmd
}

func newAlertRuleSetCmd(g *cli) *cobra.Command {
	var (
		kind, level, params string
		enable, disable     bool
	)
	cmd := &cobra.Command{
		Use:   "set NAME",
		Short: "Create an alert rule or change one (admin)",
		Long: `Create an alert rule, or change the level, params or enabled flag of one; what
is not given keeps its value (a new rule needs --kind and --level). --params
replaces the whole params object. The kinds and their params:

  no_live_executor      (none)
  failing_tasks         tasks (5), window ("10m")
  consecutive_failures  failures (3)
  timeout_rate          rate (0.2), window ("15m"), min_attempts (5)
  backlog               instances (10), age ("5m")
  duration_jitter       runs (20), min_runs (5), factor (2)
  quarantined           window ("1h")
  deadline_missed       window ("48h"): the runs looked at, by their firing

and every kind takes throttle ("10m"): the least time between two
notifications of one alert.`,
		Example: `  ax alert rule set consecutive_failures --params '{"failures": 5, "throttle": "30m"}'
  ax alert rule set etl-backlog --kind backlog --level P1 --params '{"instances": 100, "age": "15m"}'
  ax alert rule set duration_jitter --disable`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			if enable && disable {
				return fmt.Errorf("--enable and --disable: give one of them")
			}
			name := args[0]
			client := g.client()
			rules, err := client.ListAlertRules(cmd.Context())
			if err != nil {
				return g.apiError(err)
			}
			req := wire.AlertRuleRequest{Kind: schemas.AlertKind(kind), Level: schemas.AlertLevel(level)}
			on := true
			for _, r := range rules {
				if r.Name == name {
					req = wire.AlertRuleRequest{Kind: r.Kind, Level: r.Level, Params: r.Params}
					on = r.Enabled
					if kind != "" && schemas.AlertKind(kind) != r.Kind {
						return fmt.Errorf("--kind %s: rule %s is of kind %s, which cannot change; set a rule with another name", kind, name, r.Kind)
					}
				}
			}
			if req.Kind == "" || req.Level == "" {
				return fmt.Errorf("rule %s does not exist: give --kind and --level to create it", name)
			}
			if level != "" {
				req.Level = schemas.AlertLevel(strings.ToUpper(level))
			}
			if params != "" {
				if !json.Valid([]byte(params)) {
					return fmt.Errorf("--params %q is not JSON; write an object such as '{\"failures\": 5}'", params)
				}
				req.Params = json.RawMessage(params)
			}
			on = (on || enable) && !disable
			req.Enabled = &on
			r, err := client.PutAlertRule(cmd.Context(), name, req)
			if err != nil {
				return g.apiError(err)
			}
			if asJSON {
				return g.printData(cmd.OutOrStdout(), r)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "rule %s: %s %s, enabled %t, params %s\n", r.Name, r.Kind, r.Level, r.Enabled, r.Params)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&kind, "kind", "", "the rule's kind, for a new rule")
	f.StringVar(&level, "level", "", "P0, P1 or P2")
	f.StringVar(&params, "params", "", "the kind's parameters as a JSON object")
	f.BoolVar(&enable, "enable", false, "enable the rule")
	f.BoolVar(&disable, "disable", false, "disable the rule: its open alerts resolve")
	return cmd
}

func newAlertChannelCmd(g *cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "channel",
		Aliases: []string{"channels"},
		Short:   "Add, list and delete alert channels (admin)",
		Args:    cobra.NoArgs,
	}
	var (
		kind, url string
	)
	add := &cobra.Command{
		Use:   "add",
		Short: "Add an alert channel: every notification goes to every channel",
		Long: `Add an alert channel. Kinds:

  webhook  POST of the notification as JSON: status, alert_id, rule, level, key,
           task, instance_id, link, reason, count, repeats, first_seen, last_seen
  wecom    a WeCom group robot (https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=…): markdown
  slack    a Slack incoming webhook, or anything that takes its {"text": …} payload`,
		Example: `  ax alert channel add --kind webhook --url https://alerts.example.com/ax
  ax alert channel add --kind wecom --url 'https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=KEY'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			ch, err := g.client().AddAlertChannel(cmd.Context(), wire.AlertChannelRequest{Kind: schemas.AlertChannelKind(kind), URL: url})
			if err != nil {
				return g.apiError(err)
			}
			if asJSON {
				return g.printData(cmd.OutOrStdout(), ch)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "channel %d added: %s %s\n", ch.ID, ch.Kind, ch.URL)
			return nil
		},
	}
	add.Flags().StringVar(&kind, "kind", "webhook", "webhook, wecom or slack")
	add.Flags().StringVar(&url, "url", "", "where the notifications are posted")
	list := &cobra.Command{
		Use:   "list",
		Short: "List the alert channels",
		Example: `  ax alert channel list
  ax alert channel list -o json | jq -r '.[].url'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			chs, err := g.client().ListAlertChannels(cmd.Context())
			if err != nil {
				return g.apiError(err)
			}
			if asJSON {
				return g.printData(cmd.OutOrStdout(), chs)
			}
			tw := newTable(cmd.OutOrStdout())
			fmt.Fprintln(tw, "ID\tKIND\tURL\tCREATED")
			for _, ch := range chs {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", ch.ID, ch.Kind, ch.URL, timeOrDash(&ch.CreatedAt))
			}
			return tw.Flush()
		},
	}
	del := &cobra.Command{
		Use:   "delete ID",
		Short: "Delete an alert channel",
		Example: `  ax alert channel delete 3
  ax alert channel delete 3 -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			structured, err := g.json()
			if err != nil {
				return err
			}
			id, err := parseID(args[0], "a channel", "ax alert channel list shows")
			if err != nil {
				return err
			}
			ch, err := g.client().DeleteAlertChannel(cmd.Context(), id)
			if err != nil {
				return g.apiError(err)
			}
			if structured {
				return g.printData(cmd.OutOrStdout(), ch)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "channel %d deleted: %s %s\n", ch.ID, ch.Kind, ch.URL)
			return nil
		},
	}
	cmd.AddCommand(add, list, del)
	return cmd
}
