package e2e_test

import (
	"context"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/api/apitest"
	"github.com/ax-scheduler/ax/drill/system/systemtest"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/internal/servicetest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/trigger"
	"github.com/ax-scheduler/ax/trigger/triggertest"
)

// stepsText is an explanation as one text: its verdict and steps.
func stepsText(x schemas.Explanation) string {
	var b strings.Builder
	b.WriteString(x.Verdict + "\n")
	for _, s := range x.Steps {
		b.WriteString(s.Kind + " [" + s.Actor + "] " + s.Text + "\n")
	}
	return b.String()
}

// wantSteps fails t unless the explanation has a step of kind whose text
// holds every part.
func wantStep(t *testing.T, x schemas.Explanation, kind string, parts ...string) {
	t.Helper()
	for _, s := range x.Steps {
		if s.Kind != kind {
			continue
		}
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(s.Text, p)
		}
		if ok {
			return
		}
	}
	t.Errorf("%s: no %s step with %q:\n%s", x.Subject, kind, parts, stepsText(x))
}

// TestExplainATickSkippedWhilePaused: a cron task is paused for three
// ticks (a trigger on a simulated clock), then resumed; ax explain of a
// tick of the pause says it did not run because the task was paused, by
// whom, and what the trigger's misfire policy decided on resume (the
// decision the trigger recorded).
func TestExplainATickSkippedWhilePaused(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.executor("w1", builtinsMux(), 4)
	s.apply("task_name: minutely\nexecution: {handler: builtin.echo}\ntriggers: [{type: cron, schedule: '* * * * *'}]\n")
	base := time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC)
	clock := triggertest.NewClock(base.Add(30 * time.Second))
	conn, _ := s.srv.Connect()
	svc, err := trigger.New(trigger.Options{Conn: conn, Store: s.store, Clock: clock, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	servicetest.Start(t, "trigger", svc)
	for clock.Now().Before(base.Add(2 * time.Minute)) {
		clock.Step(t, 1)
	}
	clock.WaitTimers(t, 1)
	// The operators act at the simulated clock's time.
	setAt := func(action string, at time.Time) {
		if _, err := s.pool.Exec(context.Background(), `UPDATE operator_actions SET at = $2
			WHERE id = (SELECT max(id) FROM operator_actions WHERE task = 'minutely' AND action = $1)`, action, at); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	if _, err := s.client.SetTaskPaused(ctx, "minutely", true); err != nil {
		t.Fatal(err)
	}
	setAt("pause", base.Add(150*time.Second))
	// The paused task leaves the trigger's heap: no timer is armed.
	clock.WaitFor(t, func(_ time.Time, deadlines []time.Time) bool { return len(deadlines) == 0 })
	clock.Set(base.Add(330 * time.Second))
	if _, err := s.client.SetTaskPaused(ctx, "minutely", false); err != nil {
		t.Fatal(err)
	}
	setAt("resume", base.Add(330*time.Second))
	clock.WaitTimers(t, 1)
	waitFor(t, "the trigger's misfire decision", time.Minute, func() (bool, error) {
		ds, err := s.store.DecisionsAbout(ctx, "minutely", base.Add(4*time.Minute))
		return len(ds) == 1, err
	})

	x, err := s.client.ExplainTick(ctx, "minutely", base.Add(4*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ax explain minutely@10:04:\n%s", stepsText(x))
	if !strings.HasPrefix(x.Verdict, "did not run: the task was paused from 2025-06-01T10:02:30Z until 2025-06-01T10:05:30Z") ||
		!strings.Contains(x.Verdict, "misfire skip") {
		t.Errorf("verdict %q, want paused, with the policy", x.Verdict)
	}
	wantStep(t, x, "schedule", `trigger 0 ("* * * * *" in UTC, misfire skip) schedules a tick at 2025-06-01T10:04:00Z`)
	wantStep(t, x, "paused", "the task was paused by "+apitest.AdminName)
	wantStep(t, x, "misfire", "3 ticks missed from 2025-06-01T10:03:00Z to 2025-06-01T10:05:00Z", "misfire skip: none fired, skipped 3")
	wantStep(t, x, "no_instance", "no instance was made")
	out := runAX(t, s, "explain", "minutely@2025-06-01T12:04:00+02:00")
	if !strings.HasPrefix(out, "minutely@2025-06-01T10:04:00Z: did not run: the task was paused") || !strings.Contains(out, "misfire skip: none fired") {
		t.Errorf("ax explain printed:\n%s", out)
	}
	// A tick before the pause ran.
	ran, err := s.client.ExplainTick(ctx, "minutely", base.Add(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if ran.InstanceID == 0 {
		t.Errorf("the tick of 10:02 has no instance:\n%s", stepsText(ran))
	}
	wantStep(t, ran, "created", "the firing cron:minutely:0:2025-06-01T10:02:00Z (source cron")
}

// TestExplainAFiringThatWaitedForAMutex: two firings of a task with a
// mutex_key; the second waits while the first holds the key, and its
// explanation names the wait and the instance that held the key.
func TestExplainAFiringThatWaitedForAMutex(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.apply("task_name: books\nconcurrency: {mutex_key: ledger-books}\nexecution: {handler: test.books}\n")
	release := make(chan struct{})
	mux := executor.NewMux()
	mux.HandleFunc("test.books", func(ctx context.Context, _ *executor.Job) (any, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, nil
	})
	s.worker(executor.Options{WorkerID: "w1", Mux: mux, RequeueDelay: 100 * time.Millisecond})
	first := s.fire("books", nil)
	held := s.waitState(first, schemas.StateRunning, 30*time.Second)
	second := s.fire("books", nil)
	var dispatched time.Time
	waitFor(t, "the second firing to wait a while", 30*time.Second, func() (bool, error) {
		in, err := s.store.GetInstance(context.Background(), second)
		if err != nil || in.State != schemas.StateDispatched {
			return false, err
		}
		dispatched = in.Transitions[len(in.Transitions)-1].At
		return time.Since(dispatched) > 1500*time.Millisecond, nil
	})
	close(release)
	s.waitState(second, schemas.StateSucceeded, 30*time.Second)
	x, err := s.client.ExplainInstance(context.Background(), second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ax explain %d:\n%s", second, stepsText(x))
	wantStep(t, x, "mutex_wait", "attempt 1 waited", `for the task's mutex_key "ledger-books"`,
		"held meanwhile by instance "+itoa(held.ID))
	if !strings.HasPrefix(x.Verdict, "ran: instance "+itoa(second)+" succeeded at attempt 1") {
		t.Errorf("verdict %q", x.Verdict)
	}
}

// TestExplainAStaleReportRefused: attempt 1 fails, attempt 2 succeeds, and
// attempt 1's late success is refused: the explanation says so, with the
// lease-and-retry story.
func TestExplainAStaleReportRefused(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.apply("task_name: fenced\nexecution: {handler: test.fenced, retry: {max_attempts: 2, initial_interval_sec: 0}}\n")
	mux := executor.NewMux()
	mux.HandleFunc("test.fenced", func(_ context.Context, j *executor.Job) (any, error) {
		if j.Attempt == 1 {
			return nil, errors.New("first attempt fails")
		}
		return "second", nil
	})
	s.executor("w1", mux, 2)
	id := s.fire("fenced", nil)
	s.waitState(id, schemas.StateSucceeded, 30*time.Second)
	late := schemas.Report{InstanceID: id, Attempt: 1, WorkerID: "ghost", Kind: schemas.ReportSucceeded, At: time.Now(), StartedAt: time.Now()}
	if _, err := streams.Publish(context.Background(), s.js, s.srv.Topology.Report(schemas.DefaultPool, late.WorkerID, id), "", late); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stale report's event", 30*time.Second, func() (bool, error) {
		in, err := s.store.GetInstance(context.Background(), id)
		return len(in.Events) == 1, err
	})
	x, err := s.client.ExplainInstance(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ax explain %d:\n%s", id, stepsText(x))
	wantStep(t, x, "stale_report", "a succeeded report of attempt 1 from worker:ghost was refused as stale", "SUCCEEDED at attempt 2")
	wantStep(t, x, "retrying", "attempt 1 ended without success: first attempt fails")
	if out := runAX(t, s, "explain", itoa(id)); !strings.Contains(out, "stale_report") || !strings.HasPrefix(out, "instance "+itoa(id)+": ran:") {
		t.Errorf("ax explain %d printed:\n%s", id, out)
	}
	wantStep(t, x, "dispatched", "attempt 2 was routed to pool default and dispatched, after the retry backoff")
	if !strings.HasPrefix(x.Verdict, "ran: instance "+itoa(id)+" succeeded at attempt 2") {
		t.Errorf("verdict %q", x.Verdict)
	}
}

// TestExplainAFiringSkippedForItsPayloadVersion: a firing published on
// NATS with another payload_version than the task's schema_version is
// SKIPPED; its explanation says it never ran and why.
func TestExplainAFiringSkippedForItsPayloadVersion(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.apply("task_name: versioned\nschema_version: 2\nexecution: {handler: builtin.echo}\n")
	ev := schemas.TriggerEvent{EventID: "order-42", PayloadVersion: 1, Payload: []byte(`{"order": 42}`)}
	if _, err := streams.Publish(context.Background(), s.js, s.srv.Topology.Trigger("versioned"), ev.EventID, ev); err != nil {
		t.Fatal(err)
	}
	var id int64
	waitFor(t, "the skipped instance", 30*time.Second, func() (bool, error) {
		in, err := s.store.InstanceByEvent(context.Background(), "versioned", "order-42")
		id = in.ID
		return err == nil, nil
	})
	x, err := s.client.ExplainInstance(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(x.Verdict, "did not run: instance "+itoa(id)+" was skipped") || !strings.Contains(x.Verdict, "schema_version") {
		t.Errorf("verdict %q, want skipped for its schema_version:\n%s", x.Verdict, stepsText(x))
	}
	wantStep(t, x, "skipped", "skipped, never run:", "schema_version")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// runAX runs the ax binary against s's API with its admin token and
// returns what it printed.
func runAX(t *testing.T, s *system, args ...string) string {
	t.Helper()
	bin := systemtest.BuildAX(t)
	out, err := exec.Command(bin, append(args, "--api", s.apiURL, "--token", s.admin)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ax %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
