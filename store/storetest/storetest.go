// Package storetest gives each test a fresh PostgreSQL database with AX's
// schema in place.
//
// The server is the one TEST_DATABASE_URL points at; `make test` starts a
// private one (see internal/tools/withpg). The role in that URL must be
// allowed to create databases. The first database a test binary asks for
// migrates a template database once (ax_tmpl_<unix time>_<pid>_<random>);
// each test's database (ax_test_<unix time>_<random>) is a copy of it, so a
// test costs a CREATE DATABASE, not a migration.
//
// Each test drops its database when it ends. A test binary cannot drop its
// template when it exits, so the first use in each binary drops the
// templates and test databases left behind that are older than an hour: far
// longer than any test binary runs (`make test` times out after 30 minutes).
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ax-scheduler/ax/store"
)

// EnvURL names the environment variable that holds the URL of the
// PostgreSQL server the tests use.
const EnvURL = "TEST_DATABASE_URL"

// DB is one test's database.
type DB struct {
	// Name is the database's name.
	Name string
	// URL connects to the database, for code that opens its own pool.
	URL string
	// Pool is a pool on the database, closed when the test ends.
	Pool *pgxpool.Pool
}

// New creates a fresh, migrated database for t, with a pool on it. When t
// ends, the pool is closed and the database dropped (connections that are
// still open to it are terminated). New fails t when TEST_DATABASE_URL is
// not set or the server cannot be used; it never skips. It is safe to call
// from parallel tests.
func New(t testing.TB) *DB {
	t.Helper()
	name, dbURL := create(t)
	ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
	defer cancel()
	pool, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	// Registered after create's cleanup, so it runs first: the pool is
	// closed before the database is dropped.
	t.Cleanup(pool.Close)
	return &DB{Name: name, URL: dbURL, Pool: pool}
}

// NewDB creates a fresh, migrated database for t, as [New] does, and
// returns its pool. The pool's URL is pool.Config().ConnString().
func NewDB(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return New(t).Pool
}

// NewOneConn creates a fresh, migrated database for t, as [New] does, and
// returns a pool of one connection on it: every statement of the test runs
// on the same session, for tests of what a statement leaves on its session
// or of the statistics one backend flushes. The pool is closed when t ends.
func NewOneConn(t testing.TB) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(URL(t))
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// URL creates a fresh, migrated database for t, as [New] does, and returns
// its URL without opening a pool: for code under test that opens its own.
// The database is dropped when t ends.
func URL(t testing.TB) string {
	t.Helper()
	_, dbURL := create(t)
	return dbURL
}

const (
	// opTimeout bounds each operation on the server: creating the
	// template (connect, migrate) or a test database, or dropping one.
	opTimeout = 2 * time.Minute
	// staleAge is the age past which a leftover database is dropped.
	staleAge = time.Hour
	// cleanupLockKey is the pg_advisory_lock key that makes test binaries
	// running at once take turns at dropping leftover databases.
	cleanupLockKey = 0x61785f7465737473 // "ax_tests"
)

// leftover matches the names this package gives its databases
// (ax_tmpl_<unix time>_<pid>_<hex> and ax_test_<unix time>_<hex>) and
// captures the unix time of their creation.
var leftover = regexp.MustCompile(`^ax_(?:tmpl|test)_([0-9]+)_`)

var (
	templateOnce sync.Once
	templateName string
	templateErr  error
)

// create creates a database from the template and registers its drop.
func create(t testing.TB) (name, dbURL string) {
	t.Helper()
	serverURL, err := serverURL()
	if err != nil {
		t.Fatal(err)
	}
	templateOnce.Do(func() { templateName, templateErr = prepareTemplate(serverURL) })
	if templateErr != nil {
		t.Fatalf("storetest: %v", templateErr)
	}
	name = fmt.Sprintf("ax_test_%d_%s", time.Now().Unix(), randomHex())
	ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
	defer cancel()
	if err := exec(ctx, serverURL, "CREATE DATABASE "+name+" TEMPLATE "+templateName); err != nil {
		t.Fatalf("storetest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		// t.Context() is already cancelled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		if err := exec(ctx, serverURL, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("storetest: drop database %s: %v", name, err)
		}
	})
	dbURL, err = withDatabase(serverURL, name)
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	return name, dbURL
}

