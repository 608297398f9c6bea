package system_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/ax-scheduler/ax/drill/system"
	"github.com/ax-scheduler/ax/drill/system/systemtest"
	"github.com/ax-scheduler/ax/internal/wait/waittest"
)

func TestMain(m *testing.M) {
	waittest.VerifyTestMain(m, goleak.Cleanup(func(int) { systemtest.Remove() }))
}

// knownDefects are the checks, by scenario, that fail now and then for a
// defect not yet fixed; the test logs them instead of failing. Each names
// its defect; docs/drill.md lists them. Every other check of the scenario
// still fails the test.
var knownDefects = map[[2]string]string{}

// TestEveryScenario runs the short version of every scenario of ax drill
// system (seconds, not minutes) against its own sandbox and fails with
// each check a scenario failed: a regression of AX's fault handling fails
// here. AX_DRILL_SCENARIOS (comma-separated) runs only those.
func TestEveryScenario(t *testing.T) {
	var names []string
	if v := os.Getenv("AX_DRILL_SCENARIOS"); v != "" {
		names = strings.Split(v, ",")
	}
	runScenarios(t, names)
}

// TestPoisonKillsItsExecutor runs poison-kills-executor alone: a handler
// that ends its process (os.Exit) on every attempt, beside innocent work
// with max_attempts 3 on three executor processes that a supervisor
// restarts. Every innocent instance must succeed, each succeeded attempt
// run once in the ledger, no innocent attempt spent by the poison's
// deaths, and the poison quarantined (with its suspect event) after at
// most three deaths. Before the reaper told the suspect from its
// neighbours, every death spent each neighbour's attempt and retried
// them all at once, together.
func TestPoisonKillsItsExecutor(t *testing.T) {
	runScenarios(t, []string{"poison-kills-executor"})
}

func runScenarios(t *testing.T, names []string) {
	results, err := system.Run(context.Background(), system.Options{
		Binary:    systemtest.BuildAX(t),
		Scenarios: names,
		Duration:  6 * time.Second,
		Rate:      20,
		LeaseTTL:  2 * time.Second,
		// A busy CI machine delays the reaper by seconds (a lease TTL + 1 s
		// bound failed at load 40); a broken one takes minutes.
		RecoverySlack: 5 * time.Second,
		Logger:        zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel),
	})
	for _, r := range results {
		t.Logf("%s: fired %d, created %d, lost %d, stuck %d, duplicates %d, stale refused %d accepted %d, illegal %d, "+
			"spent without a run %d, side effects doubled %d, worker deaths %d, poison runs %d, quarantined %d, recovery %s, in %s",
			r.Scenario, r.Fired, r.Created, r.Lost, r.Stuck, r.Duplicates, r.StaleRefused, r.StaleAccepted, r.Illegal,
			r.SpentWithoutRun, r.DoubledEffects, r.WorkerDeaths, r.PoisonRuns, r.Quarantined, r.Recovery, r.Wall)
		for _, c := range r.Checks {
			if c.Pass {
				continue
			}
			if why, known := knownDefects[[2]string{r.Scenario, c.Name}]; known {
				t.Logf("KNOWN DEFECT, not failing the test: %s: %s: expected %s, observed %s: %s",
					r.Scenario, c.Name, c.Expected, c.Observed, why)
				continue
			}
			t.Errorf("%s: %s: expected %s, observed %s", r.Scenario, c.Name, c.Expected, c.Observed)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}
