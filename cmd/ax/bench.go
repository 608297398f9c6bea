package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/internal/cpustat"
	"github.com/ax-scheduler/ax/schemas"
)

// benchTask is the task ax bench applies when not given --task: a no-op
// that builtin.echo, which every executor serves, runs.
const benchTask = `task_name: ax-bench
owner: ax-bench
description: No-op task that ax bench fires; safe to delete.
execution:
  handler: builtin.echo
  timeout: 1m
`

// benchTaskName is the task_name of benchTask.
const benchTaskName = "ax-bench"

// benchResult is what ax bench measured; -o json and -o yaml print it.
type benchResult struct {
	Task      string `json:"task"`
	Instances int    `json:"instances"`
	Succeeded int    `json:"succeeded"`
	// FireSeconds is how long firing them all took, as ax saw it.
	FireSeconds float64 `json:"fire_seconds"`
	// FiresPerSecond is the rate the API took firings at.
	FiresPerSecond float64 `json:"fires_per_second"`
	// Seconds is from the first instance's fired_at to the last one's
	// finished_at, by the system's own clock.
	Seconds float64 `json:"seconds"`
	// InstancesPerSecond is Instances over Seconds.
	InstancesPerSecond float64 `json:"instances_per_second"`
	// LatencyP50MS and LatencyP99MS are percentiles of fired_at → started_at.
	LatencyP50MS float64 `json:"latency_p50_ms"`
	LatencyP99MS float64 `json:"latency_p99_ms"`
	// LatencyP999MS is the 99.9th percentile of fired_at → started_at.
	LatencyP999MS float64 `json:"latency_p999_ms"`
	// MachineCPUPerInstanceUS is the machine's busy CPU time from the
	// first firing until every instance ended, summed over its Cores and
	// read from /proc/stat, over Instances: every process of the machine
	// counts, so it is the system's cost only when ax bench runs on the
	// system's machine and nothing else does. Absent where /proc is
	// missing; zero when the run was shorter than /proc/stat's resolution
	// (cpustat.Tick), which is too short to measure.
	MachineCPUPerInstanceUS *float64 `json:"machine_cpu_us_per_instance,omitempty"`
	Cores                   int      `json:"cores"`
	// Postgres holds the durability settings of the system's PostgreSQL,
	// read when --database-url is given.
	Postgres *benchPostgres `json:"postgres,omitempty"`
}

// benchPostgres is the durability a PostgreSQL server reports.
type benchPostgres struct {
	Fsync             string `json:"fsync"`
	SynchronousCommit string `json:"synchronous_commit"`
	FullPageWrites    string `json:"full_page_writes"`
}

