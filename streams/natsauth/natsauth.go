// Package natsauth gives each AX service a NATS user of its own with only
// the permissions its work needs, derived from the topology: the users of
// ax dev's embedded server, and the same as a nats-server configuration
// block for a real deployment (see docs/security.md).
//
// The executor runs handler code on many machines, so it is the one held
// tightest: it may pull only its pools' dispatch consumers, publish only
// reports, task logs and its worker's heartbeat, and write only the
// leases, mutex and once buckets. It cannot read another pool's work,
// publish firings, write the tasks bucket, or create, purge or delete a
// stream. Every user but the dispatcher receives replies on an inbox
// prefix of its own ([InboxPrefix]), so that no user can read the replies
// — the pulled messages — of another.
//
// The package lives under streams, not internal: the permissions are
// subjects of the topology, and internal/ may not import streams. It is
// not imported by the executor SDK, so handler binaries do not link the
// NATS server.
package natsauth

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// Role names the kind of AX service a NATS user is for.
type Role string

// The roles of NATS users.
const (
	// Dispatcher owns the topology (it creates and updates every stream,
	// consumer and bucket) and may do anything in the account.
	Dispatcher Role = "dispatcher"
	// Trigger publishes firings and watches the tasks bucket. It only
	// looks up the stream and bucket it uses: the topology's settings are
	// the dispatcher's, which no other service may reset.
	Trigger Role = "trigger"
	// Executor pulls its pools' work and reports on it.
	Executor Role = "executor"
	// API publishes firings, announces task changes, and reads every
	// stream (logs, workers, stream state).
	API Role = "api"
	// Auditor relays the audit trail to AX_AUDIT, and reads the workers,
	// the leases and the consumers' state (one list per stream) for
	// metrics and alerts.
	Auditor Role = "auditor"
)

// Roles lists every role, the order of [Users].
var Roles = []Role{Dispatcher, Trigger, Executor, API, Auditor}

// Scope narrows the executor's permissions.
type Scope struct {
	// Pools are the pools the executor serves (default
	// schemas.DefaultPool).
	Pools []string `json:"pools,omitempty"`
	// WorkerID, when set, is the only worker id whose heartbeat key,
	// reports, own consumer and control subject the executor may use.
	// Empty allows any worker id, and so any worker consumer by name —
	// and a consumer's name is one subject token, so that is any
	// consumer of AX_DISPATCH, every pool's: [Scope.Check] refuses it.
	WorkerID string `json:"worker_id,omitempty"`
	// Handlers are the only handlers whose queues of its pools the
	// executor may pull, read and acknowledge (consumers
	// "pool_<pool>_<priority>_<handler>…", see streams.PoolConsumerName).
	// No permission can say "any consumer of this pool", so without
	// handlers the executor gets no pool queue at all, only its own
	// worker consumer; [Scope.Check] refuses such a scope.
	Handlers []string `json:"handlers,omitempty"`
}

// Check reports what keeps scope from holding an executor to its pools:
// it must name its worker and the handlers it serves, and every pool,
// handler and worker id must be a subject token (a handler may have
// dots). Every executor credential AX makes passes it.
func (s Scope) Check() error {
	if len(s.Handlers) == 0 {
		return errors.New("an executor credential must name the handlers its worker serves (--handler NAME, repeatable): " +
			"a pool's queues are one consumer per handler, and a credential reaches only the queues it names")
	}
	if s.WorkerID == "" {
		return errors.New("an executor credential must name its worker (--worker ID, the worker's --worker-id): " +
			"a worker's own consumer is named by its worker id, and a credential for any worker id could pull any consumer of every pool")
	}
	bad := func(what, v string, dots bool) error {
		tokens := []string{v}
		if dots {
			tokens = strings.Split(v, ".")
		}
		for _, tok := range tokens {
			if tok == "" || strings.ContainsAny(tok, " \t\r\n*>.") {
				return fmt.Errorf("%s %q is not a subject token: no spaces, wildcards (* >) or empty parts", what, v)
			}
		}
		return nil
	}
	for _, p := range s.Pools {
		if err := bad("pool", p, false); err != nil {
			return err
		}
	}
	for _, h := range s.Handlers {
		if err := bad("handler", h, true); err != nil {
			return err
		}
	}
	return bad("worker id", s.WorkerID, false)
}

