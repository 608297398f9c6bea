package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/devstack"
	"github.com/ax-scheduler/ax/dispatcher"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/executortest"
	"github.com/ax-scheduler/ax/internal/natsembed"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
	"github.com/ax-scheduler/ax/streams/natsauth/natsauthtest"
)

// authSystem is a dispatcher and an API on a server with the users ax dev
// makes (natsauth.Users; its executor user the default pool's worker
// defaultWorker, with the built-in handlers) plus an executor user of the
// pool gpu that its workers share (any worker id, the built-in handlers),
// for tests that act as a hostile credential holder.
type authSystem struct {
	*system
	top       streams.Topology
	ns        *natsauthtest.Server
	passwords map[string]string
	reg       *prometheus.Registry
}

// gpuExecutor is the user of the gpu pool's executors.
const gpuExecutor = "executor-gpu"

// defaultWorker is the worker the executor user may be.
const defaultWorker = "w1"

// builtins are the built-in handlers, which the executor users name.
var builtins = []string{executor.BuiltinEcho, executor.BuiltinFail, executor.BuiltinSleep}

func newAuthSystem(t *testing.T) *authSystem {
	t.Helper()
	top := streams.Default()
	roles := map[natsauth.Role]string{}
	passwords := map[string]string{gpuExecutor: "pw-" + gpuExecutor}
	for _, role := range natsauth.Roles {
		roles[role] = "pw-" + string(role)
		passwords[string(role)] = roles[role]
	}
	users := append(natsauth.Users(top, roles, natsauth.Scope{Pools: []string{schemas.DefaultPool}, WorkerID: defaultWorker, Handlers: builtins}),
		&server.User{Username: gpuExecutor, Password: passwords[gpuExecutor],
			Permissions: natsauth.Permissions(top, natsauth.Executor, gpuExecutor, natsauth.Scope{Pools: []string{"gpu"}, Handlers: builtins})})
	ns := natsauthtest.NewServer(t, natsembed.Options{Users: users})
	a := &authSystem{top: top, ns: ns, passwords: passwords, reg: prometheus.NewRegistry()}
	pool := storetest.NewDB(t)
	st := store.New(pool)
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	a.system = &system{t: t, store: st, pool: pool, log: log}
	a.stack, _ = a.startStack(devstack.Options{NATSURL: ns.ClientURL(), Passwords: passwords,
		Services: []natsauth.Role{natsauth.Dispatcher, natsauth.API}, Streams: streams.Config{LeaseTTL: leaseTTL},
		Dispatcher: dispatcher.Options{Metrics: a.reg}})
	a.dispatcher = a.stack.Dispatcher
	a.serveAPI(a.stack.API)
	return a
}

// connect connects as user with its inbox prefix.
func (a *authSystem) connect(user string) *nats.Conn {
	a.t.Helper()
	nc, _ := a.watch(user)
	return nc
}

// watch connects as user with its inbox prefix; the Refusals hear the
// server's refusals.
func (a *authSystem) watch(user string) (*nats.Conn, *natsauthtest.Refusals) {
	a.t.Helper()
	return a.ns.Connect(user, a.passwords[user])
}

// executor runs a worker of pools as user.
func (a *authSystem) executor(user, workerID string, pools ...string) {
	a.t.Helper()
	mux := builtinsMux()
	executortest.Run(a.t, executor.Options{Conn: a.connect(user), WorkerID: workerID, Pools: pools, Mux: mux,
		Slots: 4, Logger: slog.New(zerolog.NewSlogHandler(a.log))})
}

// events returns the kinds of the events of instance id.
func (s *system) events(id int64) []string {
	s.t.Helper()
	in, err := s.store.GetInstance(context.Background(), id)
	if err != nil {
		s.t.Fatal(err)
	}
	var kinds []string
	for _, e := range in.Events {
		kinds = append(kinds, e.Kind)
	}
	return kinds
}

