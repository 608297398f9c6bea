package system

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/internal/pgcluster"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
)

// SandboxEnv is set (to 1) in the environment of every process a sandbox
// starts; ax drill system refuses to run where it is set, so that a binary
// that is not ax (a test binary that re-runs its tests) cannot recurse.
const SandboxEnv = "AX_DRILL_SANDBOX"

// SandboxOptions configures a [Sandbox].
type SandboxOptions struct {
	// Binary is the ax binary whose subcommands the sandbox runs as its
	// processes (ax nats-server, ax dispatcher, ax trigger, ax
	// executor). Required; the ax command passes os.Executable().
	Binary string
	// LeaseTTL is the lease TTL of the sandbox's topology and dispatchers
	// (default streams.DefaultLeaseTTL).
	LeaseTTL time.Duration
	// Fsync runs PostgreSQL with production durability (fsync,
	// synchronous_commit and full_page_writes on); false turns them off,
	// for tests.
	Fsync bool
	// Cluster runs a JetStream cluster of [ClusterNodes] nats-server
	// processes, routed to each other on loopback, instead of one server,
	// and the topology at that many replicas (the dispatchers'
	// --replicas).
	Cluster bool
	// Logger receives the sandbox's events. The zero value logs nothing.
	// Each process's output goes to its log file in the sandbox's folder.
	Logger zerolog.Logger
}

// Sandbox is a whole AX on loopback that the drill starts, hurts and stops
// by itself: a private PostgreSQL, a nats-server in a process of its own
// (so that it can be killed with kill -9) with one NATS user per service
// role, and dispatcher, trigger and executor processes of the ax binary.
// It ends only processes it started. Its methods are safe for concurrent
// use.
type Sandbox struct {
	opts     SandboxOptions
	dir      string
	natsPort int
	users    string // the NATS users' password file
	pw       map[natsauth.Role]string

	// Pool and Store reach the sandbox's PostgreSQL; JS its JetStream as
	// the dispatcher user; Top is its topology; Ledger is the path of the
	// ledger its executors' drill handlers append to.
	Pool   *pgxpool.Pool
	Store  *store.Store
	NC     *nats.Conn
	JS     jetstream.JetStream
	Top    streams.Topology
	Ledger string

	mu    sync.Mutex
	pg    *pgcluster.Cluster
	pgOpt pgcluster.Options
	nats  *Proc
	procs map[string]*Proc
	// natsMaxStore bounds the nats-server's file store when it starts
	// (0: unbounded); see RestartNATS.
	natsMaxStore int64
	// cluster is the JetStream cluster that replaces nats when
	// opts.Cluster is set.
	cluster *cluster
}

// LogsMaxBytes is the size of the sandbox's task logs (AX_LOGS), which
// JetStream reserves in its file store: small, so that a scenario can fill
// the store (see [Sandbox.FillStore]).
const LogsMaxBytes = 64 << 20

