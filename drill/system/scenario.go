package system

import (
	"context"
	"fmt"
	"time"
)

// Scenario is one fault drill: a set of processes, a load, and a fault
// injected while the load runs.
type Scenario struct {
	// Name is what --scenario selects.
	Name string
	// Description says what the fault is and what AX must do about it.
	Description string
	// Dispatchers and Executors are how many of each run (at least 1
	// dispatcher); Trigger runs an ax trigger too.
	Dispatchers, Executors int
	Trigger                bool
	// Cron replaces the firings of the load with a cron trigger that fires
	// every second (the trigger service runs it).
	Cron bool
	// Hash routes the load with dispatch strategy hash over 16 keys.
	Hash bool
	// Poison sends 1 % of the load to a task whose handler always panics.
	Poison bool
	// Killer makes the poison task's handler end its process (os.Exit) on
	// every attempt, after working 300 ms beside the load; the fault fires
	// it. The scenario checks that it is quarantined, and the poison's
	// worker deaths it took, and that no innocent attempt was spent.
	Killer bool
	// Supervise replaces an executor that exits by itself at once, as a
	// process supervisor would, until the scenario has been judged; each
	// exit is a crash.
	Supervise bool
	// MaxAttempts is the work task's max_attempts (default 10: more than
	// any fault takes).
	MaxAttempts int
	// CrashRecovery: the fault kills (or stops) executors; the recovery
	// time is from the fault to the next attempt of each attempt it cut
	// short, and must stay within lease TTL + 1 s.
	CrashRecovery bool
	// Stale: the fault makes stale reports, which the dispatcher must
	// refuse (at least one refused, none accepted).
	Stale bool
	// NoRetries: no attempt may need a second one (cron without executors:
	// no retry storm when they return).
	NoRetries bool
	// Cluster runs the scenario against a JetStream cluster of
	// [ClusterNodes] nats-server processes, its streams and buckets at that
	// many replicas (a sandbox of its own, shared by the cluster
	// scenarios).
	Cluster bool
	// Fault injects the fault while the load runs, restores what it broke
	// before it returns, and notes each fault with r.fault. ctx ends with
	// the load.
	Fault func(ctx context.Context, r *run) error
}

