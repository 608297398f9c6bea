package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/importer"
	"github.com/ax-scheduler/ax/schemas"
)

func newImportCmd(g *cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "import",
		Short: "Turn crontab lines, XXL-JOB jobs and Quartz jobs into AX task definitions",
		Long: `Read another scheduler's jobs and make one AX task definition of each: YAML
files to review (--out DIR), or applied through the API (--apply). A report
says, row by row, what was imported as it was, what was changed (imported,
with each thing AX does differently) and what was refused, with the reason.
See docs/migrate.md.`,
		Example: `  crontab -l | ax import crontab - --timezone Europe/Berlin --tags web-1
  ax import crontab --system /etc/crontab /etc/cron.d/* --out imported/
  ax import xxl-job --dsn 'mysql://reader:secret@127.0.0.1:3306/xxl_job' --apply`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newImportCrontabCmd(g), newImportXXLJobCmd(g), newImportQuartzCmd(g))
	return cmd
}

// importOut is where an import's definitions go.
type importOut struct {
	dir      string
	apply    bool
	disabled bool
}

func (o *importOut) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.dir, "out", "", `write one YAML definition per task into this folder (default "ax-import" unless --apply)`)
	cmd.Flags().BoolVar(&o.apply, "apply", false, "apply the definitions through the API (and disable those stopped in the source)")
	cmd.Flags().BoolVar(&o.disabled, "disabled", false, "with --apply: apply every task disabled, so that none fires until you enable it (cut-over); a new task never fires in between")
}

func newImportCrontabCmd(g *cli) *cobra.Command {
	var (
		opts importer.CrontabOptions
		out  importOut
	)
	cmd := &cobra.Command{
		Use:   "crontab FILE…|-",
		Short: "Import the lines of crontabs (crontab -l output, /etc/crontab with --system)",
		Long: `Make one task of each command line of the crontabs: a cron trigger with the
line's schedule, read by crontab(5)'s rules in the zone of its CRON_TZ= (or
TZ=) line or --timezone, whose payload is the command for the shell handler
builtin.shell (off by default: run the executors that should run these
commands with ax executor --enable-shell, in the pool --tags names). The
text after the first unescaped % is the command's standard input; the
environment lines above a command are its environment; comment lines above
it, its description; MAILTO=, its owner (unless --owner). A task's name comes
from its command, so importing the same line again updates the same task.
@reboot lines and schedules AX's cron would read differently are refused.`,
		Example: `  crontab -l | ax import crontab - --tags web-1
  ax import crontab --system /etc/crontab --timezone Europe/Berlin --out imported/`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := g.json(); err != nil {
				return err
			}
			rep := &importer.Report{}
			for _, name := range args {
				var r io.Reader = cmd.InOrStdin()
				o := opts
				o.Name = name
				if name == "-" {
					o.Name = "stdin"
				} else {
					f, err := os.Open(name)
					if err != nil {
						return fmt.Errorf("import crontab: %w", err)
					}
					defer f.Close()
					r = f
				}
				one, err := importer.Crontab(r, o)
				if err != nil {
					return fmt.Errorf("import crontab: %w", err)
				}
				rep.Entries = append(rep.Entries, one.Entries...)
				rep.Notes = mergeNotes(rep.Notes, one.Notes)
			}
			return g.finishImport(cmd, "crontab", rep, out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Owner, "owner", "", "every task's owner (default the crontab's MAILTO=)")
	f.StringVar(&opts.Timezone, "timezone", hostZone(), "the zone of lines without CRON_TZ= (default this host's: $TZ, /etc/timezone or /etc/localtime)")
	f.BoolVar(&opts.System, "system", false, "system crontab format (/etc/crontab, /etc/cron.d): a user name before each command, who runs it")
	f.StringSliceVar(&opts.Tags, "tags", nil, "dispatch tags of every task: the pool of the executors that run the commands (the crontab's host)")
	f.DurationVar(&opts.Timeout, "timeout", importer.DefaultImportTimeout, "every task's execution timeout (cron has none)")
	out.flags(cmd)
	return cmd
}

// finishImport prints the report and writes or applies its definitions.
func (g *cli) finishImport(cmd *cobra.Command, kind string, rep *importer.Report, out importOut) error {
	asJSON, err := g.json()
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if out.dir == "" && !out.apply {
		out.dir = "ax-import"
	}
	if out.dir != "" {
		if err := writeImported(out.dir, kind, rep); err != nil {
			return err
		}
	}
	if asJSON {
		if err := g.printData(w, rep); err != nil {
			return err
		}
	} else {
		rep.Print(w)
		if out.dir != "" {
			fmt.Fprintf(w, "definitions written to %s/ (review them, then ax task apply -f FILE, or run again with --apply)\n", out.dir)
		}
	}
	if out.disabled && !out.apply {
		return fmt.Errorf("--disabled applies the tasks disabled: give --apply too")
	}
	if out.apply {
		return g.applyImported(cmd.Context(), cmd.ErrOrStderr(), rep, out.disabled)
	}
	return nil
}

// writeImported writes one YAML file per imported task, headed by where
// it came from and what AX does differently.
func writeImported(dir, kind string, rep *importer.Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("import: %w", err)
	}
	for _, e := range rep.Entries {
		if e.Task == nil {
			continue
		}
		body, err := yaml.Marshal(e.Task)
		if err != nil {
			return fmt.Errorf("import: encode %s: %w", e.Task.TaskName, err)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "# ax import %s: %s, %s\n", kind, e.Source, e.Outcome)
		for _, line := range strings.Split(e.Text, "\n") {
			fmt.Fprintf(&b, "#   | %s\n", line)
		}
		for _, n := range e.Notes {
			fmt.Fprintf(&b, "# - %s\n", n)
		}
		if e.Disabled {
			b.WriteString("# stopped in the source: disable it after applying (ax task disable " + e.Task.TaskName + ")\n")
		}
		b.Write(body)
		if err := os.WriteFile(filepath.Join(dir, e.Task.TaskName+".yaml"), []byte(b.String()), 0o644); err != nil {
			return fmt.Errorf("import: %w", err)
		}
	}
	return nil
}

