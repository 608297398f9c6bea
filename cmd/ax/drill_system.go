package main

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/drill/system"
	"github.com/ax-scheduler/ax/internal/natsembed"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
)

// drillSystemOutput is what ax drill system -o json prints.
type drillSystemOutput struct {
	Passed    bool            `json:"passed"`
	Settings  map[string]any  `json:"settings"`
	Scenarios []system.Result `json:"scenarios"`
}

// newDrillSystemCmd is ax drill system: the reliability battery against a
// sandbox it starts itself.
func newDrillSystemCmd(g *cli) *cobra.Command {
	var (
		scenarios []string
		opts      system.Options
		logLevel  string
		checks    bool
	)
	cmd := &cobra.Command{
		Use:   "system",
		Short: "Rehearse AX's faults against a sandbox of its own: kill -9, SIGSTOP, NATS and PostgreSQL outages",
		Long: `Start a whole AX on loopback — a private PostgreSQL, a nats-server in a process of
its own, dispatcher, trigger and executor processes of this binary — and run the
fault scenarios against it, one after the other, each under a steady load of
firings whose handler writes every run to a ledger (O_APPEND). For each scenario it
prints what was fired and created, what was lost, stuck or run twice, the stale
reports refused and accepted, the transitions the state machine forbids, the
recovery times, and a verdict. It ends every process it started, and exits 0 only
when every check of every scenario passed, 2 when one failed (-o json for CI).

It needs the machine's PostgreSQL installation (initdb, pg_ctl), as ax dev does.
docs/drill.md explains every check and scenario.`,
		Example: `  ax drill system                                  # every scenario, 1 minute each
  ax drill system --scenario executor-kill --duration 20s --rate 50
  ax drill system -o json > drill.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Getenv(system.SandboxEnv) != "" {
				return fmt.Errorf("ax drill system runs inside a drill sandbox (%s is set): a drill does not start another", system.SandboxEnv)
			}
			structured, err := g.json()
			if err != nil {
				return err
			}
			c := conn{logLevel: logLevel, logFormat: "console"}
			log, err := c.logger()
			if err != nil {
				return err
			}
			if _, err := system.Select(scenarios); err != nil {
				return fmt.Errorf("--scenario: %w", err)
			}
			switch {
			case opts.Duration < time.Second:
				return fmt.Errorf("--duration %v: give at least 1s, e.g. --duration 30s", opts.Duration)
			case opts.Rate < 1 || opts.Rate > 1000:
				return fmt.Errorf("--rate %d: give 1 to 1000 firings a second", opts.Rate)
			case opts.LeaseTTL < time.Second:
				return fmt.Errorf("--lease-ttl %v: give at least 1s", opts.LeaseTTL)
			case opts.Work < 0:
				return fmt.Errorf("--work %v: give a duration of 0 or more", opts.Work)
			}
			if opts.Binary, err = os.Executable(); err != nil {
				return fmt.Errorf("find the ax binary to run the sandbox's processes: %w", err)
			}
			opts.Scenarios, opts.Logger = scenarios, log
			ctx, stop := signalContext(cmd)
			defer stop()
			results, err := system.Run(ctx, opts)
			if err != nil && len(results) == 0 {
				return err
			}
			out := cmd.OutOrStdout()
			passed := len(results) > 0
			var failed []string
			for _, r := range results {
				if !r.Pass {
					passed = false
					failed = append(failed, r.Scenario)
				}
			}
			if structured {
				settings := map[string]any{"duration": opts.Duration.String(), "rate": opts.Rate, "work": opts.Work.String(),
					"lease_ttl": opts.LeaseTTL.String(), "fsync": opts.Fsync, "jetstream_storage": "file"}
				if perr := g.printData(out, drillSystemOutput{Passed: passed, Settings: settings, Scenarios: results}); perr != nil {
					return perr
				}
			} else if perr := printDrillSystem(out, results, checks); perr != nil {
				return perr
			}
			if err != nil {
				return err
			}
			if !passed {
				return &exitError{code: exitNotSucceeded, err: fmt.Errorf("the drill failed: scenarios %s", strings.Join(failed, ", "))}
			}
			return nil
		},
	}
	f := cmd.Flags()
	var names []string
	for _, s := range system.Scenarios() {
		names = append(names, s.Name)
	}
	f.StringSliceVar(&scenarios, "scenario", nil, fmt.Sprintf("scenarios to run, repeatable or comma-separated (default all: %v)", names))
	f.DurationVar(&opts.Duration, "duration", system.DefaultDuration, "how long each scenario's load and fault last")
	f.IntVar(&opts.Rate, "rate", system.DefaultRate, "firings a second")
	f.DurationVar(&opts.Work, "work", system.DefaultWork, "how long each attempt of the drill's handler works")
	f.DurationVar(&opts.LeaseTTL, "lease-ttl", system.DefaultLeaseTTL, "the sandbox's lease TTL")
	f.BoolVar(&opts.Fsync, "fsync", true, "run the sandbox's PostgreSQL with fsync on (production durability)")
	f.StringVar(&logLevel, "log-level", "info", "the drill's progress on stderr: debug, info, warn, error")
	f.BoolVar(&checks, "checks", false, "print every scenario's checks and facts after the summary, not only the failed checks")
	return cmd
}

// printDrillSystem prints the results as a table, then every failed check
// (or, with all, every scenario's report).
func printDrillSystem(w io.Writer, results []system.Result, all bool) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "SCENARIO\tFIRED\tCREATED\tLOST\tSTUCK\tDUPLICATES\tSPENT UNRUN\tSTALE REFUSED\tSTALE ACCEPTED\tILLEGAL\tRECOVERY P50/P99/MAX\tVERDICT")
	for _, r := range results {
		verdict := "pass"
		if !r.Pass {
			verdict = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", r.Scenario, r.Fired, r.Created, r.Lost, r.Stuck,
			r.Duplicates, r.SpentWithoutRun, r.StaleRefused, r.StaleAccepted, r.Illegal, r.Recovery, verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range results {
		if all {
			fmt.Fprintln(w)
			if err := r.Report().WriteTable(w); err != nil {
				return err
			}
			continue
		}
		for _, c := range r.Checks {
			if !c.Pass && !c.Info {
				fmt.Fprintf(w, "FAIL %s: %s: expected %s, observed %s\n", r.Scenario, c.Name, c.Expected, c.Observed)
			}
		}
	}
	// The verdict's last line, as every drill prints it (docs/drill.md).
	var failed []string
	for _, r := range results {
		for _, name := range r.Report().Failed() {
			failed = append(failed, r.Scenario+": "+name)
		}
		if !r.Pass && len(r.Report().Failed()) == 0 {
			failed = append(failed, r.Scenario+": no check was made")
		}
	}
	switch {
	case len(results) == 0:
		_, err := fmt.Fprintln(w, "\nFAIL: no scenario ran")
		return err
	case len(failed) > 0:
		_, err := fmt.Fprintf(w, "\nFAIL: %s\n", strings.Join(failed, "; "))
		return err
	}
	_, err := fmt.Fprintln(w, "\nPASS: every check passed")
	return err
}

// newNATSServerCmd is the hidden ax nats-server: the embedded nats-server
// in a process of its own, with the users of ax dev, for ax drill system's
// sandbox (which kills it with kill -9). Not for production: run a real
// nats-server there.
func newNATSServerCmd(*cli) *cobra.Command {
	var listen, storeDir, users, prefix, portFile string
	var maxStore int64
	var serverName, clusterName, clusterListen string
	var routes []string
	cmd := &cobra.Command{
		Use:     "nats-server",
		Short:   "Run the embedded nats-server alone (for ax drill system's sandbox)",
		Example: `  ax nats-server --listen 127.0.0.1:4222 --store /tmp/ax-nats --users /tmp/ax-nats/users.json`,
		Hidden:  true,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			host, portText, err := net.SplitHostPort(listen)
			if err != nil {
				return fmt.Errorf("--listen %q: want host:port: %w", listen, err)
			}
			port, err := strconv.Atoi(portText)
			if err != nil {
				return fmt.Errorf("--listen %q: port %q is not a number", listen, portText)
			}
			if storeDir == "" || users == "" {
				return fmt.Errorf("give the JetStream store folder (--store) and the users' password file (--users)")
			}
			top, err := streams.NewTopology(prefix)
			if err != nil {
				return err
			}
			pw, err := natsauth.LoadOrCreatePasswords(users)
			if err != nil {
				return err
			}
			ctx, stop := signalContext(cmd)
			defer stop()
			// The services' users, and the executors' of the workers file,
			// one worker each, which the sandbox adds as it starts them.
			delete(pw, natsauth.Executor)
			o := natsembed.Options{Host: host, Port: port, StoreDir: storeDir, MaxStore: maxStore, ServerName: serverName,
				Auth: natsauth.NewAuthenticator(top, natsauth.Users(top, pw, natsauth.Scope{}), system.WorkersFile(users))}
			if err := clusterOptions(&o, clusterName, clusterListen, routes); err != nil {
				return err
			}
			ns, err := natsembed.Start(o)
			if err != nil {
				return err
			}
			if portFile != "" {
				if err := writePortFile(portFile, ns.Addr().(*net.TCPAddr).Port); err != nil {
					ns.Shutdown()
					return err
				}
			}
			<-ctx.Done()
			ns.Shutdown()
			ns.WaitForShutdown()
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:4222", "address to listen on")
	f.StringVar(&storeDir, "store", "", "JetStream store folder")
	f.StringVar(&users, "users", "", "the NATS users' password file (made when missing, as ax dev's nats-users.json)")
	f.StringVar(&prefix, "prefix", streams.DefaultPrefix, "subject prefix of the installation")
	f.Int64Var(&maxStore, "max-file-store", 0, "bound JetStream's file store to this many bytes (the server's max_file_store; 0: most of the disk)")
	f.StringVar(&serverName, "server-name", "", "the server's name (default ax; each node of a cluster needs its own)")
	f.StringVar(&clusterName, "cluster-name", "", "make the server a node of the JetStream cluster of this name (with --cluster-listen and --routes; "+
		"the route password is in env "+routePasswordEnv+")")
	f.StringVar(&clusterListen, "cluster-listen", "", "host:port the node listens on for the other nodes' routes")
	f.StringSliceVar(&routes, "routes", nil, "host:port of the other nodes' route listeners, repeatable or comma-separated")
	f.StringVar(&portFile, "port-file", "", "once the server accepts connections, write its client port to this file (with --listen host:0 the server picks a free port)")
	return cmd
}

// routePasswordEnv holds the password the nodes of ax nats-server's
// cluster present to each other (natsembed.RouteUser's): not a flag, so
// that it is not in the process list.
const routePasswordEnv = "AX_NATS_ROUTE_PASSWORD"

// clusterOptions makes o a node of the cluster called name, listening for
// routes on listen and routed to routes, with the route password of
// routePasswordEnv; no name leaves o a standalone server.
func clusterOptions(o *natsembed.Options, name, listen string, routes []string) error {
	if name == "" {
		if listen != "" || len(routes) > 0 {
			return fmt.Errorf("--cluster-listen and --routes need --cluster-name")
		}
		return nil
	}
	host, portText, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("--cluster-listen %q: want host:port: %w", listen, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port <= 0 {
		return fmt.Errorf("--cluster-listen %q: give the port the node listens on for routes", listen)
	}
	if host != o.Host {
		return fmt.Errorf("--cluster-listen %q: listen for routes on the client host %s", listen, o.Host)
	}
	pw := os.Getenv(routePasswordEnv)
	if pw == "" {
		return fmt.Errorf("--cluster-name %s: set the nodes' route password in env %s", name, routePasswordEnv)
	}
	o.ClusterName, o.ClusterPort, o.RouteUser, o.RoutePassword = name, port, natsembed.RouteUser, pw
	for _, r := range routes {
		if _, _, err := net.SplitHostPort(r); err != nil {
			return fmt.Errorf("--routes %q: want host:port: %w", r, err)
		}
		o.Routes = append(o.Routes, &url.URL{Scheme: "nats-route", Host: r})
	}
	return nil
}

// writePortFile writes port to path whole or not at all (a reader never
// sees half a number).
func writePortFile(path string, port int) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(port)+"\n"), 0o644); err != nil {
		return fmt.Errorf("write the port file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write the port file: %w", err)
	}
	return nil
}
