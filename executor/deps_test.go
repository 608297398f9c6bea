package executor_test

import (
	"os/exec"
	"strings"
	"testing"
)

// maxSDKDeps bounds the packages outside the standard library and AX that
// a program linking the SDK links: NATS (with nkeys, nuid, compress and
// x/crypto, 19), x/time/rate, and the OpenTelemetry trace API with the
// W3C propagator (14: trace, noop, propagation, baggage, attribute, codes,
// semconv and their internals), so that the attempt's span reaches the
// handler. Not OpenTelemetry's global provider, which would add logr,
// stdr and auto/sdk: a program passes its provider in Options. Users link
// the SDK into their own binaries; a new dependency should be a choice,
// not a side effect.
const maxSDKDeps = 35

// TestExecutorLinks lists what a program that imports the SDK links: no
// PostgreSQL driver, no store, no service, and none of what reading task
// definitions takes (schemas/taskdef: the JSON Schema validator, YAML, the
// cron parser, x/text), nor a logging library: the SDK logs through
// log/slog, and a program picks its own (ax executor adapts zerolog).
func TestExecutorLinks(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	forbidden := []string{
		"github.com/jackc/",
		"github.com/ax-scheduler/ax/store",
		"github.com/ax-scheduler/ax/schemas/taskdef",
		"github.com/ax-scheduler/ax/api",
		"github.com/ax-scheduler/ax/dispatcher",
		"github.com/ax-scheduler/ax/trigger",
		"github.com/ax-scheduler/ax/auditor",
		"github.com/robfig/cron",
		"github.com/santhosh-tekuri/jsonschema",
		"sigs.k8s.io/yaml",
		"go.yaml.in/",
		"golang.org/x/text",
		"github.com/prometheus/",
		"github.com/rs/zerolog",
		// The OpenTelemetry API only: the SDK and the exporters are
		// the program's choice (cmd/ax sets them up).
		"go.opentelemetry.io/otel/sdk",
		"go.opentelemetry.io/auto/",
		"github.com/go-logr/",
		"go.opentelemetry.io/otel/exporters",
		"go.opentelemetry.io/proto",
		"google.golang.org/",
	}
	var third []string
	for _, d := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if strings.HasPrefix(d, f) {
				t.Errorf("the SDK links %s", d)
			}
		}
		if !strings.HasPrefix(d, "github.com/ax-scheduler/ax/") {
			third = append(third, d)
		}
	}
	if len(third) > maxSDKDeps {
		t.Errorf("the SDK links %d third-party packages, more than %d: %q", len(third), maxSDKDeps, third)
	}
	t.Logf("the SDK links %d third-party packages", len(third))
}
