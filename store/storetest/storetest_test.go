package storetest

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/ax-scheduler/ax/internal/wait/waittest"
)

func TestMain(m *testing.M) { waittest.VerifyTestMain(m) }

func TestNewDBGivesSeparateMigratedDatabases(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a, b := New(t), New(t)
	if a.Name == b.Name {
		t.Fatalf("both databases are named %s", a.Name)
	}
	for _, db := range []*DB{a, b} {
		var current string
		if err := db.Pool.QueryRow(ctx, "SELECT current_database()").Scan(&current); err != nil {
			t.Fatal(err)
		}
		if current != db.Name {
			t.Errorf("pool of %s is connected to %s", db.Name, current)
		}
		if got := db.Pool.Config().ConnString(); got != db.URL {
			t.Errorf("pool of %s has URL %s, want %s", db.Name, got, db.URL)
		}
		for _, table := range []string{"tasks", "instances", "instance_transitions"} {
			var exists bool
			if err := db.Pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil {
				t.Fatal(err)
			}
			if !exists {
				t.Errorf("database %s has no table %s: not migrated", db.Name, table)
			}
		}
	}

	// A write to one database is not seen in the other.
	if _, err := a.Pool.Exec(ctx, `INSERT INTO tasks (name, version, definition) VALUES ('only-in-a', 1, '{}')`); err != nil {
		t.Fatal(err)
	}
	for db, want := range map[*DB]int{a: 1, b: 0} {
		var n int
		if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM tasks").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Errorf("database %s has %d tasks, want %d", db.Name, n, want)
		}
	}
}

func TestNewDBPool(t *testing.T) {
	t.Parallel()
	pool := NewDB(t)
	var n int
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM instances").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("a fresh database has %d instances, want 0", n)
	}
}

func TestURLIsDroppedAtCleanup(t *testing.T) {
	t.Parallel()
	var name string
	t.Run("owner", func(t *testing.T) {
		conn, err := pgx.Connect(t.Context(), URL(t))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		var migrated bool
		if err := conn.QueryRow(t.Context(), "SELECT current_database(), to_regclass('instance_transitions') IS NOT NULL").Scan(&name, &migrated); err != nil {
			t.Fatal(err)
		}
		if !migrated {
			t.Errorf("database %s is not migrated", name)
		}
		// The connection is still open when the cleanup drops the
		// database: DROP DATABASE … WITH (FORCE) ends it.
	})
	conn, err := pgx.Connect(t.Context(), mustServerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(t.Context(), "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Errorf("database %s still exists after its test ended", name)
	}
}

func TestServerURLSaysHowToFix(t *testing.T) {
	t.Setenv(EnvURL, "")
	_, err := serverURL()
	if err == nil || !strings.Contains(err.Error(), "make test") || !strings.Contains(err.Error(), "PostgreSQL 15+") {
		t.Errorf("serverURL() = %v, want an error that says how to set %s", err, EnvURL)
	}
}

func TestWithDatabase(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "postgres://postgres@127.0.0.1:5432/ax_x?sslmode=disable"},
		{"postgresql://u:p@db/", "postgresql://u:p@db/ax_x"},
		{"host=127.0.0.1 dbname=postgres", "host=127.0.0.1 dbname=postgres dbname=ax_x"},
	}
	for _, tt := range tests {
		got, err := withDatabase(tt.in, "ax_x")
		if err != nil || got != tt.want {
			t.Errorf("withDatabase(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	if got := redact("host=db password='s e' user=u"); strings.Contains(got, "s e") {
		t.Errorf("redact kept the password: %s", got)
	}
	if got := redact("postgres://u:secret@db/x"); strings.Contains(got, "secret") {
		t.Errorf("redact kept the password: %s", got)
	}
}

func mustServerURL(t *testing.T) string {
	t.Helper()
	u, err := serverURL()
	if err != nil {
		t.Fatal(err)
	}
	return u
}
