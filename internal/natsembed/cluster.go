package natsembed

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ClusterOptions configures an embedded JetStream cluster.
type ClusterOptions struct {
	// Size is the number of nodes (at least 3: JetStream needs a majority
	// of its nodes to elect a leader, so a smaller cluster cannot lose one).
	Size int
	// Dir holds the nodes' stores, node i's in Dir/node-<i>. Required.
	Dir string
	// Name names the cluster and prefixes its nodes' names (default "ax":
	// nodes ax-0, ax-1, …).
	Name string
	// Host to listen on (default 127.0.0.1).
	Host string
	// Ports are the nodes' client ports, one per node (default: free
	// ports, chosen at start and kept across a restart).
	Ports []int
	// MonitorPort, when not 0, opens node i's HTTP monitoring port on
	// MonitorPort+i at Host (see [Options.MonitorPort]; -1: free ports).
	MonitorPort int
	// Users, when set, replaces anonymous access on every node.
	Users []*server.User
	// Auth, when set, decides who may connect to every node instead of
	// Users (see [Options]).
	Auth server.Authentication
	// RoutePassword is what a node must present to open a route to
	// another, as user "route" (default: a random password made at start
	// and kept across [Cluster.Restart]): a server that does not know it
	// cannot join the cluster and read or inject its messages.
	RoutePassword string
	// Logs prints the servers' own log lines to stderr.
	Logs bool
}

// RouteUser is the user name a cluster's nodes present to each other.
const RouteUser = "route"

// Cluster is a JetStream cluster of servers inside the process, on
// loopback, whose nodes a test (or `ax dev --cluster`) stops and restarts
// with their stores. Its methods are safe for concurrent use.
type Cluster struct {
	mu    sync.Mutex
	opts  []Options // per node, with fixed client and route ports
	nodes []*server.Server
}

// StartCluster starts o.Size nodes, every one routed to every other, and
// waits until the cluster has a JetStream meta leader that every node
// follows. Stop it with Shutdown.
func StartCluster(o ClusterOptions) (*Cluster, error) {
	if o.Size < 3 {
		return nil, fmt.Errorf("start embedded nats cluster: %d nodes, want at least 3 (a JetStream cluster needs a majority to survive one node)", o.Size)
	}
	if o.Dir == "" {
		return nil, fmt.Errorf("start embedded nats cluster: a folder for the nodes' stores is required")
	}
	if len(o.Ports) != 0 && len(o.Ports) != o.Size {
		return nil, fmt.Errorf("start embedded nats cluster: %d client ports for %d nodes, want one per node", len(o.Ports), o.Size)
	}
	if o.Name == "" {
		o.Name = "ax"
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.RoutePassword == "" {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return nil, fmt.Errorf("start embedded nats cluster: make the route password: %w", err)
		}
		o.RoutePassword = base64.RawURLEncoding.EncodeToString(b)
	}
	// A port picked free may be taken before its node binds it: then the
	// cluster starts again on other free ports (a client port the caller
	// chose is its to keep free: taken, it fails every try at once).
	var c *Cluster
	for try := 1; ; try++ {
		var err error
		if c, err = startNodes(o); err == nil {
			break
		}
		if try == maxPortTries || !strings.Contains(err.Error(), "address already in use") {
			return nil, fmt.Errorf("start embedded nats cluster: %w", err)
		}
	}
	if err := c.WaitReady(time.Minute); err != nil {
		c.Shutdown()
		return nil, fmt.Errorf("start embedded nats cluster: %w", err)
	}
	return c, nil
}

// maxPortTries is how many times [StartCluster] picks free ports.
const maxPortTries = 3

