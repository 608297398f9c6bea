package natsauth_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
)

// TestServerConfigIsTheUsers parses the rendered configuration with
// nats-server and compares it with the users ax dev's server gets.
func TestServerConfigIsTheUsers(t *testing.T) {
	top, err := streams.NewTopology("acme")
	if err != nil {
		t.Fatal(err)
	}
	scope := natsauth.Scope{Pools: []string{"gpu", "default"}, WorkerID: "w-1"}
	passwords := map[natsauth.Role]string{}
	for _, role := range natsauth.Roles {
		passwords[role] = "secret-" + string(role)
		t.Setenv(natsauth.PasswordEnv(role), passwords[role])
	}
	path := filepath.Join(t.TempDir(), "server.conf")
	if err := os.WriteFile(path, []byte(natsauth.ServerConfig(top, scope)), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-server refuses the configuration: %v\n%s", err, natsauth.ServerConfig(top, scope))
	}
	want := natsauth.Users(top, passwords, scope)
	if len(opts.Users) != len(want) {
		t.Fatalf("the configuration has %d users, want %d", len(opts.Users), len(want))
	}
	for i, u := range opts.Users {
		w := want[i]
		if u.Username != w.Username || u.Password != w.Password {
			t.Errorf("user %d = %s/%s, want %s/%s", i, u.Username, u.Password, w.Username, w.Password)
		}
		if (u.Permissions == nil) != (w.Permissions == nil) {
			t.Errorf("user %s: permissions %v, want %v", u.Username, u.Permissions, w.Permissions)
			continue
		}
		if w.Permissions == nil {
			continue
		}
		if !slices.Equal(u.Permissions.Publish.Allow, w.Permissions.Publish.Allow) ||
			!slices.Equal(u.Permissions.Subscribe.Allow, w.Permissions.Subscribe.Allow) {
			t.Errorf("user %s: permissions %+v %+v, want %+v %+v", u.Username,
				u.Permissions.Publish, u.Permissions.Subscribe, w.Permissions.Publish, w.Permissions.Subscribe)
		}
	}
}

// TestDocsGiveTheConfig checks that docs/security.md shows the
// configuration of the default topology as it is rendered.
func TestDocsGiveTheConfig(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	cfg := natsauth.ServerConfig(streams.Default(), natsauth.MatrixScope)
	if !strings.Contains(string(doc), cfg) {
		t.Errorf("docs/security.md does not hold the configuration natsauth renders; replace its block with:\n%s", cfg)
	}
}

