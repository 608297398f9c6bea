package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/api/apitest"
	"github.com/ax-scheduler/ax/internal/natsembed"
	"github.com/ax-scheduler/ax/internal/wait"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

// axRun runs ax with args and returns the exit code and what it printed.
func axRun(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(t.Context(), args, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestTokenCommands(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	st := store.New(db.Pool)

	code, out, errOut := axRun(t, "token", "create", "--role", "admin", "--name", "alice", "--database-url", db.URL)
	secret := strings.TrimSpace(out)
	if code != 0 || !store.ValidTokenSecret(secret) || !strings.Contains(errOut, `token 1 "alice" (admin) made`) {
		t.Fatalf("token create: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	tok, err := st.TokenBySecret(t.Context(), secret)
	if err != nil || tok.Name != "alice" || tok.Role != schemas.RoleAdmin {
		t.Errorf("the printed secret is token %+v, %v", tok, err)
	}

	code, out, _ = axRun(t, "token", "create", "--role", "viewer", "--name", "dash", "--database-url", db.URL, "-o", "json")
	var made struct {
		Token  schemas.Token `json:"token"`
		Secret string        `json:"secret"`
	}
	if err := json.Unmarshal([]byte(out), &made); code != 0 || err != nil || made.Token.Role != schemas.RoleViewer || !store.ValidTokenSecret(made.Secret) {
		t.Errorf("token create -o json: exit %d, %q, %v", code, out, err)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"token", "create", "--name", "x", "--database-url", db.URL}, `required flag(s) "role" not set`},
		{[]string{"token", "create", "--role", "root", "--name", "x", "--database-url", db.URL}, "--role: role \"root\": use viewer, operator or admin"},
		{[]string{"token", "create", "--role", "admin", "--name", "a b", "--database-url", db.URL}, "--name: token name \"a b\""},
		{[]string{"token", "create", "--role", "admin", "--name", "alice", "--database-url", db.URL}, "a live token already has this name"},
		// Without a database, through the API: none runs at this address.
		{[]string{"--api", "http://127.0.0.1:1", "token", "create", "--role", "admin", "--name", "bob", "--database-url", ""}, "is the AX API running at http://127.0.0.1:1?"},
		{[]string{"token", "revoke", "nobody", "--database-url", db.URL}, "no live token has this id or name"},
	} {
		if code, _, errOut := axRun(t, c.args...); code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("ax %s: exit %d, stderr %q; want %q", strings.Join(c.args, " "), code, errOut, c.want)
		}
	}

	code, out, errOut = axRun(t, "token", "revoke", "dash", "--database-url", db.URL)
	if code != 0 || !strings.Contains(out, `revoked token 2 "dash" (viewer)`) {
		t.Errorf("token revoke: exit %d, %q %q", code, out, errOut)
	}
	code, out, _ = axRun(t, "token", "list", "--database-url", db.URL)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") ||
		!strings.Contains(lines[1], "alice") || !strings.HasSuffix(lines[1], "-") || strings.HasSuffix(lines[2], "-") {
		t.Errorf("token list: exit %d\n%s", code, out)
	}
	code, out, _ = axRun(t, "token", "list", "--database-url", db.URL, "-o", "json")
	var toks []schemas.Token
	if err := json.Unmarshal([]byte(out), &toks); code != 0 || err != nil || len(toks) != 2 || toks[1].RevokedAt == nil {
		t.Errorf("token list -o json: exit %d, %q, %v", code, out, err)
	}
	// The secret is never shown again.
	if strings.Contains(out, secret) {
		t.Error("token list shows a secret")
	}
}

// TestTokenCommandsThroughTheAPI makes, lists and revokes tokens without a
// database URL, as under ax dev: through the API, with an admin token.
func TestTokenCommandsThroughTheAPI(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	code, out, errOut := e.ax("", "token", "create", "--role", "operator", "--name", "ci", "--database-url", "")
	secret := strings.TrimSpace(out)
	if code != 0 || !store.ValidTokenSecret(secret) || !strings.Contains(errOut, `"ci" (operator) made`) {
		t.Fatalf("token create: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	tok, err := store.New(e.pool).TokenBySecret(t.Context(), secret)
	if err != nil || tok.Name != "ci" || tok.Role != schemas.RoleOperator {
		t.Errorf("the printed secret is token %+v, %v", tok, err)
	}
	out = e.mustAx("token", "list", "--database-url", "")
	if !strings.Contains(out, "ci") || !strings.Contains(out, operatorName()) {
		t.Errorf("token list:\n%s", out)
	}
	out = e.mustAx("token", "revoke", "ci", "--database-url", "")
	if !strings.Contains(out, fmt.Sprintf(`revoked token %d "ci" (operator)`, tok.ID)) {
		t.Errorf("token revoke: %q", out)
	}
	if code, _, errOut := e.ax("", "token", "revoke", "ci", "--database-url", ""); code != 1 || !strings.Contains(errOut, "no live token has this id or name") {
		t.Errorf("second revoke: exit %d, %q", code, errOut)
	}
	// An operator token may not make tokens.
	var stdout, stderr bytes.Buffer
	code = run(t.Context(), []string{"--api", e.url, "--token", apitest.Token(t, store.New(e.pool), "op", schemas.RoleOperator),
		"token", "create", "--role", "admin", "--name", "mallory", "--database-url", ""}, strings.NewReader(""), &stdout, &stderr)
	if code == 0 || !strings.Contains(stderr.String(), "admin") {
		t.Errorf("operator's token create: exit %d, %q", code, stderr.String())
	}
}

// TestAPIRefusesToStartWithoutAnAdminToken runs ax api against a database
// without tokens.
func TestAPIRefusesToStartWithoutAnAdminToken(t *testing.T) {
	t.Parallel()
	ns := streamstest.NewServer(t, streams.Config{})
	dbURL := storetest.URL(t)
	code, _, errOut := axRun(t, "api", "--require-nats-auth=false", "--nats-url", ns.URL, "--database-url", dbURL, "--http", "127.0.0.1:0", "--log-level", "error")
	if code != 1 || !strings.Contains(errOut, "no live admin token exists") ||
		!strings.Contains(errOut, "DATABASE_URL=… ax token create --role admin --name <you>") {
		t.Errorf("ax api without tokens: exit %d, stderr %q", code, errOut)
	}
}

func TestWorkerAndStreamCommands(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	if out := e.mustAx("worker", "list"); !strings.Contains(out, "no live workers") {
		t.Errorf("worker list with none: %q", out)
	}
	kv, err := e.js.KeyValue(t.Context(), streams.Default().WorkersBucket())
	if err != nil {
		t.Fatal(err)
	}
	w := schemas.Worker{ID: "w-1", Hostname: "box", Version: "1.2.0", Pools: []string{"default", "gpu"}, Handlers: []string{"builtin.echo"},
		Slots: 4, Busy: 1, StartedAt: time.Now(), HeartbeatAt: time.Now()}
	data, _ := json.Marshal(w)
	if _, err := kv.Put(t.Context(), w.ID, data); err != nil {
		t.Fatal(err)
	}
	out := e.mustAx("worker", "list")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 ||
		!strings.Contains(lines[1], "w-1") || !strings.Contains(lines[1], "default,gpu") || !strings.Contains(lines[1], "1/4") {
		t.Errorf("worker list:\n%s", out)
	}
	var workers []schemas.Worker
	if err := json.Unmarshal([]byte(e.mustAx("worker", "list", "-o", "json")), &workers); err != nil || len(workers) != 1 || workers[0].ID != "w-1" {
		t.Errorf("worker list -o json = %+v, %v", workers, err)
	}

	out = e.mustAx("stream", "list")
	if !strings.Contains(out, "AX_TRIGGERS") || !strings.Contains(out, "KV_ax-workers") || !strings.HasPrefix(out, "STREAM") {
		t.Errorf("stream list:\n%s", out)
	}
	if !strings.Contains(e.mustAx("stream", "list", "-o", "json"), `"name": "AX_DISPATCH"`) {
		t.Error("stream list -o json does not show AX_DISPATCH")
	}
}

func TestTokenCommandsHaveExamples(t *testing.T) {
	t.Parallel()
	g := &cli{}
	var check func(c *cobra.Command)
	check = func(c *cobra.Command) {
		if c.Example == "" {
			t.Errorf("%s has no Example in its --help", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			check(sub)
		}
	}
	for _, c := range []*cobra.Command{newTokenCmd(g), newWorkerCmd(g), newStreamCmd(g)} {
		check(c)
	}
	if got := byteSize(1536); got != "1.5KiB" {
		t.Errorf("byteSize(1536) = %q", got)
	}
}

// TestExecutorWithItsNATSUser runs ax executor as the executor's NATS user
// of a server that has the users of every role.
func TestExecutorWithItsNATSUser(t *testing.T) {
	t.Parallel()
	top := streams.Default()
	passwords := map[natsauth.Role]string{natsauth.Dispatcher: "d-pw", natsauth.Executor: "e-pw"}
	ns, err := natsembed.Start(natsembed.Options{StoreDir: t.TempDir(), Users: natsauth.Users(top, passwords, natsauth.Scope{WorkerID: "w-auth", Handlers: builtinHandlers()})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	admin, err := nats.Connect(ns.ClientURL(), nats.UserInfo("dispatcher", "d-pw"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	js, _ := jetstream.New(admin)
	if err := top.Ensure(t.Context(), js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), top.WorkersBucket())
	if err != nil {
		t.Fatal(err)
	}
	pwFile := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pwFile, []byte("e-pw\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	// The password as a flag, and read from a file (the Helm chart's way).
	for _, password := range [][]string{{"--nats-password", "e-pw"}, {"--nats-password-file", pwFile}} {
		var before uint64
		if e, err := kv.Get(t.Context(), "w-auth"); err == nil {
			before = e.Revision()
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan int, 1)
		var errOut bytes.Buffer
		go func() {
			done <- run(ctx, append([]string{"executor", "--nats-url", ns.ClientURL(), "--nats-user", "executor",
				"--nats-inbox-prefix", natsauth.InboxPrefix("executor"), "--worker-id", "w-auth", "--log-level", "warn"}, password...),
				strings.NewReader(""), io.Discard, &errOut)
		}()
		// Registered: a heartbeat newer than the last run's.
		waitCtx, stop := context.WithTimeout(t.Context(), 20*time.Second)
		registered := wait.Until(waitCtx, func() (bool, error) {
			e, err := kv.Get(waitCtx, "w-auth")
			return err == nil && e.Revision() > before, nil
		})
		stop()
		cancel()
		code := <-done
		if registered != nil {
			t.Fatalf("ax executor %s never registered (%v): exit %d, stderr %s", password[0], registered, code, errOut.String())
		}
		if code != 0 || strings.Contains(errOut.String(), "ermissions") {
			t.Errorf("ax executor %s: exit %d, stderr %s", password[0], code, errOut.String())
		}
	}
}

// TestReadPasswordFile: the first line of the file, without its line end;
// an empty or missing file is an error naming the file.
func TestReadPasswordFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tt := range []struct{ content, want, err string }{
		{content: "s3cret", want: "s3cret"},
		{content: "s3cret\n", want: "s3cret"},
		{content: "s3cret\r\n", want: "s3cret"},
		{content: "s3 cret\nsecond line\n", want: "s3 cret"},
		{content: "", err: "holds no password"},
		{content: "\ns3cret", err: "holds no password"},
	} {
		path := filepath.Join(dir, fmt.Sprintf("pw-%q", tt.content))
		if err := os.WriteFile(path, []byte(tt.content), 0o400); err != nil {
			t.Fatal(err)
		}
		got, err := readPasswordFile(path)
		if got != tt.want || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("readPasswordFile(%q) = %q, %v; want %q, error %q", tt.content, got, err, tt.want, tt.err)
		}
	}
	if _, err := readPasswordFile(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("a missing file: %v", err)
	}
	// A password and a file: refused before connecting, not one silently preferred.
	c := conn{natsURL: "nats://127.0.0.1:1", natsUser: "u", natsPass: "a", natsPassFile: filepath.Join(dir, "missing"), logLevel: "info", logFormat: "json"}
	if _, err := c.connectNATS("test"); err == nil || !strings.Contains(err.Error(), "give one") {
		t.Errorf("connect with a password and a password file: %v", err)
	}
}

func TestDevAdminToken(t *testing.T) {
	t.Parallel()
	st := store.New(storetest.NewDB(t))
	dir := t.TempDir()
	ctx := t.Context()
	first, made, err := devAdminToken(ctx, st, dir)
	if err != nil || !made {
		t.Fatalf("first start: %q, made %t, %v", first, made, err)
	}
	path := dir + "/admin.token"
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin.token: %v, %v; want mode 0600", fi, err)
	}
	tok, err := st.TokenBySecret(ctx, first)
	if err != nil || tok.Name != "dev-admin" || tok.Role != schemas.RoleAdmin {
		t.Errorf("the token in the file = %+v, %v", tok, err)
	}
	again, made, err := devAdminToken(ctx, st, dir)
	if err != nil || made || again != first {
		t.Errorf("second start: made %t, same %t, %v", made, again == first, err)
	}
	// Its token revoked: a new one.
	if _, err := st.RevokeToken(ctx, "dev-admin", "test"); err != nil {
		t.Fatal(err)
	}
	third, made, err := devAdminToken(ctx, st, dir)
	if err != nil || !made || third == first {
		t.Errorf("after the revocation: made %t, %v", made, err)
	}
	// The file lost: the live dev-admin token, whose secret is gone with
	// it, is replaced.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	fourth, made, err := devAdminToken(ctx, st, dir)
	if err != nil || !made || fourth == third {
		t.Errorf("after the file was lost: made %t, %v", made, err)
	}
	if _, err := st.TokenBySecret(ctx, third); err == nil {
		t.Error("the lost token is still live")
	}
	if ok, err := st.LiveTokenExists(ctx, schemas.RoleAdmin); err != nil || !ok {
		t.Errorf("no live admin token: %v", err)
	}
}
