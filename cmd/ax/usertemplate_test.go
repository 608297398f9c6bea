package main

import (
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
)

// TestUserTemplate: ax user template prints natsauth's services' block and
// worker user for the prefix, pools and handlers given, and refuses a
// worker user without pools or handlers.
func TestUserTemplate(t *testing.T) {
	t.Parallel()
	top, err := streams.NewTopology("acme")
	if err != nil {
		t.Fatal(err)
	}
	want, err := natsauth.WorkerUserTemplate(top, natsauth.Scope{Pools: []string{"gpu"}, Handlers: []string{"train.model"}})
	if err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := axRun(t, "user", "template", "executor", "--prefix", "acme", "--pool", "gpu", "--handler", "train.model"); code != 0 || out != want {
		t.Errorf("ax user template executor: exit %d, %s\n%s\nwant\n%s", code, errOut, out, want)
	}
	if code, out, _ := axRun(t, "user", "template", "services", "--prefix", "acme"); code != 0 || out != natsauth.ServicesServerConfig(top) {
		t.Errorf("ax user template services: exit %d\n%s", code, out)
	}
	for _, args := range [][]string{{"--handler", "h"}, {"--pool", "gpu"}} {
		if code, _, errOut := axRun(t, append([]string{"user", "template", "executor"}, args...)...); code == 0 || !strings.Contains(errOut, "--") && !strings.Contains(errOut, "handler") {
			t.Errorf("ax user template executor %v: exit %d, %s; want refused", args, code, errOut)
		}
	}
}
