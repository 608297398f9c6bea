package deploy_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/internal/natsembed"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
	"github.com/ax-scheduler/ax/streams/natsauth/natsauthtest"
)

// replicaValues are two pools: default with three replicas, gpu autoscaled
// up to two.
func replicaValues(t *testing.T) string {
	t.Helper()
	gpuUser, err := natsauth.WorkerUserTemplate(streams.Default(), natsauth.Scope{Pools: []string{"gpu"}, Handlers: []string{"train.model"}})
	if err != nil {
		t.Fatal(err)
	}
	return `
database: {url: "postgres://ax@db/ax"}
executorPools:
  - pool: default
    replicas: 3
    autoscaling: {enabled: false}
  - pool: gpu
    handlers: [train.model]
    autoscaling: {maxReplicas: 2}
    natsUser: |
` + indent(gpuUser, "      ") + "\n"
}

// chartUsers loads the rendered auth.conf as nats-server does, each service
// password variable replaced by "pw-<role>", and returns its users by name.
func chartUsers(t *testing.T, objects map[string]object) map[string]*server.User {
	t.Helper()
	auth := objects["Secret/t-ax-nats-auth"].str("stringData", "auth.conf")
	auth = regexp.MustCompile(`\$([A-Z]+)_NATS_PASSWORD`).ReplaceAllStringFunc(auth, func(v string) string {
		return fmt.Sprintf("%q", "pw-"+strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(v, "$"), "_NATS_PASSWORD")))
	})
	file := filepath.Join(t.TempDir(), "auth.conf")
	if err := os.WriteFile(file, []byte(auth), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(file)
	if err != nil {
		t.Fatalf("nats-server does not load the chart's auth.conf: %v\n%s", err, auth)
	}
	users := map[string]*server.User{}
	for _, u := range opts.Users {
		users[u.Username] = u
	}
	return users
}

// replica is one executor pod the chart makes.
type replica struct {
	pool, pod string
	handlers  []string
}

var replicas = []replica{
	{"default", "t-ax-executor-default-0", builtinHandlers},
	{"default", "t-ax-executor-default-1", builtinHandlers},
	{"default", "t-ax-executor-default-2", builtinHandlers},
	{"gpu", "t-ax-executor-gpu-0", []string{"train.model"}},
	{"gpu", "t-ax-executor-gpu-1", []string{"train.model"}},
}

// password is the pod's password in its pool's Secret.
func password(t *testing.T, objects map[string]object, r replica) string {
	t.Helper()
	b64 := objects["Secret/t-ax-executor-"+r.pool+"-nats"].str("data", r.pod)
	pw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(pw) < 32 {
		t.Fatalf("the Secret of pool %s holds %q for %s (%v); want a generated password", r.pool, b64, r.pod, err)
	}
	return string(pw)
}

// TestChartGivesEachReplicaItsUser renders two pools and checks that every
// replica (replicas, or autoscaling.maxReplicas) has a NATS user of its own
// with its own password and exactly natsauth's permissions for its worker,
// that no other executor user exists, and that an executor pod's container
// mounts no Secret and holds no credential: its init container copies its
// own password out of the pool's Secret.
func TestChartGivesEachReplicaItsUser(t *testing.T) {
	t.Parallel()
	top := streams.Default()
	objects := render(t, replicaValues(t))
	users := chartUsers(t, objects)

	seen := map[string]bool{}
	for _, r := range replicas {
		name := natsauth.WorkerUserName(r.pod)
		u := users[name]
		if u == nil {
			t.Errorf("no NATS user %s", name)
			continue
		}
		pw := password(t, objects, r)
		if u.Password != pw || seen[pw] {
			t.Errorf("user %s: password %q, want its own (%q) from its pool's Secret", name, u.Password, pw)
		}
		seen[pw] = true
		want := natsauth.Permissions(top, natsauth.Executor, name, natsauth.Scope{Pools: []string{r.pool}, WorkerID: r.pod, Handlers: r.handlers})
		if !reflect.DeepEqual(u.Permissions, want) {
			t.Errorf("user %s: permissions\n%+v\nwant natsauth's\n%+v", name, u.Permissions, want)
		}
	}
	for name := range users {
		if !slices.Contains(natsauth.Roles, natsauth.Role(name)) && !strings.HasPrefix(name, "executor-t-ax-executor-") || name == string(natsauth.Executor) {
			t.Errorf("an unexpected user %s", name)
		}
	}
	if n := len(users); n != len(replicas)+len(natsauth.Roles)-1 {
		t.Errorf("%d users, want the four services' and one per replica (%d)", n, len(replicas))
	}

	for _, pool := range []string{"default", "gpu"} {
		sts := objects["StatefulSet/t-ax-executor-"+pool]
		if sts == nil {
			t.Fatalf("no StatefulSet for pool %s", pool)
		}
		spec := object(sts.get("spec", "template", "spec").(map[string]any))
		if spec.get("automountServiceAccountToken") != false {
			t.Errorf("pool %s: the service account token is mounted", pool)
		}
		secretVolumes := map[string]string{}
		for _, v := range spec.get("volumes").([]any) {
			v := object(v.(map[string]any))
			if v.get("secret") != nil || v.get("projected") != nil {
				secretVolumes[v.str("name")] = v.str("secret", "secretName")
			}
		}
		c := object(spec.get("containers", 0).(map[string]any))
		for _, m := range c.get("volumeMounts").([]any) {
			if name := object(m.(map[string]any)).str("name"); secretVolumes[name] != "" || name == "" {
				t.Errorf("pool %s: the executor container mounts Secret volume %q", pool, name)
			}
		}
		for _, e := range c.get("env").([]any) {
			e := object(e.(map[string]any))
			if e.get("valueFrom", "secretKeyRef") != nil {
				t.Errorf("pool %s: the executor's %s comes from a Secret", pool, e.str("name"))
			}
			for pw := range seen {
				if strings.Contains(e.str("value"), pw) {
					t.Errorf("pool %s: the executor's %s holds a password", pool, e.str("name"))
				}
			}
		}
		init := object(spec.get("initContainers", 0).(map[string]any))
		args := fmt.Sprint(init.get("args"))
		if args != "[pod-secret --dir /secrets/pool --out /run/ax/nats/password]" ||
			secretVolumes[object(init.get("volumeMounts", 0).(map[string]any)).str("name")] != "t-ax-executor-"+pool+"-nats" {
			t.Errorf("pool %s: the init container runs %s with %v; want ax pod-secret on the pool's Secret", pool, args, init.get("volumeMounts"))
		}
	}
}