// InboxPrefix is the inbox prefix that a connection of user must use
// (nats.CustomInboxPrefix): replies to its requests, pulled messages
// included, come there, where no other user may subscribe.
func InboxPrefix(user string) string { return "_INBOX_" + user }

// Permissions returns the permissions of user, a user of role in topology
// top; scope narrows an executor. The dispatcher's are nil: everything.
func Permissions(top streams.Topology, role Role, user string, scope Scope) *server.Permissions {
	if role == Dispatcher {
		return nil
	}
	var pub, sub []string
	inbox := InboxPrefix(user) + ".>"
	switch role {
	case Trigger:
		pub, sub = triggerPermissions(top)
	case API:
		pub, sub = apiPermissions(top)
	case Auditor:
		pub, sub = auditorPermissions(top)
	case Executor:
		pub, sub = executorPermissions(top, scope)
	default:
		// An unknown role may do nothing but ask.
		pub = append(pub, "$JS.API.INFO")
	}
	sub = append(sub, inbox)
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: pub},
		Subscribe: &server.SubjectPermission{Allow: sub},
	}
}

// Flow control of push consumers (key-value watchers) is answered on
// $JS.FC subjects; a stray answer only unblocks a consumer.
const flowControl = "$JS.FC.>"

// info lets a user read the state of the streams.
func info(streams ...string) []string {
	out := []string{"$JS.API.INFO"}
	for _, s := range streams {
		out = append(out, "$JS.API.STREAM.INFO."+s)
	}
	return out
}

// read lets a user get messages of a stream by subject or sequence.
func read(stream string) []string {
	return []string{
		"$JS.API.DIRECT.GET." + stream,
		"$JS.API.DIRECT.GET." + stream + ".>",
		"$JS.API.STREAM.MSG.GET." + stream,
	}
}

// watch lets a user read a stream through consumers of its own
// (ordered consumers, key-value watchers, direct gets).
func watch(stream string) []string {
	return append([]string{
		"$JS.API.CONSUMER.CREATE." + stream + ".>",
		"$JS.API.CONSUMER.DELETE." + stream + ".>",
		"$JS.API.CONSUMER.MSG.NEXT." + stream + ".>",
	}, read(stream)...)
}

// kv names the stream of a key-value bucket.
func kv(bucket string) string { return "KV_" + bucket }

// observe lets a user read the state of every stream and consumer.
var observe = []string{
	"$JS.API.STREAM.INFO.>", "$JS.API.STREAM.NAMES", "$JS.API.STREAM.LIST",
	"$JS.API.CONSUMER.INFO.>", "$JS.API.CONSUMER.NAMES.>", "$JS.API.CONSUMER.LIST.>",
}

// triggerPermissions returns what the trigger service may publish.
func triggerPermissions(top streams.Topology) (pub, sub []string) {
	// Plain firings only (ax.trigger.<task>, AX_TRIGGERS), its cron
	// firings among them: `ax dev` hands its user to outside
	// publishers too. AX_FIRINGS (the API's firings, AX's own, the
	// schedules) is the api's and the dispatcher's.
	pub = append(pub, top.Trigger("*"))
	pub = append(pub, info(top.TriggersStream(), kv(top.TasksBucket()))...)
	pub = append(pub, watch(kv(top.TasksBucket()))...)
	pub = append(pub, flowControl)
	return pub, sub
}

