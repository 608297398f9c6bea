package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ax-scheduler/ax/api"
	"github.com/ax-scheduler/ax/api/apitest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

// cliEnv is an API over a real store and NATS server for the CLI to talk to.
type cliEnv struct {
	t    *testing.T
	pool *pgxpool.Pool
	js   jetstream.JetStream
	url  string
	// token is the secret of an admin token named after the user running
	// the tests (operatorName), which ax sends.
	token string
}

func newCLIEnv(t *testing.T) *cliEnv {
	t.Helper()
	ns := streamstest.NewServer(t, streams.Config{})
	nc, js := ns.Connect()
	pool := storetest.NewDB(t)
	svc, err := api.New(api.Options{Store: store.New(pool), Conn: nc, RunWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(srv.Close)
	token := apitest.Token(t, store.New(pool), operatorName(), schemas.RoleAdmin)
	return &cliEnv{t: t, pool: pool, js: js, url: srv.URL, token: token}
}

// ax runs the command line args against the API with stdin as standard
// input, and returns the exit code and what it printed.
func (e *cliEnv) ax(stdin string, args ...string) (code int, stdout, stderr string) {
	e.t.Helper()
	var out, errOut bytes.Buffer
	code = run(e.t.Context(), append([]string{"--api", e.url, "--token", e.token}, args...), strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

// mustAx runs args and fails the test unless ax exits 0.
func (e *cliEnv) mustAx(args ...string) string {
	e.t.Helper()
	code, out, errOut := e.ax("", args...)
	if code != 0 {
		e.t.Fatalf("ax %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// refuses runs args and checks that ax exits 1, prints nothing on standard
// output and an error beginning with want on standard error.
func (e *cliEnv) refuses(args []string, want string) {
	e.t.Helper()
	code, out, errOut := e.ax("", args...)
	if code != 1 || out != "" || !strings.HasPrefix(errOut, want) {
		e.t.Errorf("ax %s: exit %d, stdout %q, stderr %q; want exit 1 and %q", strings.Join(args, " "), code, out, errOut, want)
	}
}

// apply applies the task definition def with ax task apply -f -.
func (e *cliEnv) apply(def string) {
	e.t.Helper()
	if code, _, errOut := e.ax(def, "task", "apply", "-f", "-"); code != 0 {
		e.t.Fatal(errOut)
	}
}

// lastMsg returns the data of the newest message on subject in AX_TRIGGERS.
func (e *cliEnv) lastMsg(subject string) []byte {
	e.t.Helper()
	s, err := e.js.Stream(e.t.Context(), "AX_FIRINGS")
	if err != nil {
		e.t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(e.t.Context(), subject)
	if err != nil {
		e.t.Fatal(err)
	}
	return m.Data
}

// lastEvent returns the newest trigger event on subject in AX_FIRINGS.
func (e *cliEnv) lastEvent(subject string) schemas.TriggerEvent {
	e.t.Helper()
	ev, err := taskdef.ParseTriggerEvent(e.lastMsg(subject))
	if err != nil {
		e.t.Fatal(err)
	}
	return ev
}

// insertInstance writes the instance the dispatcher would make for a firing.
func (e *cliEnv) insertInstance(task, eventID string, state schemas.State, errMsg string) int64 {
	e.t.Helper()
	ctx := context.WithoutCancel(e.t.Context())
	var id int64
	err := e.pool.QueryRow(ctx, `
		INSERT INTO instances (task, task_version, event_id, source, state, attempt, max_attempts, priority, pool, handler,
			timeout_ms, error, worker_id, fired_at)
		VALUES ($1, 1, $2, 'manual', $3, 2, 3, 'normal', 'default', 'builtin.echo', 60000, $4, 'w-7', now())
		RETURNING id`, task, eventID, string(state), errMsg).Scan(&id)
	if err != nil {
		e.t.Fatalf("insert instance: %v", err)
	}
	_, err = e.pool.Exec(ctx, `
		INSERT INTO instance_transitions (instance_id, task, from_state, to_state, attempt, operator, reason)
		VALUES ($1, $2, NULL, 'CREATED', 1, 'alice', ''), ($1, $2, 'CREATED', $3, 2, 'worker:w-7', 'handler said so')`,
		id, task, string(state))
	if err != nil {
		e.t.Fatalf("insert transitions: %v", err)
	}
	return id
}

const reportTask = `task_name: nightly-report
owner: data-team
execution:
  handler: builtin.echo
  timeout: 10m
`

func TestRootFlags(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	if code := run(t.Context(), []string{"-o", "xml", "task", "list"}, strings.NewReader(""), &out, &errOut); code != 1 ||
		!strings.Contains(errOut.String(), `ax: --output "xml": use table, json or yaml`) {
		t.Errorf("bad --output: exit %d, stderr %q", code, errOut.String())
	}
	errOut.Reset()
	if code := run(t.Context(), []string{"--api", "http://127.0.0.1:1", "task", "list"}, strings.NewReader(""), &out, &errOut); code != 1 ||
		!strings.Contains(errOut.String(), "is the AX API running at http://127.0.0.1:1?") {
		t.Errorf("API not there: exit %d, stderr %q", code, errOut.String())
	}
	errOut.Reset()
	if code := run(t.Context(), []string{"fire"}, strings.NewReader(""), &out, &errOut); code != 1 ||
		!strings.HasPrefix(errOut.String(), "ax: accepts 1 arg(s)") {
		t.Errorf("missing argument: exit %d, stderr %q", code, errOut.String())
	}
}

// serviceCommands run services (or, ax secrets, ax pod-secret and ax user
// template, write or print a deployment's files; ax drill system, start a sandbox of them) rather than talk to the API: they take no -o, and running them in
// a test would start them.
var serviceCommands = map[string]bool{
	"ax dev": true, "ax dispatcher": true, "ax trigger": true, "ax executor": true, "ax api": true, "ax auditor": true,
	"ax secrets": true, "ax user add executor": true, "ax drill system": true, "ax nats-server": true,
	"ax pod-secret": true, "ax user template services": true, "ax user template executor": true,
}

// TestCommandTree walks the whole command tree: every runnable command has
// an Example in its --help, and every operator command takes -o table,
// json and yaml and refuses any other format.
func TestCommandTree(t *testing.T) {
	t.Parallel()
	var runnable []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Runnable() {
			runnable = append(runnable, c)
			if c.Example == "" {
				t.Errorf("%s has no Example in its --help", c.CommandPath())
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
	if len(runnable) < 30 {
		t.Fatalf("found %d runnable commands; is the tree built?", len(runnable))
	}

	file := filepath.Join(t.TempDir(), "task.yaml")
	if err := os.WriteFile(file, []byte(reportTask), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range runnable {
		path := c.CommandPath()
		if serviceCommands[path] || strings.HasPrefix(path, "ax completion") || path == "ax" {
			continue
		}
		// An argument for each placeholder of Use, so that the command gets
		// as far as reading -o.
		args := strings.Fields(strings.TrimPrefix(path, "ax "))
		for _, word := range strings.Fields(c.Use)[1:] {
			if word == "-f" || word == "FILE" {
				continue
			}
			args = append(args, "1")
		}
		if c.Flag("file") != nil {
			args = append(args, "--file", file)
		}
		// Nothing listens at port 1, so each command stops at the API or
		// at PostgreSQL.
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if _, required := f.Annotations[cobra.BashCompOneRequiredFlag]; required {
				value := "1"
				if f.Name == "role" {
					value = "viewer"
				}
				args = append(args, "--"+f.Name, value)
			}
		})
		if c.Flag("database-url") != nil {
			args = append(args, "--database-url", "postgres://127.0.0.1:1/none?connect_timeout=1")
		}
		args = append([]string{"--api", "http://127.0.0.1:1"}, args...)
		for _, format := range []string{"table", "json", "yaml", "xml"} {
			var out, errOut bytes.Buffer
			code := run(t.Context(), append(args, "-o", format), strings.NewReader(""), &out, &errOut)
			refused := strings.Contains(errOut.String(), `--output "`+format+`"`)
			if format == "xml" && (code != 1 || !refused) {
				t.Errorf("%s -o xml: exit %d, stderr %q; want --output refused", path, code, errOut.String())
			}
			if format != "xml" && refused {
				t.Errorf("%s -o %s: refused: %s", path, format, errOut.String())
			}
		}
	}
}

// TestCLIDocNamesEveryCommand checks that docs/cli.md names every command
// of the tree, as "`ax task delete" or in a group as "`ax task
// enable|disable|pause|resume".
func TestCLIDocNamesEveryCommand(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		path := c.CommandPath()
		if c.Runnable() && !c.Hidden && path != "ax" && !strings.HasPrefix(path, "ax completion") && !strings.HasPrefix(path, "ax help") {
			words := strings.Fields(path)
			pattern := "`" + regexp.QuoteMeta(strings.Join(words[:len(words)-1], " ")) + ` (?:[a-z-]+\\\|)*` +
				regexp.QuoteMeta(words[len(words)-1]) + "[ `\\\\]"
			if !regexp.MustCompile(pattern).Match(doc) {
				t.Errorf("docs/cli.md does not name %s", path)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
}
