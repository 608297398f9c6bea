// Command peers measures AX beside River on the same machine and the same
// PostgreSQL, round-robin, and prints the medians and AX/River ratios:
//
//	cd bench && go run ./peers -rounds 3      # or: make bench-peers
//
// It starts one private PostgreSQL cluster from the local installation
// (fsync on unless -fsync off), builds AX's pipeline benchmarks
// (internal/e2e) once, and then, in each round, runs five subjects on fresh
// databases of that cluster, alternating which system goes first:
//
//   - AX burst: BenchmarkPipelineThroughput, -n no-op firings at once, in
//     bulk (1,000 firings a trigger message, as River's InsertMany inserts
//     1,000 jobs a statement), first firing → every instance ended, with the
//     production lease TTL (30 s) and JetStream on file storage;
//   - AX audited: the AX burst with the auditor running beside it, as a
//     deployment runs it (its relay publishes every transition to
//     AX_AUDIT, its monitor reads them back), first firing → every
//     transition and operator action on AX_AUDIT;
//   - River burst: -n no-op jobs inserted with InsertMany in batches of
//     1,000, MaxWorkers 1,000, first insert → every job completed;
//   - AX steady: BenchmarkPipelineLatency at -rate firings a second for
//     -seconds, firing → handler start, without its hop listener (a
//     subscriber to every firing, dispatch and lease, which a deployment
//     does not have);
//   - River steady: -rate jobs a second (an InsertMany every 10 ms),
//     FetchCooldown 10 ms, insert → handler start;
//   - AX audited 1: the audited burst with a trigger message a firing;
//   - AX API: BenchmarkAPIPath with the auditor, as ax bench runs it: -rate
//     HTTP firings a second for -seconds, firing → handler start, then -n
//     firings in requests of 1,000 (ax bench --batch 1000).
//
// AX steady runs with the auditor too. At the end it prints the medians,
// every round's steady p50/p99/p99.9, and each goal of issue #28 met or
// missed (docs/benchmarks.md lists them).
//
// Both wait for the end the same way (a count query polled every 1–50 ms).
// CPU per job is the machine's busy time over the run (from /proc/stat)
// divided by the jobs; "own" CPU is the benchmark's process plus its
// PostgreSQL server only, which other work on the machine does not inflate.
//
// River lives in this module (bench/), not in AX's: AX's go.mod never
// requires it.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ax-scheduler/ax/internal/cpustat"
	"github.com/ax-scheduler/ax/internal/pgcluster"
)

func main() {
	rounds := flag.Int("rounds", 3, "rounds of the five subjects")
	n := flag.Int("n", 20000, "jobs in each burst")
	rate := flag.Int("rate", 500, "jobs per second of the steady runs")
	seconds := flag.Int("seconds", 5, "length of each steady run in seconds")
	fsync := flag.String("fsync", "on", "PostgreSQL durability: on (production) or off")
	flag.Parse()
	if *fsync != "on" && *fsync != "off" {
		fmt.Fprintf(os.Stderr, "peers: -fsync %q: use on or off\n", *fsync)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *rounds, *n, *rate, *seconds, *fsync == "off"); err != nil {
		fmt.Fprintf(os.Stderr, "peers: %v\n", err)
		os.Exit(1)
	}
}

// result is one subject's figures in one round.
type result struct {
	// Rate is jobs/s for a burst, the submit rate for a steady run.
	Rate           float64
	P50, P99, P999 float64 // ms, submit → handler start (steady runs)
	ReqP50, ReqP99 float64 // ms, an API request (AX API)
	APIBurst       float64 // instances/s of the API's burst (AX API)
	MachineCPU     float64 // µs per job, the whole machine
	OwnCPU         float64 // µs per job, the benchmark process and PostgreSQL
	Faults         float64 // page faults per job, the benchmark process and PostgreSQL
	Succeeded      int
	Failed         int
	// Settings is the settings line AX's benchmark printed.
	Settings string
}

