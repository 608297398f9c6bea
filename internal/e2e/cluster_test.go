package e2e_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/dispatcher"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/executortest"
	"github.com/ax-scheduler/ax/internal/natsembed"
	"github.com/ax-scheduler/ax/internal/servicetest"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
	"github.com/ax-scheduler/ax/streams"
)

// clusterLeaseTTL is longer than the e2e tests' leaseTTL: a stream leader
// election on a loaded machine can take seconds, during which an executor
// cannot renew its leases. The production default is 30 s.
const clusterLeaseTTL = 10 * time.Second

// natsCluster is a three-node JetStream cluster of a test, with AX's
// topology in three replicas once the dispatcher has ensured it.
type natsCluster struct {
	*natsembed.Cluster
	t   *testing.T
	js  jetstream.JetStream
	top streams.Topology
}

func newNATSCluster(t *testing.T) *natsCluster {
	t.Helper()
	if testing.Short() {
		t.Skip("a three-node NATS cluster test: skipped with -short; make test runs it")
	}
	c, err := natsembed.StartCluster(natsembed.ClusterOptions{Size: 3, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	nc := &natsCluster{Cluster: c, t: t, top: streams.Default()}
	_, nc.js = nc.connect("test")
	return nc
}

// connect opens a connection to every node, which reconnects for ever as
// the ax binary's do (cmd/ax connectNATS).
func (c *natsCluster) connect(name string) (*nats.Conn, jetstream.JetStream) {
	c.t.Helper()
	conn, err := nats.Connect(c.URL(), nats.Name(name), nats.MaxReconnects(-1))
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(conn.Close)
	js, err := jetstream.New(conn)
	if err != nil {
		c.t.Fatal(err)
	}
	return conn, js
}

// streamNames are the streams of the topology and those holding its buckets.
func (c *natsCluster) streamNames() []string {
	var names []string
	for _, sc := range c.top.StreamConfigs(streams.Config{}) {
		names = append(names, sc.Name)
	}
	for _, kc := range c.top.BucketConfigs(streams.Config{}) {
		names = append(names, "KV_"+kc.Bucket)
	}
	return names
}

// leaderOf returns the index of the node leading stream, or -1 while it has none.
func (c *natsCluster) leaderOf(stream string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := c.js.Stream(ctx, stream)
	if err != nil {
		return -1, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return -1, err
	}
	for i := range c.Size() {
		if info.Cluster != nil && c.NodeName(i) == info.Cluster.Leader {
			return i, nil
		}
	}
	return -1, nil
}

// healthy reports whether every stream of the topology has three replicas,
// a leader, and two followers online and current; if not, it says which
// stream is not yet.
func (c *natsCluster) healthy() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, name := range c.streamNames() {
		s, err := c.js.Stream(ctx, name)
		if err != nil {
			return name + ": " + err.Error(), nil // a request during an election
		}
		info, err := s.Info(ctx)
		if err != nil {
			return name + ": " + err.Error(), nil
		}
		if info.Config.Replicas != 3 {
			return "", fmt.Errorf("stream %s has %d replicas, want 3", name, info.Config.Replicas)
		}
		if info.Cluster == nil || info.Cluster.Leader == "" {
			return name + " has no leader", nil
		}
		current := 0
		for _, r := range info.Cluster.Replicas {
			if r.Current && !r.Offline {
				current++
			}
		}
		if current != 2 {
			return fmt.Sprintf("%s has %d current followers", name, current), nil
		}
	}
	return "", nil
}

func (c *natsCluster) waitHealthy(what string) {
	c.t.Helper()
	var last string
	waitFor(c.t, what+" (every stream led, both followers current)", 2*time.Minute, func() (bool, error) {
		var err error
		last, err = c.healthy()
		return last == "", err
	})
}

// TestExactlyOnceThroughNATSNodeRestarts runs the pipeline on a real
// three-node JetStream cluster, the topology in three replicas as the
// dispatcher ensures it with Replicas 3: under a steady load, the node
// leading AX_DISPATCH is stopped and restarted with its store, then
// another node (the one leading AX_REPORTS, or the next one). The
// services, on connections to every node, carry on by themselves; every
// firing the load published has one instance, every instance SUCCEEDED,
// and the ledger the handler appends to holds one run per instance.
//
// It runs in make test since the fence (dispatcher/fence.go): before, about
// half the runs saw a handler run twice — a dispatch message delivered
// again after a node restart (an acknowledgement lost in the consumer
// leader change, or a delivery given back while the lease write's answer
// was lost) found no lease nor expiry marker on its key (nats-server
// 2.15.3 loses an R3 bucket's limit markers when its leader restarts,
// internal/natsembed TestClusterKeepsLimitMarkersAcrossARestart) and ran
// the attempt again; the redelivery now asks the dispatcher first.
func TestExactlyOnceThroughNATSNodeRestarts(t *testing.T) {
	t.Parallel()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	if os.Getenv("AX_TEST_LOG") != "" {
		log = log.Level(zerolog.DebugLevel)
	}
	cluster, pool := startClusterDispatcher(t, log)

	ledger := filepath.Join(t.TempDir(), "ledger")
	for _, id := range []string{"exec-a", "exec-b"} {
		conn, _ := cluster.connect(id)
		executortest.Run(t, executor.Options{Conn: conn, WorkerID: id, Mux: ledgerMux(ledger, 100*time.Millisecond),
			Slots: 8, Logger: slog.New(zerolog.NewSlogHandler(log))})
	}

	// Load: 40 firings a second. A publish that fails (no leader yet) is
	// retried with the same message id until the stream acknowledges it:
	// a firing counts as fired once acknowledged, and then must run.
	_, loadJS := cluster.connect("load")
	stopLoad := startLoad(t, loadJS, cluster.top.Trigger("ledger"), 25*time.Millisecond, true)

	progress := func(what string, more int) {
		t.Helper()
		from := countSucceeded(t, pool)
		waitFor(t, what, 2*time.Minute, func() (bool, error) {
			return countSucceeded(t, pool) >= from+more, nil
		})
	}
	progress("the first successes", 20)

	first, err := cluster.leaderOf(cluster.top.DispatchStream())
	if err != nil || first < 0 {
		t.Fatalf("leader of %s: %d, %v", cluster.top.DispatchStream(), first, err)
	}
	second, err := cluster.leaderOf(cluster.top.ReportsStream())
	if err != nil || second == first || second < 0 {
		second = (first + 1) % cluster.Size()
	}
	for _, node := range []int{first, second} {
		name := cluster.NodeName(node)
		cluster.Stop(node)
		t.Logf("stopped %s", name)
		progress("successes while "+name+" is down", 40)
		if err := cluster.Restart(node); err != nil {
			t.Fatal(err)
		}
		cluster.waitHealthy(name + " back")
		t.Logf("%s is back and current", name)
		progress("successes after "+name+" came back", 20)
	}
	fired, retries := stopLoad()
	waitLedgerEnded(t, pool, fired)
	t.Logf("%d publishes retried while a leader was elected", retries)
	checkExactlyOnce(t, pool, fired, ledger)
}

// dump logs what a failed test needs to see where the pipeline stopped:
// the instances by state and every consumer of the topology.
func (c *natsCluster) dump(pool *pgxpool.Pool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := pool.Query(ctx, `SELECT state, count(*) FROM instances GROUP BY state`)
	if err == nil {
		for rows.Next() {
			var state string
			var n int
			_ = rows.Scan(&state, &n)
			c.t.Logf("instances %s: %d", state, n)
		}
		rows.Close()
	}
	// The instances not ended, each with where it stands: a stall shows
	// which step never came.
	rows, err = pool.Query(ctx, `SELECT id, state, attempt, worker_id, updated_at FROM instances
		WHERE state NOT IN ('SUCCEEDED', 'FAILED', 'SKIPPED', 'CANCELLED') ORDER BY id LIMIT 10`)
	if err == nil {
		for rows.Next() {
			var (
				id, attempt   int64
				state, worker string
				updated       time.Time
			)
			_ = rows.Scan(&id, &state, &attempt, &worker, &updated)
			c.t.Logf("instance %d: %s, attempt %d, worker %q, updated %s ago", id, state, attempt, worker,
				time.Since(updated).Round(time.Millisecond))
		}
		rows.Close()
	}
	for _, name := range c.streamNames() {
		s, err := c.js.Stream(ctx, name)
		if err != nil {
			c.t.Logf("stream %s: %v", name, err)
			continue
		}
		info, err := s.Info(ctx)
		if err == nil {
			c.t.Logf("stream %s: %d messages, cluster %+v", name, info.State.Msgs, info.Cluster)
		}
		for ci := range s.ListConsumers(ctx).Info() {
			c.t.Logf("  consumer %s: pending %d ack pending %d redelivered %d waiting %d delivered %d/%d acked %d, cluster %+v",
				ci.Name, ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.NumWaiting,
				ci.Delivered.Stream, ci.Delivered.Consumer, ci.AckFloor.Stream, ci.Cluster)
		}
	}
}

func countSucceeded(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM instances WHERE state = 'SUCCEEDED'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// startClusterDispatcher starts a three-node NATS cluster, a database with
// the ledger task, and a dispatcher on them that ensures the topology in
// three replicas itself, trying again while a cold cluster leaves the
// requests unanswered (a loaded machine was seen to take longer than one
// request waits); it returns once the topology is healthy. The cluster's
// state is dumped when the test fails.
func startClusterDispatcher(t *testing.T, log zerolog.Logger) (*natsCluster, *pgxpool.Pool) {
	t.Helper()
	cluster := newNATSCluster(t)
	pool := storetest.NewDB(t)
	t.Cleanup(func() {
		if t.Failed() {
			cluster.dump(pool)
		}
	})
	applyLedgerTask(t, store.New(pool))
	cfg := streams.Config{Replicas: 3, LeaseTTL: clusterLeaseTTL}
	dispatchConn, _ := cluster.connect("dispatcher")
	d, err := dispatcher.New(dispatcher.Options{Conn: dispatchConn, Store: store.New(pool), Logger: log, Streams: cfg})
	if err != nil {
		t.Fatal(err)
	}
	servicetest.Start(t, "dispatcher", d)
	cluster.waitHealthy("the topology in three replicas")
	return cluster, pool
}
