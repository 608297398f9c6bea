package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/trace"

	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// conn holds the connection settings every service command shares. Flags
// default to the NATS CLI's environment names, so one environment serves
// both ax and nats.
type conn struct {
	natsURL      string
	natsCreds    string
	natsUser     string
	natsPass     string
	natsPassFile string
	natsInbox    string
	natsNKey     string
	natsCA       string
	natsCert     string
	natsKey      string
	databaseURL  string
	prefix       string
	logLevel     string
	logFormat    string
	// requireAuth refuses to connect to NATS without credentials (a
	// service's --require-nats-auth; false for the other commands).
	requireAuth bool
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func (c *conn) natsFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&c.natsURL, "nats-url", envOr("NATS_URL", nats.DefaultURL), "NATS server URL(s), comma-separated (env NATS_URL)")
	f.StringVar(&c.natsCreds, "nats-creds", os.Getenv("NATS_CREDS"), "NATS credentials file (env NATS_CREDS)")
	f.StringVar(&c.natsUser, "nats-user", os.Getenv("NATS_USER"), "NATS user name (env NATS_USER)")
	f.StringVar(&c.natsPass, "nats-password", "", "NATS password (env NATS_PASSWORD); prefer --nats-password-file")
	f.StringVar(&c.natsPassFile, "nats-password-file", os.Getenv("NATS_PASSWORD_FILE"),
		"file holding the NATS password, one line (env NATS_PASSWORD_FILE): the password then sits in no environment or command line")
	f.StringVar(&c.natsInbox, "nats-inbox-prefix", os.Getenv("NATS_INBOX_PREFIX"),
		"prefix of the inboxes replies come to, when the NATS user may not subscribe to _INBOX.> (env NATS_INBOX_PREFIX; see docs/security.md)")
	f.StringVar(&c.natsNKey, "nats-nkey", os.Getenv("NATS_NKEY"), "NATS NKey seed file (env NATS_NKEY)")
	f.StringVar(&c.natsCA, "nats-ca", os.Getenv("NATS_CA"), "CA certificate file that signs the NATS server's TLS certificate (env NATS_CA)")
	f.StringVar(&c.natsCert, "nats-cert", os.Getenv("NATS_CERT"), "client TLS certificate file, for a server that verifies clients (env NATS_CERT)")
	f.StringVar(&c.natsKey, "nats-key", os.Getenv("NATS_KEY"), "client TLS key file (env NATS_KEY)")
	f.StringVar(&c.prefix, "prefix", envOr("AX_PREFIX", streams.DefaultPrefix), "subject prefix of this installation (env AX_PREFIX)")
	c.logFlags(cmd)
}

// requireAuthFlag adds a service's --require-nats-auth, on unless
// AX_REQUIRE_NATS_AUTH says false: a service connected to a server that lets
// anyone in is a service anyone can impersonate, read and purge.
func (c *conn) requireAuthFlag(cmd *cobra.Command) {
	def := true
	if v, err := strconv.ParseBool(os.Getenv("AX_REQUIRE_NATS_AUTH")); err == nil {
		def = v
	}
	cmd.Flags().BoolVar(&c.requireAuth, "require-nats-auth", def,
		"refuse to start without NATS credentials (env AX_REQUIRE_NATS_AUTH); =false only for a test server on loopback")
}

// hasNATSCredentials reports whether a credential is set to connect with.
func (c *conn) hasNATSCredentials() bool {
	return c.natsCreds != "" || c.natsUser != "" || c.natsNKey != "" || c.natsCert != ""
}

func (c *conn) databaseFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&c.databaseURL, "database-url", os.Getenv("DATABASE_URL"),
		"PostgreSQL URL, e.g. postgres://ax:secret@127.0.0.1:5432/ax (env DATABASE_URL)")
}

func (c *conn) logFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&c.logLevel, "log-level", envOr("AX_LOG_LEVEL", "info"), "log level: debug, info, warn, error (env AX_LOG_LEVEL)")
	f.StringVar(&c.logFormat, "log-format", envOr("AX_LOG_FORMAT", "console"), "log format: console or json (env AX_LOG_FORMAT)")
}

func (c *conn) logger() (zerolog.Logger, error) {
	level, err := zerolog.ParseLevel(c.logLevel)
	if err != nil || c.logLevel == "" {
		return zerolog.Logger{}, fmt.Errorf("--log-level %q: use debug, info, warn or error", c.logLevel)
	}
	var log zerolog.Logger
	switch c.logFormat {
	case "json":
		log = zerolog.New(os.Stderr)
	case "console":
		log = zerolog.New(consoleWriter(os.Stderr))
	default:
		return zerolog.Logger{}, fmt.Errorf("--log-format %q: use console or json", c.logFormat)
	}
	return log.Level(level).With().Timestamp().Logger(), nil
}

func (c *conn) topology() (streams.Topology, error) { return streams.NewTopology(c.prefix) }