// TestChartReplicasAreBoundaries loads the rendered users into a real server
// and acts as the default pool's replica 0 against replica 1: pulling and
// acknowledging replica 1's own consumer and writing its heartbeat key are
// refused, and afterwards its message still waits, undelivered, and its key
// is unwritten, while replica 0's own heartbeat is written.
func TestChartReplicasAreBoundaries(t *testing.T) {
	t.Parallel()
	top := streams.Default()
	objects := render(t, replicaValues(t))
	var users []*server.User
	for _, u := range chartUsers(t, objects) {
		users = append(users, u)
	}
	srv := natsauthtest.NewServer(t, natsembed.Options{Users: users})
	djs := srv.Dispatcher("pw-dispatcher")
	ctx := t.Context()
	zero, one := replicas[0], replicas[1]
	victim := top.WorkerConsumer(one.pod)
	cons, err := djs.CreateOrUpdateConsumer(ctx, top.DispatchStream(), victim)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := djs.Publish(ctx, top.DispatchWorker(one.pod), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}

	nc, r := srv.Connect(natsauth.WorkerUserName(zero.pod), password(t, objects, zero))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, top.WorkersBucket())
	if err != nil {
		t.Fatal(err)
	}
	// Its own heartbeat: allowed, so the refusals below are the boundary's.
	if _, err := kv.Put(ctx, zero.pod, []byte(`{}`)); err != nil {
		t.Errorf("replica 0 cannot write its own heartbeat: %v", err)
	}
	next := "$JS.API.CONSUMER.MSG.NEXT." + top.DispatchStream() + "." + victim.Durable
	ack := "$JS.ACK." + top.DispatchStream() + "." + victim.Durable + ".1.1.1.1.0"
	heartbeat := "$KV." + top.WorkersBucket() + "." + one.pod
	publish := func(subject string) func(context.Context) error {
		return func(ctx context.Context) error {
			if err := nc.Publish(subject, []byte(`{}`)); err != nil {
				return err
			}
			<-ctx.Done() // a plain publish gets no answer: wait for the refusal
			return nil
		}
	}
	for subject, action := range map[string]func(context.Context) error{
		next:      natsauthtest.Request(nc, next, `{"batch":1,"no_wait":true}`),
		ack:       publish(ack),
		heartbeat: publish(heartbeat),
	} {
		if !r.Try(t, subject, action) {
			t.Errorf("replica 0 was not refused %s", subject)
		}
	}

	// The effect: replica 1's message waits undelivered, its key unwritten.
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumPending != 1 || info.NumAckPending != 0 || info.Delivered.Consumer != 0 {
		t.Errorf("replica 1's consumer: %d waiting, %d delivered, %d unacknowledged; want its message waiting, undelivered",
			info.NumPending, info.Delivered.Consumer, info.NumAckPending)
	}
	dkv, err := djs.KeyValue(ctx, top.WorkersBucket())
	if err != nil {
		t.Fatal(err)
	}
	if e, err := dkv.Get(ctx, one.pod); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("replica 1's heartbeat key: %v, %v; want none written", e, err)
	}
	if _, err := dkv.Get(ctx, zero.pod); err != nil {
		t.Errorf("replica 0's own heartbeat: %v", err)
	}
}
