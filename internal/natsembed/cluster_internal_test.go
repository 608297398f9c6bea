package natsembed

import (
	"net"
	"testing"
)

// TestStartClusterTriesOtherPorts: when a port picked free is taken
// before its node binds it, the cluster starts on other free ports.
func TestStartClusterTriesOtherPorts(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-node NATS cluster test: skipped with -short; make test runs it")
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	pick := freePorts
	defer func() { freePorts = pick }()
	picks := 0
	freePorts = func(host string, n int) ([]int, error) {
		picks++
		ports, err := pick(host, n)
		if picks == 2 && err == nil { // the first try's route ports
			ports[1] = taken.Addr().(*net.TCPAddr).Port
		}
		return ports, err
	}
	c, err := StartCluster(ClusterOptions{Size: 3, Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("a port taken before the bind: %v, want a start on other ports", err)
	}
	defer c.Shutdown()
	if picks != 4 {
		t.Errorf("ports picked %d times, want 4: client and route ports for each of two tries", picks)
	}
}