func TestExecutorPermissions(t *testing.T) {
	t.Parallel()
	top := streams.Default()
	p := natsauth.Permissions(top, natsauth.Executor, "exec-gpu", natsauth.Scope{Pools: []string{"gpu"}, WorkerID: "w-9", Handlers: []string{"img.resize"}})
	queue := func(pool string, pr schemas.Priority, handler string) string {
		return streams.PoolConsumerName(pool, pr, handler)
	}
	for _, c := range []struct {
		subjects []string
		subject  string
		want     bool
	}{
		{p.Publish.Allow, "ax.report.gpu.w-9.*", true},
		{p.Publish.Allow, "ax.report.>", false},
		{p.Publish.Allow, "ax.report.default.w-9.*", false},
		{p.Publish.Allow, "ax.log.*.w-9", true},
		{p.Publish.Allow, "ax.log.>", false},
		{p.Publish.Allow, "$KV.ax-workers.w-9.gpu.img.resize", true},
		{p.Publish.Allow, "$KV.ax-workers.w-9.default.img.resize", false},
		{p.Publish.Allow, "$KV.ax-workers.w-9.>", false},
		{p.Publish.Allow, "$JS.API.CONSUMER.MSG.NEXT.AX_DISPATCH." + queue("gpu", schemas.PriorityUrgent, "img.resize"), true},
		{p.Publish.Allow, "$JS.API.CONSUMER.CREATE.AX_DISPATCH." + queue("gpu", schemas.PriorityLow, "img.resize") + ".ax.dispatch.gpu.low.img.resize", true},
		{p.Publish.Allow, "$JS.ACK.AX_DISPATCH." + queue("gpu", schemas.PriorityNormal, "img.resize") + ".>", true},
		// Only its handlers' queues.
		{p.Publish.Allow, "$JS.API.CONSUMER.MSG.NEXT.AX_DISPATCH." + queue("gpu", schemas.PriorityNormal, "img.crop"), false},
		{p.Publish.Allow, "$KV.ax-workers.w-9", true},
		{p.Publish.Allow, "$KV.ax-leases.>", true},
		{p.Publish.Allow, "$JS.API.CONSUMER.MSG.NEXT.AX_DISPATCH." + queue("default", schemas.PriorityNormal, "img.resize"), false},
		{p.Publish.Allow, "$JS.API.CONSUMER.MSG.NEXT.AX_DISPATCH.*", false},
		{p.Publish.Allow, "$KV.ax-workers.*", false},
		{p.Publish.Allow, "ax.trigger.>", false},
		{p.Subscribe.Allow, "_INBOX_exec-gpu.>", true},
		{p.Subscribe.Allow, "ax.control.w-9", true},
		{p.Subscribe.Allow, "ax.ready.gpu.>", true},
		{p.Subscribe.Allow, "ax.ready.default.>", false},
		// Its own subject, and no other worker's.
		{p.Publish.Allow, "$JS.API.CONSUMER.CREATE.AX_DISPATCH.worker_w-9.ax.dispatch.worker.w-9", true},
		{p.Publish.Allow, "$JS.API.CONSUMER.MSG.NEXT.AX_DISPATCH.worker_w-9", true},
		{p.Publish.Allow, "$JS.ACK.AX_DISPATCH.worker_w-9.>", true},
		{p.Publish.Allow, "$JS.API.CONSUMER.MSG.NEXT.AX_DISPATCH.worker_w-8", false},
		{p.Publish.Allow, "$JS.API.CONSUMER.CREATE.AX_DISPATCH.worker_w-8.ax.dispatch.worker.w-8", false},
		{p.Subscribe.Allow, "ax.ready.worker.w-9", true},
		{p.Subscribe.Allow, "ax.ready.worker.w-8", false},
	} {
		if got := slices.Contains(c.subjects, c.subject); got != c.want {
			t.Errorf("executor may use %s: %t, want %t", c.subject, got, c.want)
		}
	}
	for _, s := range p.Publish.Allow {
		if strings.Contains(s, ".DELETE.AX_") || strings.Contains(s, "PURGE") || strings.Contains(s, "STREAM.CREATE") ||
			strings.Contains(s, "STREAM.UPDATE") || strings.HasPrefix(s, "$KV.ax-tasks") || s == ">" {
			t.Errorf("the executor may publish to %s", s)
		}
	}
	if natsauth.Permissions(top, natsauth.Dispatcher, "dispatcher", natsauth.Scope{}) != nil {
		t.Error("the dispatcher's permissions are narrowed; it owns the topology")
	}
	// Another prefix, other names.
	acme, _ := streams.NewTopology("acme")
	pa := natsauth.Permissions(acme, natsauth.Trigger, "trigger", natsauth.Scope{})
	if !slices.Contains(pa.Publish.Allow, "acme.trigger.*") || slices.Contains(pa.Publish.Allow, "acme.trigger.>") || !slices.Contains(pa.Publish.Allow, "$JS.API.STREAM.INFO.ACME_TRIGGERS") ||
		slices.Contains(pa.Publish.Allow, "$JS.API.STREAM.UPDATE.ACME_TRIGGERS") || slices.Contains(pa.Publish.Allow, "$JS.API.STREAM.DELETE.ACME_TRIGGERS") {
		t.Errorf("trigger permissions for prefix acme = %v", pa.Publish.Allow)
	}
}

func TestLoadOrCreatePasswords(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "nats-users.json")
	first, err := natsauth.LoadOrCreatePasswords(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != len(natsauth.Roles) {
		t.Errorf("passwords = %v, want one per role", first)
	}
	seen := map[string]bool{}
	for role, pw := range first {
		if len(pw) < 32 || seen[pw] {
			t.Errorf("password of %s = %q: too short or not unique", role, pw)
		}
		seen[pw] = true
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the file's mode is %v, %v; want 0600", fi.Mode(), err)
	}
	again, err := natsauth.LoadOrCreatePasswords(path)
	if err != nil || len(again) != len(first) || again[natsauth.Executor] != first[natsauth.Executor] {
		t.Errorf("the passwords changed on the second start: %v, %v", again, err)
	}
	if err := os.WriteFile(path, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := natsauth.LoadOrCreatePasswords(path); err == nil || !strings.Contains(err.Error(), "delete the file") {
		t.Errorf("a damaged file: %v", err)
	}
}

// TestDocsGiveTheMatrix checks that docs/security.md shows the permission
// matrix natsauth renders from the permissions themselves.
func TestDocsGiveTheMatrix(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	m := natsauth.Matrix(streams.Default())
	if !strings.Contains(string(doc), m) {
		t.Errorf("docs/security.md does not hold the permission matrix natsauth renders; replace its table with:\n%s", m)
	}
}