func run(ctx context.Context, rounds, n, rate, seconds int, fast bool) error {
	tmp, err := os.MkdirTemp("", "ax-peers-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// As root, the cluster runs as user postgres, which must reach it.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	root, err := axRoot()
	if err != nil {
		return err
	}
	axTest := filepath.Join(tmp, "e2e.test")
	fmt.Fprintf(os.Stderr, "building AX's pipeline benchmarks (internal/e2e)\n")
	build := exec.CommandContext(ctx, "go", "test", "-c", "-o", axTest, "./internal/e2e")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("build AX's benchmarks: %w", err)
	}

	pg, err := pgcluster.Start(ctx, pgcluster.Options{Dir: filepath.Join(tmp, "pg"), Fast: fast})
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := pg.Stop(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "peers: %v\n", err)
		}
	}()
	c := &cluster{pg: pg}
	settings, err := c.settings(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("settings: %s; River %s; %d CPUs, load average %s at the start\n",
		settings, riverVersion(), cpustat.Cores(), cpustat.LoadAverage())
	fmt.Printf("AX's settings are those its benchmarks print, below (by default the production lease TTL of 30 s, JetStream on file storage)\n")
	fmt.Printf("subjects: burst of %d no-op jobs (first submit → last completion; AX fires in bulk, 1,000 firings a trigger message, River inserts with InsertMany, 1,000 jobs a statement); AX audited: the AX burst with the auditor beside it (first submit → every transition on AX_AUDIT), AX audited 1 the same with a trigger message a firing; steady %d/s for %d s (submit → handler start), AX's with the auditor and without the hop listener of its standalone run; AX API: the same rate through the HTTP API (ax bench --rate), then %d firings in requests of 1,000 (ax bench --batch 1000)\n\n", n, rate, seconds, n)

	subjects := []string{"AX burst", "AX audited", "AX audited 1", "River burst", "AX steady", "River steady", "AX API"}
	results := map[string][]result{}
	began := time.Now()
	printedAX := false
	for r := 1; r <= rounds; r++ {
		order := []string{"AX burst", "River burst", "AX audited", "AX audited 1", "AX steady", "River steady", "AX API"}
		if r%2 == 0 {
			order = []string{"River burst", "AX audited 1", "AX audited", "AX burst", "River steady", "AX steady", "AX API"}
		}
		for _, subject := range order {
			if err := ctx.Err(); err != nil {
				return err
			}
			db := fmt.Sprintf("peers_%d_%s", r, strings.ReplaceAll(strings.ToLower(subject), " ", "_"))
			var res result
			switch subject {
			case "AX burst":
				res, err = axBench(ctx, c, axTest, "PipelineThroughput", []string{"AX_BENCH_N=" + strconv.Itoa(n), "AX_BENCH_FIRE_BATCH=1000"})
			case "AX audited":
				res, err = axBench(ctx, c, axTest, "PipelineThroughput", []string{"AX_BENCH_N=" + strconv.Itoa(n), "AX_BENCH_FIRE_BATCH=1000",
					"AX_BENCH_AUDITOR=1"})
			case "AX audited 1":
				res, err = axBench(ctx, c, axTest, "PipelineThroughput", []string{"AX_BENCH_N=" + strconv.Itoa(n), "AX_BENCH_FIRE_BATCH=1",
					"AX_BENCH_AUDITOR=1"})
			case "AX steady":
				res, err = axBench(ctx, c, axTest, "PipelineLatency", []string{"AX_BENCH_RATE=" + strconv.Itoa(rate), "AX_BENCH_SECONDS=" + strconv.Itoa(seconds),
					"AX_BENCH_AUDITOR=1", "AX_BENCH_HOPS=0"})
			case "AX API":
				res, err = axBench(ctx, c, axTest, "APIPath", []string{"AX_BENCH_RATE=" + strconv.Itoa(rate), "AX_BENCH_SECONDS=" + strconv.Itoa(seconds),
					"AX_BENCH_N=" + strconv.Itoa(n), "AX_BENCH_AUDITOR=1"})
			case "River burst":
				res, err = riverBurst(ctx, c, db, n)
			case "River steady":
				res, err = riverSteady(ctx, c, db, rate, seconds)
			}
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", r, subject, err)
			}
			if strings.HasPrefix(subject, "River") {
				if err := c.dropDatabase(ctx, db); err != nil {
					return err
				}
			}
			if res.Settings != "" && !printedAX {
				fmt.Printf("AX settings: %s\n", res.Settings)
				printedAX = true
			}
			results[subject] = append(results[subject], res)
			fmt.Printf("round %d  %-13s %s\n", r, subject, res.format(subject))
		}
	}
	fmt.Printf("\n%d rounds in %s; load average %s at the end\n\n", rounds, time.Since(began).Round(time.Second), cpustat.LoadAverage())

	med := func(subject string, f func(result) float64) float64 {
		var v []float64
		for _, r := range results[subject] {
			v = append(v, f(r))
		}
		return median(v)
	}
	rateOf := func(r result) float64 { return r.Rate }
	p50 := func(r result) float64 { return r.P50 }
	p99 := func(r result) float64 { return r.P99 }
	machine := func(r result) float64 { return r.MachineCPU }
	own := func(r result) float64 { return r.OwnCPU }
	p999 := func(r result) float64 { return r.P999 }
	fmt.Printf("medians of %d rounds          %12s %12s %10s\n", rounds, "AX", "River", "AX/River")
	row := func(name, ax, river string, f func(result) float64, unit string) {
		a, b := med(ax, f), med(river, f)
		fmt.Printf("%-29s %12s %12s %10s\n", name, fmt.Sprintf("%.1f%s", a, unit), fmt.Sprintf("%.1f%s", b, unit), ratio(a, b))
	}
	row("burst jobs/s (no auditor)", "AX burst", "River burst", rateOf, "")
	row("burst own CPU/job (no aud.)", "AX burst", "River burst", own, "µs")
	row("audited bulk jobs/s", "AX audited", "River burst", rateOf, "")
	row("audited 1/msg jobs/s", "AX audited 1", "River burst", rateOf, "")
	fmt.Printf("%-29s %12s\n", "AX audited bulk ÷ AX burst", fmt.Sprintf("%.2f", med("AX audited", rateOf)/med("AX burst", rateOf)))
	row("audited bulk machine CPU/job", "AX audited", "River burst", machine, "µs")
	row("audited bulk own CPU/job", "AX audited", "River burst", own, "µs")
	row("audited 1/msg machine CPU/job", "AX audited 1", "River burst", machine, "µs")
	row("audited bulk page faults/job", "AX audited", "River burst", func(r result) float64 { return r.Faults }, "")
	row("steady start p50", "AX steady", "River steady", p50, "ms")
	row("steady start p99", "AX steady", "River steady", p99, "ms")
	row("steady start p99.9", "AX steady", "River steady", p999, "ms")
	row("steady own CPU/job", "AX steady", "River steady", own, "µs")
	fmt.Printf("%-29s %12s\n", "API start p50 / p99", fmt.Sprintf("%.1f / %.1fms", med("AX API", p50), med("AX API", p99)))
	fmt.Printf("%-29s %12s\n", "API burst (--batch 1000)", fmt.Sprintf("%.0f/s", med("AX API", func(r result) float64 { return r.APIBurst })))
	printGoals(results, med)
	for _, s := range subjects {
		for i, r := range results[s] {
			if r.Failed > 0 {
				fmt.Printf("warning: round %d, %s: %d jobs failed\n", i+1, s, r.Failed)
			}
		}
	}
	return nil
}

