package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
)

// userNameRE is what an executor user's name may be.
var userNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// executorsFile is where ax user add executor keeps the executor users it
// made, in a folder of ax secrets: ax secrets renders them into auth.conf.
func executorsFile(dir string) string { return filepath.Join(dir, "nats", "executors.json") }

// loadExecutorUsers reads the executor users of the secrets folder dir.
func loadExecutorUsers(dir string) ([]natsauth.NKeyUser, error) {
	data, err := os.ReadFile(executorsFile(dir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the executor users: %w", err)
	}
	var users []natsauth.NKeyUser
	if err := json.Unmarshal(data, &users); err != nil {
		return nil, fmt.Errorf("read the executor users from %s: %w; fix or delete the file (then add the users again)", executorsFile(dir), err)
	}
	for _, u := range users {
		if err := u.Scope.Check(); err != nil {
			return nil, fmt.Errorf("executor user %s in %s: %w", u.Name, executorsFile(dir), err)
		}
	}
	return users, nil
}

func newUserCmd(*cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "user",
		Short: "Make NATS users of their own for executors (in a folder of ax secrets)",
		Args:  cobra.NoArgs,
	}
	add := &cobra.Command{Use: "add", Short: "Add a NATS user", Args: cobra.NoArgs}
	add.AddCommand(newUserAddExecutorCmd())
	cmd.AddCommand(add, newUserTemplateCmd())
	return cmd
}

// newUserTemplateCmd prints the NATS users of the Helm chart's values:
// nats.authorization, and an executor pool's natsUser.
func newUserTemplateCmd() *cobra.Command {
	var (
		prefix          string
		pools, handlers []string
	)
	cmd := &cobra.Command{
		Use:   "template",
		Short: "Print the NATS users of the Helm chart (its values nats.authorization and executorPools[].natsUser)",
		Args:  cobra.NoArgs,
	}
	cmd.PersistentFlags().StringVar(&prefix, "prefix", envOr("AX_PREFIX", streams.DefaultPrefix), "subject prefix of the installation (env AX_PREFIX)")
	services := &cobra.Command{
		Use:   "services",
		Short: "Print the authorization block of the services' users (the chart's nats.authorization)",
		Long: `Print the nats-server authorization block of the dispatcher's, trigger's,
api's and auditor's users for the prefix, each password read from
<ROLE>_NATS_PASSWORD: the chart's nats.authorization, to which it adds a user
per executor replica. The chart's default is this block for prefix ax.`,
		Example: `  DISPATCHER_NATS_PASSWORD=… TRIGGER_NATS_PASSWORD=… API_NATS_PASSWORD=… AUDITOR_NATS_PASSWORD=… \
    ax user template services --prefix ax > nats-authorization.conf`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			top, err := streams.NewTopology(prefix)
			if err != nil {
				return fmt.Errorf("--prefix: %w", err)
			}
			fmt.Fprint(cmd.OutOrStdout(), natsauth.ServicesServerConfig(top))
			return nil
		},
	}
	executor := &cobra.Command{
		Use:   "executor",
		Short: "Print the NATS user of one replica of an executor pool (the chart's executorPools[].natsUser)",
		Long: `Print the NATS user of a worker of the pools and handlers named, with
` + natsauth.WorkerIDPlaceholder + ` where its worker id goes and ` + natsauth.PasswordPlaceholder + `
where its password goes: the chart's executorPools[].natsUser, from which it
writes the user of each replica of the pool. The chart's default is this user
for prefix ax, the pool default and the built-in handlers.`,
		Example: `  ax user template executor --pool gpu --handler train.model`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			top, err := streams.NewTopology(prefix)
			if err != nil {
				return fmt.Errorf("--prefix: %w", err)
			}
			if len(pools) == 0 {
				return errors.New("--pool: name the pools the workers serve (repeatable)")
			}
			user, err := natsauth.WorkerUserTemplate(top, natsauth.Scope{Pools: pools, Handlers: handlers})
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), user)
			return nil
		},
	}
	executor.Flags().StringSliceVar(&pools, "pool", nil, "a pool the workers serve (repeatable)")
	executor.Flags().StringSliceVar(&handlers, "handler", nil, "a handler the workers register (repeatable)")
	cmd.AddCommand(services, executor)
	return cmd
}

