package main

import (
	"bytes"
	"context"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
)

// fakeDispatcher makes, for each firing of task published from now on, the
// instance the dispatcher would, in the state that end picks for the n-th
// firing (from 1), fired, started and finished at once.
func (e *cliEnv) fakeDispatcher(task string, end func(n int) schemas.State) {
	e.t.Helper()
	ctx := e.t.Context()
	cons, err := e.js.OrderedConsumer(ctx, "AX_FIRINGS", jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"ax.fire." + task + ".api"}, DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		e.t.Fatal(err)
	}
	var n atomic.Int64
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		ev, err := taskdef.ParseTriggerEvent(msg.Data())
		if err != nil {
			e.t.Errorf("fake dispatcher: %v", err)
			return
		}
		_, err = e.pool.Exec(context.WithoutCancel(ctx), `
			INSERT INTO instances (task, task_version, event_id, source, state, attempt, max_attempts, priority, pool, handler,
				timeout_ms, worker_id, fired_at, started_at, finished_at)
			VALUES ($1, 1, $2, 'manual', $3, 1, 3, 'normal', 'default', 'builtin.echo', 60000, 'w-1', now(), now(), now())`,
			task, ev.EventID, string(end(int(n.Add(1)))))
		if err != nil {
			e.t.Errorf("fake dispatcher: insert instance: %v", err)
		}
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(cc.Stop)
}

func TestFireCount(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	e.apply(reportTask)
	e.fakeDispatcher("nightly-report", func(n int) schemas.State {
		if n == 7 {
			return schemas.StateFailed
		}
		return schemas.StateSucceeded
	})

	// Off a terminal: one line per instance as it ends, then the counts.
	code, out, errOut := e.ax("", "fire", "nightly-report", "--count", "5", "--wait", "--timeout", "30s")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(lines) != 7 || !strings.HasSuffix(lines[0], " SUCCEEDED") ||
		lines[5] != "STATE      INSTANCES" || lines[6] != "SUCCEEDED  5" {
		t.Errorf("fire --count 5 --wait: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	// As YAML, the instances; the 7th firing failed: exit 2.
	code, out, errOut = e.ax("", "fire", "nightly-report", "-n", "3", "--wait", "-o", "yaml")
	var ins []schemas.Instance
	if err := yaml.Unmarshal([]byte(out), &ins); err != nil || len(ins) != 3 {
		t.Errorf("fire -n 3 --wait -o yaml printed %q (%v)", out, err)
	}
	if code != exitNotSucceeded || !strings.Contains(errOut, "ax: 1 of the 3 instances ended other than SUCCEEDED") {
		t.Errorf("fire -n 3 with one failure: exit %d, stderr %q", code, errOut)
	}

	// Without --wait: the ids.
	out = e.mustAx("fire", "nightly-report", "-n", "2")
	if ids := strings.Fields(out); len(ids) != 2 {
		t.Errorf("fire -n 2 printed %q, want 2 ids", out)
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"fire", "nightly-report", "-n", "0"}, "ax: --count 0: fire at least once"},
		{[]string{"fire", "nightly-report", "-n", "2", "--event-id", "x"}, "ax: --count fires several times"},
		{[]string{"fire", "missing", "-n", "2"}, "ax: firing "},
	} {
		code, _, errOut := e.ax("", tt.args...)
		if code != 1 || !strings.HasPrefix(errOut, tt.want) {
			t.Errorf("ax %s: exit %d, stderr %q; want exit 1 and %q", strings.Join(tt.args, " "), code, errOut, tt.want)
		}
	}
}

func TestBench(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	e.fakeDispatcher(benchTaskName, func(int) schemas.State { return schemas.StateSucceeded })
	code, out, errOut := e.ax("", "bench", "--count", "20", "--timeout", "30s", "-o", "json")
	var r benchResult
	if err := yaml.Unmarshal([]byte(out), &r); code != 0 || err != nil || r.Task != benchTaskName || r.Instances != 20 || r.Succeeded != 20 {
		t.Errorf("bench: exit %d, stdout %q, stderr %q, result %+v (%v)", code, out, errOut, r, err)
	}
	if !strings.Contains(errOut, "fired ax-bench 20 times in ") {
		t.Errorf("bench said %q", errOut)
	}
	if r.Cores < 1 || r.Postgres != nil {
		t.Errorf("bench without --database-url: cores %d, postgres %+v; want the machine's cores and no settings", r.Cores, r.Postgres)
	}
	code, out, errOut = e.ax("", "bench", "--count", "5", "--timeout", "30s", "--database-url", e.pool.Config().ConnString())
	if code != 0 || !strings.Contains(out, "fsync=") || !strings.Contains(out, "machine CPU") {
		t.Errorf("bench --database-url: exit %d, stdout %q, stderr %q; want the settings and the machine's CPU", code, out, errOut)
	}
	if code, _, errOut := e.ax("", "bench", "--count", "0"); code != 1 || !strings.HasPrefix(errOut, "ax: --count 0") {
		t.Errorf("bench --count 0: exit %d, stderr %q", code, errOut)
	}
}