func (r result) format(subject string) string {
	head := fmt.Sprintf("%8.1f jobs/s", r.Rate)
	switch {
	case strings.HasSuffix(subject, "steady"):
		head = fmt.Sprintf("p50 %6.1f ms  p99 %6.1f ms  p99.9 %6.1f ms", r.P50, r.P99, r.P999)
	case subject == "AX API":
		head = fmt.Sprintf("p50 %6.1f ms  p99 %6.1f ms  p99.9 %6.1f ms  request p50 %.1f ms p99 %.1f ms  burst %.0f/s",
			r.P50, r.P99, r.P999, r.ReqP50, r.ReqP99, r.APIBurst)
	}
	return fmt.Sprintf("%s  CPU/job machine %6.0f µs, own %5.0f µs, page faults %4.1f  (%d succeeded, %d failed)",
		head, r.MachineCPU, r.OwnCPU, r.Faults, r.Succeeded, r.Failed)
}

// printGoals says, for each goal of issue #28 (docs/benchmarks.md), what
// was measured and whether it was met.
func printGoals(results map[string][]result, med func(string, func(result) float64) float64) {
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	rate := func(r result) float64 { return r.Rate }
	river := med("River burst", rate)
	fmt.Printf("\ngoals (AX as deployed: the auditor on, fsync on, lease TTL 30 s, JetStream file storage)\n")
	goal := func(name string, ok bool, got string) { fmt.Printf("  %-6s %-58s %s\n", verdict(ok), name, got) }
	bulk, single := med("AX audited", rate), med("AX audited 1", rate)
	goal("audited burst, bulk firings ≥ 1.5 × River InsertMany", bulk >= 1.5*river, fmt.Sprintf("%.2f ×", bulk/max(river, 1)))
	goal("audited burst, a message a firing ≥ 1.25 × River InsertMany", single >= 1.25*river, fmt.Sprintf("%.2f ×", single/max(river, 1)))
	machine := func(r result) float64 { return r.MachineCPU }
	own := func(r result) float64 { return r.OwnCPU }
	axCPU, riverCPU := med("AX audited", machine), med("River burst", machine)
	goal("audited machine CPU per job ≤ River's", axCPU <= riverCPU, fmt.Sprintf("%.0f µs vs %.0f µs (own: %.0f vs %.0f)",
		axCPU, riverCPU, med("AX audited", own), med("River burst", own)))
	p50 := med("AX steady", func(r result) float64 { return r.P50 })
	goal("steady 500/s p50 ≤ 3 ms (median of rounds)", p50 <= 3, fmt.Sprintf("%.1f ms", p50))
	var p99s []string
	every := true
	for _, r := range results["AX steady"] {
		p99s = append(p99s, fmt.Sprintf("%.1f", r.P99))
		every = every && r.P99 <= 10
	}
	goal("steady 500/s p99 ≤ 10 ms in every round", every, strings.Join(p99s, " / ")+" ms")
	apiP50 := med("AX API", func(r result) float64 { return r.P50 })
	apiP99 := med("AX API", func(r result) float64 { return r.P99 })
	goal("API (ax bench) p50 ≤ 5 ms at 500/s", apiP50 <= 5, fmt.Sprintf("%.1f ms", apiP50))
	goal("API (ax bench) p99 ≤ 20 ms at 500/s", apiP99 <= 20, fmt.Sprintf("%.1f ms", apiP99))
	burst := med("AX API", func(r result) float64 { return r.APIBurst })
	goal("API burst with --batch ≥ 5,000/s", burst >= 5000, fmt.Sprintf("%.0f/s", burst))
	fmt.Printf("  (the history goals — mover rate, list latency with 10 M in history — are make bench-history's)\n")
}