// TestForgedReports acts as a hostile executor: with the default pool's
// credentials it reports another pool's attempt succeeded, and with the
// gpu pool's it reports an attempt another gpu worker holds failed. Neither
// changes the instance; both are counted and on its timeline; the true
// worker's outcome is what is recorded.
func TestForgedReports(t *testing.T) {
	t.Parallel()
	a := newAuthSystem(t)
	ctx := context.Background()
	a.apply(`
task_name: gpu-echo
execution:
  handler: builtin.echo
dispatch:
  tags: [gpu]
`)
	a.apply(`
task_name: gpu-sleep
execution:
  handler: builtin.sleep
dispatch:
  tags: [gpu]
`)
	id := a.fire("gpu-echo", map[string]string{"truth": "from the gpu worker"})
	a.waitState(id, schemas.StateDispatched, time.Minute)

	// The default pool's executor, as ax dev makes it.
	nc, v := a.watch(string(natsauth.Executor))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	forged := schemas.Report{InstanceID: id, Attempt: 1, WorkerID: "evil", Kind: schemas.ReportSucceeded,
		At: time.Now(), StartedAt: time.Now(), Output: json.RawMessage(`{"forged": true}`)}
	data, _ := json.Marshal(forged)
	// On the gpu pool's subject: the server refuses it.
	gpuSubject := a.top.Report("gpu", "evil", id)
	if err := errors.Join(nc.Publish(gpuSubject, data), nc.Flush()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the server to refuse a report on the gpu pool's subject", time.Minute, func() (bool, error) { return v.Refused(gpuSubject), nil })
	// On its own pool's subject, which it may use: the dispatcher refuses it.
	if _, err := streams.Publish(ctx, js, a.top.Report(schemas.DefaultPool, defaultWorker, id), "", forged); err != nil {
		t.Fatal(err)
	}
	// And a subject that names another worker than the body.
	other := forged
	other.WorkerID = "w-honest"
	if _, err := streams.Publish(ctx, js, a.top.Report(schemas.DefaultPool, defaultWorker, id), "", other); err != nil {
		t.Fatal(err)
	}
	// Refused: counted, and on the timeline (recorded after the count).
	waitFor(t, "the forged reports to be refused and recorded", time.Minute, func() (bool, error) {
		return counterValue(t, a.reg, "ax_refused_reports_total", "kind", "succeeded") == 2 && len(a.events(id)) > 0, nil
	})
	in, err := a.store.GetInstance(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if in.State != schemas.StateDispatched || len(in.Output) != 0 || in.WorkerID != "" {
		t.Fatalf("after the forged reports the instance is %s, output %s, worker %q; want DISPATCHED as it was", in.State, in.Output, in.WorkerID)
	}
	if kinds := a.events(id); len(kinds) != 1 || kinds[0] != "refused_succeeded" {
		t.Errorf("events = %v, want the refused report on the timeline", kinds)
	}

	// The gpu worker then runs it, and its outcome is the one recorded.
	a.executor(gpuExecutor, "g1", "gpu")
	in = a.waitState(id, schemas.StateSucceeded, time.Minute)
	if in.WorkerID != "g1" {
		t.Errorf("worker = %q, want g1", in.WorkerID)
	}
	var out map[string]string
	if err := json.Unmarshal(in.Output, &out); err != nil || out["truth"] != "from the gpu worker" {
		t.Errorf("output = %s, want the echo of the payload", in.Output)
	}

	// A worker of the same pool reports on an attempt g1 holds.
	slow := a.fire("gpu-sleep", map[string]float64{"seconds": 10})
	running := a.waitState(slow, schemas.StateRunning, time.Minute)
	if running.WorkerID != "g1" {
		t.Fatalf("worker = %q, want g1", running.WorkerID)
	}
	gnc := a.connect(gpuExecutor)
	gjs, err := jetstream.New(gnc)
	if err != nil {
		t.Fatal(err)
	}
	failed := schemas.Report{InstanceID: slow, Attempt: 1, WorkerID: "g2", Kind: schemas.ReportFailed,
		At: time.Now(), StartedAt: time.Now(), Error: "forged", Permanent: true}
	if _, err := streams.Publish(ctx, gjs, a.top.Report("gpu", "g2", slow), "", failed); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the report on another worker's attempt to be refused", time.Minute, func() (bool, error) {
		return counterValue(t, a.reg, "ax_refused_reports_total", "kind", "failed") == 1, nil
	})
	in = a.waitState(slow, schemas.StateSucceeded, time.Minute)
	if in.WorkerID != "g1" || in.Attempt != 1 {
		t.Errorf("instance = worker %q attempt %d, want g1's first attempt", in.WorkerID, in.Attempt)
	}
}

