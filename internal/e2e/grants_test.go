package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/executortest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
	"github.com/ax-scheduler/ax/streams/natsauth/natsauthtest"
)

// TestHeartbeatClaimsGrantNothing acts as the default pool's executor
// (worker w1, the built-in handlers), with the credential ax dev makes:
// it writes its own heartbeat claiming the gpu pool too, a newer version
// and an extra handler, with the grant keys its credential allows (a gpu
// one is refused). The gpu pool's hash-, broadcast- and
// min_worker_version-routed attempts, and one pinned to w1 by name, never
// reach w1's own subject, where it could pull them: the others all run on
// the gpu worker, and the pinned one waits.
func TestHeartbeatClaimsGrantNothing(t *testing.T) {
	t.Parallel()
	a := newAuthSystem(t)
	ctx := context.Background()

	// The true gpu worker.
	executortest.Run(t, executor.Options{Conn: a.connect(gpuExecutor), WorkerID: "g1", Pools: []string{"gpu"},
		Mux: builtinsMux(), Slots: 4, Version: "1.0.0", Logger: slog.New(zerolog.NewSlogHandler(a.log))})

	nc, v := a.watch(string(natsauth.Executor))
	handlers := append(slices.Clone(builtins), "gpu.secret")
	for _, pool := range []string{schemas.DefaultPool, "gpu"} {
		for _, h := range handlers {
			subject := a.top.GrantSubject(defaultWorker, pool, h)
			grant := natsauthtest.Request(nc, subject, "")
			if pool == schemas.DefaultPool && slices.Contains(builtins, h) {
				if err := grant(ctx); err != nil {
					t.Fatalf("write grant key %s: %v", subject, err)
				}
				continue
			}
			refusedBy(t, v, subject, grant)
		}
	}
	claim, _ := json.Marshal(schemas.Worker{ID: defaultWorker, Version: "9.9.9", Pools: []string{schemas.DefaultPool, "gpu"},
		Handlers: handlers, Slots: 64, StartedAt: time.Now(), HeartbeatAt: time.Now(), Protocol: schemas.ExecutorProtocol})
	heartbeat := natsauthtest.Request(nc, "$KV."+a.top.WorkersBucket()+"."+defaultWorker, string(claim))
	if err := heartbeat(ctx); err != nil {
		t.Fatalf("write its own heartbeat: %v", err)
	}
	a.routedTo("g1", defaultWorker)
	// Meanwhile w1 keeps its heartbeat and pulls what comes to its own
	// subject, as its credential lets it.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	own, err := js.CreateOrUpdateConsumer(ctx, a.top.DispatchStream(), a.top.WorkerConsumer(defaultWorker))
	if err != nil {
		t.Fatalf("make its own consumer: %v", err)
	}
	pulled := make(map[int64]bool)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = heartbeat(ctx)
			batch, err := own.Fetch(16, jetstream.FetchMaxWait(time.Second))
			if err != nil {
				continue
			}
			for m := range batch.Messages() {
				var d schemas.Dispatch
				if json.Unmarshal(m.Data(), &d) == nil {
					pulled[d.InstanceID] = true
				}
			}
		}
	}()

	a.apply("task_name: gpu-hash\nexecution: {handler: builtin.echo}\ndispatch: {tags: [gpu], strategy: hash, hash_key: 'k-{{.k}}'}\n")
	a.apply("task_name: gpu-cast\nexecution: {handler: builtin.echo}\ndispatch: {tags: [gpu], strategy: broadcast}\n")
	a.apply("task_name: gpu-new\nexecution: {handler: builtin.echo}\ndispatch: {tags: [gpu]}\nmin_worker_version: 0.5.0\n")
	var ids []int64
	for i := range 12 {
		ids = append(ids, a.fire("gpu-hash", map[string]any{"k": i, "secret": "s3cr3t"}))
		ids = append(ids, a.fire("gpu-new", map[string]any{"secret": "s3cr3t"}))
	}
	ids = append(ids, a.fire("gpu-cast", map[string]any{"secret": "s3cr3t"}))
	// Pinned to w1 by name: w1 is live, but its credential does not grant
	// the gpu pool, so the attempt waits rather than go to it.
	a.apply("task_name: gpu-pinned\nexecution: {handler: builtin.echo}\ndispatch: {tags: [gpu], strategy: worker, worker: w1}\n")
	pinned := a.fire("gpu-pinned", map[string]any{"secret": "s3cr3t"})
	for _, id := range ids {
		in := a.waitState(id, schemas.StateSucceeded, 2*time.Minute)
		if in.WorkerID != "g1" && in.WorkerID != "" {
			t.Errorf("instance %d (%s) ran on %q, want g1", id, in.Task, in.WorkerID)
		}
	}
	if in, err := a.store.GetInstance(ctx, pinned); err != nil || in.State != schemas.StateDispatched {
		t.Errorf("the attempt pinned to %s is %s (%v), want DISPATCHED, waiting", defaultWorker, in.State, err)
	}
	close(stop)
	<-done
	if len(pulled) != 0 {
		t.Errorf("%s pulled %d gpu attempts from its own subject; want none", defaultWorker, len(pulled))
	}
	for _, w := range a.dispatcher.Workers() {
		if w.ID == defaultWorker && (slices.Contains(w.Pools, "gpu") || slices.Contains(w.Handlers, "gpu.secret")) {
			t.Errorf("the dispatcher believes %s serves %v with %v", defaultWorker, w.Pools, w.Handlers)
		}
	}
}