// applyImported applies each imported definition through the API and
// disables those stopped in their source.
func (g *cli) applyImported(ctx context.Context, w io.Writer, rep *importer.Report, disabled bool) error {
	client := g.client()
	var failed int
	for _, e := range rep.Entries {
		if e.Task == nil {
			continue
		}
		body, err := json.Marshal(e.Task)
		if err != nil {
			return fmt.Errorf("import: encode %s: %w", e.Task.TaskName, err)
		}
		off := disabled || e.Disabled
		if off {
			if err := disableFirst(ctx, client, e.Task); err != nil {
				failed++
				fmt.Fprintf(w, "disable %s: %v\n", e.Task.TaskName, g.apiError(err))
				continue
			}
		}
		res, err := client.ApplyTask(ctx, body, "application/json")
		if err != nil {
			failed++
			fmt.Fprintf(w, "apply %s: %v\n", e.Task.TaskName, g.apiError(err))
			continue
		}
		state := "unchanged"
		switch {
		case res.Changed && res.Version == 1:
			state = "created"
		case res.Changed:
			state = fmt.Sprintf("updated to version %d", res.Version)
		}
		switch {
		case e.Disabled:
			state += ", disabled as in the source"
		case off:
			state += ", disabled (ax task enable " + e.Task.TaskName + " to cut over)"
		}
		fmt.Fprintf(w, "task %s %s\n", e.Task.TaskName, state)
	}
	if failed > 0 {
		return fmt.Errorf("import: %d definitions were not applied (see above)", failed)
	}
	return nil
}

func mergeNotes(a, b []string) []string {
	for _, n := range b {
		seen := false
		for _, m := range a {
			seen = seen || m == n
		}
		if !seen {
			a = append(a, n)
		}
	}
	return a
}

// hostZone names this host's time zone, as cron reads its crontabs: $TZ,
// else /etc/timezone, else the zoneinfo file /etc/localtime links to;
// "UTC" when none says.
func hostZone() string {
	if tz := strings.TrimPrefix(os.Getenv("TZ"), ":"); tz != "" {
		if _, err := time.LoadLocation(tz); err == nil {
			return tz
		}
	}
	if b, err := os.ReadFile("/etc/timezone"); err == nil {
		if tz := strings.TrimSpace(string(b)); tz != "" {
			if _, err := time.LoadLocation(tz); err == nil {
				return tz
			}
		}
	}
	if link, err := os.Readlink("/etc/localtime"); err == nil {
		if _, tz, ok := strings.Cut(link, "zoneinfo/"); ok {
			if _, err := time.LoadLocation(tz); err == nil {
				return tz
			}
		}
	}
	return "UTC"
}

// disableFirst disables task before its definition is applied, so that
// none of its triggers fires in between: a new task is created without
// triggers, disabled, and then gets its definition.
func disableFirst(ctx context.Context, client *apiclient.Client, task *schemas.Task) error {
	if _, err := client.GetTask(ctx, task.TaskName); apiclient.IsNotFound(err) {
		bare := *task
		bare.Triggers, bare.After = nil, nil
		body, err := json.Marshal(bare)
		if err != nil {
			return err
		}
		if _, err := client.ApplyTask(ctx, body, "application/json"); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	_, err := client.SetTaskEnabled(ctx, task.TaskName, false)
	return err
}
