package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/ax-scheduler/ax/schemas"
)

func newLimitCmd(g *cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "limit",
		Aliases: []string{"limits"},
		Short:   "Apply, list, pause and resume named limits that tasks share",
		Long: `A named limit bounds the attempts of every task that names it (limits: [NAME] in
the task's definition), across every dispatcher and worker: concurrency (most
running at once), rate (most started per interval, N/s, N/m, N/h) or both, per
key of a template over the payload ("{{.tenant}}"; none: one key for all), with
per-key overrides. An attempt starts only when all its limits admit it; until
then its instance is WAITING, the limit and key it waits for as the reason. A
paused limit admits nothing until resumed. See docs/execution.md.`,
		Example: `  ax limit apply -f supplier-api.yaml
  ax limit list
  ax limit pause supplier-api
  ax limit resume supplier-api`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newLimitApplyCmd(g), newLimitListCmd(g), newLimitPauseCmd(g, true), newLimitPauseCmd(g, false),
		newLimitDeleteCmd(g))
	return cmd
}

func newLimitApplyCmd(g *cli) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Create or replace the limits of a YAML or JSON file (one limit or a list)",
		Long: `Applies the limits of FILE (- for standard input): one limit, or a list of them.
A limit has name, and concurrency, rate or both; key and overrides are optional:

  name: supplier-api
  rate: 50/s
  concurrency: 10
  key: "{{.supplier}}"
  overrides:
    big-supplier: {rate: 200/s}

Applying again replaces the bounds; a paused limit stays paused.`,
		Example: `  ax limit apply -f supplier-api.yaml
  cat limits.yaml | ax limit apply -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			structured, err := g.json()
			if err != nil {
				return err
			}
			if file == "" {
				return fmt.Errorf("name the limits file with -f FILE (or -f - for standard input)")
			}
			limits, err := readLimits(cmd.InOrStdin(), file)
			if err != nil {
				return err
			}
			var applied []schemas.LimitUsage
			for _, l := range limits {
				u, err := g.client().ApplyLimit(cmd.Context(), l)
				if err != nil {
					return g.apiError(err)
				}
				applied = append(applied, u)
				if !structured {
					fmt.Fprintf(cmd.OutOrStdout(), "limit %s applied (%s)\n", u.Name, limitBounds(u.Limit))
				}
			}
			if structured {
				return g.printData(cmd.OutOrStdout(), applied)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "the limits file, or - for standard input")
	return cmd
}

// readLimits reads one limit or a list of them from file, YAML or JSON,
// and checks each, naming what to fix.
func readLimits(stdin io.Reader, file string) ([]schemas.Limit, error) {
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, fmt.Errorf("read limits: %w", err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s is neither YAML nor JSON: %w", file, err)
	}
	js = bytes.TrimSpace(js)
	if !bytes.HasPrefix(js, []byte("[")) {
		js = append(append([]byte("["), js...), ']')
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	var limits []schemas.Limit
	if err := dec.Decode(&limits); err != nil {
		return nil, fmt.Errorf("%s: not a limit or a list of limits (fields name, description, concurrency, rate, key, paused, overrides): %w", file, err)
	}
	if len(limits) == 0 {
		return nil, fmt.Errorf("%s holds no limit; write one with at least name and concurrency or rate", file)
	}
	for i, l := range limits {
		if p := l.Problems(); len(p) > 0 {
			var b strings.Builder
			fmt.Fprintf(&b, "%s: limit %d (%q) is not valid:", file, i+1, l.Name)
			for _, x := range p {
				fmt.Fprintf(&b, "\n  %s: %s", x.Field, x.Message)
			}
			return nil, fmt.Errorf("%s", b.String())
		}
	}
	return limits, nil
}

// limitBounds says a limit's bounds in a few words.
func limitBounds(l schemas.Limit) string {
	var parts []string
	if l.Concurrency > 0 {
		parts = append(parts, "concurrency "+strconv.Itoa(l.Concurrency))
	}
	if l.Rate != "" {
		parts = append(parts, "rate "+l.Rate)
	}
	if l.Key != "" {
		parts = append(parts, "per key "+l.Key)
	}
	if len(l.Overrides) > 0 {
		parts = append(parts, strconv.Itoa(len(l.Overrides))+" overrides")
	}
	return strings.Join(parts, ", ")
}

func newLimitListCmd(g *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the limits with their use: running, waiting, admitted in the last second, top keys",
		Example: `  ax limit list
  ax limit list -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			limits, err := g.client().ListLimits(cmd.Context())
			if err != nil {
				return g.apiError(err)
			}
			if asJSON {
				return g.printData(cmd.OutOrStdout(), limits)
			}
			tw := newTable(cmd.OutOrStdout())
			fmt.Fprintln(tw, "NAME\tBOUNDS\tPAUSED\tRUNNING\tWAITING\tADMITTED/S\tTOP KEYS (running/waiting)")
			for _, u := range limits {
				var keys []string
				for i, k := range u.Keys {
					if i == 5 {
						keys = append(keys, "…")
						break
					}
					keys = append(keys, fmt.Sprintf("%s=%d/%d", cmpKey(k.Key), k.Running, k.Waiting))
				}
				fmt.Fprintf(tw, "%s\t%s\t%t\t%d\t%d\t%d\t%s\n", u.Name, limitBounds(u.Limit), u.Paused, u.Running, u.Waiting,
					u.AdmittedLastSecond, strings.Join(keys, " "))
			}
			return tw.Flush()
		},
	}
}

// cmpKey shows the empty key (a limit without a key template) as "-".
func cmpKey(k string) string {
	if k == "" {
		return "-"
	}
	return k
}

func newLimitPauseCmd(g *cli, pause bool) *cobra.Command {
	use, short := "resume NAME", "Resume a paused limit: what waits for it is admitted again"
	if pause {
		use, short = "pause NAME", "Pause a limit: it admits nothing until resumed (what runs goes on)"
	}
	return &cobra.Command{
		Use:     use,
		Short:   short,
		Example: "  ax limit " + strings.Fields(use)[0] + " supplier-api",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			structured, err := g.json()
			if err != nil {
				return err
			}
			u, err := g.client().SetLimitPaused(cmd.Context(), args[0], pause)
			if err != nil {
				return g.apiError(err)
			}
			if structured {
				return g.printData(cmd.OutOrStdout(), u)
			}
			verb := "resumed"
			if u.Paused {
				verb = "paused"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "limit %s %s (%d running, %d waiting)\n", u.Name, verb, u.Running, u.Waiting)
			return nil
		},
	}
}

func newLimitDeleteCmd(g *cli) *cobra.Command {
	return &cobra.Command{
		Use:     "delete NAME",
		Short:   "Delete a limit: what waits for it waits until it is applied again",
		Example: "  ax limit delete supplier-api",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			structured, err := g.json()
			if err != nil {
				return err
			}
			if err := g.client().DeleteLimit(cmd.Context(), args[0]); err != nil {
				return g.apiError(err)
			}
			if structured {
				return g.printData(cmd.OutOrStdout(), map[string]any{"name": args[0], "deleted": true})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "limit %s deleted\n", args[0])
			return nil
		},
	}
}
