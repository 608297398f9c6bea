package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/importer"
)

func newImportQuartzCmd(g *cli) *cobra.Command {
	var (
		dsn  string
		opts importer.QuartzOptions
		out  importOut
	)
	cmd := &cobra.Command{
		Use:   "quartz",
		Short: "Import the jobs of a Quartz JDBC job store",
		Long: `Read a Quartz JDBC job store (qrtz_job_details, qrtz_triggers,
qrtz_cron_triggers, qrtz_simple_triggers; read-only) and make one task of each
job, named quartz-<group>-<name>, its handler the job's class name: cron
triggers by Quartz's rules in their zone, simple triggers that repeat forever
at whole seconds as @every, misfire instructions, paused jobs disabled,
@DisallowConcurrentExecution as one run at a time, and the job data map as
the payload when the store keeps it as properties
(org.quartz.jobStore.useProperties=true). See docs/migrate.md.`,
		Example: `  ax import quartz --dsn 'postgres://reader:secret@127.0.0.1:5432/app' --out imported/
  ax import quartz --dsn 'mysql://reader:secret@127.0.0.1:3306/app' --table-prefix QRTZ_ --apply --disabled`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := g.json(); err != nil {
				return err
			}
			if dsn == "" {
				return fmt.Errorf("name Quartz's database with --dsn postgres://… or mysql://…")
			}
			db, err := importer.OpenDatabase(dsn)
			if err != nil {
				return err
			}
			defer db.Close()
			rep, err := importer.Quartz(cmd.Context(), db, opts)
			if err != nil {
				return fmt.Errorf("import quartz: %w", err)
			}
			return g.finishImport(cmd, "quartz", rep, out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&dsn, "dsn", "", "the job store's database: postgres://user:password@host:port/database or mysql://…")
	f.StringVar(&opts.Scheduler, "scheduler", "", "the SCHED_NAME to import (default every scheduler's)")
	f.StringVar(&opts.TablePrefix, "table-prefix", "qrtz_", "org.quartz.jobStore.tablePrefix")
	f.StringVar(&opts.Timezone, "timezone", hostZone(), "the zone of cron triggers without TIME_ZONE_ID (the JVM's; default this host's)")
	f.DurationVar(&opts.Timeout, "timeout", importer.DefaultImportTimeout, "every task's execution timeout (Quartz has none)")
	out.flags(cmd)
	return cmd
}
