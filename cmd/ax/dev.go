package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/api"
	"github.com/ax-scheduler/ax/auditor"
	"github.com/ax-scheduler/ax/devstack"
	"github.com/ax-scheduler/ax/dispatcher"
	"github.com/ax-scheduler/ax/drill/drillfaults"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/shell"
	"github.com/ax-scheduler/ax/internal/metrics"
	"github.com/ax-scheduler/ax/internal/natsembed"
	"github.com/ax-scheduler/ax/internal/pgcluster"
	"github.com/ax-scheduler/ax/trigger"
)

func newDevCmd(*cli) *cobra.Command {
	var (
		c           conn
		m           metricsServer
		dataDir     string
		httpAddr    string
		natsAddr    string
		clusterSize int
		natsMon     string
		alertAllow  string
		history     historyFlags
		topology    topologyFlags
		poolArgs    []string
		enableShell bool
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run every service in one process, with embedded NATS and a private PostgreSQL",
		Long: `Run AX on one machine for development: an embedded NATS server with JetStream
on disk under --data, PostgreSQL from DATABASE_URL or, where it is unset, a private
cluster initialised inside --data from the machine's PostgreSQL installation, and
the dispatcher, the trigger, an executor with the built-in handlers, the API and the auditor —
each on its own NATS connection, exactly as they run apart. Ctrl-C stops it
cleanly; it starts again on the same data.`,
		Example: `  ax dev
  ax dev --data /tmp/ax --http 127.0.0.1:9090
  DATABASE_URL=postgres://ax@127.0.0.1/ax ax dev`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext(cmd)
			defer stop()
			log, err := c.logger()
			if err != nil {
				return err
			}
			log.Debug().Str("gc", gcSetting.String()).Msg("garbage collector")
			hist, err := history.options()
			if err != nil {
				return err
			}
			dir, err := filepath.Abs(dataDir)
			if err != nil {
				return fmt.Errorf("--data %q: %w", dataDir, err)
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("--data %q: %w", dataDir, err)
			}
			host, portText, err := net.SplitHostPort(natsAddr)
			if err != nil {
				return fmt.Errorf("--nats %q: want host:port: %w", natsAddr, err)
			}
			port, err := strconv.Atoi(portText)
			if err != nil {
				return fmt.Errorf("--nats %q: port %q is not a number", natsAddr, portText)
			}
			if err := checkClusterSize(clusterSize); err != nil {
				return err
			}
			settings, err := topology.config()
			if err != nil {
				return err
			}
			if err := checkLeaseTTL(settings.LeaseTTL); settings.LeaseTTL != 0 && err != nil {
				return err
			}
			var extraPools []devPool
			for _, arg := range poolArgs {
				p, err := parseDevPool(arg)
				if err != nil {
					return err
				}
				extraPools = append(extraPools, p)
			}

			if c.databaseURL == "" {
				cluster, err := pgcluster.Start(ctx, pgcluster.Options{Dir: filepath.Join(dir, "postgres"), Logger: log})
				if err != nil {
					return fmt.Errorf("start private PostgreSQL (or set DATABASE_URL): %w", err)
				}
				defer func() {
					if err := cluster.Stop(context.WithoutCancel(ctx)); err != nil {
						log.Error().Err(err).Msg("stop PostgreSQL")
					}
				}()
				if err := createDatabase(ctx, cluster.URL("postgres"), "ax"); err != nil {
					return err
				}
				c.databaseURL = cluster.URL("ax")
			}
			pool, st, err := c.openStore(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			token, madeToken, err := devAdminToken(ctx, st, dir)
			if err != nil {
				return err
			}
			top, err := c.topology()
			if err != nil {
				return err
			}
			// One NATS user per service, each with only what it needs.
			natsUsers, err := devNATSUsers(dir)
			if err != nil {
				return err
			}

			monHost, monPort, err := monitorAddr(natsMon)
			if err != nil {
				return err
			}
			// Every executor user is one worker's: ax dev's own executor
			// (the default pool, the built-in handlers, its worker id), and
			// those of the workers one attaches (see docs/security.md).
			mux := executor.NewMux()
			executor.RegisterBuiltins(mux)
			if enableShell {
				shell.Register(mux)
			}
			auth, extraPasswords, err := devAuth(top, dir, natsUsers, mux.Names(), extraPools)
			if err != nil {
				return err
			}
			natsNote, replicas := "", 0 // unset: the installation's, 1 on a new one
			switch {
			case clusterSize <= 1:
				ns, err := natsembed.Start(natsembed.Options{Host: host, Port: port, StoreDir: filepath.Join(dir, "nats"),
					MonitorHost: monHost, MonitorPort: monPort, Auth: auth})
				if err != nil {
					return fmt.Errorf("%w (is another NATS server on %s or %s? choose other addresses with --nats and --nats-monitor)",
						err, natsAddr, natsMon)
				}
				if mon := ns.MonitorAddr(); mon != nil {
					log.Info().Str("addr", "http://"+mon.String()).Msg("NATS monitoring listening")
				}
				defer func() {
					ns.Shutdown()
					ns.WaitForShutdown()
				}()
				c.natsURL = ns.ClientURL()
			default:
				if port > 0 && port+clusterSize-1 > 65535 {
					return fmt.Errorf("--nats %q: the nodes of --cluster %d take ports %d-%d; choose a lower port", natsAddr, clusterSize, port, port+clusterSize-1)
				}
				if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
					return fmt.Errorf("--nats %q with --cluster: the nodes listen on loopback only; use 127.0.0.1:<port>", natsAddr)
				}
				var ports []int
				for i := range clusterSize {
					if port > 0 {
						ports = append(ports, port+i)
					}
				}
				cl, err := natsembed.StartCluster(natsembed.ClusterOptions{Size: clusterSize, Dir: filepath.Join(dir, "nats-cluster"),
					Host: host, Ports: ports, MonitorPort: monPort, Auth: auth})
				if err != nil {
					return fmt.Errorf("%w (are other servers on the ports from %s? choose another with --nats)", err, natsAddr)
				}
				defer cl.Shutdown()
				c.natsURL = cl.URL()
				replicas = 3
				for i := range clusterSize {
					natsNote += fmt.Sprintf("\n    node %s  %s", cl.NodeName(i), cl.NodeURL(i))
					if mon := cl.Node(i).MonitorAddr(); mon != nil {
						natsNote += "  monitoring http://" + mon.String()
					}
				}
				natsNote += fmt.Sprintf("\n    every stream and bucket in %d replicas", replicas)
			}

			// Every service on its own connection and NATS user, as it
			// would run apart; the executor is ax dev's own worker.
			passwords := map[string]string{devOwnUser: extraPasswords[devOwnUser]}
			for role, pw := range natsUsers {
				passwords[string(role)] = pw
			}
			// Every listener is up before the banner says where: the API's
			// once the stack has started, the metrics' here.
			var metricsLn net.Listener
			if m.addr != "" {
				if metricsLn, err = listenMetrics(ctx, m.addr, log); err != nil {
					return err
				}
				defer metricsLn.Close()
			}
			settings.Replicas = replicas
			// ax dev rehearses: its dispatcher takes ax drill's faults.
			faults := drillfaults.New(drillfaults.Options{Store: st, Topology: top, Logger: log})
			tracer, stopTracing, err := startTracing(ctx, "ax-dev", log)
			if err != nil {
				return err
			}
			defer stopTracing()
			stack, err := devstack.Start(ctx, devstack.Options{
				NATSURL: c.natsURL, Passwords: passwords, Store: st, Topology: top,
				// The executor needs the topology the dispatcher ensures;
				// the stack ensures it first.
				Streams: settings, Ensure: true,
				Dispatcher: dispatcher.Options{Faults: faults, History: hist, TracerProvider: tracer},
				Trigger:    trigger.Options{TracerProvider: tracer},
				API:        api.Options{Addr: httpAddr, TracerProvider: tracer},
				Auditor:    auditor.Options{ConsoleURL: "http://" + httpAddr, Destinations: alertDestinations(alertAllow)},
				Executors: []devstack.Executor{{User: devOwnUser, Options: executor.Options{WorkerID: devWorkerID, Mux: mux,
					TracerProvider: tracer}}},
				Logger: log, Metrics: m.registry(),
			})
			if err != nil {
				return err
			}
			runCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			var (
				wg         sync.WaitGroup
				metricsErr error
			)
			metricsFailed := make(chan struct{})
			metricsNote := "off (--metrics-addr)"
			if m.addr != "" {
				wg.Go(func() {
					if metricsErr = metrics.ServeListener(runCtx, metricsLn, m.registry(), log); metricsErr != nil {
						close(metricsFailed)
					}
				})
				metricsNote = "http://" + metricsListenAddr(m.addr) + "/metrics (no token)"
			}
			shutdown := func() error {
				cancel()
				err := stack.Stop(context.WithoutCancel(ctx))
				wg.Wait()
				return errors.Join(err, metricsErr)
			}
			poolNote, err := writeDevPools(dir, c.natsURL, extraPools, extraPasswords)
			if err != nil {
				return errors.Join(err, shutdown())
			}
			tokenNote := "kept in " + filepath.Join(dir, "admin.token")
			if madeToken {
				tokenNote = "made now, " + tokenNote
			}
			fmt.Fprintf(cmd.OutOrStdout(), `AX is running (data in %s)
  NATS     %s (a user per service; passwords in %s)%s%s
  API      http://%s (admin token %q %s)
  Console  http://%s (log in with the admin token)
  Metrics  %s
Use the API as admin (bin/ax reads both):
  export AX_API_URL=http://%s
  export AX_TOKEN=%s
Try it (make build makes bin/ax):
  bin/ax task apply -f examples/hello.yaml && bin/ax fire hello --payload '{"name":"world"}' --wait
Ctrl-C stops it.
`, dir, c.natsURL, filepath.Join(dir, "nats-users.json"), natsNote, poolNote, httpAddr, devAdminName, tokenNote, httpAddr, metricsNote, httpAddr, token)
			select {
			case <-ctx.Done():
			case <-stack.Failed():
			case <-metricsFailed:
			}
			return shutdown()
		},
	}
	c.logFlags(cmd)
	c.databaseFlags(cmd)
	f := cmd.Flags()
	f.BoolVar(&enableShell, "enable-shell", false, "let ax dev's executor run builtin.shell: the command lines of tasks (imported crontab lines) with /bin/sh, as this process's user")
	f.StringVar(&dataDir, "data", envOr("AX_DATA", ".ax"), "data folder for NATS and the private PostgreSQL (env AX_DATA)")
	f.StringVar(&httpAddr, "http", envOr("AX_HTTP", api.DefaultAddr), "API address (env AX_HTTP)")
	f.IntVar(&clusterSize, "cluster", 1, "run NATS as a JetStream cluster of this many nodes on loopback (3 or more; ports from --nats up, monitoring ports from --nats-monitor up), every stream and bucket in 3 replicas")
	f.StringVar(&natsAddr, "nats", envOr("AX_NATS_LISTEN", "127.0.0.1:4222"), "address of the embedded NATS server (env AX_NATS_LISTEN)")
	f.StringVar(&natsMon, "nats-monitor", envOr("AX_NATS_MONITOR", "127.0.0.1:8222"),
		"address of the embedded NATS server's HTTP monitoring port, for prometheus-nats-exporter and NATS Surveyor; \"off\" closes it (env AX_NATS_MONITOR)")
	// --cluster sets the replicas.
	topology.flags(cmd, "replicas")
	f.StringArrayVar(&poolArgs, "pool", nil, "make a least-privilege NATS user for a worker of another pool, as NAME:handler,handler (repeatable): it may pull only those handlers' queues of that pool, as worker NAME-1; its settings go to <data>/executor-NAME.env")
	alertAllowFlag(cmd, &alertAllow)
	history.flags(cmd)
	m.flags(cmd, "127.0.0.1:9090")
	return cmd
}

