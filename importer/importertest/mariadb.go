// Package importertest starts what the importer's tests read from: a
// private MariaDB server, as XXL-JOB's admin database.
package importertest

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/ax-scheduler/ax/internal/wait"
)

// MariaDB is a private MariaDB server a test started: its address and
// a connection to its root account (grant tables off: the server listens
// on loopback only and lives as long as the test).
type MariaDB struct {
	// Addr is the server's host:port on 127.0.0.1.
	Addr string
	// Root is a connection as root that runs several statements at once.
	Root *sql.DB
}

// StartMariaDB starts a MariaDB server from Debian's mariadb-server (make
// test installs it) on a loopback port, with its data in a temporary
// folder, as the user mysql when the test runs as root; the test's
// cleanup stops it by its PID and removes the folder.
func StartMariaDB(t testing.TB) *MariaDB {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: the MariaDB tests need Debian's mariadb-server (make test installs it)")
	}
	bin, err := exec.LookPath("mariadbd")
	if err != nil {
		if _, err2 := os.Stat("/usr/sbin/mariadbd"); err2 != nil {
			t.Fatalf("this test needs MariaDB's server: run make test (which installs Debian's mariadb-server as root) or apt-get install mariadb-server")
		}
		bin = "/usr/sbin/mariadbd"
	}
	dir, err := os.MkdirTemp("", "ax-mariadb-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var asUser []string
	if os.Geteuid() == 0 {
		// mariadbd refuses to run as root without --user.
		u, err := user.Lookup("mysql")
		if err != nil {
			t.Fatalf("running as root, the test starts MariaDB as the user mysql, which Debian's mariadb-server creates: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		asUser = []string{"--user=mysql"}
	}
	data := filepath.Join(dir, "data")
	install := exec.Command("mariadb-install-db", append([]string{"--no-defaults", "--datadir=" + data,
		"--auth-root-authentication-method=normal", "--skip-test-db"}, asUser...)...)
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("mariadb-install-db: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, port, _ := net.SplitHostPort(addr)
	srv := exec.Command(bin, append([]string{"--no-defaults", "--datadir=" + data, "--bind-address=127.0.0.1", "--port=" + port,
		"--socket=" + filepath.Join(dir, "mysqld.sock"), "--pid-file=" + filepath.Join(dir, "mysqld.pid"),
		"--log-error=" + filepath.Join(dir, "error.log"), "--skip-grant-tables", "--skip-log-bin",
		"--innodb-buffer-pool-size=16M", "--default-time-zone=+00:00"}, asUser...)...)
	if err := srv.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- srv.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(srv.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(srv.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	})
	c := mysql.NewConfig()
	c.User, c.Net, c.Addr, c.MultiStatements, c.ParseTime = "root", "tcp", addr, true, true
	conn, err := mysql.NewConnector(c)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := wait.Until(ctx, func() (bool, error) {
		select {
		case err := <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			return false, fmt.Errorf("mariadbd exited: %v\n%s", err, log)
		default:
		}
		return db.PingContext(ctx) == nil, nil
	}); err != nil {
		t.Fatalf("MariaDB did not come up: %v", err)
	}
	return &MariaDB{Addr: addr, Root: db}
}

// Exec runs the SQL script in file.
func (m *MariaDB) Exec(t testing.TB, file string) {
	t.Helper()
	script, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Root.ExecContext(t.Context(), string(script)); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}
