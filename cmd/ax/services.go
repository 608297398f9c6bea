package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/api"
	"github.com/ax-scheduler/ax/auditor"
	"github.com/ax-scheduler/ax/auditor/monitor"
	"github.com/ax-scheduler/ax/auditor/relay"
	"github.com/ax-scheduler/ax/dispatcher"
	"github.com/ax-scheduler/ax/drill/drillfaults"
	"github.com/ax-scheduler/ax/drill/system"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/shell"
	"github.com/ax-scheduler/ax/trigger"
)

// signalContext ends on Ctrl-C or SIGTERM: services drain and return.
func signalContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
}

func newDispatcherCmd(*cli) *cobra.Command {
	var (
		c        conn
		m        metricsServer
		topology topologyFlags
		drill    bool
		single   bool
		history  historyFlags
		// quarantine is Options.QuarantineAfter.
		quarantine int
	)
	cmd := &cobra.Command{
		Use:   "dispatcher",
		Short: "Run the dispatcher: firings to instances, reports to transitions, the lease reaper",
		Long: `Run the dispatcher service. It ensures the JetStream topology, applies pending
database migrations, and runs until interrupted. Run as many replicas as you like.`,
		Example: `  NATS_URL=nats://127.0.0.1:4222 DATABASE_URL=postgres://ax@127.0.0.1/ax ax dispatcher`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext(cmd)
			defer stop()
			o, closeAll, err := c.open(ctx, "dispatcher", true)
			if err != nil {
				return err
			}
			defer closeAll()
			hist, err := history.options()
			if err != nil {
				return err
			}
			settings, err := topology.config()
			if err != nil {
				return err
			}
			if err := checkLeaseTTL(settings.LeaseTTL); settings.LeaseTTL != 0 && err != nil {
				return err
			}
			var faults dispatcher.Faults
			if drill {
				faults = drillfaults.New(drillfaults.Options{Store: o.store, Topology: o.top, Logger: o.log})
			}
			svc, err := dispatcher.New(dispatcher.Options{
				Conn: o.nc, Store: o.store, Topology: o.top, Logger: o.log,
				Streams: settings, Metrics: m.registry(),
				QuarantineAfter: quarantine, Faults: faults,
				SingleReports:  single,
				History:        hist,
				TracerProvider: o.tracer,
			})
			if err != nil {
				return err
			}
			return m.run(ctx, o.log, svc.Run)
		},
	}
	c.natsFlags(cmd)
	c.requireAuthFlag(cmd)
	c.databaseFlags(cmd)
	f := cmd.Flags()
	topology.flags(cmd)
	f.BoolVar(&single, "single-reports", false, "do not offer executors report batches: each final report comes alone on its attempt's subject (while dispatchers older than the batches still run)")
	f.IntVar(&quarantine, "quarantine-after", dispatcher.DefaultQuarantineAfter, "workers that may die while running one instance before it is quarantined (FAILED, whatever its attempts left); a worker death spends no attempt")
	f.BoolVar(&drill, "drill-faults", false, "let ax drill task inject database jitter into the recording of its own drill-jitter tasks' reports (never other tasks')")
	history.flags(cmd)
	m.flags(cmd, "")
	return cmd
}

func newTriggerCmd(*cli) *cobra.Command {
	var (
		c conn
		m metricsServer
	)
	cmd := &cobra.Command{
		Use:   "trigger",
		Short: "Run the trigger service: fires cron schedules, with time zones and misfire policies",
		Long: `Run the trigger service. It keeps every cron trigger of every enabled task in one
min-heap, fires each tick to AX_TRIGGERS with an event id derived from the task, the
trigger and the tick, follows each trigger's misfire policy for ticks missed while no
trigger service ran, and re-plans a task as soon as it changes. Run several replicas:
their duplicate firings collapse into one instance.`,
		Example: `  NATS_URL=nats://127.0.0.1:4222 DATABASE_URL=postgres://ax@127.0.0.1/ax ax trigger`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext(cmd)
			defer stop()
			o, closeAll, err := c.open(ctx, "trigger", true)
			if err != nil {
				return err
			}
			defer closeAll()
			svc, err := trigger.New(trigger.Options{Conn: o.nc, Store: o.store, Topology: o.top, Logger: o.log,
				TracerProvider: o.tracer})
			if err != nil {
				return err
			}
			return m.run(ctx, o.log, svc.Run)
		},
	}
	c.natsFlags(cmd)
	c.requireAuthFlag(cmd)
	c.databaseFlags(cmd)
	m.flags(cmd, "")
	return cmd
}

