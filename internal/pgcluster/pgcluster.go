// Package pgcluster starts and stops a private PostgreSQL cluster from the
// machine's own PostgreSQL installation, for `ax dev` and for the tests.
//
// A cluster lives in one folder: the data directory is Dir/data, the
// server's log Dir/postgres.log, and its unix socket sits in Dir itself. The
// server listens on 127.0.0.1 only and takes no connection without the
// superuser's password (scram-sha-256), made at the first start and kept in
// Dir/password (mode 0600). Dir is mode 0700 and so is the socket: another
// user of the machine can neither read the password nor use the socket.
//
// PostgreSQL refuses to run as root. When the process is root, the cluster's
// folder is handed to the "postgres" system user and every server program
// runs as that user through runuser (or su where runuser is missing).
package pgcluster

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
)

// Options configures a cluster.
type Options struct {
	// Dir is the cluster's folder, created when missing. Required. When
	// it already holds an initialised cluster, Start restarts that cluster
	// on its data. When running as root, Dir is handed to the postgres
	// system user, so every folder above it must be searchable by others
	// (mode 0755, as os.TempDir() is).
	Dir string
	// Port is the TCP port on 127.0.0.1. Zero picks a free port at each
	// Start, and another when the server finds it taken.
	Port int
	// Fast turns durability off (fsync, synchronous_commit and
	// full_page_writes): for tests and throwaway data only, as a crash of
	// the machine can corrupt the cluster.
	Fast bool
	// Settings are extra server settings, each "name=value", given to the
	// server as -c options after AX's own, so they win: for example
	// "shared_preload_libraries=pg_stat_statements". Nil adds none.
	Settings []string
	// Logger receives the cluster's start and stop events. The zero value
	// logs nothing.
	Logger zerolog.Logger
}

// Cluster is a running private PostgreSQL server. Its methods are not safe
// for concurrent use.
type Cluster struct {
	dir     string
	dataDir string
	binDir  string
	port    int
	fast    bool
	extra   []string
	log     zerolog.Logger
	// runAs is set when the process is root and the server programs must
	// run as the postgres system user.
	runAs *runAs
	// password is the superuser's.
	password string
}

// runAs says how to run a program as the postgres system user.
type runAs struct {
	uid, gid int
	runuser  string // path of runuser; empty when only su is available
	su       string
}

const (
	// superuser is the role initdb creates and every URL connects as.
	superuser = "postgres"
	// passwordFile is the file in Dir that keeps the superuser's password.
	passwordFile = "password"
	// maxSocketPath is the longest unix socket path Linux accepts
	// (sizeof(sun_path) - 1).
	maxSocketPath = 107
	// pgCtlTimeout bounds pg_ctl's own wait for the server to start or
	// stop; a start that must replay WAL after a crash can take a while.
	pgCtlTimeout = 60 * time.Second
	// readyTimeout bounds the wait for the first TCP connection after
	// pg_ctl has reported the server ready.
	readyTimeout = 30 * time.Second
)