// apiPermissions returns what the API may publish.
func apiPermissions(top streams.Topology) (pub, sub []string) {
	// Its own firings and cancel orders, and the schedules of delayed
	// ones (ax.sched.<task>.<event>); not AX's own firings, nor the
	// dispatcher's retry schedules (ax.sched.<event>), which a
	// schedule of the same subject would replace.
	pub = append(pub, top.APITrigger("*"), top.Sched("*.>"), top.Control(">"), kvKey(top.TasksBucket(), ">"))
	pub = append(pub, "$JS.API.INFO")
	pub = append(pub, observe...)
	// Consumers of its own on streams where no other service has one:
	// the task logs, and watchers of the workers and tasks buckets.
	for _, s := range []string{top.LogsStream(), kv(top.WorkersBucket()), kv(top.TasksBucket())} {
		pub = append(pub, watch(s)...)
	}
	// AX_FIRINGS holds the dispatcher's consumer: the api reads a
	// pending schedule by subject, and makes, pulls from or deletes no
	// consumer there.
	pub = append(pub, read(top.FiringsStream())...)
	// The mutex bucket, read by key: who holds the mutex_key an instance
	// waits for (api/waits.go).
	pub = append(pub, read(kv(top.MutexBucket()))...)
	pub = append(pub, flowControl)
	return pub, sub
}

// auditorPermissions returns what the auditor may publish.
func auditorPermissions(top streams.Topology) (pub, sub []string) {
	pub = append(pub, top.Audit(">"))
	// The state it reads: the streams and buckets it uses, its own
	// consumer, and for the consumer lag one consumer list per
	// stream with durable consumers and the oldest waiting dispatch
	// message of a pool (monitor.LagStreams in auditor/monitor) — no consumer's info
	// one by one, no stream it does not read.
	pub = append(pub, info(top.AuditStream(), top.TriggersStream(), top.FiringsStream(), top.DispatchStream(), top.ReportsStream(),
		kv(top.WorkersBucket()), kv(top.LeasesBucket()), kv(top.TasksBucket()))...)
	pub = append(pub, "$JS.API.CONSUMER.INFO."+top.AuditStream()+".>")
	for _, s := range []string{top.TriggersStream(), top.FiringsStream(), top.DispatchStream(), top.ReportsStream(), top.AuditStream()} {
		pub = append(pub, "$JS.API.CONSUMER.LIST."+s)
	}
	pub = append(pub, "$JS.API.STREAM.MSG.GET."+top.DispatchStream())
	for _, s := range []string{top.AuditStream(), kv(top.WorkersBucket()), kv(top.LeasesBucket()), kv(top.TasksBucket())} {
		pub = append(pub, watch(s)...)
	}
	pub = append(pub, ack(top.AuditStream(), "*")...)
	pub = append(pub, flowControl)
	return pub, sub
}

