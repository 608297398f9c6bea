package main

import (
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/schemas"
)

// auditVersionFlag adds --audit-version: the audit protocol version the
// relay publishes (docs/protocol.md, "the audit protocol").
func auditVersionFlag(cmd *cobra.Command, v *int) {
	def := schemas.AuditBatchVersion
	if env, err := strconv.Atoi(os.Getenv("AX_AUDIT_VERSION")); err == nil {
		def = env
	}
	cmd.Flags().IntVar(v, "audit-version", def,
		"the AX_AUDIT message version the relay publishes: 2, a page's records of one task a message; 1, a record a message, for consumers that read only version 1 (env AX_AUDIT_VERSION; docs/protocol.md)")
}