// checkClusterSize checks --cluster: 1 (one server) or a cluster that
// survives the loss of a node.
func checkClusterSize(n int) error {
	switch {
	case n < 1:
		return fmt.Errorf("--cluster %d: give the number of NATS nodes, 1 for a single server or 3 or more for a cluster", n)
	case n == 2:
		return fmt.Errorf("--cluster 2: a JetStream cluster of two nodes cannot lose one; use 3 or more, or 1 for a single server")
	}
	return nil
}

// checkLeaseTTL checks --lease-ttl: a worker renews its leases every third
// of the TTL, so less than a second leaves it no time to.
func checkLeaseTTL(d time.Duration) error {
	if d < time.Second {
		return fmt.Errorf("--lease-ttl %v: give at least 1s (a worker renews its leases every third of it)", d)
	}
	return nil
}

// monitorAddr parses the --nats-monitor address: host and port, or port 0
// for "off" (or empty).
func monitorAddr(addr string) (string, int, error) {
	if addr == "" || addr == "off" {
		return "", 0, nil
	}
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("--nats-monitor %q: give host:port, e.g. 127.0.0.1:8222, or off", addr)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("--nats-monitor %q: the port must be 1-65535", addr)
	}
	return host, port, nil
}

// createDatabase creates db on the server at url unless it exists.
func createDatabase(ctx context.Context, url, db string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, db).Scan(&exists); err != nil {
		return fmt.Errorf("look up database %s: %w", db, err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", db, err)
	}
	return nil
}
