package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/drill"
	"github.com/ax-scheduler/ax/examples/executor/handlers"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/streams/natsauth"
)

func newDrillTaskCmd(g *cli) *cobra.Command {
	var (
		c       conn
		devDir  string
		payload string
		opts    drill.TaskOptions
	)
	cmd := &cobra.Command{
		Use:   "task NAME",
		Short: "Rehearse one task with faults injected: node crash, database jitter, retry storm, duplicate delivery",
		Long: `Rehearse one task on a running AX (ax dev or a real installation) and print a
verdict. ax drill applies copies of the task named drill-<fault>-NAME (task type
"drill", pool "drill", no cron trigger), runs two drill executors of its own
that serve the pool with the handlers this binary links (the built-in ones and
those of examples/executor), and fires the copies with --payload:

  plain runs         --runs firings: every one must succeed; their run time
                     against the task's timeout (warn when p99 > 50% of it)
  duplicate delivery the attempt delivered a second time to the other drill
                     executor: the handler must be called once
  cancellation       the instance cancelled while it runs: the handler must
                     return within --grace
  database jitter    the dispatcher refuses each report a few times, as a
                     failing database would (the dispatcher must run with
                     --drill-faults; ax dev does): nothing failed, doubled, lost
  node crash         the drill executor running attempt 1 crashes mid-run: the
                     retry must start within the lease TTL + backoff + 1s on
                     the other, and the instance end as the retry policy says;
                     the handler's idempotency check (if it declares one)
                     must find the effect applied once
  retry storm        the first --storm-failures attempts fail: gaps must
                     follow the backoff policy and its cap, and other firings'
                     start latency p99 stay within 3× (or 1s more than) the
                     plain runs'

When it ends it deletes the copies (cancelling what of theirs has not ended)
and removes its executors' consumers and keys; --keep leaves them to inspect.
Their failures are meant: the alert rules, the health report and the
dashboard leave drill and conformance tasks out.

It exits 0 only when every check passed, 2 when one failed (-o json for CI).
To drill handlers of your own, call drill.Task with your mux from a program
that links them, as ax executor's users do (see docs/drill.md).`,
		Example: `  ax drill task hello --ax-dev .ax --payload '{"name": "drill"}'
  ax drill task ledger-unsafe --ax-dev .ax            # fails: not idempotent
  ax drill task sleepy --ax-dev .ax --payload '{"seconds": 8}' -o json
  NATS_URL=nats://ax-nats:4222 NATS_CREDS=executor.creds ax drill task nightly-report --dispatch-creds dispatcher.creds`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			if payload != "" {
				if !json.Valid([]byte(payload)) {
					return fmt.Errorf("--payload %q is not JSON: give a JSON value, e.g. '{\"name\": \"world\"}'", payload)
				}
				opts.Payload = json.RawMessage(payload)
			}
			if opts.Runs < 0 || opts.StormFailures < 0 {
				return errors.New("--runs and --storm-failures must be 0 (the default) or more")
			}
			top, err := c.topology()
			if err != nil {
				return err
			}
			log, err := c.logger()
			if err != nil {
				return err
			}
			var conns []*nats.Conn
			defer func() {
				for _, nc := range conns {
					nc.Close()
				}
			}()
			connectAs, err := drillConnect(c, devDir, cmd.Flag("dispatch-creds").Value.String())
			if err != nil {
				return err
			}
			opts.Connect = func(name string) (*nats.Conn, error) {
				nc, err := connectAs(natsauth.Executor, name)
				if err == nil {
					conns = append(conns, nc)
				}
				return nc, err
			}
			if nc, err := connectAs(natsauth.Dispatcher, "drill dispatch"); err == nil {
				conns = append(conns, nc)
				opts.Dispatch = nc
			} else {
				log.Warn().Err(err).Msg("no connection that may deliver an attempt twice; the duplicate-delivery check will fail")
			}
			if opts.LeaseTTL == 0 {
				if ttl, err := leaseTTL(cmd.Context(), func(name string) (*nats.Conn, error) { return connectAs(natsauth.Dispatcher, name) }, top.LeasesBucket()); err == nil {
					opts.LeaseTTL = ttl
				}
			}
			opts.Task, opts.Client, opts.Topology, opts.Logger = args[0], g.client(), top, log
			mux := executor.NewMux()
			executor.RegisterBuiltins(mux)
			handlers.Register(mux)
			r, err := drill.Task(cmd.Context(), opts, mux)
			return g.printVerdict(cmd.OutOrStdout(), asJSON, r, err, "drill of "+args[0])
		},
	}
	c.natsFlags(cmd)
	f := cmd.Flags()
	_ = f.Set("log-level", envOr("AX_LOG_LEVEL", "warn"))
	f.Lookup("log-level").DefValue = "warn"
	f.StringVar(&devDir, "ax-dev", "", "data folder of a running ax dev (.ax): connect as its executor and dispatcher users")
	f.String("dispatch-creds", "", "NATS credentials file of a user that may publish to the dispatch subjects (a dispatcher's), for the duplicate delivery")
	f.StringVar(&payload, "payload", "", "the payload of every firing, as JSON")
	f.IntVar(&opts.Runs, "runs", 3, "plain runs that measure the run time and start latency")
	f.DurationVar(&opts.LeaseTTL, "lease-ttl", 0, "the installation's lease TTL (default: read from its leases bucket)")
	f.DurationVar(&opts.Grace, "grace", 5*time.Second, "how soon after a cancel the handler must return")
	f.IntVar(&opts.StormFailures, "storm-failures", 3, "attempts in a row the retry storm fails")
	f.DurationVar(&opts.Wait, "wait", 0, "how long to wait for each instance to end (default 2m plus the task's retry backoff)")
	f.BoolVar(&opts.Keep, "keep", false, "leave the task copies, the drill executors' consumers and keys in place when the drill ends, to inspect them (by default it removes them)")
	return cmd
}

