package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ax-scheduler/ax/internal/wait/waittest"
)

func TestMain(m *testing.M) { waittest.VerifyTestMain(m) }

// clusterDir returns a fresh folder that the postgres system user can reach
// when the tests run as root (t.TempDir's parents are private to root).
func clusterDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pgcluster-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Error(err)
		}
	})
	return dir
}

func start(t *testing.T, ctx context.Context, dir string) *Cluster {
	t.Helper()
	c, err := Start(ctx, Options{Dir: dir, Fast: true})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func connect(t *testing.T, ctx context.Context, c *Cluster) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestClusterRestartsOnSameData(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := clusterDir(t)

	c := start(t, ctx, dir)
	if want := "postgres://postgres:" + c.password + "@127.0.0.1:"; c.password == "" || !strings.HasPrefix(c.URL("ax"), want) || !strings.HasSuffix(c.URL("ax"), "/ax?sslmode=disable") {
		t.Fatalf("URL(ax) = %q, want %s<port>/ax?sslmode=disable", Redact(c.URL("ax")), Redact(want))
	}
	conn := connect(t, ctx, c)
	var fsync, maxConns, encoding string
	if err := conn.QueryRow(ctx, "SELECT current_setting('fsync'), current_setting('max_connections'), current_setting('server_encoding')").Scan(&fsync, &maxConns, &encoding); err != nil {
		t.Fatal(err)
	}
	if fsync != "off" || maxConns != "300" || encoding != "UTF8" {
		t.Errorf("fsync, max_connections, server_encoding = %s, %s, %s; want off, 300, UTF8", fsync, maxConns, encoding)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('first run')"); err != nil {
		t.Fatal(err)
	}
	if err := conn.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}

	// Restart on the same data, and then start once more while that
	// server is still running, as after a crash of the process that owned
	// it: Start stops the leftover server and takes over.
	c = start(t, ctx, dir)
	leftover := c
	c = start(t, ctx, dir)
	if leftover.Port() != c.Port() {
		if conn, err := pgx.Connect(ctx, leftover.URL("postgres")); err == nil {
			conn.Close(ctx)
			t.Errorf("the leftover server on port %d still accepts connections", leftover.Port())
		}
	}
	var v string
	if err := connect(t, ctx, c).QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != "first run" {
		t.Errorf("kept row = %q, want %q", v, "first run")
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "postmaster.pid")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("postmaster.pid after Stop: %v, want it gone", err)
	}
}

// TestSettings starts a durable cluster (Fast unset) with an extension
// preloaded through Settings, as the benchmarks do.
func TestSettings(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{Dir: clusterDir(t), Settings: []string{"shared_preload_libraries=pg_stat_statements", "log_lock_waits=on"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Stop(ctx); err != nil {
			t.Error(err)
		}
	}()
	conn := connect(t, ctx, c)
	var fsync, preload, lockWaits string
	if err := conn.QueryRow(ctx, "SELECT current_setting('fsync'), current_setting('shared_preload_libraries'), current_setting('log_lock_waits')").Scan(&fsync, &preload, &lockWaits); err != nil {
		t.Fatal(err)
	}
	if fsync != "on" || preload != "pg_stat_statements" || lockWaits != "on" {
		t.Errorf("fsync, shared_preload_libraries, log_lock_waits = %s, %s, %s; want on, pg_stat_statements, on", fsync, preload, lockWaits)
	}
	if _, err := conn.Exec(ctx, "CREATE EXTENSION pg_stat_statements"); err != nil {
		t.Fatal(err)
	}
	var calls int64
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_statements").Scan(&calls); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.LogFile()); err != nil {
		t.Errorf("LogFile: %v", err)
	}
}

func TestStartRejectsBadOptions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if _, err := Start(ctx, Options{}); err == nil || !strings.Contains(err.Error(), "Dir is required") {
		t.Errorf("Start without Dir: %v, want an error saying Dir is required", err)
	}
	long := filepath.Join(os.TempDir(), strings.Repeat("x", 100))
	if _, err := Start(ctx, Options{Dir: long}); err == nil || !strings.Contains(err.Error(), "too long") {
		t.Errorf("Start with a long Dir: %v, want an error saying it is too long", err)
	}
}