// Scenarios returns every scenario, in the order the drill runs them.
func Scenarios() []Scenario {
	return []Scenario{
		{
			Name: "executor-kill", Description: "kill -9 of an executor every few seconds under load (3 executors, each replaced at once)",
			Dispatchers: 1, Executors: 3, CrashRecovery: true,
			Fault: func(ctx context.Context, r *run) error {
				period := max(3*time.Second, r.d/6)
				for i := 0; ; i++ {
					if !r.sleep(ctx, period) {
						return nil
					}
					workers := r.sb.Running(r.sc.Name + "-e")
					if len(workers) == 0 {
						return fmt.Errorf("no executor left to kill")
					}
					victim := r.busyExecutor(ctx, workers, workers[i%len(workers)])
					if err := r.killExecutor(victim); err != nil {
						return err
					}
					if err := r.startExecutor(); err != nil {
						return err
					}
				}
			},
		},
		{
			Name: "executors-all-killed", Description: "every executor killed with kill -9 at once, new ones started a lease TTL later",
			Dispatchers: 1, Executors: 3, CrashRecovery: true,
			Fault: func(ctx context.Context, r *run) error {
				if !r.sleep(ctx, r.d/3) {
					return nil
				}
				// Attempts in flight for sure, whatever the load.
				if ws, err := r.longRuns(ctx, 4, 10*time.Second); err != nil || ws == nil {
					return err
				}
				workers := r.sb.Running(r.sc.Name + "-e")
				for _, w := range workers {
					if err := r.killExecutor(w); err != nil {
						return err
					}
				}
				time.Sleep(r.sb.LeaseTTL())
				for range workers {
					if err := r.startExecutor(); err != nil {
						return err
					}
				}
				return nil
			},
		},
		{
			Name: "executor-sigstop", Description: "an executor stopped with SIGSTOP for two lease TTLs, then SIGCONT: its reports are stale and must be refused",
			Dispatchers: 1, Executors: 2, CrashRecovery: true, Stale: true,
			Fault: func(ctx context.Context, r *run) error {
				if !r.sleep(ctx, r.d/3) {
					return nil
				}
				// The victim runs attempts that end during the pause, so
				// that it may report them as soon as it continues, before
				// it notices its leases are lost; retried elsewhere at once,
				// they still run there then: the moment the dispatcher's
				// fencing must hold.
				workers, err := r.longRuns(ctx, 4, 3*r.sb.LeaseTTL()/2+time.Second)
				if err != nil || workers == nil {
					return err
				}
				victim := workers[0]
				p := r.sb.Proc(victim)
				if err := p.Pause(); err != nil {
					return err
				}
				r.crash(victim, time.Now())
				time.Sleep(2*r.sb.LeaseTTL() + time.Second)
				return p.Resume()
			},
		},
		{
			Name: "dispatcher-kill", Description: "kill -9 of one of two dispatchers every 20 s (at most a third of the duration), each started again a second later",
			Dispatchers: 2, Executors: 2,
			Fault: func(ctx context.Context, r *run) error {
				period := min(20*time.Second, r.d/3)
				for i := 0; ; i++ {
					if !r.sleep(ctx, period) {
						return nil
					}
					name := fmt.Sprintf("%s-d%d", r.sc.Name, i%2+1)
					if err := r.restart(context.WithoutCancel(ctx), name, time.Second); err != nil {
						return err
					}
				}
			},
		},
		{
			Name: "dispatcher-only-kill", Description: "kill -9 of the only dispatcher, started again 2 s later",
			Dispatchers: 1, Executors: 2,
			Fault: func(ctx context.Context, r *run) error {
				if !r.sleep(ctx, r.d/3) {
					return nil
				}
				return r.restart(context.WithoutCancel(ctx), r.sc.Name+"-d1", 2*time.Second)
			},
		},
		{
			Name: "dispatcher-alone-locked", Description: "kill -9 of the only dispatcher while its creation statements wait on firing keys held in PostgreSQL; " +
				"the statements commit after the kill, their attempts never published; a new dispatcher starts at once and each runs once",
			Dispatchers: 1, Executors: 2,
			Fault: func(ctx context.Context, r *run) error {
				if !r.sleep(ctx, r.d/3) {
					return nil
				}
				return r.restartWith(context.WithoutCancel(ctx), r.sc.Name+"-d1", 0, true)
			},
		},
		{
			Name: "nats-kill", Description: "kill -9 of the nats-server, started again on its store 2 s later",
			Dispatchers: 1, Executors: 2,
			Fault: func(ctx context.Context, r *run) error {
				if !r.sleep(ctx, r.d/3) {
					return nil
				}
				if err := r.sb.KillNATS(); err != nil {
					return err
				}
				r.fault("nats-server", time.Now())
				time.Sleep(2 * time.Second)
				return r.sb.StartNATS(context.WithoutCancel(ctx))
			},
		},
		{
			Name: "postgres-crash", Description: "PostgreSQL restarted with pg_ctl -m immediate (a crash: WAL replay) while attempts run that report meanwhile",
			Dispatchers: 1, Executors: 2,
			Fault: func(ctx context.Context, r *run) error {
				if !r.sleep(ctx, r.d/3) {
					return nil
				}
				// Attempts in flight whose reports come while PostgreSQL
				// restarts: they must be recorded once it is back.
				if workers, err := r.longRuns(ctx, 4, time.Second); err != nil || workers == nil {
					return err
				}
				if err := r.sb.CrashPostgres(context.WithoutCancel(ctx)); err != nil {
					return err
				}
				r.fault("postgres", time.Now())
				return r.sb.StartPostgres(context.WithoutCancel(ctx))
			},
		},
		{
			Name: "postgres-outage", Description: "PostgreSQL stopped for two lease TTLs while attempts run that end meanwhile: their leases, retired, age into expiries",
			Dispatchers: 1, Executors: 2,
			Fault: func(ctx context.Context, r *run) error {
				if !r.sleep(ctx, r.d/3) {
					return nil
				}
				// Attempts that end, report and retire their leases during
				// the outage: their successes must not be lost to the reaper.
				if workers, err := r.longRuns(ctx, 4, r.sb.LeaseTTL()); err != nil || workers == nil {
					return err
				}
				if err := r.sb.StopPostgres(context.WithoutCancel(ctx)); err != nil {
					return err
				}
				r.fault("postgres", time.Now())
				time.Sleep(2 * r.sb.LeaseTTL())
				return r.sb.StartPostgres(context.WithoutCancel(ctx))
			},
		},
		{
			Name: "cron-no-executors", Description: "no executor for half the duration while a cron trigger fires every second; then they return: no retry storm",
			Dispatchers: 1, Executors: 2, Trigger: true, Cron: true, NoRetries: true,
			Fault: func(ctx context.Context, r *run) error {
				if !r.sleep(ctx, r.d/4) {
					return nil
				}
				workers := r.sb.Running(r.sc.Name + "-e")
				for _, w := range workers {
					if err := r.sb.Proc(w).Stop(10 * time.Second); err != nil {
						return err
					}
				}
				r.fault("executors", time.Now())
				time.Sleep(r.d / 2)
				for range workers {
					if err := r.startExecutor(); err != nil {
						return err
					}
				}
				return nil
			},
		},
		{
			Name: "hash-worker-departs", Description: "a hash-routed executor killed with kill -9 for good: its keys move to the others",
			Dispatchers: 1, Executors: 3, Hash: true, CrashRecovery: true,
			Fault: func(ctx context.Context, r *run) error {
				if !r.sleep(ctx, r.d/3) {
					return nil
				}
				// The worker the key "long" is pinned to, while it runs one.
				workers, err := r.longRuns(ctx, 1, 10*time.Second)
				if err != nil || workers == nil {
					return err
				}
				return r.killExecutor(workers[0])
			},
		},
		{
			Name: "jetstream-full", Description: "JetStream's file store full for 40 s while attempts run and end: leases, reports, dispatches and firings refused; every final report kept until stored",
			Dispatchers: 1, Executors: 2,
			Fault: func(ctx context.Context, r *run) error {
				if !r.sleep(ctx, r.d/3) {
					return nil
				}
				// Attempts that end during the outage: their final
				// reports wait at their workers until JetStream takes
				// them, and their leases expire meanwhile.
				if workers, err := r.longRuns(ctx, 4, 3*time.Second); err != nil || workers == nil {
					return err
				}
				bg := context.WithoutCancel(ctx)
				used, err := r.sb.StoreUsed(bg)
				if err != nil {
					return err
				}
				// The store bounded a little above what is in it, then
				// filled: the restart is a fault of its own, which the
				// nats-kill scenario covers.
				if err := r.sb.RestartNATS(bg, used+LogsMaxBytes+(32<<20)); err != nil {
					return err
				}
				if _, err := r.sb.FillStore(bg); err != nil {
					return err
				}
				r.fault("jetstream-full", time.Now())
				// Longer than the 30 s an executor used to keep an unsent
				// final report.
				time.Sleep(40 * time.Second)
				if err := r.sb.FreeStore(bg); err != nil {
					return err
				}
				return r.sb.RestartNATS(bg, 0)
			},
		},
		{
			Name: "poison-kills-executor", Description: "a poison whose handler ends its process (os.Exit) on every attempt, beside the load on 3 supervised executors, max_attempts 3: " +
				"the poison is quarantined, no innocent attempt is spent by its deaths",
			Dispatchers: 1, Executors: 3, Killer: true, Supervise: true, MaxAttempts: 3,
			Fault: func(ctx context.Context, r *run) error {
				if !r.sleep(ctx, r.d/4) {
					return nil
				}
				if err := r.publish(r.pois, r.sc.Name+"-poison", 300*time.Millisecond, "poison"); err != nil {
					return fmt.Errorf("fire the poison: %w", err)
				}
				r.fault("poison", time.Now())
				return nil
			},
		},
		{
			Name: "cluster-leader-loss", Description: "on a 3-node JetStream cluster (streams at R3), kill -9 of the node that leads AX_DISPATCH while attempts run; " +
				"it starts again on its store 2 s later",
			Dispatchers: 1, Executors: 2, Cluster: true, Fault: leaderLoss,
		},
		{
			Name: "dispatcher-settings", Description: "on the 3-node cluster, a second dispatcher started without --replicas, --lease-ttl or any setting takes over the load: " +
				"the installed settings stay; a third with another --lease-ttl is refused",
			Dispatchers: 1, Executors: 2, Cluster: true, Fault: settingsOwner,
		},
		{
			Name: "poison", Description: "1 % of the load goes to a handler that always panics: it fails by its policy and holds up nothing",
			Dispatchers: 1, Executors: 2, Poison: true,
		},
	}
}
