package main

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nats-io/nkeys"
	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/streams/natsauth"
)

// dbRoles are the services that use PostgreSQL; the executor never does.
var dbRoles = []natsauth.Role{natsauth.Dispatcher, natsauth.Trigger, natsauth.API, natsauth.Auditor}

func newSecretsCmd(*cli) *cobra.Command {
	var (
		dir, owner, pgOwner, pgHost, pgUser, pgDB, pools string
		prefix, worker                                   string
		handlers, routes                                 []string
	)
	cmd := &cobra.Command{
		Use:   "secrets",
		Short: "Make the NATS keys, the NATS authorization and the PostgreSQL password of a deployment",
		Long: `Make, in --dir, what a deployment of AX needs to start with no default secret
(docker-compose.yml runs it in its init service):

  <dir>/<role>/nats.nk     the NKey seed of each service's NATS user (NATS_NKEY)
  <dir>/nats/auth.conf     the nats-server authorization block: each user's public
                           key and the permissions of docs/security.md
  <dir>/nats/cluster.conf  the cluster block's route authorization and the routes
                           (--routes) with its password: a server that lacks it
                           cannot join the cluster as a route
  <dir>/postgres/password  PostgreSQL's password (POSTGRES_PASSWORD_FILE)
  <dir>/<role>/pgpass      the same, for each service that uses PostgreSQL (PGPASSFILE)

Secrets that exist are kept; auth.conf is written again, so that an upgrade
takes the permissions of the new version, with the executor users that
ax user add executor recorded in <dir>/nats/executors.json. The executor
user is one worker's (--executor-worker, the executor's AX_WORKER_ID) and
may pull only the queues of --executor-handler of --pools. Every file is mode 0600, owned by
--owner (the services' user) or --postgres-owner.`,
		Example: `  ax secrets --dir /secrets --owner 65532:65532 --postgres-owner 999:999`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			top, err := (&conn{prefix: prefix}).topology()
			if err != nil {
				return err
			}
			uid, gid, err := parseOwner(owner)
			if err != nil {
				return fmt.Errorf("--owner: %w", err)
			}
			puid, pgid, err := parseOwner(pgOwner)
			if err != nil {
				return fmt.Errorf("--postgres-owner: %w", err)
			}
			keys := map[natsauth.Role]string{}
			for _, role := range natsauth.Roles {
				if keys[role], err = keepOrMakeNKey(filepath.Join(dir, string(role), "nats.nk"), string(role), uid, gid); err != nil {
					return err
				}
			}
			scope := natsauth.Scope{WorkerID: worker, Handlers: handlers}
			for p := range strings.SplitSeq(pools, ",") {
				if p = strings.TrimSpace(p); p != "" {
					scope.Pools = append(scope.Pools, p)
				}
			}
			if err := scope.Check(); err != nil {
				return fmt.Errorf("the executor's user: %w", err)
			}
			more, err := loadExecutorUsers(dir)
			if err != nil {
				return err
			}
			auth := "# Written by ax secrets: the NATS users of AX's services, by NKey, and the executor users of ax user add.\n" +
				natsauth.NKeyServerConfig(top, scope, keys, more...)
			if err := writeSecret(filepath.Join(dir, "nats", "auth.conf"), auth, -1, -1); err != nil {
				return err
			}
			routePW, err := keepOrMake(filepath.Join(dir, "nats", "route-password"), -1, -1, randomSecret)
			if err != nil {
				return err
			}
			if err := writeSecret(filepath.Join(dir, "nats", "cluster.conf"), routeConfig(strings.TrimSpace(routePW), routes), -1, -1); err != nil {
				return err
			}
			pw, err := keepOrMake(filepath.Join(dir, "postgres", "password"), puid, pgid, randomSecret)
			if err != nil {
				return err
			}
			for _, role := range dbRoles {
				// The .pgpass format: host:port:database:user:password.
				line := fmt.Sprintf("%s:5432:%s:%s:%s\n", pgHost, pgDB, pgUser, strings.TrimSpace(pw))
				if err := writeSecret(filepath.Join(dir, string(role), "pgpass"), line, uid, gid); err != nil {
					return err
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "secrets ready in %s\n", dir)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "folder to keep the secrets in (required)")
	_ = cmd.MarkFlagRequired("dir")
	f.StringVar(&owner, "owner", "", "uid:gid that owns the services' files (default: this process)")
	f.StringVar(&pgOwner, "postgres-owner", "", "uid:gid that owns PostgreSQL's password file (default: this process)")
	f.StringVar(&pgHost, "postgres-host", "postgres", "PostgreSQL's host name, for the pgpass files")
	f.StringVar(&pgUser, "postgres-user", "ax", "PostgreSQL's user, for the pgpass files")
	f.StringVar(&pgDB, "postgres-db", "ax", "PostgreSQL's database, for the pgpass files")
	f.StringVar(&pools, "pools", "default", "pools the executor user serves, comma-separated")
	f.StringVar(&worker, "executor-worker", "executor-1", "the worker id of the executor user (its --worker-id): the user may be that worker only")
	f.StringSliceVar(&handlers, "executor-handler", builtinHandlers(), "handlers the executor user may pull, repeatable (default: ax executor's built-in ones)")
	f.StringVar(&prefix, "prefix", envOr("AX_PREFIX", "ax"), "subject prefix of this installation (env AX_PREFIX)")
	f.StringSliceVar(&routes, "routes", []string{"nats-1:6222", "nats-2:6222", "nats-3:6222"},
		"host:port of every NATS node's route listener, for cluster.conf's routes (a node skips its own)")
	return cmd
}

// randomSecret is a password of 24 random bytes, URL-safe base64.
func randomSecret() (string, error) {
	b := make([]byte, 24)
	_, err := rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b), err
}