// TestForgedReportBatch acts as the default pool's executor (worker w1)
// with report batches: one on the gpu pool's batch subject is refused by
// the server; one on its own carries a true success of its pool's attempt,
// a success that names another worker and a success of a gpu attempt. The
// dispatcher applies the first and refuses the other two, each counted and
// on its instance's timeline as a forged single report is.
func TestForgedReportBatch(t *testing.T) {
	t.Parallel()
	a := newAuthSystem(t)
	ctx := context.Background()
	a.apply("task_name: plain-echo\nexecution: {handler: builtin.echo}\n")
	a.apply("task_name: gpu-echo\nexecution: {handler: builtin.echo}\ndispatch: {tags: [gpu]}\n")
	own, named, gpu := a.fire("plain-echo", nil), a.fire("plain-echo", nil), a.fire("gpu-echo", nil)
	for _, id := range []int64{own, named, gpu} {
		a.waitState(id, schemas.StateDispatched, time.Minute)
	}

	nc, v := a.watch(string(natsauth.Executor))
	gpuBatch := a.top.ReportBatch("gpu", defaultWorker)
	data, _ := json.Marshal(schemas.ReportBatch{Reports: []schemas.Report{finalOf(gpu, defaultWorker, schemas.ReportSucceeded)}})
	if err := errors.Join(nc.Publish(gpuBatch, data), nc.Flush()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the server to refuse a batch on the gpu pool's subject", time.Minute, func() (bool, error) { return v.Refused(gpuBatch), nil })

	// w1's grant keys, as its SDK writes them: the dispatcher takes its
	// report on an attempt no worker holds yet only for a handler they name.
	for _, h := range builtins {
		if _, err := nc.Request(a.top.GrantSubject(defaultWorker, schemas.DefaultPool, h), nil, 10*time.Second); err != nil {
			t.Fatalf("write grant key: %v", err)
		}
	}
	rec, _ := json.Marshal(schemas.Worker{ID: defaultWorker, Pools: []string{schemas.DefaultPool}, Handlers: builtins, Slots: 1,
		StartedAt: time.Now(), HeartbeatAt: time.Now()})
	if _, err := nc.Request("$KV."+a.top.WorkersBucket()+"."+defaultWorker, rec, 10*time.Second); err != nil {
		t.Fatalf("write heartbeat: %v", err)
	}
	waitFor(t, "the dispatcher to see w1's grant keys", time.Minute, func() (bool, error) {
		for _, w := range a.dispatcher.Workers() {
			if w.ID == defaultWorker && len(w.Handlers) == len(builtins) {
				return true, nil
			}
		}
		return false, nil
	})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	batch := schemas.ReportBatch{Reports: []schemas.Report{finalOf(own, defaultWorker, schemas.ReportSucceeded),
		finalOf(named, "w-honest", schemas.ReportSucceeded), finalOf(gpu, defaultWorker, schemas.ReportSucceeded)}}
	if _, err := streams.Publish(ctx, js, a.top.ReportBatch(schemas.DefaultPool, defaultWorker), "", batch); err != nil {
		t.Fatal(err)
	}
	if in := a.waitState(own, schemas.StateSucceeded, time.Minute); in.WorkerID != defaultWorker {
		t.Errorf("instance %d succeeded by %q, want %s", own, in.WorkerID, defaultWorker)
	}
	waitFor(t, "the forged reports of the batch to be refused and recorded", time.Minute, func() (bool, error) {
		return counterValue(t, a.reg, "ax_refused_reports_total", "kind", "succeeded") == 2 &&
			len(a.events(named)) > 0 && len(a.events(gpu)) > 0, nil
	})
	for _, id := range []int64{named, gpu} {
		in, err := a.store.GetInstance(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if in.State != schemas.StateDispatched || in.WorkerID != "" {
			t.Errorf("instance %d: %s by %q after a forged report, want DISPATCHED as it was", id, in.State, in.WorkerID)
		}
		if kinds := a.events(id); len(kinds) != 1 || kinds[0] != "refused_succeeded" {
			t.Errorf("instance %d: events %v, want the refused report on the timeline", id, kinds)
		}
	}
}
