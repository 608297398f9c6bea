package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/schemas"
)

func newWorkerCmd(g *cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "worker",
		Aliases: []string{"workers"},
		Short:   "Inspect the executors' workers",
		Example: `  ax worker list
  ax worker list -o json`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List the live workers: their pools, handlers, slots and last heartbeat",
		Long: `List the workers whose heartbeat is live in the ax-workers bucket: id, host,
version, pools, busy and total slots, handlers, and how long ago the last
heartbeat came. A worker that stops beating drops off within the bucket's TTL.`,
		Example: `  ax worker list
  ax worker list -o json | jq '.[] | select(.busy == .slots) | .id'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			workers, err := g.client().ListWorkers(cmd.Context())
			if err != nil {
				return g.apiError(err)
			}
			if asJSON {
				return g.printData(cmd.OutOrStdout(), workers)
			}
			printWorkers(cmd.OutOrStdout(), workers, time.Now())
			return nil
		},
	})
	return cmd
}

func printWorkers(out io.Writer, workers []schemas.Worker, now time.Time) {
	if len(workers) == 0 {
		fmt.Fprintln(out, "no live workers; start one with ax executor (ax dev runs one)")
		return
	}
	tw := newTable(out)
	fmt.Fprintln(tw, "ID\tHOST\tVERSION\tPOOLS\tBUSY\tHANDLERS\tHEARTBEAT")
	for _, w := range workers {
		beat := "-"
		if !w.HeartbeatAt.IsZero() {
			beat = now.Sub(w.HeartbeatAt).Truncate(100*time.Millisecond).String() + " ago"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", w.ID, orDash(w.Hostname), orDash(w.Version),
			orDash(strings.Join(w.Pools, ",")), w.Busy, w.Slots, orDash(strings.Join(w.Handlers, ",")), beat)
	}
	tw.Flush()
}