// StartSandbox starts PostgreSQL and the nats-server, migrates the
// database and ensures the topology. No AX service runs yet: start them
// with [Sandbox.StartDispatcher] and the like. Close ends everything.
func StartSandbox(ctx context.Context, opts SandboxOptions) (_ *Sandbox, err error) {
	if opts.Binary == "" {
		return nil, errors.New("start the drill sandbox: the path of the ax binary is required")
	}
	if opts.LeaseTTL == 0 {
		opts.LeaseTTL = streams.DefaultLeaseTTL
	}
	// A short folder: the server's unix socket lives inside it.
	dir, err := os.MkdirTemp("", "ax-drill-")
	if err != nil {
		return nil, fmt.Errorf("start the drill sandbox: %w", err)
	}
	s := &Sandbox{opts: opts, dir: dir, procs: make(map[string]*Proc), Ledger: filepath.Join(dir, "ledger")}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	// PostgreSQL runs as the postgres user when the drill runs as root.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, fmt.Errorf("start the drill sandbox: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return nil, fmt.Errorf("start the drill sandbox: %w", err)
	}
	s.pgOpt = pgcluster.Options{Dir: filepath.Join(dir, "pg"), Fast: !opts.Fsync, Logger: opts.Logger}
	if s.pgOpt.Fast {
		// Without fsync a crash of PostgreSQL alone (not of the machine)
		// loses nothing, but without synchronous_commit it loses the last
		// commits it acknowledged: the drill's PostgreSQL crash would then
		// test the setting, not AX.
		s.pgOpt.Settings = []string{"synchronous_commit=on"}
	}
	if s.pg, err = pgcluster.Start(ctx, s.pgOpt); err != nil {
		return nil, fmt.Errorf("start the drill sandbox's PostgreSQL: %w", err)
	}
	s.pgOpt.Port = s.pg.Port()
	if s.Pool, err = pgxpool.New(ctx, s.DatabaseURL()); err != nil {
		return nil, fmt.Errorf("connect to the drill sandbox's PostgreSQL: %w", err)
	}
	if err := store.Migrate(ctx, s.Pool); err != nil {
		return nil, fmt.Errorf("migrate the drill sandbox's database: %w", err)
	}
	s.Store = store.New(s.Pool)
	if s.Top, err = streams.NewTopology(streams.DefaultPrefix); err != nil {
		return nil, err
	}

	s.users = filepath.Join(dir, "nats-users.json")
	if s.pw, err = natsauth.LoadOrCreatePasswords(s.users); err != nil {
		return nil, fmt.Errorf("start the drill sandbox: %w", err)
	}
	if opts.Cluster {
		if s.cluster, err = newCluster(); err != nil {
			return nil, err
		}
	}
	if err := s.StartNATS(ctx); err != nil {
		return nil, err
	}
	s.NC, err = nats.Connect(s.NATSURL(), nats.Name("ax drill"), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond),
		nats.UserInfo(string(natsauth.Dispatcher), s.pw[natsauth.Dispatcher]), nats.CustomInboxPrefix(natsauth.InboxPrefix(string(natsauth.Dispatcher))))
	if err != nil {
		return nil, fmt.Errorf("connect to the drill sandbox's NATS: %w", err)
	}
	if s.JS, err = jetstream.New(s.NC); err != nil {
		return nil, err
	}
	if err := s.ensure(ctx); err != nil {
		return nil, fmt.Errorf("ensure the drill sandbox's topology: %w", err)
	}
	return s, nil
}