// startNodes starts o's nodes together, on free ports where o names none.
func startNodes(o ClusterOptions) (*Cluster, error) {
	ports := o.Ports
	if len(ports) == 0 {
		var err error
		if ports, err = freePorts(o.Host, o.Size); err != nil {
			return nil, err
		}
	}
	routePorts, err := freePorts(o.Host, o.Size)
	if err != nil {
		return nil, err
	}
	c := &Cluster{nodes: make([]*server.Server, o.Size)}
	for i := range o.Size {
		var routes []*url.URL
		for j, p := range routePorts {
			if j != i {
				routes = append(routes, &url.URL{Scheme: "nats-route", Host: net.JoinHostPort(o.Host, strconv.Itoa(p))})
			}
		}
		mon := o.MonitorPort
		if mon > 0 {
			mon += i
		}
		c.opts = append(c.opts, Options{MonitorHost: o.Host, MonitorPort: mon,
			Host: o.Host, Port: ports[i], StoreDir: filepath.Join(o.Dir, "node-"+strconv.Itoa(i)),
			ServerName: o.Name + "-" + strconv.Itoa(i), Users: o.Users, Auth: o.Auth, Logs: o.Logs,
			ClusterName: o.Name, ClusterPort: routePorts[i], Routes: routes,
			RouteUser: RouteUser, RoutePassword: o.RoutePassword,
		})
	}
	// The nodes start together: each waits for a majority before it
	// accepts JetStream requests, so one at a time would not do.
	var wg sync.WaitGroup
	errs := make([]error, o.Size)
	for i := range o.Size {
		wg.Go(func() { c.nodes[i], errs[i] = Start(c.opts[i]) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Shutdown()
		return nil, err
	}
	return c, nil
}

// freePorts returns n ports free on host now. Another process may take one
// before the server listens on it; on loopback that is rare, and the
// node's start then fails with "address already in use".
var freePorts = func(host string, n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Size is the number of nodes, running or stopped.
func (c *Cluster) Size() int { return len(c.opts) }

// URL is the client URL of every node, comma-separated, as nats.Connect
// takes it: a client connected to a node that stops reconnects to another.
func (c *Cluster) URL() string {
	urls := make([]string, len(c.opts))
	for i := range c.opts {
		urls[i] = c.NodeURL(i)
	}
	return strings.Join(urls, ",")
}

// NodeURL is node i's client URL, the same across restarts.
func (c *Cluster) NodeURL(i int) string {
	o := c.opts[i]
	return "nats://" + net.JoinHostPort(o.Host, strconv.Itoa(o.Port))
}

// NodeName is node i's server name.
func (c *Cluster) NodeName(i int) string { return c.opts[i].ServerName }

// Node returns node i's server, nil while it is stopped.
func (c *Cluster) Node(i int) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i]
}

// Stop shuts node i down and waits until it has; its store stays for
// [Cluster.Restart]. Stopping a stopped node does nothing.
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	s := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// Restart starts node i again, on its ports and with its store, and
// returns once it accepts connections (it may still be catching up: see
// [Cluster.WaitReady]). Restarting a running node is an error.
func (c *Cluster) Restart(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodes[i] != nil {
		return fmt.Errorf("restart nats node %s: it is running", c.opts[i].ServerName)
	}
	s, err := Start(c.opts[i])
	if err != nil {
		return fmt.Errorf("restart nats node %s: %w", c.opts[i].ServerName, err)
	}
	c.nodes[i] = s
	return nil
}

// WaitReady waits until one running node is the JetStream meta leader,
// every running node is current with it, and the leader knows every
// running node as an online peer: until it has had a node's statistics it
// places no stream on that node, so an R3 stream created on a three-node
// cluster just started, or just restarted, is refused with "no suitable
// peers for placement, peer offline" (err_code 10005).
func (c *Cluster) WaitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		leader, behind, unknown := "", "", ""
		var leaderNode *server.Server
		c.mu.Lock()
		for i, s := range c.nodes {
			if s == nil {
				continue
			}
			if s.JetStreamIsLeader() {
				leader, leaderNode = c.opts[i].ServerName, s
			}
			if !s.JetStreamIsCurrent() && behind == "" {
				behind = c.opts[i].ServerName
			}
		}
		if leaderNode != nil {
			peers := leaderNode.JetStreamClusterPeers()
			for i, s := range c.nodes {
				if s != nil && !slices.Contains(peers, c.opts[i].ServerName) && unknown == "" {
					unknown = c.opts[i].ServerName
				}
			}
		}
		c.mu.Unlock()
		if leader != "" && behind == "" && unknown == "" {
			return nil
		}
		if time.Now().After(deadline) {
			switch {
			case leader == "":
				return fmt.Errorf("no JetStream meta leader after %v", timeout)
			case behind != "":
				return fmt.Errorf("node %s not current with meta leader %s after %v", behind, leader, timeout)
			default:
				return fmt.Errorf("meta leader %s does not know node %s as an online peer after %v", leader, unknown, timeout)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Shutdown stops every running node and waits until they have.
func (c *Cluster) Shutdown() {
	var wg sync.WaitGroup
	for i := range c.nodes {
		wg.Go(func() { c.Stop(i) })
	}
	wg.Wait()
}
