package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/api/wire"
	"sigs.k8s.io/yaml"
)

func newTaskCmd(g *cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "task",
		Short: "Apply, list, inspect, enable, disable, pause and resume task definitions",
		Example: `  ax task apply -f nightly-report.yaml
  ax task list
  ax task get nightly-report -o json
  ax task disable nightly-report`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newTaskApplyCmd(g), newTaskListCmd(g), newTaskGetCmd(g))
	cmd.AddCommand(newTaskFlagCmds(g)...)
	return cmd
}

func newTaskApplyCmd(g *cli) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Register a task definition, or update it to a new version",
		Long: `Apply a task definition (YAML or JSON) through the API. A new task starts at
version 1, enabled; a changed definition becomes the next version; applying the
same definition again changes nothing. FILE may be - to read standard input.
A .json file is sent as JSON, a .yaml or .yml file as YAML; otherwise (and for
standard input) a definition starting with '{' is JSON and anything else YAML.`,
		Example: `  ax task apply -f nightly-report.yaml
  cat task.json | ax task apply -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			if file == "" {
				return fmt.Errorf("name the definition file with -f FILE (or -f - for standard input)")
			}
			body, contentType, err := readDefinition(cmd.InOrStdin(), file)
			if err != nil {
				return err
			}
			res, err := g.client().ApplyTask(cmd.Context(), body, contentType)
			if err != nil {
				return g.apiError(err)
			}
			for _, warning := range res.Warnings {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", warning)
			}
			if asJSON {
				return g.printData(cmd.OutOrStdout(), res)
			}
			name := res.Task.TaskName
			switch {
			case !res.Changed:
				fmt.Fprintf(cmd.OutOrStdout(), "task %s unchanged (version %d)\n", name, res.Version)
			case res.Version == 1:
				fmt.Fprintf(cmd.OutOrStdout(), "task %s created (version 1)\n", name)
			default:
				fmt.Fprintf(cmd.OutOrStdout(), "task %s updated to version %d\n", name, res.Version)
			}
			printFit(cmd.OutOrStdout(), res)
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "the task definition file, or - for standard input")
	return cmd
}

// readDefinition reads a definition file and tells its content type.
func readDefinition(stdin io.Reader, file string) ([]byte, string, error) {
	var (
		data []byte
		err  error
	)
	if file == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, "", fmt.Errorf("read task definition: %w", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		name := file
		if file == "-" {
			name = "standard input"
		}
		return nil, "", fmt.Errorf("the task definition in %s is empty; write one in YAML or JSON with at least task_name and execution.handler", name)
	}
	switch strings.ToLower(filepath.Ext(file)) {
	case ".json":
		return data, "application/json", nil
	case ".yaml", ".yml":
		return data, "application/yaml", nil
	}
	if bytes.HasPrefix(bytes.TrimSpace(data), []byte("{")) {
		return data, "application/json", nil
	}
	return data, "application/yaml", nil
}

func newTaskListCmd(g *cli) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Short:   "List the tasks",
		Example: "  ax task list\n  ax task list -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			tasks, err := g.client().ListTasks(cmd.Context())
			if err != nil {
				return g.apiError(err)
			}
			if asJSON {
				return g.printData(cmd.OutOrStdout(), tasks)
			}
			tw := newTable(cmd.OutOrStdout())
			fmt.Fprintln(tw, "NAME\tVERSION\tENABLED\tPAUSED\tHANDLER\tPOOL\tPRIORITY\tUPDATED")
			for _, t := range tasks {
				d := t.Task
				fmt.Fprintf(tw, "%s\t%d\t%t\t%t\t%s\t%s\t%s\t%s\n", d.TaskName, t.Version, t.Enabled, t.Paused,
					d.Execution.Handler, d.Dispatch.Pool(), d.Priority, timeOrDash(&t.UpdatedAt))
			}
			return tw.Flush()
		},
	}
}

func newTaskGetCmd(g *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME",
		Short: "Show a task and its current definition",
		Long: `Show a task: its version, whether it is enabled, and its current definition
