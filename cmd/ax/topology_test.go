package main

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// The topology flags are unset by default, so that a dispatcher started
// without them keeps the installed settings; a stated one is parsed, and a
// bad one refused naming the flag.
func TestTopologyFlags(t *testing.T) {
	t.Parallel()
	parse := func(args ...string) (*topologyFlags, error) {
		var tf topologyFlags
		cmd := &cobra.Command{Use: "x"}
		tf.flags(cmd)
		return &tf, cmd.ParseFlags(args)
	}
	tf, err := parse()
	if err != nil {
		t.Fatal(err)
	}
	c, err := tf.config()
	if err != nil || c.Replicas != 0 || c.LeaseTTL != 0 || c.LogsMaxBytes != 0 || c.Reconfigure {
		t.Errorf("no flags: %+v, %v; want every setting unset", c, err)
	}
	tf, _ = parse("--replicas", "3", "--lease-ttl", "5s", "--logs-max-bytes", "67108864", "--reconfigure")
	c, err = tf.config()
	if err != nil || c.Replicas != 3 || c.LeaseTTL != 5*time.Second || c.LogsMaxBytes != 64<<20 || !c.Reconfigure {
		t.Errorf("flags: %+v, %v", c, err)
	}
	tf, _ = parse("--logs-max-bytes", "1GiB")
	if _, err := tf.config(); err == nil || !strings.Contains(err.Error(), "--logs-max-bytes") {
		t.Errorf("--logs-max-bytes 1GiB: %v, want a refusal naming the flag", err)
	}
}
