package main

import (
	"bytes"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"sigs.k8s.io/yaml"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// composeFile is the part of docker-compose.yml the checks read.
type composeFile struct {
	Services map[string]struct {
		Image       string            `json:"image"`
		Build       any               `json:"build"`
		Command     []string          `json:"command"`
		Ports       []string          `json:"ports"`
		Environment map[string]string `json:"environment"`
		Volumes     []any             `json:"volumes"`
	} `json:"services"`
}

// TestComposeIsSecureByDefault reads docker-compose.yml: every service is
// there, no NATS port is published, no credential is written in it, and
// each AX service mounts its own secrets only.
func TestComposeIsSecureByDefault(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("docker-compose.yml does not parse: %v", err)
	}
	axServices := []string{"dispatcher", "trigger", "executor", "api", "auditor"}
	for _, name := range append([]string{"init", "nats-1", "nats-2", "nats-3", "postgres"}, axServices...) {
		if _, ok := f.Services[name]; !ok {
			t.Errorf("service %s is missing", name)
		}
	}
	credential := regexp.MustCompile(`(?i)(password|secret|token|passwd|nkey_seed)$`)
	for name, svc := range f.Services {
		for _, p := range svc.Ports {
			if strings.HasPrefix(name, "nats") || strings.HasSuffix(p, ":4222") || p == "4222" || strings.HasSuffix(p, ":6222") {
				t.Errorf("service %s publishes port %s: NATS must be reached from this file's network only", name, p)
			}
		}
		for k, v := range svc.Environment {
			if credential.MatchString(k) {
				t.Errorf("service %s sets %s=%q: a credential written in the file is a default anyone knows; use a file (%s_FILE) made by ax secrets", name, k, v, k)
			}
			if strings.Contains(v, "://") {
				for u := range strings.SplitSeq(v, ",") {
					if pu, err := url.Parse(u); err == nil && pu.User != nil {
						if _, has := pu.User.Password(); has {
							t.Errorf("service %s: %s holds a password in %s", name, k, pu.Redacted())
						}
					}
				}
			}
		}
	}
	for _, name := range axServices {
		svc := f.Services[name]
		env := svc.Environment
		if env["NATS_NKEY"] != "/secrets/nats.nk" || env["NATS_INBOX_PREFIX"] != "_INBOX_"+name {
			t.Errorf("service %s connects to NATS with NATS_NKEY=%q NATS_INBOX_PREFIX=%q, want its own user", name, env["NATS_NKEY"], env["NATS_INBOX_PREFIX"])
		}
		mounted, _ := yaml.Marshal(svc.Volumes)
		if !bytes.Contains(mounted, []byte("subpath: "+name+"\n")) || bytes.Count(mounted, []byte("subpath:")) != 1 {
			t.Errorf("service %s mounts %s; want its own folder of the secrets only", name, mounted)
		}
		if name == "executor" && env["DATABASE_URL"] != "" {
			t.Error("the executor is given the database")
		}
		if name != "executor" && env["PGPASSFILE"] != "/secrets/pgpass" {
			t.Errorf("service %s: PGPASSFILE=%q", name, env["PGPASSFILE"])
		}
	}
	if env := f.Services["postgres"].Environment; env["POSTGRES_PASSWORD_FILE"] == "" {
		t.Errorf("postgres takes its password from %v, want POSTGRES_PASSWORD_FILE", env)
	}
}

