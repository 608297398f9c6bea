package natsauth_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
)

// TestWorkerUserTemplate: the template with a worker's id and password put
// in loads, beside the services' users of ServicesServerConfig, as that
// worker's user with exactly the permissions natsauth builds for it; a
// scope without handlers or pools is refused.
func TestWorkerUserTemplate(t *testing.T) {
	t.Parallel()
	top, err := streams.NewTopology("acme")
	if err != nil {
		t.Fatal(err)
	}
	scope := natsauth.Scope{Pools: []string{"gpu"}, Handlers: []string{"train.model", "hello"}}
	tpl, err := natsauth.WorkerUserTemplate(top, scope)
	if err != nil {
		t.Fatal(err)
	}
	user := strings.NewReplacer(natsauth.WorkerIDPlaceholder, "gpu-7", natsauth.PasswordPlaceholder, "s3cret").Replace(tpl)
	conf := strings.TrimSuffix(natsauth.ServicesServerConfig(top), "  ]\n}\n") + user + "  ]\n}\n"
	for _, role := range []string{"DISPATCHER", "TRIGGER", "API", "AUDITOR"} {
		conf = strings.ReplaceAll(conf, "$"+role+"_NATS_PASSWORD", `"pw"`)
	}
	file := filepath.Join(t.TempDir(), "auth.conf")
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(file)
	if err != nil {
		t.Fatalf("%v\n%s", err, conf)
	}
	var names []string
	for _, u := range opts.Users {
		names = append(names, u.Username)
		if u.Username != "executor-gpu-7" {
			continue
		}
		scope.WorkerID = "gpu-7"
		want := natsauth.Permissions(top, natsauth.Executor, "executor-gpu-7", scope)
		if u.Password != "s3cret" || !reflect.DeepEqual(u.Permissions, want) {
			t.Errorf("the worker's user: password %q, permissions %+v; want natsauth's %+v", u.Password, u.Permissions, want)
		}
	}
	if want := []string{"dispatcher", "trigger", "api", "auditor", "executor-gpu-7"}; !reflect.DeepEqual(names, want) {
		t.Errorf("users %v, want %v (no shared executor)", names, want)
	}
	for _, bad := range []natsauth.Scope{{Pools: []string{"gpu"}}, {Handlers: []string{"hello"}}} {
		if _, err := natsauth.WorkerUserTemplate(top, bad); err == nil {
			t.Errorf("WorkerUserTemplate(%+v) made a user", bad)
		}
	}
}