// readBenchPostgres reads the durability settings of the server at url.
func readBenchPostgres(ctx context.Context, url string) (*benchPostgres, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL to read its settings: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var p benchPostgres
	err = conn.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('synchronous_commit'), current_setting('full_page_writes')`).
		Scan(&p.Fsync, &p.SynchronousCommit, &p.FullPageWrites)
	if err != nil {
		return nil, fmt.Errorf("read PostgreSQL's settings: %w", err)
	}
	return &p, nil
}

func newBenchCmd(g *cli) *cobra.Command {
	var (
		count       int
		task        string
		timeout     time.Duration
		databaseURL string
		firing      benchFiring
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure throughput and firing-to-start latency against a running AX",
		Long: `Fire a task many times as fast as the API takes it (from a few connections at
once), at --rate firings a second, or in requests of --batch firings; wait until
every instance has ended, and print instances per second and the p50, p99 and
p99.9 latency from each instance's fired_at to its started_at. Each firing asks
the API to answer from the publish's acknowledgement (Prefer: respond-async)
rather than wait for its instance.

Without --task, ax bench applies (creates or updates) the task ax-bench, a no-op
bound to builtin.echo, which the executor of "ax dev" serves. Point it at a
running system: ax dev, or the services on their own. It needs an operator
token, and an admin one to apply ax-bench.

It also prints the machine's CPU time per instance (busy cores × seconds from
/proc/stat over the run, divided by the instances: run it on the system's
machine, with nothing else running, for that to be the system's cost) and,
given --database-url, the durability settings of the system's PostgreSQL. ax dev
runs the production settings: PostgreSQL with fsync on, leases of 30 s,
JetStream on file storage.

On a terminal it draws a progress bar; elsewhere it prints "ID STATE" as each
instance ends. It exits 2 if an instance ended other than SUCCEEDED and 3 if
they did not all end within --timeout.`,
		Example: `  ax dev &                                  # in another terminal
  ax bench
  ax bench --count 5000 -o json
  ax bench --rate 500 --count 2500
  ax bench --batch 1000 --count 20000
  ax bench --task resize-image --count 200`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			structured, err := g.json()
			if err != nil {
				return err
			}
			if count < 1 {
				return fmt.Errorf("--count %d: fire at least once", count)
			}
			if timeout <= 0 {
				return fmt.Errorf("--timeout %s: use a positive duration such as 30s or 10m", timeout)
			}
			ctx := cmd.Context()
			client := g.client()
			if task == "" {
				task = benchTaskName
				if _, err := client.ApplyTask(ctx, []byte(benchTask), "application/yaml"); err != nil {
					return g.apiError(fmt.Errorf("apply %s: %w", benchTaskName, err))
				}
			}
			var pg *benchPostgres
			if databaseURL != "" {
				if pg, err = readBenchPostgres(ctx, databaseURL); err != nil {
					return err
				}
			}
			out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
			cpuBefore, cpuErr := cpustat.ReadMachine()
			start := time.Now()
			if firing.rate < 0 || firing.batch < 0 || firing.batch > schemas.MaxTriggerBatch || (firing.rate > 0 && firing.batch > 0) {
				return fmt.Errorf("--rate %d, --batch %d: give a positive rate, or a batch of 1-%d firings a request, not both",
					firing.rate, firing.batch, schemas.MaxTriggerBatch)
			}
			res, err := firing.fire(ctx, client, task, wire.FireRequest{Operator: operatorName()}, count)
			if err != nil {
				return g.apiError(err)
			}
			fired := time.Since(start)
			fmt.Fprintf(errOut, "fired %s %d times in %s; waiting for the instances to end\n", task, count, fired.Round(time.Millisecond))

			waitCtx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			progressOut := out
			if structured {
				progressOut = errOut
			}
			bar := newProgressBar(progressOut, isTerminal(out), count, "ended")
			ins, err := g.waitMany(waitCtx, client, res, func(in schemas.Instance) {
				bar.Step(fmt.Sprintf("%d %s", in.ID, in.State))
			})
			bar.Finish()
			if err != nil {
				if errors.Is(err, context.DeadlineExceeded) {
					return &exitError{code: exitTimeout, err: fmt.Errorf("%d of the %d instances did not end within %s; are the dispatcher and an executor serving the task's handler running?",
						count-bar.done, count, timeout)}
				}
				return g.apiError(err)
			}
			r := measure(task, ins, fired)
			r.Postgres, r.Cores = pg, cpustat.Cores()
			if cpuAfter, err := cpustat.ReadMachine(); err == nil && cpuErr == nil && r.Instances > 0 {
				perInstance := float64(cpuAfter.Sub(cpuBefore).Busy.Microseconds()) / float64(r.Instances)
				r.MachineCPUPerInstanceUS = &perInstance
			}
			if structured {
				err = g.printData(out, r)
			} else {
				err = printBench(cmd, r)
			}
			if err != nil {
				return err
			}
			if r.Succeeded < r.Instances {
				return &exitError{code: exitNotSucceeded, err: fmt.Errorf("%d of the %d instances ended other than SUCCEEDED; see them with: ax instance list --task %s",
					r.Instances-r.Succeeded, r.Instances, task)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVarP(&count, "count", "n", 1000, "how many firings")
	f.StringVar(&task, "task", "", "fire this task instead of applying and firing ax-bench")
	f.IntVar(&firing.rate, "rate", 0, "fire at this many firings a second (each a request) instead of as fast as the API answers: the steady latency")
	f.IntVar(&firing.batch, "batch", 0, "fire in requests of this many firings (1-1000, one trigger message each): the API's burst")
	f.DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait for the instances to end")
	f.StringVar(&databaseURL, "database-url", os.Getenv("DATABASE_URL"),
		"the system's PostgreSQL, only to read and print its durability settings (env DATABASE_URL)")
	return cmd
}

// measure computes the bench's result from the ended instances and the
// time it took to fire them.
func measure(task string, ins []schemas.Instance, fired time.Duration) benchResult {
	r := benchResult{Task: task, Instances: len(ins), FireSeconds: fired.Seconds()}
	if fired > 0 {
		r.FiresPerSecond = float64(len(ins)) / fired.Seconds()
	}
	var first, last time.Time
	var latencies []time.Duration
	for _, in := range ins {
		if in.State == schemas.StateSucceeded {
			r.Succeeded++
		}
		if first.IsZero() || in.FiredAt.Before(first) {
			first = in.FiredAt
		}
		if in.FinishedAt != nil && in.FinishedAt.After(last) {
			last = *in.FinishedAt
		}
		if in.StartedAt != nil {
			latencies = append(latencies, in.StartedAt.Sub(in.FiredAt))
		}
	}
	if last.After(first) {
		r.Seconds = last.Sub(first).Seconds()
		r.InstancesPerSecond = float64(len(ins)) / r.Seconds
	}
	slices.Sort(latencies)
	r.LatencyP50MS = milliseconds(percentile(latencies, 50))
	r.LatencyP99MS = milliseconds(percentile(latencies, 99))
	r.LatencyP999MS = milliseconds(percentileOf(latencies, 999, 1000))
	return r
}

// percentile returns the p-th percentile of sorted by the nearest-rank
// method, or 0 for none.
func percentile(sorted []time.Duration, p int) time.Duration { return percentileOf(sorted, p, 100) }

// percentileOf returns the p/of-th quantile of sorted by the nearest-rank
// method, or 0 for none.
func percentileOf(sorted []time.Duration, p, of int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := (p*len(sorted) + of - 1) / of // ceil(p/of × n)
	return sorted[max(rank, 1)-1]
}

func milliseconds(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// printBench prints a bench result as a two-column table.
func printBench(cmd *cobra.Command, r benchResult) error {
	tw := newTable(cmd.OutOrStdout())
	fmt.Fprintf(tw, "task\t%s\n", r.Task)
	fmt.Fprintf(tw, "instances\t%d (%d succeeded)\n", r.Instances, r.Succeeded)
	fmt.Fprintf(tw, "fired in\t%.3fs (%.1f firings/s)\n", r.FireSeconds, r.FiresPerSecond)
	fmt.Fprintf(tw, "ended in\t%.3fs, first fired_at to last finished_at\n", r.Seconds)
	fmt.Fprintf(tw, "throughput\t%.1f instances/s\n", r.InstancesPerSecond)
	fmt.Fprintf(tw, "latency p50\t%.1f ms, fired_at to started_at\n", r.LatencyP50MS)
	fmt.Fprintf(tw, "latency p99\t%.1f ms\n", r.LatencyP99MS)
	fmt.Fprintf(tw, "latency p99.9\t%.1f ms\n", r.LatencyP999MS)
	switch cpu := r.MachineCPUPerInstanceUS; {
	case cpu == nil:
		fmt.Fprintf(tw, "machine CPU\tnot read (no /proc/stat)\n")
	case *cpu == 0:
		fmt.Fprintf(tw, "machine CPU\tnot measured: the run took less than /proc/stat's %s a core (fire more instances)\n", cpustat.Tick)
	default:
		fmt.Fprintf(tw, "machine CPU\t%.0f µs per instance (%d cores, /proc/stat: every process on this machine)\n", *cpu, r.Cores)
	}
	if r.Postgres != nil {
		fmt.Fprintf(tw, "postgres\tfsync=%s synchronous_commit=%s full_page_writes=%s\n", r.Postgres.Fsync, r.Postgres.SynchronousCommit, r.Postgres.FullPageWrites)
	} else {
		fmt.Fprintf(tw, "postgres\tsettings not read (pass --database-url to print them)\n")
	}
	return tw.Flush()
}