// executorPermissions returns what an executor of scope may publish
// and subscribe to.
func executorPermissions(top streams.Topology, scope Scope) (pub, sub []string) {
	pools := scope.Pools
	if len(pools) == 0 {
		pools = []string{schemas.DefaultPool}
	}
	worker := scope.WorkerID
	if worker == "" {
		worker = "*"
	}
	// Task log lines only as its worker: a line's subject names the
	// worker that shipped it, and readers show an instance only the
	// lines of workers that held one of its attempts.
	pub = append(pub, top.Logs(worker))
	pub = append(pub, info(top.DispatchStream(), top.ReportsStream(), top.LogsStream(),
		kv(top.LeasesBucket()), kv(top.WorkersBucket()), kv(top.MutexBucket()), kv(top.OnceBucket()))...)
	stream := top.DispatchStream()
	// Its handlers' queues of its pools, each by name: a consumer name
	// is one subject token, so there is no permission for "this pool's
	// consumers", and an executor without handlers gets none.
	for _, pool := range pools {
		for _, p := range schemas.Priorities {
			for _, h := range scope.Handlers {
				c := top.PoolConsumer(pool, p, h)
				pub = append(pub,
					"$JS.API.CONSUMER.CREATE."+stream+"."+c.Durable+"."+c.FilterSubject,
					"$JS.API.CONSUMER.INFO."+stream+"."+c.Durable,
					"$JS.API.CONSUMER.MSG.NEXT."+stream+"."+c.Durable)
				pub = append(pub, ack(stream, c.Durable)...)
			}
		}
		sub = append(sub, top.ReadyPool(pool))
		// Reports only on its pools' work, as its worker when it is
		// pinned to one: the dispatcher applies a report only when
		// the subject's pool and worker are the attempt's.
		pub = append(pub, top.Reports(pool, worker))
		// Fence questions likewise: the dispatcher answers only about
		// the attempts of the subject's pool.
		pub = append(pub, top.Fences(pool, worker))
	}
	// The worker's own consumer, by its worker id: "worker_<id>" on
	// ax.dispatch.worker.<id>. With any worker id, any worker consumer
	// on a worker subject (a durable name is one token, so "*").
	own := top.WorkerConsumer(worker)
	if scope.WorkerID == "" {
		own.Durable = "*"
	}
	pub = append(pub,
		"$JS.API.CONSUMER.CREATE."+stream+"."+own.Durable+"."+own.FilterSubject,
		"$JS.API.CONSUMER.INFO."+stream+"."+own.Durable,
		"$JS.API.CONSUMER.MSG.NEXT."+stream+"."+own.Durable)
	pub = append(pub, ack(stream, own.Durable)...)
	sub = append(sub, top.ReadyWorker(worker))
	// Its heartbeat, and one grant key per pool and handler of its
	// scope (streams.GrantKey): what the dispatcher lets a worker
	// serve is what these keys prove its credential grants, never
	// what its heartbeat claims.
	pub = append(pub, kvKey(top.WorkersBucket(), worker))
	for _, pool := range pools {
		for _, h := range scope.Handlers {
			pub = append(pub, kvKey(top.WorkersBucket(), streams.GrantKey(worker, pool, h)))
		}
	}
	pub = append(pub, kvKey(top.LeasesBucket(), ">"),
		kvKey(top.MutexBucket(), ">"), kvKey(top.OnceBucket(), ">"))
	pub = append(pub, watch(kv(top.OnceBucket()))...)
	// A create over a released key reads the key's delete marker for
	// its revision (nats.go's KeyValue.Create); without the read, a
	// released mutex could not be taken again until its marker aged
	// out, a minute later.
	pub = append(pub, read(kv(top.MutexBucket()))...)
	pub = append(pub, flowControl)
	sub = append(sub, top.Control(worker))
	return pub, sub
}

// ack returns the subjects that acknowledge messages of consumer on
// stream, in both formats of ack subjects the server may use.
func ack(stream, consumer string) []string {
	return []string{
		"$JS.ACK." + stream + "." + consumer + ".>",
		"$JS.ACK.*.*." + stream + "." + consumer + ".>",
	}
}

// kvKey is the subject that writes key of bucket.
func kvKey(bucket, key string) string { return "$KV." + bucket + "." + key }

// Users returns one user per role, each called by its role, with the
// password passwords holds for it; scope narrows the executor. A role
// without a password is left out.
func Users(top streams.Topology, passwords map[Role]string, scope Scope) []*server.User {
	var out []*server.User
	for _, role := range Roles {
		pw, ok := passwords[role]
		if !ok {
			continue
		}
		out = append(out, &server.User{Username: string(role), Password: pw,
			Permissions: Permissions(top, role, string(role), scope)})
	}
	return out
}

// ServerConfig renders the users of [Users] as the authorization block of
// a nats-server configuration file. Each password is read from an
// environment variable, <ROLE>_NATS_PASSWORD (e.g. EXECUTOR_NATS_PASSWORD),
// so that the file holds no secret.
func ServerConfig(top streams.Topology, scope Scope) string {
	return serverConfig(top, scope, func(role Role) string {
		return fmt.Sprintf("      user: %q\n      password: $%s\n", role, PasswordEnv(role))
	})
}

// NKeyServerConfig renders the users of [Users] as the authorization block
// of a nats-server configuration file, each user known by the public NKey
// keys holds for its role ("U…") instead of a password: a service proves
// its role with the seed, which the server never sees (NATS_NKEY). A role
// without a key is left out; more are executor users of their own (see
// [NKeyUser]), after the roles'.
func NKeyServerConfig(top streams.Topology, scope Scope, keys map[Role]string, more ...NKeyUser) string {
	var b strings.Builder
	b.WriteString("authorization {\n  users = [\n")
	for _, role := range Roles {
		if keys[role] != "" {
			writeUser(&b, fmt.Sprintf("      nkey: %q\n", keys[role]), Permissions(top, role, string(role), scope))
		}
	}
	for _, u := range more {
		writeUser(&b, fmt.Sprintf("      # %s\n      nkey: %q\n", u.Name, u.NKey), Permissions(top, Executor, u.Name, u.Scope))
	}
	b.WriteString("  ]\n}\n")
	return b.String()
}