with every default filled in (as YAML; -o json prints the API's JSON).`,
		Example: "  ax task get nightly-report\n  ax task get nightly-report -o json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			t, err := g.client().GetTask(cmd.Context(), args[0])
			if err != nil {
				return g.apiError(err)
			}
			if asJSON {
				return g.printData(cmd.OutOrStdout(), t)
			}
			def, err := yaml.Marshal(t.Task)
			if err != nil {
				return fmt.Errorf("show task %s: %w", args[0], err)
			}
			tw := newTable(cmd.OutOrStdout())
			fmt.Fprintf(tw, "NAME\t%s\n", t.Task.TaskName)
			fmt.Fprintf(tw, "VERSION\t%d\n", t.Version)
			fmt.Fprintf(tw, "ENABLED\t%t\n", t.Enabled)
			fmt.Fprintf(tw, "PAUSED\t%t\n", t.Paused)
			if t.Shadow {
				fmt.Fprintf(tw, "SHADOW\tsince %s: firings recorded SHADOW, not run (ax shadow stop)\n", timeOrDash(t.ShadowSince))
			}
			fmt.Fprintf(tw, "CREATED\t%s\n", timeOrDash(&t.CreatedAt))
			fmt.Fprintf(tw, "UPDATED\t%s\n", timeOrDash(&t.UpdatedAt))
			if err := tw.Flush(); err != nil {
				return err
			}
			for _, tt := range t.NextFireTimes {
				fmt.Fprintf(cmd.OutOrStdout(), "\nNEXT FIRINGS of trigger %d (%s, %s)\n", tt.Trigger, tt.Schedule, tt.Timezone)
				for i, at := range tt.Local {
					fmt.Fprintf(cmd.OutOrStdout(), "  %s   %s\n", at.Format("2006-01-02 15:04:05 MST"),
						tt.UTC[i].Format("2006-01-02 15:04:05Z"))
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "\n%s", def)
			return nil
		},
	}
}

// newTaskFlagCmd makes a command that sets one of a task's flags.
func newTaskFlagCmd(g *cli, verb, done, short, example string,
	set func(c *apiclient.Client, ctx context.Context, name string) (wire.TaskInfo, error)) *cobra.Command {
	return &cobra.Command{
		Use:     verb + " NAME",
		Short:   short,
		Example: example,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			t, err := set(g.client(), cmd.Context(), args[0])
			if err != nil {
				return g.apiError(err)
			}
			if asJSON {
				return g.printData(cmd.OutOrStdout(), t)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "task %s %s\n", args[0], done)
			return nil
		},
	}
}

func newTaskFlagCmds(g *cli) []*cobra.Command {
	return []*cobra.Command{
		newTaskFlagCmd(g, "enable", "enabled", "Enable a task, so that its firings run", "  ax task enable nightly-report",
			func(c *apiclient.Client, ctx context.Context, name string) (wire.TaskInfo, error) {
				return c.SetTaskEnabled(ctx, name, true)
			}),
		newTaskFlagCmd(g, "disable", "disabled", "Disable a task: its firings are skipped until it is enabled again",
			"  ax task disable nightly-report",
			func(c *apiclient.Client, ctx context.Context, name string) (wire.TaskInfo, error) {
				return c.SetTaskEnabled(ctx, name, false)
			}),
		newTaskFlagCmd(g, "pause", "paused",
			"Pause a task: running instances finish, new firings make no runs, missed cron ticks follow the misfire policy on resume",
			"  ax task pause nightly-report",
			func(c *apiclient.Client, ctx context.Context, name string) (wire.TaskInfo, error) {
				return c.SetTaskPaused(ctx, name, true)
			}),
		newTaskFlagCmd(g, "resume", "resumed", "Resume a paused task", "  ax task resume nightly-report",
			func(c *apiclient.Client, ctx context.Context, name string) (wire.TaskInfo, error) {
				return c.SetTaskPaused(ctx, name, false)
			}),
		newTaskFlagCmd(g, "delete", "deleted",
			"Delete a task (admin): it takes no more firings, running instances finish, its history stays",
			"  ax task delete nightly-report",
			func(c *apiclient.Client, ctx context.Context, name string) (wire.TaskInfo, error) {
				return c.DeleteTask(ctx, name)
			}),
	}
}
