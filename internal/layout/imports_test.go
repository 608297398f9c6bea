package layout

import (
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/ax-scheduler/ax/"

// allowed lists, for each top-level folder, the folders of AX it may import
// (its own subpackages always). cmd may import everything.
var allowed = map[string][]string{
	"schemas":    {},
	"streams":    {"schemas", "internal"},
	"store":      {"schemas", "internal"},
	"trigger":    {"schemas", "streams", "store", "internal"},
	"dispatcher": {"schemas", "streams", "store", "internal"},
	"executor":   {"schemas", "streams", "internal"},
	"auditor":    {"schemas", "streams", "store", "internal"},
	"api":        {"schemas", "streams", "store", "internal"},
	// examples/executor is a program of a user's own: the SDK, never the store.
	"examples": {"schemas", "streams", "executor"},
	// drill rehearses faults against AX as an operator's tool: the SDK to
	// run a drill executor, the API's client to fire and read; drill/system
	// starts a whole sandbox.
	"drill": {"schemas", "streams", "store", "trigger", "dispatcher", "executor", "auditor", "api", "internal"},
	// conformance checks a worker in any language from the outside, as an
	// operator's tool: the API's client to fire, NATS to watch the wire,
	// drill's verdict table to print.
	"conformance": {"schemas", "streams", "api", "drill", "internal"},
}

// testOnly lists imports a folder's tests may add: test servers of the
// packages below them, and the services an end-to-end test runs.
var testOnly = map[string][]string{
	"internal": {"schemas", "streams", "store", "trigger", "dispatcher", "executor", "auditor", "api", "examples", "drill", "conformance"},
	"drill":    {"examples"},
}

type pkg struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

func TestImportGraph(t *testing.T) {
	out, err := exec.Command("go", "list", "-json", "../../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	checked := 0
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		from := top(p.ImportPath)
		if from == "cmd" || from == "" {
			continue
		}
		checked++
		check := func(imports []string, extra []string) {
			for _, imp := range imports {
				to := top(imp)
				if to == "" || to == from || slices.Contains(allowed[from], to) || slices.Contains(extra, to) {
					continue
				}
				if from == "internal" && !slices.Contains(extra, to) {
					t.Errorf("%s imports %s: internal/ holds small helpers, not services", p.ImportPath, imp)
					continue
				}
				t.Errorf("%s imports %s: %s may import only %v (services talk over NATS, not through each other's code)",
					p.ImportPath, imp, from, allowed[from])
			}
		}
		check(p.Imports, nil)
		check(append(p.TestImports, p.XTestImports...), testOnly[from])
	}
	if checked < 8 {
		t.Fatalf("checked %d packages; go list found too few", checked)
	}
}

// top returns the top-level folder of an AX import path, or "" for another module's.
func top(importPath string) string {
	rest, ok := strings.CutPrefix(importPath, module)
	if !ok {
		return ""
	}
	first, _, _ := strings.Cut(rest, "/")
	return first
}