func newUserAddExecutorCmd() *cobra.Command {
	var (
		dir, devDir, name, worker, owner string
		pools, handlers                  []string
	)
	cmd := &cobra.Command{
		Use:   "executor",
		Short: "Make a least-privilege NATS user for one executor worker",
		Long: `Make a NATS user for one worker: it may pull only the queues of the handlers
named, of the pools named, be only the worker named (its heartbeat key, its own
consumer, its control subject, its reports), and nothing of any other pool.

It writes the user's NKey seed to <dir>/<name>/nats.nk (mode 0600) and records the
user in <dir>/nats/executors.json, where ax secrets finds it: run ax secrets on
the same folder again (docker compose does on every start) to write it into
<dir>/nats/auth.conf, then restart or reload the NATS servers. Adding a user
that exists replaces its pools, worker and handlers and keeps its key.

With --ax-dev DIR instead, it adds the user executor-<worker> with a password to
a running ax dev's <DIR>/nats-workers.json, which its NATS server reads on every
connection: the worker may connect at once (NATS_USER, NATS_PASSWORD and
NATS_INBOX_PREFIX printed).`,
		Example: `  ax user add executor --dir /secrets --pool gpu --worker gpu-1 --handler train.model
  NATS_NKEY=/secrets/executor-gpu-1/nats.nk NATS_INBOX_PREFIX=_INBOX_executor-gpu-1 \
    my-worker --pool gpu --worker-id gpu-1
  ax user add executor --ax-dev .ax --pool default --worker node-1 --handler node.greet`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			scope := natsauth.Scope{Pools: pools, WorkerID: worker, Handlers: handlers}
			if len(scope.Pools) == 0 {
				return errors.New("--pool: name the pools the worker serves (repeatable)")
			}
			if err := scope.Check(); err != nil {
				return err
			}
			if devDir != "" {
				if dir != "" || name != "" || owner != "" {
					return errors.New("--ax-dev: give --dir, --name and --owner only without it (ax dev's worker users are executor-<worker>, in its data folder)")
				}
				u, err := natsauth.AddWorkerUser(devWorkersFile(devDir), scope)
				if err != nil {
					return fmt.Errorf("--ax-dev %s: %w", devDir, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "NATS_USER=%s\nNATS_PASSWORD=%s\nNATS_INBOX_PREFIX=%s\nAX_POOLS=%s\nAX_WORKER_ID=%s\n",
					u.Name, u.Password, natsauth.InboxPrefix(u.Name), strings.Join(pools, ","), worker)
				return nil
			}
			if dir == "" {
				return errors.New("--dir: give the folder of ax secrets (or --ax-dev, the data folder of ax dev)")
			}
			if name == "" {
				name = "executor-" + worker
			}
			if slices.Contains(natsauth.Roles, natsauth.Role(name)) {
				return fmt.Errorf("--name %s is a service's user, which ax secrets makes; give another name", name)
			}
			if !userNameRE.MatchString(name) {
				return fmt.Errorf("--name %q: use letters, digits, '-' and '_' (it names a folder and the user's inbox subject)", name)
			}
			uid, gid, err := parseOwner(owner)
			if err != nil {
				return fmt.Errorf("--owner: %w", err)
			}
			seedPath := filepath.Join(dir, name, "nats.nk")
			pub, err := keepOrMakeNKey(seedPath, name, uid, gid)
			if err != nil {
				return err
			}
			users, err := loadExecutorUsers(dir)
			if err != nil {
				return err
			}
			users = slices.DeleteFunc(users, func(u natsauth.NKeyUser) bool { return u.Name == name })
			users = append(users, natsauth.NKeyUser{Name: name, NKey: pub, Scope: scope})
			data, err := json.MarshalIndent(users, "", "  ")
			if err != nil {
				return err
			}
			if err := writeSecret(executorsFile(dir), string(data)+"\n", -1, -1); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), `executor user %s (NKey %s) added for worker %s of pool(s) %s, handlers %s
  seed in %s
Next: run ax secrets --dir %s again to write it into the NATS authorization, reload
the NATS servers, and start the worker with
  NATS_NKEY=%s NATS_INBOX_PREFIX=%s <worker> --worker-id %s
`, name, pub, worker, strings.Join(pools, ", "), strings.Join(handlers, ", "), seedPath, dir, seedPath, natsauth.InboxPrefix(name), worker)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "the folder of ax secrets (this or --ax-dev is required)")
	f.StringVar(&devDir, "ax-dev", "", "the data folder of ax dev (.ax): add the worker's user to the running ax dev instead")
	f.StringSliceVar(&pools, "pool", nil, "a pool the worker serves (repeatable; required)")
	f.StringVar(&worker, "worker", "", "the worker id the user may be (the worker's --worker-id; required)")
	f.StringSliceVar(&handlers, "handler", nil, "a handler the worker serves (repeatable; required): the user may pull only these handlers' queues")
	f.StringVar(&name, "name", "", "the NATS user's name, and its folder in --dir (default executor-<worker>)")
	f.StringVar(&owner, "owner", "", "uid:gid that owns the seed (default: this process)")
	return cmd
}
