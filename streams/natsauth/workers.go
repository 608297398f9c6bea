package natsauth

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"syscall"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/ax-scheduler/ax/streams"
)

// A WorkerUser is the NATS user of one executor worker of a development
// or throw-away server (ax dev, ax drill system's sandbox): its name
// ("executor-<worker id>", whose inbox is [InboxPrefix] of it), its
// password, and its scope, which names that worker and its handlers.
type WorkerUser struct {
	Name     string `json:"name"`
	Password string `json:"password"`
	Scope    Scope  `json:"scope"`
}

// WorkerUserName is the name of the worker user of worker id.
func WorkerUserName(worker string) string { return "executor-" + worker }

// AddWorkerUser records the user of scope's worker in the JSON file at
// path (mode 0600), which an [Authenticator] reads on every connection, and
// returns it: a server gains a worker's user without a restart. Adding a
// worker that is there keeps its password and takes the new scope. The
// scope must pass [Scope.Check]. Concurrent adds, from several processes
// too, are serialised by a lock on the file.
func AddWorkerUser(path string, scope Scope) (WorkerUser, error) {
	if err := scope.Check(); err != nil {
		return WorkerUser{}, err
	}
	if len(scope.Pools) == 0 {
		return WorkerUser{}, errors.New("a worker user must name the pools its worker serves")
	}
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return WorkerUser{}, fmt.Errorf("add worker user: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return WorkerUser{}, fmt.Errorf("add worker user: lock %s: %w", lock.Name(), err)
	}
	users, err := LoadWorkerUsers(path)
	if err != nil {
		return WorkerUser{}, err
	}
	name := WorkerUserName(scope.WorkerID)
	for i, u := range users {
		if u.Name != name {
			continue
		}
		if reflect.DeepEqual(u.Scope, scope) {
			return u, nil
		}
		users[i].Scope = scope
		return users[i], writeWorkerUsers(path, users)
	}
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return WorkerUser{}, fmt.Errorf("make NATS password: %w", err)
	}
	u := WorkerUser{Name: name, Password: base64.RawURLEncoding.EncodeToString(b), Scope: scope}
	return u, writeWorkerUsers(path, append(users, u))
}

// LoadWorkerUsers reads the worker users of the file at path; a missing
// file holds none.
func LoadWorkerUsers(path string) ([]WorkerUser, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the worker users: %w", err)
	}
	var users []WorkerUser
	if err := json.Unmarshal(data, &users); err != nil {
		return nil, fmt.Errorf("read the worker users from %s: %w; delete the file (then add the users again)", path, err)
	}
	return users, nil
}

// writeWorkerUsers replaces the file at path with users, atomically: an
// Authenticator reading it meanwhile sees the old list or the new.
func writeWorkerUsers(path string, users []WorkerUser) error {
	data, err := json.MarshalIndent(users, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write the worker users: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("write the worker users: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write the worker users: %w", err)
	}
	// CreateTemp makes the file 0600.
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write the worker users: %w", err)
	}
	return nil
}

// An Authenticator admits the users it was made with, and the worker
// users (see [AddWorkerUser]) of its file, which it reads on every
// connection: set it as a server's CustomClientAuthentication (it then
// replaces the server's Users). Each worker user gets the executor
// permissions of its scope; a user of its file whose scope fails
// [Scope.Check] is refused. Safe for concurrent use.
type Authenticator struct {
	top     streams.Topology
	users   map[string]*server.User
	workers string
}

// NewAuthenticator returns an Authenticator for users (each with its
// password and permissions) and the worker users of the file at workers
// ("" for none).
func NewAuthenticator(top streams.Topology, users []*server.User, workers string) *Authenticator {
	a := &Authenticator{top: top, users: map[string]*server.User{}, workers: workers}
	for _, u := range users {
		a.users[u.Username] = u
	}
	return a
}

// Check admits client when its user name and password are those of a user
// of a, and registers that user's permissions.
func (a *Authenticator) Check(client server.ClientAuthentication) bool {
	opts := client.GetOpts()
	if opts == nil || opts.Username == "" {
		return false
	}
	same := func(pw string) bool { return subtle.ConstantTimeCompare([]byte(pw), []byte(opts.Password)) == 1 }
	if u, ok := a.users[opts.Username]; ok {
		if !same(u.Password) {
			return false
		}
		client.RegisterUser(&server.User{Username: u.Username, Permissions: u.Permissions})
		return true
	}
	if a.workers == "" {
		return false
	}
	users, err := LoadWorkerUsers(a.workers)
	if err != nil {
		return false
	}
	for _, u := range users {
		if u.Name != opts.Username || u.Password == "" || !same(u.Password) ||
			u.Name != WorkerUserName(u.Scope.WorkerID) || u.Scope.Check() != nil {
			continue
		}
		client.RegisterUser(&server.User{Username: u.Name, Permissions: Permissions(a.top, Executor, u.Name, u.Scope)})
		return true
	}
	return false
}