// Start starts the cluster in opts.Dir, running initdb first when the folder
// holds no cluster yet, and returns once the server accepts connections.
//
// If a server from an earlier run is still running on the same data (its
// process was killed before it could stop it), Start stops that server
// first and starts a fresh one, so the returned cluster always runs with the
// port and settings of opts.
//
// The server is started in its own process group, so a Ctrl-C in the
// terminal reaches the caller but not PostgreSQL: the caller decides when to
// call [Cluster.Stop]. If Start fails after launching the server, it stops
// it again.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Dir == "" {
		return nil, errors.New("start postgres: Options.Dir is required: the folder that holds the cluster")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	// The socket is Dir/.s.PGSQL.<port>, with up to five digits of port.
	if n := len(dir) + len("/.s.PGSQL.65535"); n > maxSocketPath {
		return nil, fmt.Errorf("start postgres: folder %s is too long for PostgreSQL's unix socket inside it (%d bytes, at most %d): choose a shorter Dir", dir, n, maxSocketPath)
	}
	binDir, err := findBinDir(os.Getenv("PATH"), []string{"/usr/lib/postgresql/*/bin"}, []string{"/usr/local/pgsql/bin"})
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	c := &Cluster{
		dir:     dir,
		dataDir: filepath.Join(dir, "data"),
		binDir:  binDir,
		port:    opts.Port,
		fast:    opts.Fast,
		extra:   opts.Settings,
		log:     opts.Logger,
	}
	if os.Geteuid() == 0 {
		if c.runAs, err = lookupRunAs(); err != nil {
			return nil, fmt.Errorf("start postgres: %w", err)
		}
	}
	if err := c.prepareDir(ctx); err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	legacy, err := c.initdb(ctx)
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	running, err := c.running(ctx)
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	if running {
		c.log.Warn().Str("dir", c.dir).Msg("stopping a postgres server left running by an earlier run")
		if err := c.stop(ctx); err != nil {
			return nil, fmt.Errorf("start postgres: stop the server left running by an earlier run: %w", err)
		}
	}
	// A port picked free may be taken by another process before the
	// server binds it: then the server starts again on another (a port
	// the caller chose is its to keep free).
	picked := c.port == 0
	for try := 1; ; try++ {
		if picked {
			if c.port, err = pickPort(); err != nil {
				return nil, fmt.Errorf("start postgres: %w", err)
			}
		}
		err := c.start(ctx)
		if err == nil {
			break
		}
		c.stopQuietly()
		if !picked || try == maxPortTries || !strings.Contains(err.Error(), "already in use") {
			return nil, fmt.Errorf("start postgres in %s on port %d: %w", c.dir, c.port, err)
		}
		c.log.Warn().Str("dir", c.dir).Int("port", c.port).Msg("the port picked for postgres was taken before it listened: starting on another")
	}
	if legacy {
		// A cluster made before passwords trusted every local user: give
		// the superuser its password and ask for it from now on.
		if err := c.requirePassword(ctx); err != nil {
			c.stopQuietly()
			return nil, fmt.Errorf("start postgres in %s on port %d: %w", c.dir, c.port, err)
		}
	}
	if err := c.waitReady(ctx); err != nil {
		c.stopQuietly()
		return nil, fmt.Errorf("start postgres in %s on port %d: %w", c.dir, c.port, err)
	}
	c.log.Info().Str("dir", c.dir).Int("port", c.port).Str("bin", c.binDir).Bool("fast", c.fast).Msg("postgres started")
	return c, nil
}

// URL returns the URL of database db on the cluster, connecting as the
// superuser "postgres", with its password, over TCP without TLS. The URL
// holds the password: do not log it (see [Redact]).
func (c *Cluster) URL(db string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(superuser, c.password),
		Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)), Path: "/" + db, RawQuery: "sslmode=disable"}
	return u.String()
}

// Redact returns rawURL with its password replaced by "xxxxx", for a log.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(a URL that does not parse)"
	}
	return u.Redacted()
}

// Port returns the TCP port the server listens on.
func (c *Cluster) Port() int { return c.port }

// Dir returns the cluster's folder as an absolute path.
func (c *Cluster) Dir() string { return c.dir }

// LogFile returns the path of the server's log.
func (c *Cluster) LogFile() string { return filepath.Join(c.dir, "postgres.log") }

// Stop stops the server with a fast shutdown (open sessions are ended,
// unfinished transactions roll back) and returns once it has exited. It
// returns nil when the server is not running, so it may be called more than
// once.
func (c *Cluster) Stop(ctx context.Context) error {
	running, err := c.running(ctx)
	if err != nil {
		return fmt.Errorf("stop postgres in %s: %w", c.dir, err)
	}
	if !running {
		return nil
	}
	if err := c.stop(ctx); err != nil {
		return fmt.Errorf("stop postgres in %s: %w", c.dir, err)
	}
	c.log.Info().Str("dir", c.dir).Int("port", c.port).Msg("postgres stopped")
	return nil
}

// Crash stops the server with an immediate shutdown (pg_ctl -m
// immediate): every process quits at once, as in a crash, and the next
// Start replays the WAL. Fault drills use it; it returns nil when the
// server is not running.
func (c *Cluster) Crash(ctx context.Context) error {
	running, err := c.running(ctx)
	if err != nil {
		return fmt.Errorf("crash postgres in %s: %w", c.dir, err)
	}
	if !running {
		return nil
	}
	if err := c.run(ctx, c.program("pg_ctl"), "stop", "-D", c.dataDir, "-m", "immediate", "-w", "-s",
		"-t", strconv.Itoa(int(pgCtlTimeout.Seconds()))); err != nil {
		return fmt.Errorf("crash postgres in %s: %w", c.dir, err)
	}
	c.log.Info().Str("dir", c.dir).Int("port", c.port).Msg("postgres crashed (immediate shutdown)")
	return nil
}

// DataDir returns the folder of the server's data (postmaster.pid lives
// there).
func (c *Cluster) DataDir() string { return c.dataDir }

