package apiclient

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNeitherStoreNorServer lists what a program that imports only
// the client links: no PostgreSQL driver, no store, no API server, no NATS,
// and no package outside AX and the standard library. A program that only
// calls the API stays small.
func TestLinksNeitherStoreNorServer(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 3 {
		t.Fatalf("go list -deps found %d packages outside the standard library, want apiclient, wire and schemas at least: %q", len(deps), deps)
	}
	forbidden := []string{
		"github.com/jackc/pgx",
		"github.com/ax-scheduler/ax/store",
		"github.com/nats-io/",
		"github.com/prometheus/",
	}
	for _, d := range deps {
		for _, f := range forbidden {
			if strings.HasPrefix(d, f) {
				t.Errorf("the client links %s", d)
			}
		}
		if !strings.HasPrefix(d, "github.com/ax-scheduler/ax/") {
			t.Errorf("the client links %s, outside AX and the standard library", d)
		}
		if d == "github.com/ax-scheduler/ax/api" {
			t.Errorf("the client links the API server (%s)", d)
		}
	}
	t.Logf("the client links %d packages outside the standard library, all of AX", len(deps))
}