func newAuditorCmd(*cli) *cobra.Command {
	var (
		c            conn
		m            metricsServer
		pollInterval time.Duration
		lagInterval  time.Duration
		auditVersion int
		consoleURL   string
		alertAllow   string
	)
	cmd := &cobra.Command{
		Use:   "auditor",
		Short: "Run the auditor: relays every transition and operator action to AX_AUDIT, exactly once",
		Long: `Run the auditor service. It relays the audit trail's outbox tables of PostgreSQL
(instance_transitions, operator_actions) to the AX_AUDIT stream, one record per
row on ax.audit.<task>, exactly once even across crashes. Run as many replicas as
you like: one leads, holding a PostgreSQL advisory lock, and the others take over
within a few seconds when it goes. It needs the topology the dispatcher creates.

It also monitors the fleet, one auditor at a time (a lock of its own): it computes
the metrics of docs/operations.md from AX_AUDIT, ax-workers and PostgreSQL (serve
them with --metrics-addr), evaluates the alert rules and sends the notifications
to the alert channels (ax alert).`,
		Example: `  NATS_URL=nats://127.0.0.1:4222 DATABASE_URL=postgres://ax@127.0.0.1/ax ax auditor`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext(cmd)
			defer stop()
			o, closeAll, err := c.open(ctx, "auditor", true)
			if err != nil {
				return err
			}
			defer closeAll()
			svc, err := auditor.New(auditor.Options{Conn: o.nc, Store: o.store, Topology: o.top, PollInterval: pollInterval, Logger: o.log,
				Metrics: m.registry(), ConsoleURL: consoleURL, Destinations: alertDestinations(alertAllow), LagInterval: lagInterval,
				AuditVersion: auditVersion})
			if err != nil {
				return err
			}
			return m.run(ctx, o.log, svc.Run)
		},
	}
	c.natsFlags(cmd)
	c.requireAuthFlag(cmd)
	c.databaseFlags(cmd)
	cmd.Flags().DurationVar(&pollInterval, "poll-interval", relay.DefaultPollInterval, "how often the leader looks for new records when it is idle (half that after a batch that read them all)")
	cmd.Flags().DurationVar(&lagInterval, "lag-interval", monitor.DefaultLagInterval, "how often the monitoring auditor reads the consumers' lag from JetStream")
	auditVersionFlag(cmd, &auditVersion)
	cmd.Flags().StringVar(&consoleURL, "console-url", envOr("AX_CONSOLE_URL", monitor.DefaultConsoleURL),
		"base URL of the web console, for the links to an instance's logs in alert notifications (env AX_CONSOLE_URL)")
	alertAllowFlag(cmd, &alertAllow)
	m.flags(cmd, "")
	return cmd
}

// alertAllowFlag adds --alert-allow, the allow list of the alert
// destination policy.
func alertAllowFlag(cmd *cobra.Command, v *string) {
	cmd.Flags().StringVar(v, "alert-allow", envOr("AX_ALERT_ALLOW", ""),
		"hosts, addresses and CIDR networks alert channels may reach although they are not public (loopback, private, link-local), comma-separated; a URL with credentials needs its host here (env AX_ALERT_ALLOW)")
}

// alertDestinations is the destination policy of a --alert-allow value.
func alertDestinations(allow string) monitor.DestinationPolicy {
	var p monitor.DestinationPolicy
	for a := range strings.SplitSeq(allow, ",") {
		if a = strings.TrimSpace(a); a != "" {
			p.Allow = append(p.Allow, a)
		}
	}
	return p
}

