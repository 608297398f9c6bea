package main

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/ax-scheduler/ax/drill"
	"github.com/ax-scheduler/ax/examples/executor/handlers"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
)

// devWorkerID is the worker id of ax dev's own executor, which its
// user, devOwnUser, is pinned to.
const devWorkerID = "ax-dev"

// devOwnUser is the NATS user of ax dev's own executor.
const devOwnUser = "executor-ax-dev"

// devExampleWorkers are the worker ids of the example executor's users
// that ax dev makes (go run ./examples/executor --ax-dev .ax --worker-id
// example-1): the default pool, the built-in and example handlers.
// backup-host-1 is the worker examples/pinned-worker.yaml names.
var devExampleWorkers = []string{"example-1", "example-2", "example-3", "backup-host-1"}

// devWorkersFile is where ax dev keeps the users of the workers one
// attaches, one worker id each: its NATS server reads it on every
// connection, so ax user add executor --ax-dev adds one while it runs.
func devWorkersFile(dir string) string { return filepath.Join(dir, "nats-workers.json") }

// devPool is an extra pool of ax dev (--pool NAME:handler,handler): a
// NATS user of its own for one worker of it, in another language say.
type devPool struct {
	scope natsauth.Scope
	user  string
}

// parseDevPool reads --pool NAME:handler[,handler…].
func parseDevPool(arg string) (devPool, error) {
	name, list, _ := strings.Cut(arg, ":")
	name = strings.TrimSpace(name)
	var handlers []string
	for h := range strings.SplitSeq(list, ",") {
		if h = strings.TrimSpace(h); h != "" {
			handlers = append(handlers, h)
		}
	}
	if name == "" {
		return devPool{}, fmt.Errorf("--pool %q: give the pool and its handlers, as --pool js:hello,resize", arg)
	}
	if len(handlers) == 0 {
		return devPool{}, fmt.Errorf("--pool %q: name the handlers its worker serves, as --pool %s:hello,resize: a credential reaches only the queues of the handlers it names", arg, name)
	}
	if name == schemas.DefaultPool || name == drill.Pool || name == streams.WorkerPool {
		return devPool{}, fmt.Errorf("--pool %q: ax dev's own executor serves pool %s (and the drill's %s; %s is reserved); give another pool name", arg, schemas.DefaultPool, drill.Pool, streams.WorkerPool)
	}
	worker := strings.NewReplacer("+", "-", ".", "-").Replace(name) + "-1"
	p := devPool{user: "executor-" + name, scope: natsauth.Scope{Pools: []string{name}, WorkerID: worker, Handlers: handlers}}
	if err := p.scope.Check(); err != nil {
		return devPool{}, fmt.Errorf("--pool %q: %w", arg, err)
	}
	return p, nil
}

// devAuth returns who may connect to ax dev's NATS server: the services'
// users (the passwords of roles), ax dev's own executor (serving
// ownHandlers), the extra pools' users, with their passwords kept in
// <dir>/nats-users.json beside the services' ones, and the worker users of
// <dir>/nats-workers.json, among them the example executor's, which it
// makes. Every executor user is one worker's; the roles' executor user is
// not made.
func devAuth(top streams.Topology, dir string, roles map[natsauth.Role]string, ownHandlers []string, pools []devPool) (*natsauth.Authenticator, map[string]string, error) {
	names := []string{devOwnUser}
	for _, p := range pools {
		names = append(names, p.user)
	}
	passwords, err := natsauth.LoadOrCreateUserPasswords(filepath.Join(dir, "nats-users.json"), names)
	if err != nil {
		return nil, nil, err
	}
	services := maps.Clone(roles)
	delete(services, natsauth.Executor)
	users := natsauth.Users(top, services, natsauth.Scope{})
	own := natsauth.Scope{Pools: []string{schemas.DefaultPool}, WorkerID: devWorkerID, Handlers: ownHandlers}
	users = append(users, &server.User{Username: devOwnUser, Password: passwords[devOwnUser], Permissions: natsauth.Permissions(top, natsauth.Executor, devOwnUser, own)})
	for _, p := range pools {
		users = append(users, &server.User{Username: p.user, Password: passwords[p.user],
			Permissions: natsauth.Permissions(top, natsauth.Executor, p.user, p.scope)})
	}
	for _, w := range devExampleWorkers {
		if _, err := natsauth.AddWorkerUser(devWorkersFile(dir), natsauth.Scope{Pools: []string{schemas.DefaultPool}, WorkerID: w, Handlers: exampleHandlers()}); err != nil {
			return nil, nil, err
		}
	}
	return natsauth.NewAuthenticator(top, users, devWorkersFile(dir)), passwords, nil
}

// writeDevPools writes each extra pool's connection settings to
// <dir>/executor-<pool>.env (mode 0600), and returns the banner's lines.
func writeDevPools(dir, natsURL string, pools []devPool, passwords map[string]string) (string, error) {
	var note strings.Builder
	for _, p := range pools {
		pool := p.scope.Pools[0]
		// AX_HANDLERS: the handlers the user may serve, comma-separated;
		// a worker registers these (or fewer) and no other.
		env := fmt.Sprintf("NATS_URL=%s\nNATS_USER=%s\nNATS_PASSWORD=%s\nNATS_INBOX_PREFIX=%s\nAX_POOLS=%s\nAX_WORKER_ID=%s\nAX_HANDLERS=%s\n",
			natsURL, p.user, passwords[p.user], natsauth.InboxPrefix(p.user), pool, p.scope.WorkerID, strings.Join(p.scope.Handlers, ","))
		path := filepath.Join(dir, "executor-"+pool+".env")
		if err := os.WriteFile(path, []byte(env), 0o600); err != nil {
			return "", fmt.Errorf("write the settings of pool %s: %w", pool, err)
		}
		// WriteFile keeps the mode of a file that was there.
		if err := os.Chmod(path, 0o600); err != nil {
			return "", fmt.Errorf("write the settings of pool %s: %w", pool, err)
		}
		fmt.Fprintf(&note, "\n  Pool     %s: NATS user %s for worker id %s, handlers %s only; settings in %s\n"+
			"           (set -a; . %s; set +a — then start the worker with that worker id)",
			pool, p.user, p.scope.WorkerID, strings.Join(p.scope.Handlers, ", "), path, path)
	}
	return note.String(), nil
}

// exampleHandlers are the handlers of the example executor and of ax
// drill task's executors: the built-in ones and examples/executor's.
func exampleHandlers() []string {
	mux := executor.NewMux()
	executor.RegisterBuiltins(mux)
	handlers.Register(mux)
	return mux.Names()
}
