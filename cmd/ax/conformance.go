package main

import (
	"fmt"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/conformance"
	"github.com/ax-scheduler/ax/streams/natsauth"
)

func newConformanceCmd(g *cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "conformance",
		Short: "Check that a worker speaks AX's executor protocol",
		Long: `Check a worker against docs/executor-protocol.md and print a verdict: a table
of checks (check | expected | observed | result). It exits 0 only when every
check passed; -o json prints the same report as JSON.

  ax conformance executor --pool P   fire the conformance tasks at a running
                                     worker of pool P and check the rules`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newConformanceExecutorCmd(g))
	return cmd
}

func newConformanceExecutorCmd(g *cli) *cobra.Command {
	var (
		c         conn
		devDir    string
		workerPID int
		opts      conformance.Options
	)
	cmd := &cobra.Command{
		Use:   "executor",
		Short: "Fire the conformance tasks at a running worker and check the executor protocol's rules",
		Long: `Point the conformance kit at your worker, in any language, running against a
running AX (ax dev, or a real installation). The worker serves pool --pool and
registers the conformance handlers of docs/executor-protocol.md ("Conformance
handlers"): conformance.echo, .fail, .permanent, .sleep and .log (another
prefix with --handler-prefix), and not conformance.missing. The kit applies one
task per handler (conformance-<handler>-<pool>, task type conformance, deleted
when it ends unless --keep), fires them, watches the pool's reports, the leases and workers
buckets and the workers' control subjects on NATS, and checks:

  registration     the worker record: pools, handlers, slots, protocol version
  heartbeats       the record put again at intervals under the bucket's TTL
  lease            each attempt's lease created before its first report
  reports          subjects ax.report.<pool>.<worker>.<instance>, bodies,
                   Nats-Msg-Id <instance>-<attempt>-<started|final>-<nonce>,
                   one final report per attempt, none refused
  started          a started report for an attempt that runs longer than 1s
  echo, retries, permanent, logs   outputs, retries, failures and log lines
  cancel, deadline the attempt stopped and reported within --grace of the
                   cancel's delivery on ax.control.<worker>, or of its deadline
  unknown handler  an attempt of a handler no worker has is left alone
  drain            with --worker-pid: SIGTERM while an attempt runs; it
                   finishes, nothing new is taken, the record goes

Run one worker on the pool for the drain check: the kit signals that process.
The kit's NATS user must subscribe to the pool's report subjects, the
buckets' ($KV.<bucket>.>) and ax.control.*: with --ax-dev it is ax dev's
dispatcher user, otherwise the NATS flags' (or --observer-creds), e.g. the
dispatcher's.`,
		Example: `  ax conformance executor --pool js --ax-dev .ax
  ax conformance executor --pool js --ax-dev .ax --worker-pid 4242 -o json
  NATS_URL=nats://ax-nats:4222 ax conformance executor --pool py --observer-creds dispatcher.creds --api http://ax-api:8080`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			if workerPID < 0 {
				return fmt.Errorf("--worker-pid %d: give the process id of the worker, or leave it out to skip the drain check", workerPID)
			}
			if workerPID > 0 {
				if err := syscall.Kill(workerPID, 0); err != nil {
					return fmt.Errorf("--worker-pid %d: %w (give the process id of the running worker)", workerPID, err)
				}
				opts.Drain = func() error { return syscall.Kill(workerPID, syscall.SIGTERM) }
			}
			if opts.Topology, err = c.topology(); err != nil {
				return err
			}
			if opts.Logger, err = c.logger(); err != nil {
				return err
			}
			connectAs, err := drillConnect(c, devDir, cmd.Flag("observer-creds").Value.String())
			if err != nil {
				return err
			}
			nc, err := connectAs(natsauth.Dispatcher, "conformance observer")
			if err != nil {
				return err
			}
			defer nc.Close()
			opts.Conn, opts.Client = nc, g.client()
			r, err := conformance.Executor(cmd.Context(), opts)
			return g.printVerdict(cmd.OutOrStdout(), asJSON, r, err, fmt.Sprintf("the worker of pool %s", opts.Pool))
		},
	}
	c.natsFlags(cmd)
	f := cmd.Flags()
	_ = f.Set("log-level", envOr("AX_LOG_LEVEL", "warn"))
	f.Lookup("log-level").DefValue = "warn"
	f.StringVar(&opts.Pool, "pool", "", "the pool the worker under test serves (required; ax dev's own workers serve default)")
	_ = cmd.MarkFlagRequired("pool")
	f.StringVar(&opts.HandlerPrefix, "handler-prefix", conformance.DefaultHandlerPrefix, "the prefix of the conformance handlers' names")
	f.StringVar(&devDir, "ax-dev", "", "data folder of a running ax dev (.ax): watch as its dispatcher user")
	f.String("observer-creds", "", "NATS credentials file of a user that may subscribe to the pool's reports, the buckets' and the control subjects (a dispatcher's); default: the NATS flags")
	f.IntVar(&workerPID, "worker-pid", 0, "process id of the worker, for the drain check (SIGTERM); 0 skips it")
	f.DurationVar(&opts.Grace, "grace", 5*time.Second, "how soon after a cancel's delivery on ax.control.<worker>, or its deadline, an attempt must be reported")
	f.DurationVar(&opts.Wait, "wait", 2*time.Minute, "how long to wait for each instance and report")
	f.BoolVar(&opts.Keep, "keep", false, "leave the conformance tasks in place when the kit ends, to inspect them (by default it deletes them)")
	return cmd
}