func newExecutorCmd(*cli) *cobra.Command {
	var (
		c        conn
		m        metricsServer
		workerID string
		pools    []string
		slots    int
		version  string
		shutdown time.Duration
		ledger   string
		single   bool
		spool    string

		codecKeyFile string
		enableShell  bool
	)
	cmd := &cobra.Command{
		Use:   "executor",
		Short: "Run an executor daemon with the built-in handlers",
		Long: `Run an executor: it registers in the ax-workers bucket, pulls attempts of its
pools while it has free slots, holds a lease on each, and reports to AX_REPORTS.
It needs NATS only, never the database. This binary serves the built-in handlers
builtin.echo, builtin.sleep and builtin.fail; link the executor package into your
own binary to serve yours.

On SIGTERM or Ctrl-C it drains: it stops pulling at once, lets the running
attempts finish for up to --shutdown-timeout, then cancels those still running
and hands them back: a "released" report and the lease deleted, so that the
dispatcher starts each again at once on another worker as a new attempt that
spends none of the task's max_attempts (the handler runs again from the start),
and exits. Give a container longer than that to stop (Kubernetes'
terminationGracePeriodSeconds: the shutdown timeout plus a few seconds).

While JetStream refuses writes (a full store, a stream without quorum) it keeps
each final report and tries it until it is stored, however long that takes;
with --spool-dir a report the first try did not store is also written there
and sent by the next run on the same folder (give each worker its own, on a
volume that outlives the container).`,
		Example: `  ax executor --pool default --slots 32
  NATS_URL=nats://nats.internal:4222 NATS_CREDS=executor.creds ax executor --pool gpu`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext(cmd)
			defer stop()
			o, closeAll, err := c.open(ctx, "executor", false)
			if err != nil {
				return err
			}
			defer closeAll()
			mux := executor.NewMux()
			executor.RegisterBuiltins(mux)
			if enableShell {
				shell.Register(mux)
			}
			if ledger != "" {
				system.RegisterHandlers(mux, ledger)
			}
			codec, err := loadCodec(codecKeyFile)
			if err != nil {
				return err
			}
			svc, err := executor.New(executor.Options{
				Conn: o.nc, Topology: o.top, WorkerID: workerID, Pools: pools, Slots: slots,
				Version: version, Mux: mux, Logger: slog.New(zerolog.NewSlogHandler(o.log)), ShutdownTimeout: shutdown, Codec: codec,
				SingleReports: single, SpoolDir: spool, TracerProvider: o.tracer,
			})
			if err != nil {
				return err
			}
			return m.run(ctx, o.log, svc.Run)
		},
	}
	c.natsFlags(cmd)
	c.requireAuthFlag(cmd)
	codecFlag(cmd, &codecKeyFile, false, "encoded payloads are decoded with it for the handler, outputs encoded")
	f := cmd.Flags()
	f.BoolVar(&enableShell, "enable-shell", false, "serve builtin.shell too: run the command lines of the pool's tasks (imported crontab lines) with /bin/sh, as the task's user when running as root; only for pools that trusted operators' tasks reach")
	f.StringVar(&workerID, "worker-id", os.Getenv("AX_WORKER_ID"), "worker id, a subject token (default <hostname>-<random>; env AX_WORKER_ID)")
	f.StringSliceVar(&pools, "pool", splitEnv("AX_POOLS"), "pools to serve, repeatable; a task's pool is its dispatch tags joined with + (default \"default\"; env AX_POOLS)")
	f.IntVar(&slots, "slots", 0, "attempts run at once (default 16)")
	f.StringVar(&version, "version", "", "worker version compared with tasks' min_worker_version (default "+executor.DefaultVersion+")")
	f.DurationVar(&shutdown, "shutdown-timeout", executor.DefaultShutdownTimeout,
		"how long running attempts may go on after SIGTERM before they are cancelled and handed back to run elsewhere")
	f.StringVar(&spool, "spool-dir", os.Getenv("AX_SPOOL_DIR"),
		"folder that keeps the final reports JetStream refused until they are stored, across restarts (default none: kept in memory only; env AX_SPOOL_DIR)")
	// The executors of ax drill system's sandbox serve the drill's handlers too.
	f.BoolVar(&single, "single-reports", false, "send each final report alone on its attempt's subject, even when the dispatchers take report batches")
	f.StringVar(&ledger, "drill-ledger", "", "serve the handlers of ax drill system as well, appending their runs to this ledger")
	_ = f.MarkHidden("drill-ledger")
	m.flags(cmd, "")
	return cmd
}

func splitEnv(name string) []string {
	v := strings.TrimSpace(os.Getenv(name))
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

func newAPICmd(*cli) *cobra.Command {
	var (
		c    conn
		m    metricsServer
		addr string
	)
	cmd := &cobra.Command{
		Use:     "api",
		Short:   "Run the HTTP API",
		Example: `  ax api --http 0.0.0.0:8080`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext(cmd)
			defer stop()
			o, closeAll, err := c.open(ctx, "api", true)
			if err != nil {
				return err
			}
			defer closeAll()
			svc, err := api.New(api.Options{Store: o.store, Conn: o.nc, Topology: o.top, Addr: addr, Logger: o.log,
				Metrics: m.registry(), TracerProvider: o.tracer})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "ax api listening on http://%s\n", addr)
			return m.run(ctx, o.log, svc.Run)
		},
	}
	c.natsFlags(cmd)
	c.requireAuthFlag(cmd)
	c.databaseFlags(cmd)
	cmd.Flags().StringVar(&addr, "http", envOr("AX_HTTP", api.DefaultAddr), "address to listen on (env AX_HTTP); GET /metrics there serves this process's metrics to a viewer token")
	m.flags(cmd, "")
	return cmd
}
