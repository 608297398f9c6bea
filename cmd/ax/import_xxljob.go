package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/importer"
)

func newImportXXLJobCmd(g *cli) *cobra.Command {
	var (
		dsn  string
		opts importer.XXLJobOptions
		out  importOut
	)
	cmd := &cobra.Command{
		Use:   "xxl-job",
		Short: "Import the jobs of an XXL-JOB admin database",
		Long: `Read xxl_job_info and xxl_job_group of an XXL-JOB admin database (read-only)
and make one task of each job, named xxl-<id>-<handler>: its Quartz cron read
in --timezone (L, W, # and years refused), FIX_RATE as @every, misfire,
route strategy as AX's dispatch, block strategy as concurrency, timeout,
retry count, child jobs as the children's after, the executor group's
app_name as the pool, executor_param as the payload (a JSON string), the
author and alarm email as owner. GLUE jobs are refused. Jobs stopped in
XXL-JOB are disabled when applied. See docs/migrate.md.`,
		Example: `  ax import xxl-job --dsn 'mysql://reader:secret@127.0.0.1:3306/xxl_job' --timezone Asia/Shanghai --out imported/
  ax import xxl-job --dsn 'mysql://reader:secret@db:3306/xxl_job' --timezone Asia/Shanghai --apply`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := g.json(); err != nil {
				return err
			}
			if dsn == "" {
				return fmt.Errorf("name XXL-JOB's database with --dsn mysql://user:password@host:port/database")
			}
			db, err := importer.OpenMySQL(dsn)
			if err != nil {
				return err
			}
			defer db.Close()
			rep, err := importer.XXLJob(cmd.Context(), db, opts)
			if err != nil {
				return fmt.Errorf("import xxl-job: %w", err)
			}
			return g.finishImport(cmd, "xxl-job", rep, out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&dsn, "dsn", "", "XXL-JOB's admin database: mysql://user:password@host:port/database")
	f.StringVar(&opts.Timezone, "timezone", hostZone(), "the zone XXL-JOB's admin ran in, its cron expressions' zone (default this host's)")
	f.DurationVar(&opts.Timeout, "timeout", importer.DefaultImportTimeout, "the timeout of jobs whose executor_timeout is 0 (none)")
	out.flags(cmd)
	return cmd
}
