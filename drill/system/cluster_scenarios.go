package system

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ax-scheduler/ax/drill"
	"github.com/ax-scheduler/ax/streams"
)

// leaderLoss is the fault of the cluster-leader-loss scenario: under the
// load, with attempts in flight, the node that leads AX_DISPATCH is killed
// with kill -9; the stream elects another leader among the two left, and
// the node starts again on its store 2 s later and catches up.
func leaderLoss(ctx context.Context, r *run) error {
	if !r.sleep(ctx, r.d/3) {
		return nil
	}
	bg := context.WithoutCancel(ctx)
	// Attempts whose leases and reports cross the election.
	if workers, err := r.longRuns(ctx, 4, r.sb.LeaseTTL()); err != nil || workers == nil {
		return err
	}
	stream := r.sb.Top.DispatchStream()
	leader, err := r.sb.StreamLeader(bg, stream)
	if err != nil {
		return err
	}
	if err := r.sb.KillNode(leader); err != nil {
		return err
	}
	killed := time.Now()
	r.fault("nats node "+NodeName(leader)+", leader of "+stream, killed)
	// The two nodes left elect a leader: the stream answers again.
	next, elected := -1, time.Duration(0)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		info, err := r.sb.streamInfo(bg, stream)
		if err != nil || info.Cluster == nil {
			continue
		}
		for i := range ClusterNodes {
			if i != leader && info.Cluster.Leader == NodeName(i) {
				next, elected = i, time.Since(killed)
			}
		}
		if next >= 0 {
			break
		}
	}
	observed := "none within a minute"
	if next >= 0 {
		observed = fmt.Sprintf("%s, then %s after %v", NodeName(leader), NodeName(next), elected.Round(time.Millisecond))
	}
	r.check(drill.Check{Name: "leader of " + stream + " killed, another elected", Expected: "another node", Observed: observed, Pass: next >= 0})
	time.Sleep(2 * time.Second)
	return r.sb.StartNode(bg, leader)
}

// settingsOwner is the fault of the dispatcher-settings scenario: beside
// the dispatcher that installed the topology (its lease TTL, its
// replicas), a second one starts with no topology flag at all and takes
// over the load; a third states another lease TTL and must be refused.
// The installed settings must not change.
func settingsOwner(ctx context.Context, r *run) error {
	if !r.sleep(ctx, r.d/4) {
		return nil
	}
	bg := context.WithoutCancel(ctx)
	before, err := r.sb.installedSettings(bg)
	if err != nil {
		return err
	}
	leases := "KV_" + r.sb.Top.LeasesBucket()
	want := fmt.Sprintf("R%d max age %v", r.sb.Replicas(), r.sb.LeaseTTL())
	r.check(drill.Check{Name: "installed " + leases, Expected: want + " (the first dispatcher's)", Observed: before[leases],
		Pass: strings.HasPrefix(before[leases], want+" ")})

	second := r.sc.Name + "-d2"
	p2, err := r.sb.StartDispatcherWith(second)
	if err != nil {
		return err
	}
	r.fault(second+" started without --lease-ttl, --replicas or any setting", time.Now())
	// Issue 25 saw such a dispatcher turn R3 into R1 within 5 s: watch
	// that long for any change.
	var changed []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && len(changed) == 0; time.Sleep(250 * time.Millisecond) {
		now, err := r.sb.installedSettings(bg)
		if err != nil {
			continue // the dispatcher's update would be seen the next time
		}
		changed = settingsChanged(before, now)
	}
	r.check(drill.Check{Name: "settings changed by a dispatcher without settings", Expected: "none",
		Observed: strings.Join(append([]string{fmt.Sprintf("%d", len(changed))}, changed...), ": "), Pass: len(changed) == 0})
	// The first one leaves: the second carries the load alone, which it can
	// only once its own topology check has passed.
	if err := r.sb.Proc(r.sc.Name + "-d1").Stop(30 * time.Second); err != nil {
		return err
	}
	r.check(drill.Check{Name: second + " serves the load alone", Expected: "running", Observed: running(p2), Pass: p2.Running()})

	third := r.sc.Name + "-d3"
	asked := 2 * r.sb.LeaseTTL()
	p3, err := r.sb.StartDispatcherWith(third, "--lease-ttl", asked.String())
	if err != nil {
		return err
	}
	ended := true
	select {
	case <-p3.Done():
	case <-time.After(30 * time.Second):
		ended = false
		_ = p3.Stop(10 * time.Second)
	}
	out, _ := os.ReadFile(r.sb.LogFile(third))
	refused := ended && p3.exitErr() != nil && strings.Contains(string(out), "--reconfigure")
	observed := "ended: " + fmt.Sprint(p3.exitErr())
	if !ended {
		observed = "still running after 30 s (stopped)"
	}
	if i := strings.Index(string(out), "topology settings differ"); i >= 0 {
		observed = strings.TrimSpace(strings.SplitN(string(out[i:]), "\n", 2)[0])
	}
	r.check(drill.Check{Name: third + " with --lease-ttl " + asked.String() + " refused", Expected: "exit, naming --reconfigure", Observed: observed, Pass: refused})

	after, err := r.sb.installedSettings(bg)
	if err != nil {
		return err
	}
	changed = settingsChanged(before, after)
	r.check(drill.Check{Name: "settings changed at the end", Expected: "none",
		Observed: strings.Join(append([]string{fmt.Sprintf("%d", len(changed))}, changed...), ": "), Pass: len(changed) == 0})
	return nil
}

func running(p *Proc) string {
	if p.Running() {
		return "running"
	}
	return fmt.Sprintf("ended: %v", p.exitErr())
}

// exitErr returns how the process ended (nil: exit status 0, or running).
func (p *Proc) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// installedSettings returns, by stream, the settings of every stream and
// bucket of the topology that the topology's owner sets.
func (s *Sandbox) installedSettings(ctx context.Context) (map[string]string, error) {
	out := make(map[string]string)
	var names []string
	for _, sc := range s.Top.StreamConfigs(streams.Config{}) {
		names = append(names, sc.Name)
	}
	for _, kv := range s.Top.BucketConfigs(streams.Config{}) {
		names = append(names, "KV_"+kv.Bucket)
	}
	for _, name := range names {
		info, err := s.streamInfo(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("read the settings of %s: %w", name, err)
		}
		c := info.Config
		out[name] = fmt.Sprintf("R%d max age %v max bytes %d duplicates %v", c.Replicas, c.MaxAge, c.MaxBytes, c.Duplicates)
	}
	return out, nil
}

// settingsChanged lists the streams whose settings differ in now from
// before.
func settingsChanged(before, now map[string]string) []string {
	var changed []string
	for _, name := range slices.Sorted(maps.Keys(before)) {
		if now[name] != before[name] {
			changed = append(changed, fmt.Sprintf("%s %s → %s", name, before[name], now[name]))
		}
	}
	return changed
}
