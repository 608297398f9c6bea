package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/dispatcher"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
)

// historyFlags are the dispatcher's flags of the instance history's
// maintenance (see dispatcher.HistoryOptions).
type historyFlags struct {
	after, retention, period string
	archive                  bool
}

func (h *historyFlags) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&h.after, "history-after", envOr("AX_HISTORY_AFTER", "7d"),
		`how long an ended instance stays in the hot tables before it moves to the partitioned history, e.g. "7d" or "36h" (env AX_HISTORY_AFTER)`)
	f.StringVar(&h.retention, "history-retention", envOr("AX_HISTORY_RETENTION", "0"),
		`how long instances are kept after they fired, for tasks without a retention of their own, e.g. "90d"; 0 keeps them forever (env AX_HISTORY_RETENTION)`)
	f.BoolVar(&h.archive, "history-archive", os.Getenv("AX_HISTORY_ARCHIVE") == "true",
		"move expired instances to the archive tables instead of dropping them, for tasks that do not set archive (env AX_HISTORY_ARCHIVE=true)")
	f.StringVar(&h.period, "history-period", envOr("AX_HISTORY_PERIOD", "month"),
		"the span of one history partition: month, week or day (env AX_HISTORY_PERIOD)")
}

func (h *historyFlags) options() (dispatcher.HistoryOptions, error) {
	var o dispatcher.HistoryOptions
	after, err := schemas.ParseRetention(h.after)
	if err != nil {
		return o, fmt.Errorf("--history-after: %w", err)
	}
	o.After, o.Archive = after, h.archive
	if n, err := strconv.Atoi(h.retention); err != nil || n != 0 {
		if o.Retention, err = schemas.ParseRetention(h.retention); err != nil {
			return o, fmt.Errorf("--history-retention: %w (or 0 to keep instances forever)", err)
		}
	}
	if o.Period, err = store.ParseHistoryPeriod(h.period); err != nil {
		return o, fmt.Errorf("--history-period: %w", err)
	}
	return o, nil
}
