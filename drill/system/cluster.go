package system

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ClusterNodes is the size of the sandbox's JetStream cluster when
// [SandboxOptions.Cluster] is set: three, the least that survives the loss
// of a node.
const ClusterNodes = 3

// clusterName names the sandbox's cluster; node i is clusterName-i.
const clusterName = "ax-drill"

// cluster is the sandbox's JetStream cluster: ClusterNodes ax nats-server
// processes on loopback ports fixed at the first start, routed to each
// other with a route password.
type cluster struct {
	ports, routePorts []int
	password          string
	nodes             []*Proc
}

// NodeName returns the server name of the cluster's node i.
func NodeName(i int) string { return clusterName + "-" + strconv.Itoa(i) }

// newCluster picks the cluster's ports and its route password.
func newCluster() (*cluster, error) {
	c := &cluster{nodes: make([]*Proc, ClusterNodes)}
	ports, err := loopbackPorts(2 * ClusterNodes)
	if err != nil {
		return nil, err
	}
	c.ports, c.routePorts = ports[:ClusterNodes], ports[ClusterNodes:]
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("make the drill cluster's route password: %w", err)
	}
	c.password = base64.RawURLEncoding.EncodeToString(b)
	return c, nil
}

// loopbackPorts returns n ports free on 127.0.0.1 now. Another process
// may take one before its node listens on it: the node then fails to
// start, and says so in its log.
func loopbackPorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port for the drill cluster: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// clusterURL returns the client URLs of every node, comma-separated, as
// the services' --nats-url takes them.
func (c *cluster) clusterURL() string {
	urls := make([]string, len(c.ports))
	for i, p := range c.ports {
		urls[i] = "nats://127.0.0.1:" + strconv.Itoa(p)
	}
	return strings.Join(urls, ",")
}

// startNodes starts every node that is not running and waits until each
// accepts connections. The caller holds mu. The nodes start together:
// JetStream waits for a majority of them.
func (s *Sandbox) startNodes(ctx context.Context) error {
	c := s.cluster
	var started []int
	for i, p := range c.nodes {
		if p != nil && p.Running() {
			continue
		}
		portFile := filepath.Join(s.dir, "nats-"+strconv.Itoa(i)+".port")
		if err := os.Remove(portFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("start the drill cluster's node %d: %w", i, err)
		}
		var routes []string
		for j, rp := range c.routePorts {
			if j != i {
				routes = append(routes, "127.0.0.1:"+strconv.Itoa(rp))
			}
		}
		p, err := s.start(NodeName(i), []string{"AX_NATS_ROUTE_PASSWORD=" + c.password}, "nats-server",
			"--listen", "127.0.0.1:"+strconv.Itoa(c.ports[i]), "--store", filepath.Join(s.dir, "nats-"+strconv.Itoa(i)),
			"--users", s.users, "--port-file", portFile, "--server-name", NodeName(i),
			"--cluster-name", clusterName, "--cluster-listen", "127.0.0.1:"+strconv.Itoa(c.routePorts[i]),
			"--routes", strings.Join(routes, ","))
		if err != nil {
			return err
		}
		c.nodes[i] = p
		started = append(started, i)
	}
	for _, i := range started {
		portFile := filepath.Join(s.dir, "nats-"+strconv.Itoa(i)+".port")
		for {
			if _, err := os.Stat(portFile); err == nil {
				break
			}
			select {
			case <-c.nodes[i].Done():
				return fmt.Errorf("start the drill cluster's node %d: it ended (see %s)", i, s.logFile(NodeName(i)))
			case <-ctx.Done():
				return fmt.Errorf("start the drill cluster's node %d: %w", i, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// KillNode kills the cluster's node i with kill -9.
func (s *Sandbox) KillNode(i int) error {
	s.mu.Lock()
	p := s.cluster.nodes[i]
	s.mu.Unlock()
	return p.Kill()
}

// StartNode starts the cluster's node i again on its port and store.
func (s *Sandbox) StartNode(ctx context.Context, i int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.startNodes(ctx)
}

// StreamLeader returns the node that leads stream now, waiting up to a
// minute for the stream to have a leader.
func (s *Sandbox) StreamLeader(ctx context.Context, stream string) (int, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		info, err := s.streamInfo(ctx, stream)
		if err == nil && info.Cluster != nil {
			for i := range ClusterNodes {
				if info.Cluster.Leader == NodeName(i) {
					return i, nil
				}
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("find the leader of %s: none within a minute (%v)", stream, err)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *Sandbox) streamInfo(ctx context.Context, stream string) (*jetstream.StreamInfo, error) {
	st, err := s.JS.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	return st.Info(ctx)
}

// stopNodes stops every node (SIGTERM). The caller holds mu.
func (s *Sandbox) stopNodes() {
	for _, p := range s.cluster.nodes {
		if p != nil {
			_ = p.Stop(10 * time.Second)
		}
	}
}