// connectNATS opens a named connection that keeps reconnecting.
func (c *conn) connectNATS(name string) (*nats.Conn, error) {
	opts := []nats.Option{nats.Name("ax " + name), nats.MaxReconnects(-1)}
	if c.natsCreds != "" {
		opts = append(opts, nats.UserCredentials(c.natsCreds))
	}
	if c.natsPass == "" {
		// Not the flag's default: --help would print it.
		c.natsPass = os.Getenv("NATS_PASSWORD")
	}
	if c.natsPassFile != "" {
		if c.natsPass != "" {
			return nil, fmt.Errorf("both a NATS password (--nats-password or NATS_PASSWORD) and a password file (--nats-password-file %s) are set: give one", c.natsPassFile)
		}
		pw, err := readPasswordFile(c.natsPassFile)
		if err != nil {
			return nil, err
		}
		c.natsPass = pw
	}
	if c.natsUser != "" {
		opts = append(opts, nats.UserInfo(c.natsUser, c.natsPass))
	}
	if c.natsInbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(c.natsInbox))
	}
	if c.natsNKey != "" {
		opt, err := nats.NkeyOptionFromSeed(c.natsNKey)
		if err != nil {
			return nil, fmt.Errorf("--nats-nkey %s: %w", c.natsNKey, err)
		}
		opts = append(opts, opt)
	}
	if c.natsCA != "" {
		opts = append(opts, nats.RootCAs(c.natsCA))
	}
	if c.natsCert != "" || c.natsKey != "" {
		opts = append(opts, nats.ClientCert(c.natsCert, c.natsKey))
	}
	if log, err := c.logger(); err == nil {
		// Without a handler, a refused publish or subscription (a missing
		// permission) would go unseen.
		opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			ev := log.Warn().Err(err).Str("connection", name)
			if sub != nil {
				ev = ev.Str("subject", sub.Subject)
			}
			ev.Msg("nats error")
		}))
	}
	nc, err := nats.Connect(c.natsURL, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w (set --nats-url or NATS_URL)", c.natsURL, err)
	}
	return nc, nil
}

// readPasswordFile reads the password in the file at path: its first line,
// without the line end. An empty password is an error, not a login without
// one.
func readPasswordFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--nats-password-file: %w", err)
	}
	pw, _, _ := strings.Cut(string(data), "\n")
	pw = strings.TrimSuffix(pw, "\r")
	if pw == "" {
		return "", fmt.Errorf("--nats-password-file %s: the file holds no password (its first line is empty)", path)
	}
	return pw, nil
}

// openStore connects to PostgreSQL and applies pending migrations.
func (c *conn) openStore(ctx context.Context) (*pgxpool.Pool, *store.Store, error) {
	if strings.TrimSpace(c.databaseURL) == "" {
		return nil, nil, fmt.Errorf("no database: set --database-url or DATABASE_URL (e.g. postgres://ax:secret@127.0.0.1:5432/ax)")
	}
	pool, err := store.Open(ctx, c.databaseURL)
	if err != nil {
		return nil, nil, err
	}
	if err := store.Migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, store.New(pool), nil
}

// service is what a service command has opened for its service.
type service struct {
	log   zerolog.Logger
	top   streams.Topology
	nc    *nats.Conn
	pool  *pgxpool.Pool // nil without a store
	store *store.Store  // nil without a store
	// tracer makes the service's spans: nil, none, unless the OTEL_*
	// variables ask for traces (startTracing).
	tracer trace.TracerProvider
}

// open reads the logging and topology settings, connects to NATS as name and,
// withStore, to PostgreSQL (applying pending migrations). closeAll undoes it.
func (c *conn) open(ctx context.Context, name string, withStore bool) (svc *service, closeAll func(), err error) {
	svc = &service{}
	if svc.log, err = c.logger(); err != nil {
		return nil, nil, err
	}
	if svc.top, err = c.topology(); err != nil {
		return nil, nil, err
	}
	svc.log.Debug().Str("gc", gcSetting.String()).Msg("garbage collector")
	var stopTracing func()
	svc.tracer, stopTracing, err = startTracing(ctx, "ax-"+name, svc.log)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			stopTracing()
		}
	}()
	if c.requireAuth && !c.hasNATSCredentials() {
		return nil, nil, fmt.Errorf("%s: no NATS credentials: set NATS_CREDS (--nats-creds), NATS_NKEY (--nats-nkey), "+
			"NATS_USER with NATS_PASSWORD or NATS_PASSWORD_FILE (--nats-user, --nats-password-file), or a client certificate "+
			"(NATS_CERT, NATS_KEY); a server that lets anyone in lets anyone publish firings, read every payload and delete "+
			"the streams (docs/security.md). Only against a test server: --require-nats-auth=false", name)
	}
	if withStore {
		if svc.pool, svc.store, err = c.openStore(ctx); err != nil {
			return nil, nil, err
		}
	}
	if svc.nc, err = c.connectNATS(name); err != nil {
		if svc.pool != nil {
			svc.pool.Close()
		}
		return nil, nil, err
	}
	if !c.hasNATSCredentials() {
		// A server that lets anyone in lets anyone delete the streams.
		svc.log.Warn().Str("nats_url", c.natsURL).
			Msg("connected to NATS without credentials: the server lets anyone in, and anyone may then publish firings, read every payload and delete the streams; give each service its user (docs/security.md)")
	}
	return svc, func() {
		svc.nc.Close()
		if svc.pool != nil {
			svc.pool.Close()
		}
		stopTracing()
	}, nil
}