func lookupRunAs() (*runAs, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, which PostgreSQL refuses, and there is no \"postgres\" system user to run it as (%w): "+
			"install PostgreSQL from the distribution (`apt-get install postgresql` creates the user) or run as an ordinary user", err)
	}
	r := &runAs{}
	if r.uid, err = strconv.Atoi(u.Uid); err != nil {
		return nil, fmt.Errorf("look up user postgres: uid %q: %w", u.Uid, err)
	}
	if r.gid, err = strconv.Atoi(u.Gid); err != nil {
		return nil, fmt.Errorf("look up user postgres: gid %q: %w", u.Gid, err)
	}
	if r.runuser = lookTool("runuser", "/usr/sbin/runuser", "/sbin/runuser"); r.runuser != "" {
		return r, nil
	}
	if r.su = lookTool("su", "/usr/bin/su", "/bin/su"); r.su == "" {
		return nil, errors.New("running as root, which PostgreSQL refuses, and neither runuser nor su is installed to run it as user postgres: install util-linux")
	}
	return r, nil
}

// lookTool finds name on PATH, or else at the first of paths that exists:
// root's PATH does not always include the sbin folders.
func lookTool(name string, paths ...string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, p := range paths {
		if isExecutable(p) {
			return p
		}
	}
	return ""
}

// prepareDir creates the cluster's folder and, as root, hands it to the
// postgres user and checks that this user can reach it.
func (c *Cluster) prepareDir(ctx context.Context) error {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return fmt.Errorf("create cluster folder: %w", err)
	}
	// Only its owner may look inside: the password and the socket are here.
	if err := os.Chmod(c.dir, 0o700); err != nil {
		return fmt.Errorf("create cluster folder: %w", err)
	}
	if c.runAs == nil {
		return nil
	}
	if err := os.Chown(c.dir, c.runAs.uid, c.runAs.gid); err != nil {
		return fmt.Errorf("hand cluster folder to user postgres: %w", err)
	}
	if err := c.run(ctx, "/bin/sh", "-c", `test -w "$0" && test -x "$0"`, c.dir); err != nil {
		return fmt.Errorf("user postgres cannot write to %s: make every folder above it searchable by others (chmod 0755) or choose a Dir under %s", c.dir, os.TempDir())
	}
	return nil
}

// initdb creates the cluster unless the data directory already holds one,
// and loads or makes the superuser's password. legacy is true for a
// cluster made before AX gave it a password, which trusts local users.
func (c *Cluster) initdb(ctx context.Context) (legacy bool, err error) {
	pwPath := filepath.Join(c.dir, passwordFile)
	if data, err := os.ReadFile(pwPath); err == nil {
		c.password = strings.TrimSpace(string(data))
	} else if !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("read the superuser's password: %w", err)
	}
	made := false
	if c.password == "" {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return false, fmt.Errorf("make the superuser's password: %w", err)
		}
		c.password, made = base64.RawURLEncoding.EncodeToString(b), true
		if err := os.WriteFile(pwPath, []byte(c.password+"\n"), 0o600); err != nil {
			return false, fmt.Errorf("keep the superuser's password: %w", err)
		}
		if c.runAs != nil {
			// initdb, run as postgres, reads it as its --pwfile.
			if err := os.Chown(pwPath, c.runAs.uid, c.runAs.gid); err != nil {
				return false, fmt.Errorf("keep the superuser's password: %w", err)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(c.dataDir, "PG_VERSION")); err == nil {
		return made, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("inspect data directory: %w", err)
	}
	c.log.Info().Str("dir", c.dir).Str("bin", c.binDir).Msg("initialising postgres cluster")
	// Password authentication on the socket and on loopback alike; the
	// server listens on nothing else.
	args := []string{"-D", c.dataDir, "-U", superuser, "-E", "UTF8", "--locale=C", "-A", "scram-sha-256",
		"--pwfile", pwPath, "--no-instructions"}
	if c.fast {
		args = append(args, "--no-sync")
	}
	if err := c.run(ctx, c.program("initdb"), args...); err != nil {
		return false, fmt.Errorf("initialise cluster: %w", err)
	}
	return false, nil
}

// hbaConf is the pg_hba.conf of a cluster: the superuser's password on the
// socket and on loopback, nothing else.
const hbaConf = `# Written by AX (internal/pgcluster): password authentication only.
local   all             all                                     scram-sha-256
host    all             all             127.0.0.1/32            scram-sha-256
host    all             all             ::1/128                 scram-sha-256
local   replication     all                                     scram-sha-256
host    replication     all             127.0.0.1/32            scram-sha-256
host    replication     all             ::1/128                 scram-sha-256
`

