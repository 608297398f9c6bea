package deploy_test

import (
	"bytes"
	"encoding/base64"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"sigs.k8s.io/yaml"

	"github.com/ax-scheduler/ax/auditor/monitor"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
)

// helmModule is the helm the tests run, built from the Go module proxy.
const helmModule = "helm.sh/helm/v3/cmd/helm@v3.22.0"

const chart = "../../deploy/helm/ax"

var update = flag.Bool("update", false, "rewrite deploy/helm/ax/files/nats-*.conf from streams/natsauth")

var (
	helmOnce sync.Once
	helmBin  string
	helmErr  error
)

// helm runs the helm binary with args and returns its standard output.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	if testing.Short() {
		t.Skip("the chart's tests build and run helm: skipped with -short; make test runs them")
	}
	helmOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ax-helm-")
		if err != nil {
			helmErr = err
			return
		}
		cmd := exec.Command("go", "install", helmModule)
		cmd.Env = append(os.Environ(), "GOBIN="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			helmErr = fmt.Errorf("go install %s: %w\n%s", helmModule, err, out)
			return
		}
		helmBin = filepath.Join(dir, "helm")
	})
	if helmErr != nil {
		t.Fatal(helmErr)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(helmBin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// A helm of its own: no repositories, caches or plugins of the machine.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// defaultAuthorization is the chart's files/nats-authorization.conf: the
// services' users of the default topology, to which the chart adds a user
// per executor replica.
func defaultAuthorization() string { return natsauth.ServicesServerConfig(streams.Default()) }

// defaultWorkerUser is the chart's files/nats-executor-user.conf: the
// worker user of pool "default" and the built-in handlers
// (executorDefaults.handlers), with placeholders for its worker id and
// password.
func defaultWorkerUser(t *testing.T) string {
	t.Helper()
	user, err := natsauth.WorkerUserTemplate(streams.Default(), natsauth.Scope{Pools: []string{schemas.DefaultPool}, Handlers: builtinHandlers})
	if err != nil {
		t.Fatal(err)
	}
	return user
}

// builtinHandlers are values.yaml's executorDefaults.handlers.
var builtinHandlers = []string{executor.BuiltinEcho, executor.BuiltinSleep, executor.BuiltinFail}

// TestChartAuthorizationIsNatsauths checks that the chart's NATS users are
// what streams/natsauth renders (go test -update rewrites them).
func TestChartAuthorizationIsNatsauths(t *testing.T) {
	t.Parallel()
	for file, want := range map[string]string{"nats-authorization.conf": defaultAuthorization(), "nats-executor-user.conf": defaultWorkerUser(t)} {
		path := filepath.Join(chart, "files", file)
		if *update {
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s is not what streams/natsauth renders; run: go test ./internal/deploy -run TestChartAuthorizationIsNatsauths -update", path)
		}
	}
}

// TestHelmLint runs helm lint on the chart.
func TestHelmLint(t *testing.T) {
	t.Parallel()
	if out, err := helm(t, "lint", "--strict", chart, "--set", "database.url=postgres://ax@db/ax"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// object is one rendered Kubernetes object, as a generic map.
type object map[string]any

func (o object) get(path ...any) any {
	var v any = map[string]any(o)
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func (o object) str(path ...any) string { s, _ := o.get(path...).(string); return s }

// render runs helm template with the values file values and returns the
// objects by kind and name.
func render(t *testing.T, values string) map[string]object {
	t.Helper()
	file := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(file, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := helm(t, "template", "t", chart, "--namespace", "ax", "-f", file)
	if err != nil {
		t.Fatal(err)
	}
	objects := map[string]object{}
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(out, -1) {
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("helm template printed YAML that does not parse: %v\n%s", err, doc)
		}
		if o == nil {
			continue
		}
		key := o.str("kind") + "/" + o.str("metadata", "name")
		if _, dup := objects[key]; dup {
			t.Errorf("two objects %s", key)
		}
		objects[key] = o
	}
	return objects
}

// TestChartRendersTheTopology renders the chart with two executor pools
// and checks every Deployment, each pool's ScaledObject (one Prometheus
// trigger on monitor.ScalingQuery), and the Secrets.
func TestChartRendersTheTopology(t *testing.T) {
	t.Parallel()
	top := streams.Default()
	gpuUser, err := natsauth.WorkerUserTemplate(top, natsauth.Scope{Pools: []string{"gpu+large"}, Handlers: []string{"train.model"}})
	if err != nil {
		t.Fatal(err)
	}
	objects := render(t, `
database: {url: "postgres://ax@db/ax"}
prometheus: {serverAddress: "http://prom.monitoring.svc.cluster.local:9090"}
executorPools:
  - pool: default
    replicas: 2
  - pool: gpu+large
    name: gpu
    slots: 4
    handlers: [train.model]
    natsUser: |
`+indent(gpuUser, "      ")+`
    shutdownTimeoutSeconds: 600
    autoscaling: {scaleToZero: true, maxReplicas: 4, threshold: 2, activationThreshold: 1}
`)

	// The services' Deployments, and the executors' StatefulSets.
	deployments := map[string]object{}
	for key, o := range objects {
		if name, ok := strings.CutPrefix(key, "Deployment/"); ok && !strings.Contains(name, "executor") {
			deployments[name] = o
		}
		if name, ok := strings.CutPrefix(key, "StatefulSet/"); ok && strings.Contains(name, "executor") {
			deployments[name] = o
		}
	}
	for _, name := range []string{"t-ax-dispatcher", "t-ax-trigger", "t-ax-auditor", "t-ax-api", "t-ax-executor-default", "t-ax-executor-gpu"} {
		d, ok := deployments[name]
		if !ok {
			t.Errorf("no Deployment %s; there are %v", name, keys(deployments))
			continue
		}
		c := object(d.get("spec", "template", "spec", "containers", 0).(map[string]any))
		for _, probe := range []string{"livenessProbe", "readinessProbe"} {
			if c.get(probe, "httpGet", "path") == nil {
				t.Errorf("%s: no %s", name, probe)
			}
		}
		if c.get("resources", "requests", "cpu") == nil || c.get("resources", "requests", "memory") == nil {
			t.Errorf("%s: no resource requests", name)
		}
		env := map[string]object{}
		for _, e := range c.get("env").([]any) {
			env[object(e.(map[string]any)).str("name")] = object(e.(map[string]any))
		}
		executor := strings.Contains(name, "executor")
		if executor {
			if _, ok := env["NATS_PASSWORD"]; ok || env["NATS_PASSWORD_FILE"].str("value") != "/run/ax/nats/password" ||
				env["NATS_USER"].str("value") != "executor-$(POD_NAME)" || env["AX_WORKER_ID"].str("value") != "$(POD_NAME)" ||
				env["POD_NAME"].str("valueFrom", "fieldRef", "fieldPath") != "metadata.name" {
				t.Errorf("%s: not its pod's worker user with its password file: %v", name, env)
			}
		} else if env["NATS_PASSWORD"].str("valueFrom", "secretKeyRef", "name") != "t-ax-nats-users" {
			t.Errorf("%s: the NATS password does not come from the users' Secret: %v", name, env["NATS_PASSWORD"])
		}
		_, hasDB := env["DATABASE_URL"]
		if executor == hasDB {
			t.Errorf("%s: DATABASE_URL in its environment: %t (executors never touch PostgreSQL)", name, hasDB)
		}
	}

	// Each pool: an executor StatefulSet serving it, and a ScaledObject on
	// its attempts, whatever handlers it lists.
	for _, tt := range []struct {
		name, pool   string
		min, max     float64
		lag          string
		activation   string
		grace        float64
		replicasSet  bool
		wantReplicas float64
	}{
		{"default", "default", 1, 10, "10", "0", 45, false, 0},
		{"gpu", "gpu+large", 0, 4, "2", "1", 615, false, 0},
	} {
		d := deployments["t-ax-executor-"+tt.name]
		if d == nil {
			continue
		}
		args := d.get("spec", "template", "spec", "containers", 0, "args").([]any)
		if !slices.Contains(args, any("--pool="+tt.pool)) {
			t.Errorf("executor %s runs %v, not for pool %s", tt.name, args, tt.pool)
		}
		if g := d.get("spec", "template", "spec", "terminationGracePeriodSeconds"); g != tt.grace {
			t.Errorf("executor %s: terminationGracePeriodSeconds = %v, want %v (the shutdown timeout + 15 s)", tt.name, g, tt.grace)
		}
		if r := d.get("spec", "replicas"); r != nil {
			t.Errorf("executor %s: replicas %v set beside its ScaledObject (KEDA owns them)", tt.name, r)
		}
		so := objects["ScaledObject/t-ax-executor-"+tt.name]
		if so == nil {
			t.Errorf("no ScaledObject for pool %s", tt.pool)
			continue
		}
		if so.str("apiVersion") != "keda.sh/v1alpha1" || so.str("spec", "scaleTargetRef", "name") != "t-ax-executor-"+tt.name ||
			so.str("spec", "scaleTargetRef", "kind") != "StatefulSet" {
			t.Errorf("ScaledObject of %s: %s targets %q", tt.pool, so.str("apiVersion"), so.str("spec", "scaleTargetRef", "name"))
		}
		if so.get("spec", "minReplicaCount") != tt.min || so.get("spec", "maxReplicaCount") != tt.max {
			t.Errorf("ScaledObject of %s: replicas %v-%v, want %v-%v", tt.pool,
				so.get("spec", "minReplicaCount"), so.get("spec", "maxReplicaCount"), tt.min, tt.max)
		}
		// One Prometheus trigger on the pool's attempts, summed: the query
		// TestKEDAScalesPoolsOnTheirAttempts drives KEDA's decision with.
		triggers := so.get("spec", "triggers").([]any)
		if len(triggers) != 1 {
			t.Errorf("ScaledObject of %s: %d triggers, want one on the pool's attempts", tt.pool, len(triggers))
			continue
		}
		tr := object(triggers[0].(map[string]any))
		if tr.str("type") != "prometheus" || tr.str("metadata", "query") != monitor.ScalingQuery(tt.pool) {
			t.Errorf("ScaledObject of %s: trigger %s %q, want prometheus %q", tt.pool, tr.str("type"), tr.str("metadata", "query"), monitor.ScalingQuery(tt.pool))
		}
		if a := tr.str("metadata", "serverAddress"); a != "http://prom.monitoring.svc.cluster.local:9090" {
			t.Errorf("ScaledObject of %s reads %q", tt.pool, a)
		}
		if th, act := tr.str("metadata", "threshold"), tr.str("metadata", "activationThreshold"); th != tt.lag || act != tt.activation {
			t.Errorf("ScaledObject of %s: threshold %q activation %q, want %s %s", tt.pool, th, act, tt.lag, tt.activation)
		}
		if n := tr.str("metadata", "ignoreNullValues"); n != "false" {
			t.Errorf("ScaledObject of %s: ignoreNullValues %q: a lost Prometheus would read 0 and scale busy executors in", tt.pool, n)
		}
	}

	// The Secrets: a password per role, the authorization as given, the
	// database URL.
	users := objects["Secret/t-ax-nats-users"]
	for _, role := range natsauth.Roles {
		if got := users.str("data", string(role)); (got == "") != (role == natsauth.Executor) {
			t.Errorf("the users' Secret holds %q for %s (a password for each service, none shared by the executors)", got, role)
		}
	}
	services := strings.TrimSuffix(defaultAuthorization(), "  ]\n}\n")
	if got := objects["Secret/t-ax-nats-auth"].str("stringData", "auth.conf"); !strings.HasPrefix(got, services) {
		t.Errorf("the authorization Secret holds\n%s\nwant natsauth's services first\n%s", got, services)
	}
	if got := objects["Secret/t-ax-database"].str("stringData", "DATABASE_URL"); got != "postgres://ax@db/ax" {
		t.Errorf("the database Secret holds %q", got)
	}
}

// TestChartRefusesAPoolItsUsersCannotServe: a pool missing from the NATS
// authorization fails the render, naming the fix; so does a pool that
// still sets the consumer-lag threshold the chart no longer reads.
func TestChartRefusesAPoolItsUsersCannotServe(t *testing.T) {
	t.Parallel()
	for values, want := range map[string]string{
		"executorPools: [{pool: gpu}]":                                     "pool gpu is not the pool of its NATS worker user",
		"executorPools: [{pool: default, handlers: [train.model]}]":        "pool default serves handler train.model, which its NATS worker user (natsUser) does not name",
		"executorPools: [{pool: default, autoscaling: {lagThreshold: 5}}]": "lagThreshold: KEDA now scales on the pool's attempts",
	} {
		file := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(file, []byte("database: {url: postgres://x}\n"+values+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := helm(t, "template", "t", chart, "-f", file)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("helm template with %s: %v; want %q", values, err, want)
		}
	}
}

// indent puts prefix before every line of s.
func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n"+prefix)
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestChartSecuresTheNetwork renders the chart's network settings: the
// route authorization of the NATS cluster (issue 24, hole 9: a rogue
// server joined the cluster as a route), which nats-server parses as a
// cluster block's, a NetworkPolicy that admits only the API's and the
// metrics' ports, and the services' TLS to NATS.
func TestChartSecuresTheNetwork(t *testing.T) {
	t.Parallel()
	objects := render(t, `
database: {url: "postgres://ax@db/ax"}
nats:
  url: tls://nats:4222
  tls: {enabled: true, existingSecret: nats-client-tls, clientCert: true}
  cluster:
    routes: ["nats-0.nats:6222", "nats-1.nats:6222", "nats-2.nats:6222"]
`)
	routes := objects["Secret/t-ax-nats-cluster"]
	if routes == nil {
		t.Fatalf("no route Secret t-ax-nats-cluster; there are %v", keys(objects))
	}
	pw, err := base64.StdEncoding.DecodeString(routes.str("data", "route-password"))
	if err != nil || len(pw) < 32 {
		t.Fatalf("route password %q (%v): want 32 generated characters", pw, err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cluster.conf"), []byte(routes.str("stringData", "cluster.conf")), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, []byte("cluster {\n  name: ax\n  port: 6222\n  include \"cluster.conf\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("nats-server refuses the chart's cluster.conf: %v\n%s", err, routes.str("stringData", "cluster.conf"))
	}
	if opts.Cluster.Username != "route" || opts.Cluster.Password != string(pw) {
		t.Errorf("the cluster takes routes from %q with the Secret's password %v", opts.Cluster.Username, opts.Cluster.Password == string(pw))
	}
	if len(opts.Routes) != 3 {
		t.Errorf("%d routes, want 3", len(opts.Routes))
	}
	for _, r := range opts.Routes {
		if got, _ := r.User.Password(); r.User.Username() != "route" || got != string(pw) {
			t.Errorf("route %s does not present the route password", r.Redacted())
		}
	}

	// The NetworkPolicies: metrics from the namespace, the API's port to
	// the API alone, nothing else.
	np := objects["NetworkPolicy/t-ax"]
	if np == nil {
		t.Fatalf("no NetworkPolicy t-ax; there are %v", keys(objects))
	}
	if np.str("spec", "podSelector", "matchLabels", "app.kubernetes.io/instance") != "t" || np.get("spec", "ingress", 1) != nil ||
		np.get("spec", "ingress", 0, "ports", 0, "port") != float64(9090) || np.get("spec", "ingress", 0, "ports", 1) != nil {
		t.Errorf("NetworkPolicy t-ax admits %v, want the metrics port alone", np.get("spec", "ingress"))
	}
	api := objects["NetworkPolicy/t-ax-api"]
	if api.str("spec", "podSelector", "matchLabels", "app.kubernetes.io/component") != "api" ||
		api.get("spec", "ingress", 0, "ports", 0, "port") != float64(8080) || api.get("spec", "ingress", 1) != nil {
		t.Errorf("NetworkPolicy t-ax-api: %v, want the API's port to the API's pods", api.get("spec"))
	}

	// TLS: every service names the CA and its certificate, mounted from
	// the given Secret.
	for _, name := range []string{"Deployment/t-ax-dispatcher", "Deployment/t-ax-api", "StatefulSet/t-ax-executor-default"} {
		d := objects[name]
		env := map[string]string{}
		c := object(d.get("spec", "template", "spec", "containers", 0).(map[string]any))
		for _, e := range c.get("env").([]any) {
			env[object(e.(map[string]any)).str("name")] = object(e.(map[string]any)).str("value")
		}
		if env["NATS_CA"] != "/etc/ax/nats-tls/ca.crt" || env["NATS_CERT"] != "/etc/ax/nats-tls/tls.crt" || env["NATS_KEY"] != "/etc/ax/nats-tls/tls.key" {
			t.Errorf("%s: NATS_CA %q NATS_CERT %q NATS_KEY %q", name, env["NATS_CA"], env["NATS_CERT"], env["NATS_KEY"])
		}
		mounted := false
		for _, v := range d.get("spec", "template", "spec", "volumes").([]any) {
			if object(v.(map[string]any)).str("secret", "secretName") == "nats-client-tls" {
				mounted = true
			}
		}
		if !mounted {
			t.Errorf("%s does not mount the Secret nats-client-tls", name)
		}
	}

	// Route TLS, when given, is the cluster block's.
	withTLS := render(t, `
database: {url: "postgres://ax@db/ax"}
nats:
  cluster:
    tls: {certFile: /etc/nats/route.crt, keyFile: /etc/nats/route.key, caFile: /etc/nats/ca.crt}
`)
	if got := withTLS["Secret/t-ax-nats-cluster"].str("stringData", "cluster.conf"); !strings.Contains(got, "tls {\n  cert_file: \"/etc/nats/route.crt\"\n  key_file: \"/etc/nats/route.key\"\n  ca_file: \"/etc/nats/ca.crt\"\n  verify: true\n}") {
		t.Errorf("cluster.conf with route TLS:\n%s", got)
	}
}