// TestUnheldAttemptOfAnotherHandler acts as the default pool's executor
// (worker w1, the built-in handlers), running: it reports an attempt of
// handler nobody.here, which its credential does not name and which no
// worker holds, succeeded with a forged output. The report is refused,
// counted and on the instance's timeline; the instance stays DISPATCHED.
// w1's own attempts of a built-in handler are recorded as ever.
func TestUnheldAttemptOfAnotherHandler(t *testing.T) {
	t.Parallel()
	a := newAuthSystem(t)
	ctx := context.Background()
	a.apply("task_name: nobody\nexecution: {handler: nobody.here}\n")
	a.apply("task_name: plain-echo\nexecution: {handler: builtin.echo}\n")
	executortest.Run(t, executor.Options{Conn: a.connect(string(natsauth.Executor)), WorkerID: defaultWorker,
		Mux: builtinsMux(), Slots: 4, Logger: slog.New(zerolog.NewSlogHandler(a.log))})
	a.routedTo(defaultWorker)
	if in := a.waitState(a.fire("plain-echo", nil), schemas.StateSucceeded, time.Minute); in.WorkerID != defaultWorker {
		t.Fatalf("the echo ran on %q, want %s", in.WorkerID, defaultWorker)
	}
	id := a.fire("nobody", map[string]string{"secret": "s3cr3t"})
	a.waitState(id, schemas.StateDispatched, time.Minute)

	js, err := jetstream.New(a.connect(string(natsauth.Executor)))
	if err != nil {
		t.Fatal(err)
	}
	forged := schemas.Report{InstanceID: id, Attempt: 1, WorkerID: defaultWorker, Kind: schemas.ReportSucceeded,
		At: time.Now(), StartedAt: time.Now(), Output: json.RawMessage(`{"forged": true}`)}
	if _, err := streams.Publish(ctx, js, a.top.Report(schemas.DefaultPool, defaultWorker, id), "", forged); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the forged report to be refused and recorded", time.Minute, func() (bool, error) {
		return counterValue(t, a.reg, "ax_refused_reports_total", "kind", "succeeded") == 1 && len(a.events(id)) > 0, nil
	})
	in, err := a.store.GetInstance(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if in.State != schemas.StateDispatched || len(in.Output) != 0 || in.WorkerID != "" {
		t.Fatalf("after the forged report the instance is %s, output %s, worker %q; want DISPATCHED as it was", in.State, in.Output, in.WorkerID)
	}
	if kinds := a.events(id); len(kinds) != 1 || kinds[0] != "refused_succeeded" {
		t.Errorf("events = %v, want the refused report on the timeline", kinds)
	}
}

// TestForgedLogLines acts as the default pool's executor (worker w1) on
// the logs of a gpu instance that g1 ran: a line as another worker, or on
// the subject of executors before the worker token, is refused by the
// server; a line as itself is stored but the API does not show it, since
// w1 held no attempt of the instance. g1's own lines are shown, as g1's.
func TestForgedLogLines(t *testing.T) {
	t.Parallel()
	a := newAuthSystem(t)
	ctx := context.Background()
	a.apply("task_name: gpu-sleep\nexecution: {handler: builtin.sleep}\ndispatch: {tags: [gpu]}\n")
	a.executor(gpuExecutor, "g1", "gpu")
	id := a.fire("gpu-sleep", map[string]float64{"seconds": 0})
	a.waitState(id, schemas.StateSucceeded, time.Minute)

	nc, v := a.watch(string(natsauth.Executor))
	line := func(worker string) []byte {
		data, _ := json.Marshal(schemas.LogLine{InstanceID: id, Task: "gpu-sleep", Attempt: 1, WorkerID: worker,
			Level: "error", Message: "forged by " + defaultWorker, Time: time.Now()})
		return data
	}
	for _, subject := range []string{a.top.Log(id, "g1"), a.top.InstanceLogs(id)[0]} {
		if err := errors.Join(nc.Publish(subject, line("g1")), nc.Flush()); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the server to refuse a log line on "+subject, time.Minute, func() (bool, error) { return v.Refused(subject), nil })
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	own := a.top.Log(id, defaultWorker)
	if _, err := js.Publish(ctx, own, line("g1")); err != nil {
		t.Fatalf("publish a line as itself on %s: %v", own, err)
	}
	lines := a.logsOf(id)
	if len(lines) == 0 {
		t.Fatal("the API shows no line of g1's run")
	}
	for _, l := range lines {
		if l.WorkerID != "g1" || l.Message == "forged by "+defaultWorker {
			t.Errorf("the API shows a line %q of worker %q; want g1's lines only", l.Message, l.WorkerID)
		}
	}
}