// TestPrintBenchMachineCPU: a run shorter than /proc/stat's tick says the
// CPU went unmeasured instead of leaving the line out or printing 0 µs.
func TestPrintBenchMachineCPU(t *testing.T) {
	t.Parallel()
	zero, some := 0.0, 97.0
	for _, tt := range []struct {
		cpu  *float64
		want string
	}{
		{nil, "machine CPU  not read (no /proc/stat)"},
		{&zero, "machine CPU  not measured: the run took less than /proc/stat's 10ms a core (fire more instances)"},
		{&some, "machine CPU  97 µs per instance (2 cores, /proc/stat: every process on this machine)"},
	} {
		var out bytes.Buffer
		cmd := &cobra.Command{}
		cmd.SetOut(&out)
		if err := printBench(cmd, benchResult{Task: benchTaskName, Cores: 2, MachineCPUPerInstanceUS: tt.cpu}); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(strings.Fields(out.String()), " "); !strings.Contains(got, strings.Join(strings.Fields(tt.want), " ")) {
			t.Errorf("printBench with machine CPU %v printed %q, want a line %q", tt.cpu, out.String(), tt.want)
		}
	}
}

func TestMeasure(t *testing.T) {
	t.Parallel()
	base := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	var ins []schemas.Instance
	for i := range 100 {
		fired := base.Add(time.Duration(i) * 10 * time.Millisecond)
		started := fired.Add(time.Duration(i+1) * time.Millisecond)
		finished := started.Add(time.Millisecond)
		ins = append(ins, schemas.Instance{State: schemas.StateSucceeded, FiredAt: fired, StartedAt: &started, FinishedAt: &finished})
	}
	ins[0].State = schemas.StateFailed
	r := measure("t", ins, 2*time.Second)
	// Fired over 990 ms, the last started 100 ms after its firing, finished 1 ms later.
	if r.Instances != 100 || r.Succeeded != 99 || r.FiresPerSecond != 50 || math.Abs(r.Seconds-1.091) > 1e-9 ||
		r.LatencyP50MS != 50 || r.LatencyP99MS != 99 {
		t.Errorf("measure = %+v", r)
	}
	if p := percentile(nil, 50); p != 0 {
		t.Errorf("percentile of nothing = %v", p)
	}
}

func TestProgressBar(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	p := newProgressBar(&b, true, 4, "ended")
	p.Step("1 SUCCEEDED")
	p.Step("2 SUCCEEDED")
	p.Finish()
	want := "\r[------------------------------] 0/4 ended" +
		"\r[#######-----------------------] 1/4 ended" +
		"\r[###############---------------] 2/4 ended\n"
	if b.String() != want {
		t.Errorf("on a terminal:\n%q\nwant\n%q", b.String(), want)
	}
	b.Reset()
	p = newProgressBar(&b, false, 4, "ended")
	p.Step("1 SUCCEEDED")
	p.Step("2 FAILED")
	p.Finish()
	if b.String() != "1 SUCCEEDED\n2 FAILED\n" {
		t.Errorf("off a terminal: %q", b.String())
	}
}

// TestOutputFormats: -o yaml prints what -o json does, as YAML.
func TestOutputFormats(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	e.apply(reportTask)
	asJSON := e.mustAx("task", "list", "-o", "json")
	asYAML := e.mustAx("task", "list", "-o", "yaml")
	converted, err := yaml.JSONToYAML([]byte(asJSON))
	if err != nil || string(converted) != asYAML {
		t.Errorf("-o yaml printed\n%s\nwant\n%s(%v)", asYAML, converted, err)
	}
	if out := e.mustAx("task", "list"); !strings.HasPrefix(out, "NAME") || strings.Contains(out, " \n") {
		t.Errorf("table: %q", out)
	}
}
