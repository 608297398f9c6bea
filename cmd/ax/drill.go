package main

import (
	"github.com/spf13/cobra"
)

func init() { extraCommands = append(extraCommands, newDrillCmd) }

// drillCommands holds the constructors of ax drill's subcommands; the
// files that define them (drill_task.go, drill_system.go) add theirs in
// their init.
var drillCommands []func() *cobra.Command

func newDrillCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "drill",
		Short: "Rehearse faults against a task or the whole system and give a verdict",
		Long: `Rehearse faults and print a verdict: a table of checks (check | expected |
observed | result), then the facts measured. ax drill exits 0 only when every
check passed, so CI can gate on it; -o json prints the same report as JSON.

  ax drill task NAME   fire one task on a running AX with faults injected (node
                       crash, database jitter, retry storm, duplicate delivery)
  ax drill system      the reliability battery against a sandbox it starts

See docs/drill.md for every check and how to read a verdict.`,
		Args: cobra.NoArgs,
	}
	for _, newCmd := range drillCommands {
		cmd.AddCommand(newCmd())
	}
	return cmd
}