// routeUser is the user name the NATS nodes present to each other.
const routeUser = "route"

// routeConfig is the inside of a nats-server cluster block: the password a
// node must present to open a route, and the routes to every node (hosts,
// host:port) carrying it. Without it any server that reaches a node's
// route port joins the cluster and reads and injects every message.
func routeConfig(password string, hosts []string) string {
	var b strings.Builder
	b.WriteString("# Written by ax secrets: the route authorization of the NATS cluster.\n")
	fmt.Fprintf(&b, "authorization {\n  user: %s\n  password: %q\n}\nroutes: [\n", routeUser, password)
	for _, h := range hosts {
		u := url.URL{Scheme: "nats-route", User: url.UserPassword(routeUser, password), Host: strings.TrimSpace(h)}
		fmt.Fprintf(&b, "  %q\n", u.String())
	}
	b.WriteString("]\n")
	return b.String()
}

// parseOwner reads "uid:gid"; empty is -1, -1: leave the owner as it is.
func parseOwner(s string) (int, int, error) {
	if s == "" {
		return -1, -1, nil
	}
	u, g, ok := strings.Cut(s, ":")
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	if !ok || err1 != nil || err2 != nil || uid < 0 || gid < 0 {
		return 0, 0, fmt.Errorf("%q is not uid:gid, such as 65532:65532", s)
	}
	return uid, gid, nil
}

// keepOrMakeNKey returns the public key of the NKey user seed kept at
// path for user, making the seed if there is none (see keepOrMake).
func keepOrMakeNKey(path, user string, uid, gid int) (string, error) {
	seed, err := keepOrMake(path, uid, gid, func() (string, error) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return "", err
		}
		seed, err := kp.Seed()
		return string(seed), err
	})
	if err != nil {
		return "", err
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(seed)))
	if err != nil {
		return "", fmt.Errorf("read the NKey seed of %s: %w; delete %s to make a new one", user, err, path)
	}
	return kp.PublicKey()
}

// keepOrMake returns the secret kept at path, or makes one with mk and
// keeps it there (mode 0600, owned by uid:gid).
func keepOrMake(path string, uid, gid int, mk func() (string, error)) (string, error) {
	data, err := os.ReadFile(path)
	if err == nil && len(strings.TrimSpace(string(data))) > 0 {
		return string(data), writeSecret(path, string(data), uid, gid)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	secret, err := mk()
	if err != nil {
		return "", fmt.Errorf("make %s: %w", path, err)
	}
	return secret, writeSecret(path, secret+"\n", uid, gid)
}

// writeSecret writes data to path, mode 0600 in a folder of mode 0700,
// both owned by uid:gid (-1 keeps the owner).
func writeSecret(path, data string, uid, gid int) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	for _, p := range []string{dir, path} {
		mode := os.FileMode(0o600)
		if p == dir {
			mode = 0o700
		}
		if err := os.Chmod(p, mode); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		if uid >= 0 {
			if err := os.Chown(p, uid, gid); err != nil {
				return fmt.Errorf("hand %s to %d:%d: %w", p, uid, gid, err)
			}
		}
	}
	return nil
}

// builtinHandlers are the handlers of ax executor.
func builtinHandlers() []string {
	mux := executor.NewMux()
	executor.RegisterBuiltins(mux)
	return mux.Names()
}