// drillConnect returns how the drill connects as a role: with ax dev's
// users when devDir is set; otherwise the NATS flags for the executor and,
// for the dispatcher role, dispatchCreds (or the same flags when unset).
func drillConnect(c conn, devDir, dispatchCreds string) (func(role natsauth.Role, name string) (*nats.Conn, error), error) {
	if devDir != "" {
		passwords := map[natsauth.Role]string{}
		path := filepath.Join(devDir, "nats-users.json")
		data, err := os.ReadFile(path)
		if err == nil {
			err = json.Unmarshal(data, &passwords)
		}
		if err != nil {
			return nil, fmt.Errorf("--ax-dev %s: read %s: %w (start ax dev first, or give the folder it keeps its data in)", devDir, path, err)
		}
		return func(role natsauth.Role, name string) (*nats.Conn, error) {
			// Each drill executor gets a user of its own worker's (its
			// name is its worker id), for the drill pool, which ax dev
			// admits from then on.
			user, pass := string(role), passwords[role]
			if role == natsauth.Executor {
				u, err := natsauth.AddWorkerUser(devWorkersFile(devDir),
					natsauth.Scope{Pools: []string{drill.Pool}, WorkerID: name, Handlers: exampleHandlers()})
				if err != nil {
					return nil, fmt.Errorf("--ax-dev %s: add the NATS user of drill executor %s: %w", devDir, name, err)
				}
				user, pass = u.Name, u.Password
			}
			cc := c
			cc.natsCreds, cc.natsUser, cc.natsPass, cc.natsInbox = "", user, pass, natsauth.InboxPrefix(user)
			return cc.connectNATS("drill " + name)
		}, nil
	}
	return func(role natsauth.Role, name string) (*nats.Conn, error) {
		cc := c
		if role == natsauth.Dispatcher && dispatchCreds != "" {
			cc.natsCreds, cc.natsUser, cc.natsInbox = dispatchCreds, "", ""
		}
		return cc.connectNATS("drill " + name)
	}, nil
}

// leaseTTL reads the TTL of the installation's leases bucket.
func leaseTTL(ctx context.Context, connect func(string) (*nats.Conn, error), bucket string) (time.Duration, error) {
	nc, err := connect("drill lease-ttl")
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return 0, err
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return 0, err
	}
	return st.TTL(), nil
}