// TestSecretsMakeAWorkingServer runs ax secrets, loads compose's NATS
// configuration with it, and connects as each service with its seed: each
// gets in with its permissions, and nobody gets in without a key.
func TestSecretsMakeAWorkingServer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	secrets := filepath.Join(dir, "secrets")
	cmd := newSecretsCmd(&cli{})
	cmd.SetArgs([]string{"--dir", secrets})
	cmd.SetOut(&bytes.Buffer{})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	first, _ := os.ReadFile(filepath.Join(secrets, "executor", "nats.nk"))
	// A worker of the gpu pool gets a user of its own, which the second
	// run of ax secrets writes into the authorization.
	add := newUserAddExecutorCmd()
	add.SetArgs([]string{"--dir", secrets, "--pool", "gpu", "--worker", "g1", "--handler", "builtin.echo"})
	add.SetOut(&bytes.Buffer{})
	if err := add.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--dir", secrets, "--pool", "gpu", "--worker", "g1"},
		{"--dir", secrets, "--pool", "gpu", "--handler", "builtin.echo"},
	} {
		add = newUserAddExecutorCmd()
		add.SetArgs(args)
		add.SetOut(&bytes.Buffer{})
		add.SetErr(&bytes.Buffer{})
		if err := add.Execute(); err == nil || !strings.Contains(err.Error(), "must name") {
			t.Errorf("ax user add executor %v: %v, want an error naming what is missing", args, err)
		}
	}
	cmd = newSecretsCmd(&cli{})
	cmd.SetArgs([]string{"--dir", secrets})
	cmd.SetOut(&bytes.Buffer{})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(filepath.Join(secrets, "executor", "nats.nk")); !bytes.Equal(first, again) || len(first) == 0 {
		t.Error("a second run changed the executor's seed")
	}
	for _, p := range []string{"executor/nats.nk", "api/pgpass", "postgres/password", "nats/auth.conf"} {
		if fi, err := os.Stat(filepath.Join(secrets, p)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want mode 0600", p, fi, err)
		}
	}
	if _, err := os.Stat(filepath.Join(secrets, "executor", "pgpass")); err == nil {
		t.Error("the executor got a PostgreSQL password")
	}
	conf, err := os.ReadFile("../../deploy/nats/nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	// Compose mounts the secrets' nats folder beside nats.conf.
	if err := os.Symlink(filepath.Join(secrets, "nats"), filepath.Join(dir, "secrets-nats")); err != nil {
		t.Fatal(err)
	}
	confPath := filepath.Join(dir, "nats.conf")
	conf = bytes.ReplaceAll(conf, []byte(`include "secrets/auth.conf"`), []byte(`include "secrets-nats/auth.conf"`))
	conf = bytes.ReplaceAll(conf, []byte(`include "secrets/cluster.conf"`), []byte(`include "secrets-nats/cluster.conf"`))
	conf = bytes.ReplaceAll(conf, []byte("store_dir: /data"), []byte("store_dir: "+filepath.Join(dir, "js")))
	if err := os.WriteFile(confPath, conf, 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(confPath)
	if err != nil {
		t.Fatalf("nats-server refuses compose's configuration: %v", err)
	}
	if len(opts.Nkeys) != 6 {
		t.Fatalf("the configuration has %d NKey users, want 5 and the gpu worker's", len(opts.Nkeys))
	}
	checkRouteAuthorization(t, opts, filepath.Join(secrets, "nats", "route-password"))
	// The parsed users on a server of the test's own.
	opts.Host, opts.Port, opts.HTTPPort, opts.Cluster = "127.0.0.1", -1, 0, server.ClusterOpts{}
	opts.StoreDir, opts.Routes, opts.NoSigs, opts.NoLog = t.TempDir(), nil, true, true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("the server did not start")
	}
	if nc, err := nats.Connect(ns.ClientURL()); err == nil {
		nc.Close()
		t.Error("a connection without a key was accepted")
	}
	for _, role := range []string{"dispatcher", "trigger", "executor", "api", "auditor"} {
		opt, err := nats.NkeyOptionFromSeed(filepath.Join(secrets, role, "nats.nk"))
		if err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 1)
		nc, err := nats.Connect(ns.ClientURL(), opt, nats.CustomInboxPrefix("_INBOX_"+role),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
		if err != nil {
			t.Fatalf("connect as %s: %v", role, err)
		}
		// Only the dispatcher, the topology's owner, may delete the
		// dispatcher's consumer.
		if role != "dispatcher" {
			if err := nc.Publish("$JS.API.CONSUMER.DELETE.AX_TRIGGERS.dispatcher", nil); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-errs:
				if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
					t.Errorf("%s deleting the dispatcher's consumer: %v, want a permissions violation", role, err)
				}
			case <-time.After(20 * time.Second):
				t.Errorf("%s deleting the dispatcher's consumer: not refused", role)
			}
		} else if err := nc.Publish("$JS.API.INFO", nil); err != nil {
			t.Fatal(err)
		}
		nc.Close()
	}

	// The gpu worker's user reaches its handler's gpu queue, and not the
	// default pool's.
	opt, err := nats.NkeyOptionFromSeed(filepath.Join(secrets, "executor-g1", "nats.nk"))
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 1)
	nc, err := nats.Connect(ns.ClientURL(), opt, nats.CustomInboxPrefix("_INBOX_executor-g1"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	if err != nil {
		t.Fatalf("connect as executor-g1: %v", err)
	}
	defer nc.Close()
	info := func(pool string) string {
		return "$JS.API.CONSUMER.INFO.AX_DISPATCH." + streams.PoolConsumerName(pool, schemas.PriorityNormal, "builtin.echo")
	}
	if _, err := nc.Request(info("gpu"), nil, 20*time.Second); err != nil {
		t.Errorf("executor-g1 asking for its gpu queue: %v, want an answer", err)
	}
	if err := nc.Publish(info(schemas.DefaultPool), nil); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if !strings.Contains(err.Error(), info(schemas.DefaultPool)) {
			t.Errorf("executor-g1 asking for the default pool's queue: %v, want a permissions violation", err)
		}
	case <-time.After(20 * time.Second):
		t.Error("executor-g1 asking for the default pool's queue: not refused")
	}
}

// checkRouteAuthorization checks that compose's NATS nodes take a route
// only from a node that presents the password ax secrets kept in pwFile,
// and present it on each of their routes to nats-1, nats-2 and nats-3
// (issue 24, hole 9: a rogue server joined the cluster as a route).
func checkRouteAuthorization(t *testing.T, opts *server.Options, pwFile string) {
	t.Helper()
	data, err := os.ReadFile(pwFile)
	if err != nil {
		t.Fatalf("the route password: %v", err)
	}
	pw := strings.TrimSpace(string(data))
	if fi, err := os.Stat(pwFile); err != nil || fi.Mode().Perm() != 0o600 || len(pw) < 24 {
		t.Errorf("%s: %v %v, a password of %d characters; want mode 0600 and 24 or more", pwFile, fi, err, len(pw))
	}
	if opts.Cluster.Username != "route" || opts.Cluster.Password != pw {
		t.Errorf("the cluster block takes routes from user %q with password set %v; want user route and ax secrets' password",
			opts.Cluster.Username, opts.Cluster.Password != "")
	}
	var hosts []string
	for _, r := range opts.Routes {
		hosts = append(hosts, r.Host)
		if got, _ := r.User.Password(); r.User.Username() != "route" || got != pw {
			t.Errorf("route %s does not present the route password", r.Redacted())
		}
	}
	if strings.Join(hosts, ",") != "nats-1:6222,nats-2:6222,nats-3:6222" {
		t.Errorf("routes to %v, want nats-1, nats-2 and nats-3 on 6222", hosts)
	}
}