// ensure ensures the topology; a cluster's JetStream answers only once
// its nodes have elected a meta leader, which it waits a minute for.
func (s *Sandbox) ensure(ctx context.Context) error {
	c := streams.Config{LeaseTTL: s.opts.LeaseTTL, LogsMaxBytes: LogsMaxBytes, Replicas: s.Replicas()}
	deadline := time.Now().Add(time.Minute)
	for {
		err := s.Top.Ensure(ctx, s.JS, c)
		if err == nil || s.cluster == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Replicas returns the replicas of the sandbox's streams and buckets: 1,
// or [ClusterNodes] on a cluster.
func (s *Sandbox) Replicas() int {
	if s.opts.Cluster {
		return ClusterNodes
	}
	return 1
}

// Dir returns the sandbox's folder: the processes' logs are in logs/.
func (s *Sandbox) Dir() string { return s.dir }

// LeaseTTL returns the lease TTL the sandbox runs with.
func (s *Sandbox) LeaseTTL() time.Duration { return s.opts.LeaseTTL }

// DatabaseURL returns the URL of the sandbox's database.
func (s *Sandbox) DatabaseURL() string { return s.pg.URL("postgres") }

// NATSURL returns the URL of the sandbox's nats-server.
func (s *Sandbox) NATSURL() string {
	if s.cluster != nil {
		return s.cluster.clusterURL()
	}
	return "nats://127.0.0.1:" + strconv.Itoa(s.natsPort)
}

// StartNATS starts the nats-server (again, after [Sandbox.KillNATS]) on
// the sandbox's port and JetStream store, and waits until it accepts
// connections. The first start lets the server pick a free port itself
// (a port picked free here could be taken before the server bound it);
// later starts take that port again, as the services' connections expect.
func (s *Sandbox) StartNATS(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cluster != nil {
		return s.startNodes(ctx)
	}
	if s.nats != nil && s.nats.Running() {
		return nil
	}
	portFile := filepath.Join(s.dir, "nats-server.port")
	if err := os.Remove(portFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("start the drill sandbox's nats-server: %w", err)
	}
	p, err := s.start("nats-server", nil, "nats-server", "--listen", "127.0.0.1:"+strconv.Itoa(s.natsPort),
		"--store", filepath.Join(s.dir, "nats"), "--users", s.users, "--port-file", portFile,
		"--max-file-store", strconv.FormatInt(s.natsMaxStore, 10))
	if err != nil {
		return err
	}
	s.nats = p
	for {
		// The server writes the file once it accepts connections.
		if data, err := os.ReadFile(portFile); err == nil {
			port, err := strconv.Atoi(strings.TrimSpace(string(data)))
			if err != nil || port <= 0 || (s.natsPort != 0 && port != s.natsPort) {
				return fmt.Errorf("start the drill sandbox's nats-server: port file says %q, want port %d", data, s.natsPort)
			}
			s.natsPort = port
			return nil
		}
		select {
		case <-p.Done():
			return fmt.Errorf("start the drill sandbox's nats-server: it ended (see %s)", s.logFile("nats-server"))
		case <-ctx.Done():
			return fmt.Errorf("start the drill sandbox's nats-server: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// KillNATS kills the nats-server with kill -9.
func (s *Sandbox) KillNATS() error {
	s.mu.Lock()
	p := s.nats
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.Kill()
}

// RestartNATS stops the nats-server (SIGTERM: it writes its state) and
// starts it again on its store with its file store bounded to maxStore
// bytes (0: unbounded).
func (s *Sandbox) RestartNATS(ctx context.Context, maxStore int64) error {
	s.mu.Lock()
	p := s.nats
	s.natsMaxStore = maxStore
	s.mu.Unlock()
	if p != nil {
		if err := p.Stop(30 * time.Second); err != nil {
			return fmt.Errorf("stop the drill sandbox's nats-server: %w", err)
		}
	}
	return s.StartNATS(ctx)
}

// StoreUsed returns the bytes of JetStream file store the sandbox's
// streams use.
func (s *Sandbox) StoreUsed(ctx context.Context) (int64, error) {
	info, err := s.JS.AccountInfo(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the drill sandbox's JetStream usage: %w", err)
	}
	return int64(info.Store), nil
}

// fillerStream is the stream FillStore fills the store with.
const fillerStream = "AX_DRILL_FILLER"

// FillStore publishes to a stream of its own until JetStream refuses a
// write for want of storage (its file store is bounded: RestartNATS), and
// returns the bytes it wrote. FreeStore deletes that stream.
func (s *Sandbox) FillStore(ctx context.Context) (int64, error) {
	if _, err := s.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: fillerStream, Subjects: []string{"ax-drill-filler"}}); err != nil {
		return 0, fmt.Errorf("fill the drill sandbox's store: %w", err)
	}
	chunk := make([]byte, 512<<10)
	var wrote int64
	for {
		_, err := s.JS.Publish(ctx, "ax-drill-filler", chunk)
		if err == nil {
			wrote += int64(len(chunk))
			continue
		}
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && (apiErr.ErrorCode == 10023 || apiErr.ErrorCode == 10047) {
			return wrote, nil // insufficient resources: the store is full
		}
		return wrote, fmt.Errorf("fill the drill sandbox's store: %w", err)
	}
}

// FreeStore deletes the stream FillStore filled, if it is there.
func (s *Sandbox) FreeStore(ctx context.Context) error {
	if err := s.JS.DeleteStream(ctx, fillerStream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("free the drill sandbox's store: %w", err)
	}
	return nil
}

// CrashPostgres stops PostgreSQL with an immediate shutdown (a crash: the
// next start replays the WAL).
func (s *Sandbox) CrashPostgres(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pg.Crash(ctx)
}

// StopPostgres stops PostgreSQL with a fast shutdown.
func (s *Sandbox) StopPostgres(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pg.Stop(ctx)
}

// StartPostgres starts PostgreSQL again on its data and port.
func (s *Sandbox) StartPostgres(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	pg, err := pgcluster.Start(ctx, s.pgOpt)
	if err != nil {
		return fmt.Errorf("start the drill sandbox's PostgreSQL again: %w", err)
	}
	s.pg = pg
	return nil
}

// PausePostgres stops every PostgreSQL process with SIGSTOP: statements
// hang, connections stay open. ResumePostgres continues them.
func (s *Sandbox) PausePostgres() error { return s.signalPostgres(syscall.SIGSTOP) }

// ResumePostgres continues the processes PausePostgres stopped.
func (s *Sandbox) ResumePostgres() error { return s.signalPostgres(syscall.SIGCONT) }

func (s *Sandbox) signalPostgres(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	procs, err := PostgresProcesses(s.pg.DataDir())
	if err != nil {
		return err
	}
	return SignalAll(procs, sig)
}

// StartDispatcher starts an ax dispatcher process called name.
func (s *Sandbox) StartDispatcher(name string) (*Proc, error) {
	settings := []string{"--lease-ttl", s.opts.LeaseTTL.String(), "--logs-max-bytes", strconv.Itoa(LogsMaxBytes)}
	if s.cluster != nil {
		settings = append(settings, "--replicas", strconv.Itoa(s.Replicas()))
	}
	return s.StartDispatcherWith(name, settings...)
}

// StartDispatcherWith starts an ax dispatcher process called name with
// settings, its topology flags, alone: none of the sandbox's.
func (s *Sandbox) StartDispatcherWith(name string, settings ...string) (*Proc, error) {
	return s.service(name, string(natsauth.Dispatcher), s.pw[natsauth.Dispatcher], "dispatcher",
		append([]string{"--database-url", s.DatabaseURL()}, settings...)...)
}

// LogFile returns the log file of the process called name.
func (s *Sandbox) LogFile(name string) string { return s.logFile(name) }

// StartTrigger starts an ax trigger process called name.
func (s *Sandbox) StartTrigger(name string) (*Proc, error) {
	return s.service(name, string(natsauth.Trigger), s.pw[natsauth.Trigger], "trigger", "--database-url", s.DatabaseURL())
}

// StartExecutor starts an ax executor process serving the drill's
// handlers too (its hidden --drill-ledger) as worker id with slots slots;
// its name is its worker id.
func (s *Sandbox) StartExecutor(id string, slots int) (*Proc, error) {
	// Each executor has a NATS user of its own worker's, which the
	// sandbox's server admits from then on.
	u, err := natsauth.AddWorkerUser(WorkersFile(s.users), natsauth.Scope{Pools: []string{schemas.DefaultPool}, WorkerID: id, Handlers: Handlers()})
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", id, err)
	}
	return s.service(id, u.Name, u.Password, "executor", "--worker-id", id, "--slots", strconv.Itoa(slots),
		"--drill-ledger", s.Ledger, "--shutdown-timeout", "5s")
}

// WorkersFile is the file of the executors' worker users beside the
// services' password file users (see natsauth.AddWorkerUser).
func WorkersFile(users string) string { return filepath.Join(filepath.Dir(users), "nats-workers.json") }

// service starts a service process as the NATS user user.
func (s *Sandbox) service(name, user, password, sub string, args ...string) (*Proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.procs[name]; p != nil && p.Running() {
		return nil, fmt.Errorf("start %s: it is running already", name)
	}
	args = append([]string{sub, "--nats-url", s.NATSURL(), "--nats-user", user,
		"--nats-inbox-prefix", natsauth.InboxPrefix(user), "--log-level", "warn"}, args...)
	p, err := s.start(name, []string{"NATS_PASSWORD=" + password, "AX_METRICS_ADDR="}, args...)
	if err != nil {
		return nil, err
	}
	s.procs[name] = p
	return p, nil
}

// start starts the ax binary with args, its output appended to its log
// file. The caller holds mu.
func (s *Sandbox) start(name string, env []string, args ...string) (*Proc, error) {
	f, err := os.OpenFile(s.logFile(name), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p, err := StartProc(name, f, append(env, SandboxEnv+"=1"), s.opts.Binary, args...)
	if err != nil {
		f.Close()
		return nil, err
	}
	go func() {
		<-p.Done()
		f.Close()
	}()
	s.opts.Logger.Debug().Str("process", name).Int("pid", p.Pid()).Msg("started")
	return p, nil
}

func (s *Sandbox) logFile(name string) string { return filepath.Join(s.dir, "logs", name+".log") }

// Proc returns the process called name, nil when none was started.
func (s *Sandbox) Proc(name string) *Proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.procs[name]
}

// Running returns the names of the running service processes whose name
// starts with prefix, sorted.
func (s *Sandbox) Running(prefix string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for name, p := range s.procs {
		if strings.HasPrefix(name, prefix) && p.Running() {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// StopAll drains every running service process (SIGTERM, then kill -9
// after grace), all at once.
func (s *Sandbox) StopAll(grace time.Duration) {
	s.mu.Lock()
	var procs []*Proc
	for _, p := range s.procs {
		procs = append(procs, p)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(func() { _ = p.Stop(grace) })
	}
	wg.Wait()
}

// Close ends every process the sandbox started, PostgreSQL and the
// nats-server included, and removes its folder.
func (s *Sandbox) Close() {
	s.StopAll(10 * time.Second)
	if s.NC != nil {
		s.NC.Close()
	}
	if s.Pool != nil {
		s.Pool.Close()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nats != nil {
		_ = s.nats.Stop(10 * time.Second)
	}
	if s.cluster != nil {
		s.stopNodes()
	}
	if s.pg != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.pg.Stop(ctx); err != nil {
			s.opts.Logger.Warn().Err(err).Msg("stop the drill sandbox's PostgreSQL")
		}
	}
	_ = os.RemoveAll(s.dir)
}
