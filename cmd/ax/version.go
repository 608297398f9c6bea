package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/internal/buildinfo"
)

// newVersionCmd is ax version: the build's version, revision and Go
// version (ax --version prints the first line).
func newVersionCmd(g *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of this ax binary",
		Long: `Print the version of this ax binary, the commit it was built from and its Go
version; -o json or yaml for a machine. Every service exports the same as the
metric ax_build_info.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			i := buildinfo.Get()
			if asData, err := g.json(); err != nil || asData {
				if err != nil {
					return err
				}
				return g.printData(cmd.OutOrStdout(), i)
			}
			rev := i.Revision
			if rev == "" {
				rev = "unknown"
			} else if i.Modified {
				rev += " (modified)"
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "ax %s\nrevision %s\n%s\n", i.Version, rev, i.GoVersion)
			return err
		},
	}
}
