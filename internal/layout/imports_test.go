package layout

import (
	"encoding/json"
	"fmt"
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
	// importer translates other schedulers' jobs into task definitions, as
	// an operator's tool: the vocabulary and the cron reader only.
	"importer": {"schemas", "internal"},
	// devstack runs the services in one process, for ax dev and the
	// end-to-end tests, so that the wiring exists once. It sits beside the
	// services, not under internal/, which holds leaves only.
	"devstack": {"schemas", "streams", "store", "trigger", "dispatcher", "executor", "auditor", "api", "internal"},
}

// testOnly lists imports a folder's tests may add: test servers of the
// packages below them, and the services an end-to-end test runs.
var testOnly = map[string][]string{
	// (importer: the shadow mode's test imports from its MariaDB.)
	"internal": {"schemas", "streams", "store", "trigger", "dispatcher", "executor", "auditor", "api", "examples", "drill", "conformance", "devstack", "importer"},
	"drill":    {"examples"},
	// The Quartz import test loads Quartz's tables into a test database.
	"importer": {"store"},
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
	checked, sawDevstack := 0, false
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		sawDevstack = sawDevstack || p.ImportPath == module+"devstack"
		if from := top(p.ImportPath); from == "cmd" || from == "" {
			continue
		}
		checked++
		for _, v := range violations(p) {
			t.Error(v)
		}
	}
	if !sawDevstack {
		t.Errorf("go list did not list %sdevstack, whose imports this test allows: update allowed", module)
	}
	if checked < 8 {
		t.Fatalf("checked %d packages; go list found too few", checked)
	}
}

// violations returns what is wrong with the imports of p, one sentence a
// forbidden import.
func violations(p pkg) []string {
	from := top(p.ImportPath)
	var out []string
	check := func(imports []string, extra []string) {
		for _, imp := range imports {
			to := top(imp)
			if to == "" || to == from || slices.Contains(allowed[from], to) || slices.Contains(extra, to) {
				continue
			}
			if from == "internal" {
				out = append(out, fmt.Sprintf("%s imports %s: internal/ holds leaves (small helpers), not services or what composes them (devstack)", p.ImportPath, imp))
				continue
			}
			out = append(out, fmt.Sprintf("%s imports %s: %s may import only %v (services talk over NATS, not through each other's code)",
				p.ImportPath, imp, from, allowed[from]))
		}
	}
	check(p.Imports, nil)
	check(append(p.TestImports, p.XTestImports...), testOnly[from])
	return out
}

// TestInternalImportsNoService holds internal/ to leaves: no package
// under it imports a service or devstack, which composes them; devstack,
// beside the services, may import them all; a test under internal/ may
// run services (the end-to-end tests).
func TestInternalImportsNoService(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p    pkg
		want int
	}{
		{pkg{ImportPath: module + "devstack", Imports: []string{module + "dispatcher", module + "api", module + "internal/natsembed"}}, 0},
		{pkg{ImportPath: module + "internal/natsembed", Imports: []string{module + "dispatcher"}}, 1},
		{pkg{ImportPath: module + "internal/devstack", Imports: []string{module + "trigger"}}, 1},
		{pkg{ImportPath: module + "internal/wait", Imports: []string{module + "devstack"}}, 1},
		{pkg{ImportPath: module + "internal/servicetest", Imports: []string{module + "schemas"}}, 1},
		// A test of internal/ may run services (the end-to-end tests).
		{pkg{ImportPath: module + "internal/e2e", XTestImports: []string{module + "dispatcher", module + "devstack"}}, 0},
		{pkg{ImportPath: module + "devstack", Imports: []string{module + "conformance"}}, 1},
	} {
		if got := violations(tc.p); len(got) != tc.want {
			t.Errorf("violations(%s importing %v %v) = %q, want %d", tc.p.ImportPath, tc.p.Imports, tc.p.XTestImports, got, tc.want)
		}
	}
}

// TestSchemasLinksOnlyTheStandardLibrary holds package schemas, the
// vocabulary every service, the SDK and the API's client link, to the
// standard library: reading and checking documents (the JSON Schema
// validator, YAML, the cron parser) is schemas/taskdef's.
func TestSchemasLinksOnlyTheStandardLibrary(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "../../schemas").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, d := range strings.Fields(string(out)) {
		if d != module+"schemas" {
			t.Errorf("schemas links %s: it may import only the standard library (move what needs it to schemas/taskdef)", d)
		}
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