func TestFindBinDir(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	install := func(dir string, programs ...string) string {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, p := range programs {
			if err := os.WriteFile(filepath.Join(dir, p), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	lib := filepath.Join(root, "lib")
	v96 := install(filepath.Join(lib, "9.6", "bin"), serverPrograms...)
	v10 := install(filepath.Join(lib, "10", "bin"), serverPrograms...)
	v15 := install(filepath.Join(lib, "15", "bin"), serverPrograms...)
	install(filepath.Join(lib, "16", "bin"), "pg_ctl", "initdb") // no postgres: a client-only install
	local := install(filepath.Join(root, "local", "bin"), serverPrograms...)
	// A PATH folder with a link to pg_ctl only, as Debian's /usr/bin has.
	linkDir := install(filepath.Join(root, "usr", "bin"))
	if err := os.Symlink(filepath.Join(v10, "pg_ctl"), filepath.Join(linkDir, "pg_ctl")); err != nil {
		t.Fatal(err)
	}
	glob := []string{filepath.Join(lib, "*", "bin")}

	tests := []struct {
		name  string
		path  string
		globs []string
		dirs  []string
		want  string
	}{
		{"newest complete version first", "", glob, []string{local}, v15},
		{"PATH before versions, symlink resolved", string(os.PathListSeparator) + linkDir, glob, nil, v10},
		{"complete PATH folder", v96, glob, nil, v96},
		{"fallback folders last", filepath.Join(root, "nothing"), nil, []string{filepath.Join(root, "missing"), local}, local},
		{"nothing installed", "", []string{filepath.Join(root, "none", "*")}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := findBinDir(tt.path, tt.globs, tt.dirs)
			if tt.want == "" {
				if !errors.Is(err, ErrNotInstalled) {
					t.Fatalf("findBinDir = %q, %v; want ErrNotInstalled", got, err)
				}
				if !strings.Contains(err.Error(), "apt-get install postgresql") || !strings.Contains(err.Error(), "DATABASE_URL") {
					t.Errorf("error %q does not say how to fix it", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("findBinDir = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestShellQuote(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"/tmp/a b":  `'/tmp/a b'`,
		"it's":      `'it'\''s'`,
		"":          `''`,
		"$HOME;`x`": "'$HOME;`x`'",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestClusterAsksForThePassword connects as a local user who knows no
// password would: over TCP and over the socket, without the password and
// with a wrong one. Each is refused, and only the owner may read the
// password or use the socket. A cluster made before passwords, which
// trusted local users, asks for the password after its next start.
func TestClusterAsksForThePassword(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := clusterDir(t)
	c := start(t, ctx, dir)
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	refused := func(when string) {
		t.Helper()
		for _, u := range []string{
			fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.Port()),
			fmt.Sprintf("postgres://postgres:wrong@127.0.0.1:%d/postgres?sslmode=disable", c.Port()),
			fmt.Sprintf("postgres://postgres@/postgres?host=%s&port=%d", c.Dir(), c.Port()),
		} {
			if conn, err := pgx.Connect(ctx, u); err == nil {
				conn.Close(ctx)
				t.Errorf("%s: %s connected without the password", when, u)
			} else if !strings.Contains(err.Error(), "password") && !strings.Contains(err.Error(), "SASL") {
				t.Errorf("%s: %s: %v, want a refused password", when, u, err)
			}
		}
		connect(t, ctx, c)
		for path, want := range map[string]os.FileMode{
			c.Dir():                              0o700,
			filepath.Join(c.Dir(), passwordFile): 0o600,
			filepath.Join(c.Dir(), fmt.Sprintf(".s.PGSQL.%d", c.Port())): 0o700,
		} {
			if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
				t.Errorf("%s: mode of %s = %v, %v; want %v", when, path, fi.Mode().Perm(), err, want)
			}
		}
	}
	refused("a new cluster")

	// The cluster of an older AX: trust, and no password file.
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	trust := "local all all trust\nhost all all 127.0.0.1/32 trust\n"
	if err := os.WriteFile(filepath.Join(dir, "data", "pg_hba.conf"), []byte(trust), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, passwordFile)); err != nil {
		t.Fatal(err)
	}
	c = start(t, ctx, dir)
	refused("a cluster that trusted local users")
}

// A port picked free and taken before the server binds it costs a start on
// another port, not the start: the first port handed out is held by a
// listener of the test's.
func TestStartAgainWhenThePickedPortIsTaken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port
	picks := 0
	pickPort = func() (int, error) {
		picks++
		if picks == 1 {
			return takenPort, nil
		}
		return freePort()
	}
	t.Cleanup(func() { pickPort = freePort })
	c, err := Start(ctx, Options{Dir: clusterDir(t), Fast: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	if c.Port() == takenPort || picks != 2 {
		t.Errorf("started on port %d after %d picks, want a second pick other than the taken %d", c.Port(), picks, takenPort)
	}
	connect(t, ctx, c)
}