func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// axRoot returns the folder of AX's main module: the parent of this one.
func axRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("find the bench module: %w", err)
	}
	root := filepath.Dir(filepath.Dir(strings.TrimSpace(string(out))))
	if _, err := os.Stat(filepath.Join(root, "internal", "e2e")); err != nil {
		return "", fmt.Errorf("AX's module is not at %s: run peers from the bench folder of the repository", root)
	}
	return root, nil
}

func riverVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/riverqueue/river" {
				return d.Version
			}
		}
	}
	return "(version unknown)"
}

// axBench runs one of AX's pipeline benchmarks from the test binary at
// path, on a fresh database of the cluster, and takes its figures from the
// benchmark's result line.
func axBench(ctx context.Context, c *cluster, path, name string, env []string) (result, error) {
	cmd := exec.CommandContext(ctx, path, "-test.run", "^$", "-test.bench", "^Benchmark"+name+"$", "-test.benchtime", "1x")
	cmd.Env = append(os.Environ(), append(env, "TEST_DATABASE_URL="+c.pg.URL("postgres"), "TEST_DATABASE_LOG="+c.pg.LogFile())...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return result{}, fmt.Errorf("%s: %w:\n%s", name, err, out.String())
	}
	sc := bufio.NewScanner(&out)
	var settings string
	for sc.Scan() {
		// The result line: the name with -GOMAXPROCS, then the figures.
		line := sc.Text()
		if _, v, ok := strings.Cut(line, ": settings: "); ok {
			settings = v
			continue
		}
		if f := strings.Fields(line); len(f) == 0 || (f[0] != "Benchmark"+name && !strings.HasPrefix(f[0], "Benchmark"+name+"-")) {
			continue
		}
		m := metrics(line)
		res := result{
			Rate: m["instances/s"], P50: m["p50_start_ms"], P99: m["p99_start_ms"], P999: m["p999_start_ms"],
			ReqP50: m["p50_request_ms"], ReqP99: m["p99_request_ms"], APIBurst: m["api_burst_instances/s"],
			MachineCPU: m["machine_cpu_us/inst"], OwnCPU: m["own_cpu_us/inst"], Faults: m["faults/inst"],
			Succeeded: int(m["succeeded"]), Failed: int(m["failed"]), Settings: settings,
		}
		if v, ok := m["fired/s"]; ok {
			res.Rate = v
		}
		if v, ok := m["audited_instances/s"]; ok {
			res.Rate = v
		}
		return res, nil
	}
	return result{}, fmt.Errorf("%s printed no result line:\n%s", name, out.String())
}