// An NKeyUser is an executor user of its own beside the roles' (one per
// worker, say, made by ax user add executor): its name (its inbox is
// [InboxPrefix] of it), its public NKey, and its scope.
type NKeyUser struct {
	Name  string `json:"name"`
	NKey  string `json:"nkey"`
	Scope Scope  `json:"scope"`
}

// serverConfig renders the authorization block; credential gives the lines
// that identify role's user, "" to leave the role out.
func serverConfig(top streams.Topology, scope Scope, credential func(Role) string) string {
	var b strings.Builder
	b.WriteString("authorization {\n  users = [\n")
	for _, role := range Roles {
		if cred := credential(role); cred != "" {
			writeUser(&b, cred, Permissions(top, role, string(role), scope))
		}
	}
	b.WriteString("  ]\n}\n")
	return b.String()
}

// writeUser writes one user of the authorization block: the lines that
// identify it, and its permissions (none: everything).
func writeUser(b *strings.Builder, cred string, p *server.Permissions) {
	b.WriteString("    {\n" + cred)
	if p != nil {
		b.WriteString("      permissions: {\n")
		writeList(b, "publish", p.Publish.Allow)
		writeList(b, "subscribe", p.Subscribe.Allow)
		b.WriteString("      }\n")
	}
	b.WriteString("    }\n")
}

// PasswordEnv names the environment variable [ServerConfig] reads the
// password of role from.
func PasswordEnv(role Role) string { return strings.ToUpper(string(role)) + "_NATS_PASSWORD" }

func writeList(b *strings.Builder, name string, subjects []string) {
	fmt.Fprintf(b, "        %s: { allow: [\n", name)
	for _, s := range subjects {
		fmt.Fprintf(b, "          %q\n", s)
	}
	b.WriteString("        ] }\n")
}

// LoadOrCreatePasswords reads the passwords of every role from the JSON
// file at path, makes a random one for each role it lacks, and writes the
// file back (mode 0600) when it made any: ax dev's users keep their
// passwords across restarts, and only the owner of the data folder can
// read them.
func LoadOrCreatePasswords(path string) (map[Role]string, error) {
	names := make([]string, len(Roles))
	for i, role := range Roles {
		names[i] = string(role)
	}
	all, err := LoadOrCreateUserPasswords(path, names)
	if err != nil {
		return nil, err
	}
	passwords := make(map[Role]string, len(Roles))
	for _, role := range Roles {
		passwords[role] = all[string(role)]
	}
	return passwords, nil
}

// LoadOrCreateUserPasswords is [LoadOrCreatePasswords] for the users
// called names (ax dev's executor users of other pools, say, beside the
// roles): it returns every password the file holds, with one made for
// each name it lacked.
func LoadOrCreateUserPasswords(path string, names []string) (map[string]string, error) {
	passwords := map[string]string{}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("read NATS passwords: %w", err)
	default:
		if err := json.Unmarshal(data, &passwords); err != nil {
			return nil, fmt.Errorf("read NATS passwords from %s: %w; delete the file to make new ones", path, err)
		}
	}
	changed := false
	for _, name := range names {
		if passwords[name] != "" {
			continue
		}
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return nil, fmt.Errorf("make NATS password: %w", err)
		}
		passwords[name] = base64.RawURLEncoding.EncodeToString(b)
		changed = true
	}
	if !changed {
		return passwords, nil
	}
	out, err := json.MarshalIndent(passwords, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("write NATS passwords: %w", err)
	}
	if err := os.WriteFile(path, append(out, '\n'), 0o600); err != nil {
		return nil, fmt.Errorf("write NATS passwords: %w", err)
	}
	// WriteFile keeps the mode of a file that was there.
	if err := os.Chmod(path, 0o600); err != nil {
		return nil, fmt.Errorf("write NATS passwords: %w", err)
	}
	return passwords, nil
}