// requirePassword sets the superuser's password on a cluster that trusted
// local users, then makes it ask for the password.
func (c *Cluster) requirePassword(ctx context.Context) error {
	trusting := fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", superuser, c.port)
	conn, err := pgx.Connect(ctx, trusting)
	if err != nil {
		return fmt.Errorf("set the superuser's password: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "SET password_encryption = 'scram-sha-256'"); err != nil {
		return fmt.Errorf("set the superuser's password: %w", err)
	}
	if _, err := conn.Exec(ctx, "ALTER ROLE "+superuser+" PASSWORD "+quoteLiteral(c.password)); err != nil {
		return fmt.Errorf("set the superuser's password: %w", err)
	}
	var hba string
	if err := conn.QueryRow(ctx, "SHOW hba_file").Scan(&hba); err != nil {
		return fmt.Errorf("find pg_hba.conf: %w", err)
	}
	if err := os.WriteFile(hba, []byte(hbaConf), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", hba, err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("reload pg_hba.conf: %w", err)
	}
	c.log.Info().Str("dir", c.dir).Msg("postgres asks for the superuser's password from now on")
	return nil
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// running reports whether a server runs on the data directory, as recorded
// by its postmaster.pid with a live pid.
func (c *Cluster) running(ctx context.Context) (bool, error) {
	out, err := c.command(ctx, c.program("pg_ctl"), "status", "-D", c.dataDir).CombinedOutput()
	if err == nil {
		return true, nil
	}
	// pg_ctl status exits with 3 when no server is running.
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) && ee.ExitCode() == 3 {
		return false, nil
	}
	return false, fmt.Errorf("pg_ctl status: %w: %s", err, strings.TrimSpace(string(out)))
}

func (c *Cluster) start(ctx context.Context) error {
	// pg_ctl hands -o to /bin/sh, so the values in it are quoted for sh.
	settings := []string{
		"-p", strconv.Itoa(c.port),
		"-k", shellQuote(c.dir),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_permissions=0700",
		"-c", "max_connections=300",
	}
	if c.fast {
		settings = append(settings, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	for _, s := range c.extra {
		settings = append(settings, "-c", shellQuote(s))
	}
	logFile := c.LogFile()
	err := c.run(ctx, c.program("pg_ctl"), "start", "-D", c.dataDir, "-l", logFile, "-w", "-s",
		"-t", strconv.Itoa(int(pgCtlTimeout.Seconds())), "-o", strings.Join(settings, " "))
	if err != nil {
		return fmt.Errorf("%w; server log %s ends with:\n%s", err, logFile, tail(logFile, 20))
	}
	return nil
}

// waitReady waits until the server accepts a TCP connection: pg_ctl has
// already waited for it to be ready, so this normally succeeds at once and
// proves that the URL works.
func (c *Cluster) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for {
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err == nil {
			return conn.Close(ctx)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for connections: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Cluster) stop(ctx context.Context) error {
	return c.run(ctx, c.program("pg_ctl"), "stop", "-D", c.dataDir, "-m", "fast", "-w", "-s",
		"-t", strconv.Itoa(int(pgCtlTimeout.Seconds())))
}

// stopQuietly stops a server whose start failed half-way. Its error is
// dropped: the start error that led here is the one to report.
func (c *Cluster) stopQuietly() {
	ctx, cancel := context.WithTimeout(context.Background(), pgCtlTimeout)
	defer cancel()
	if running, err := c.running(ctx); err == nil && running {
		_ = c.stop(ctx)
	}
}

func (c *Cluster) program(name string) string { return filepath.Join(c.binDir, name) }

// command prepares prog, run as the postgres user when the process is root,
// inside the cluster's folder (so that it never starts in a folder the
// postgres user cannot read) and isolated in a process group of its own.
func (c *Cluster) command(ctx context.Context, prog string, args ...string) *exec.Cmd {
	var cmd *exec.Cmd
	switch {
	case c.runAs == nil:
		cmd = exec.CommandContext(ctx, prog, args...)
	case c.runAs.runuser != "":
		cmd = exec.CommandContext(ctx, c.runAs.runuser, append([]string{"-u", "postgres", "--", prog}, args...)...)
	default:
		cmd = exec.CommandContext(ctx, c.runAs.su, "postgres", "-s", "/bin/sh", "-c", shellJoin(prog, args))
	}
	cmd.Dir = c.dir
	isolate(cmd)
	return cmd
}

func (c *Cluster) run(ctx context.Context, prog string, args ...string) error {
	out, err := c.command(ctx, prog, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", filepath.Base(prog), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// maxPortTries is how many ports Start picks before it gives up on a
// server that finds each taken.
const maxPortTries = 5

// pickPort picks the port of a server started without one (tests replace
// it to hand out a taken port).
var pickPort = freePort

// freePort returns a loopback port free now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tail returns the last n lines of the file at path, or why it cannot.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// shellQuote quotes s as one word for /bin/sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func shellJoin(prog string, args []string) string {
	words := []string{shellQuote(prog)}
	for _, a := range args {
		words = append(words, shellQuote(a))
	}
	return strings.Join(words, " ")
}