// metrics parses the "value unit" pairs of a benchmark result line.
func metrics(line string) map[string]float64 {
	f := strings.Fields(line)
	m := map[string]float64{}
	// f[0] is the name, f[1] the iterations; then value unit pairs.
	for i := 2; i+1 < len(f); i += 2 {
		if v, err := strconv.ParseFloat(f[i], 64); err == nil {
			m[f[i+1]] = v
		}
	}
	return m
}

// cluster is the PostgreSQL every subject runs on.
type cluster struct {
	pg *pgcluster.Cluster
}

func (c *cluster) settings(ctx context.Context) (string, error) {
	conn, err := pgx.Connect(ctx, c.pg.URL("postgres"))
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var fsync, syncCommit, fullPages, version string
	err = conn.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('synchronous_commit'),
       current_setting('full_page_writes'), current_setting('server_version')`).Scan(&fsync, &syncCommit, &fullPages, &version)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("postgres %s fsync=%s synchronous_commit=%s full_page_writes=%s", version, fsync, syncCommit, fullPages), nil
}

func (c *cluster) createDatabase(ctx context.Context, db string) (string, error) {
	conn, err := pgx.Connect(ctx, c.pg.URL("postgres"))
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database %s: %w", db, err)
	}
	return c.pg.URL(db), nil
}

func (c *cluster) dropDatabase(ctx context.Context, db string) error {
	conn, err := pgx.Connect(ctx, c.pg.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", db, err)
	}
	return nil
}

// meter measures the CPU of a River run: the machine's, and that of this
// process and the PostgreSQL server.
type meter struct {
	c          *cluster
	postmaster int
	machine    cpustat.Machine
	own        cpustat.Usage
}

func (c *cluster) startMeter() (*meter, error) {
	pid, err := postmasterPID(c.pg.Dir())
	if err != nil {
		return nil, err
	}
	m := &meter{c: c, postmaster: pid}
	m.machine, m.own, err = m.read()
	return m, err
}

func (m *meter) read() (cpustat.Machine, cpustat.Usage, error) {
	machine, err := cpustat.ReadMachine()
	if err != nil {
		return cpustat.Machine{}, cpustat.Usage{}, err
	}
	self, err := cpustat.Self()
	if err != nil {
		return cpustat.Machine{}, cpustat.Usage{}, err
	}
	pg, err := cpustat.Tree(m.postmaster)
	if err != nil {
		return cpustat.Machine{}, cpustat.Usage{}, err
	}
	return machine, cpustat.Usage{CPU: self.CPU + pg.CPU, Faults: self.Faults + pg.Faults}, nil
}

func (m *meter) stop(res *result, n int) error {
	machine, own, err := m.read()
	if err != nil {
		return err
	}
	res.MachineCPU = machine.Sub(m.machine).Busy.Seconds() / float64(n) * 1e6
	d := own.Sub(m.own)
	res.OwnCPU = d.CPU.Seconds() / float64(n) * 1e6
	res.Faults = float64(d.Faults) / float64(n)
	return nil
}

// postmasterPID reads the server's pid from the first line of its
// postmaster.pid.
func postmasterPID(dir string) (int, error) {
	data, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("read the PostgreSQL server's pid: %w", err)
	}
	line, _, _ := strings.Cut(string(data), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return 0, errors.New("read the PostgreSQL server's pid: postmaster.pid does not start with one")
	}
	return pid, nil
}
