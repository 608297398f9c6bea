package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/schemas"
)

func newLedgerCmd(g *cli) *cobra.Command {
	var from, to, format string
	cmd := &cobra.Command{
		Use:   "ledger TASK",
		Short: "Every tick a task's cron triggers scheduled, and what became of it",
		Long: `Print the ledger of a task over a range: every instant its cron triggers say it
should have fired, in their time zones (a tick that fires local times the clocks
sprang forward over is marked "dst gap", one whose local time occurs twice "dst
repeat": it fired at its first occurrence only), each with the instance its
firing made — found by the tick's event id, also once moved to history — its
attempts, state and run time; or why there is none: the task was paused or
disabled then, or no trigger service fired it in time, with the misfire policy.
A tick the misfire policy fired late is "late". The last line sums it up:
"744 ticks, 744 instances, 0 missed, 0 doubled, 3 retried".

--format csv and json export it for an auditor.`,
		Example: `  ax ledger nightly-settlement --from 2026-01-01T00:00:00Z --to 2026-04-01T00:00:00Z
  ax ledger nightly-settlement --from 720h --format csv > q1.csv`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format == "" {
				if _, err := g.json(); err != nil {
					return err
				}
				format = g.output
			} else if !slices.Contains([]string{outputTable, "csv", outputJSON, outputYAML}, format) {
				return fmt.Errorf("--format %q: use table, csv, json or yaml", format)
			}
			now := time.Now()
			var fromT, toT time.Time
			for _, f := range []struct {
				name, value string
				at          *time.Time
			}{{"--from", from, &fromT}, {"--to", to, &toT}} {
				if f.value == "" {
					continue
				}
				t, err := parseSince(f.value, now)
				if err != nil {
					return fmt.Errorf("%s %q: %w", f.name, f.value, err)
				}
				*f.at = t
			}
			l, err := g.client().Ledger(cmd.Context(), args[0], fromT, toT)
			if err != nil {
				return g.apiError(err)
			}
			return printLedger(cmd.OutOrStdout(), l, format)
		},
	}
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "the range's start: RFC 3339, or a duration back from now (720h); default one day before --to")
	f.StringVar(&to, "to", "", "the range's end, not included: RFC 3339, or a duration back from now; default now")
	f.StringVar(&format, "format", "", "table, csv, json or yaml (default: --output)")
	return cmd
}

// printLedger writes l as format asks: table, csv, json or yaml.
func printLedger(w io.Writer, l schemas.Ledger, format string) error {
	switch format {
	case outputJSON:
		return printJSON(w, l)
	case outputYAML:
		return printYAML(w, l)
	case "csv":
		return printLedgerCSV(w, l)
	case outputTable:
	default:
		return fmt.Errorf("--format %q: use table, csv, json or yaml", format)
	}
	fmt.Fprintf(w, "Ledger of %s from %s to %s\n", l.Task, l.From.Format(time.RFC3339), l.To.Format(time.RFC3339))
	for _, tr := range l.Triggers {
		fmt.Fprintf(w, "  trigger %d: %q in %s, misfire %s\n", tr.Index, tr.Schedule, tr.Timezone, tr.Misfire)
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "TICK (UTC)\tWALL CLOCK\tSTATUS\tINSTANCE\tSTATE\tATTEMPTS\tDURATION\tNOTE")
	for _, t := range append(append([]schemas.LedgerTick{}, l.Ticks...), l.Doubled...) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", tickOrDash(t.Tick), orDash(t.Wall), t.Status, idOrDash(t.InstanceID),
			orDash(string(t.State)), countOrDash(t.Attempts), durationOrDash(t.DurationMS), orDash(ledgerNote(t)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, l.Line)
	return err
}

// ledgerNote is a tick's DST note and reason, in one line.
func ledgerNote(t schemas.LedgerTick) string {
	note := t.Reason
	if t.DST != "" {
		dst := "dst " + t.DST + ": " + t.DSTNote
		if note == "" {
			note = dst
		} else {
			note = dst + "; " + note
		}
	}
	if t.Moved {
		note += " (in history)"
	}
	return note
}

// printLedgerCSV writes one row per tick, with a header row; the summary
// line is not a row (csv readers take it for data).
func printLedgerCSV(w io.Writer, l schemas.Ledger) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"tick", "wall", "trigger", "event_id", "status", "dst", "dst_note", "reason",
		"instance_id", "state", "attempts", "created_at", "duration_ms", "moved"})
	for _, t := range append(append([]schemas.LedgerTick{}, l.Ticks...), l.Doubled...) {
		rec := []string{"", t.Wall, strconv.Itoa(t.Trigger), t.EventID, t.Status, t.DST, t.DSTNote, t.Reason, "", string(t.State), "", "", "", strconv.FormatBool(t.Moved)}
		if !t.Tick.IsZero() {
			rec[0] = t.Tick.UTC().Format(time.RFC3339)
		}
		if t.InstanceID != 0 {
			rec[8], rec[10] = strconv.FormatInt(t.InstanceID, 10), strconv.Itoa(t.Attempts)
		}
		if t.CreatedAt != nil {
			rec[11] = t.CreatedAt.UTC().Format(time.RFC3339Nano)
		}
		if t.DurationMS != nil {
			rec[12] = strconv.FormatInt(*t.DurationMS, 10)
		}
		_ = cw.Write(rec)
	}
	cw.Flush()
	return cw.Error()
}

func tickOrDash(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05")
}

func idOrDash(id int64) string {
	if id == 0 {
		return "-"
	}
	return strconv.FormatInt(id, 10)
}

func countOrDash(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

func durationOrDash(ms *int64) string {
	if ms == nil {
		return "-"
	}
	return (time.Duration(*ms) * time.Millisecond).String()
}