// serverURL returns TEST_DATABASE_URL, or an error that says how to set it.
func serverURL() (string, error) {
	u := os.Getenv(EnvURL)
	if u == "" {
		return "", errors.New("TEST_DATABASE_URL is not set: run the tests with `make test`, which starts a private PostgreSQL, " +
			"or point TEST_DATABASE_URL at a PostgreSQL 15+ server where you may create databases")
	}
	return u, nil
}

// prepareTemplate drops leftover databases, then creates and migrates this
// test binary's template.
func prepareTemplate(serverURL string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := dropLeftovers(ctx, serverURL); err != nil {
		return "", err
	}
	name := fmt.Sprintf("ax_tmpl_%d_%d_%s", time.Now().Unix(), os.Getpid(), randomHex())
	if err := exec(ctx, serverURL, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("create template database %s in %s: %w", name, redact(serverURL), err)
	}
	tmplURL, err := withDatabase(serverURL, name)
	if err != nil {
		return "", err
	}
	pool, err := store.Open(ctx, tmplURL)
	if err != nil {
		return "", fmt.Errorf("migrate template database %s: %w", name, err)
	}
	// Every connection to the template must be gone before it is copied;
	// CREATE DATABASE waits a few seconds for closing sessions to exit.
	defer pool.Close()
	if err := store.Migrate(ctx, pool); err != nil {
		return "", fmt.Errorf("migrate template database %s: %w", name, err)
	}
	return name, nil
}

// dropLeftovers drops the databases of this package older than staleAge,
// holding an advisory lock so that test binaries starting together do not
// try to drop the same ones.
func dropLeftovers(ctx context.Context, serverURL string) error {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return fmt.Errorf("connect to %s (%s): %w", redact(serverURL), EnvURL, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(cleanupLockKey)); err != nil {
		return fmt.Errorf("drop leftover databases: lock: %w", err)
	}
	// The lock is held until the deferred Close ends the session.

	rows, err := conn.Query(ctx, `SELECT datname FROM pg_database WHERE datname ~ '^ax_(tmpl|test)_'`)
	if err != nil {
		return fmt.Errorf("drop leftover databases: list: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("drop leftover databases: list: %w", err)
	}
	cutoff := time.Now().Add(-staleAge).Unix()
	for _, name := range names {
		m := leftover.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		created, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil || created > cutoff {
			continue
		}
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop leftover database %s: %w", name, err)
		}
	}
	return nil
}

// exec runs one statement on a connection of its own. CREATE DATABASE
// and DROP DATABASE cannot run inside a transaction, and a connection per
// statement leaves no pool and no goroutine behind for goleak to find.
func exec(ctx context.Context, serverURL, sql string) error {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return fmt.Errorf("connect to %s (%s): %w", redact(serverURL), EnvURL, err)
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// randomHex returns 12 random hex digits, enough to keep the names of
// databases created in the same second apart.
func randomHex() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// withDatabase returns serverURL pointing at database name instead. It
// accepts both URL and key=value connection strings.
func withDatabase(serverURL, name string) (string, error) {
	if strings.HasPrefix(serverURL, "postgres://") || strings.HasPrefix(serverURL, "postgresql://") {
		u, err := url.Parse(serverURL)
		if err != nil {
			return "", fmt.Errorf("parse %s: %w", EnvURL, err)
		}
		u.Path = "/" + name
		u.RawPath = ""
		return u.String(), nil
	}
	// In a key=value string the last setting of a key wins.
	return serverURL + " dbname=" + name, nil
}

// keyValuePassword matches the password in a key=value connection string.
var keyValuePassword = regexp.MustCompile(`password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`)

// redact returns serverURL without its password, for error messages.
func redact(serverURL string) string {
	if u, err := url.Parse(serverURL); err == nil && u.Scheme != "" {
		return u.Redacted()
	}
	return keyValuePassword.ReplaceAllString(serverURL, "password=xxxxx")
}
