package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/api/wire"
)

func newStreamCmd(g *cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "stream",
		Aliases: []string{"streams"},
		Short:   "Inspect AX's JetStream streams and their consumers",
		Example: `  ax stream list
  ax stream list -o json`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List AX's streams and buckets with their consumers' backlogs",
		Long: `List each stream and key-value bucket of AX's topology — messages and bytes
stored — and under it each consumer: messages not yet delivered (PENDING),
delivered and not yet acknowledged (ACK PENDING), redelivered, and the pull
requests waiting. A growing PENDING on a pool's consumer means its workers do
not keep up; a growing ACK PENDING, that attempts are slow or stuck.`,
		Example: `  ax stream list
  ax stream list -o json | jq '.streams[] | {name, messages}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			streams, missing, err := g.client().ListStreams(cmd.Context())
			if err != nil {
				return g.apiError(err)
			}
			if asJSON {
				return g.printData(cmd.OutOrStdout(), map[string]any{"streams": streams, "missing": missing})
			}
			printStreams(cmd.OutOrStdout(), streams)
			if len(missing) > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "missing: %s (start the dispatcher or ax dev: it makes them)\n", strings.Join(missing, ", "))
			}
			return nil
		},
	})
	return cmd
}

func printStreams(out io.Writer, streams []wire.StreamInfo) {
	tw := newTable(out)
	fmt.Fprintln(tw, "STREAM\tCONSUMER\tMESSAGES\tBYTES\tPENDING\tACK PENDING\tREDELIVERED\tWAITING")
	for _, s := range streams {
		fmt.Fprintf(tw, "%s\t-\t%d\t%s\t-\t-\t-\t-\n", s.Name, s.Messages, byteSize(s.Bytes))
		for _, c := range s.Consumers {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t%d\t%d\t%d\t%d\n", s.Name, c.Name, c.Pending, c.AckPending, c.Redelivered, c.Waiting)
		}
	}
	tw.Flush()
}

// byteSize formats n bytes for a person: 512B, 1.5KiB, 3.2MiB.
func byteSize(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
