package main

import "github.com/spf13/cobra"

func newImportXXLJobCmd(g *cli) *cobra.Command { return &cobra.Command{Use: "xxl-job"} }
