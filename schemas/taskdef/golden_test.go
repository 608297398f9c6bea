package taskdef

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestGoldenMatchesSchema validates each golden file against its JSON Schema.
func TestGoldenMatchesSchema(t *testing.T) {
	t.Parallel()
	s, err := compiledSchemas()
	if err != nil {
		t.Fatal(err)
	}
	c := newCompiler()
	for url, doc := range s.docs {
		if err := c.AddResource(url, doc); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range golden {
		sch, err := c.Compile(schemaBaseURL + g.schema)
		if err != nil {
			t.Fatalf("compile %s: %v", g.schema, err)
		}
		data, err := os.ReadFile(goldenPath(g.name))
		if err != nil {
			t.Fatal(err)
		}
		doc, problem := decodeJSON(data)
		if problem != nil {
			t.Fatalf("%s: %s", goldenPath(g.name), problem)
		}
		if err := sch.Validate(doc); err != nil {
			t.Errorf("%s does not satisfy %s: %q", goldenPath(g.name), g.schema, s.problems(err, doc, ""))
		}
	}
}

// golden lists the golden files of package schemas (testdata/golden) with
// the schema each satisfies, as schemas' own golden list does;
// TestGoldenListed keeps the two in step.
var golden = []struct{ name, schema string }{
	{"trigger_event", "trigger.schema.json#"},
	{"retry_of", "trigger.schema.json#/$defs/retry_of"},
	{"dispatch", "json/dispatch.schema.json#"},
	{"report", "json/report.schema.json#"},
	{"report_progress", "json/report.schema.json#"},
	{"report_batch", "json/report_batch.schema.json#"},
	{"worker", "json/worker.schema.json#"},
	{"lease", "json/lease.schema.json#"},
	{"control", "json/control.schema.json#"},
	{"fence_question", "json/fence_question.schema.json#"},
	{"fence_answer", "json/fence_answer.schema.json#"},
	{"task_entry", "json/task_entry.schema.json#"},
	{"log_line", "json/log_line.schema.json#"},
	{"audit_record", "json/audit.schema.json#"},
	{"transition", "json/transition.schema.json#"},
	{"instance", "json/instance.schema.json#"},
}

func goldenPath(name string) string { return filepath.Join("..", "testdata", "golden", name+".json") }

// TestGoldenListed checks that every golden file of package schemas is
// listed in golden, so that each is validated against its schema.
func TestGoldenListed(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(goldenPath("*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files under ../testdata/golden: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		if !slices.ContainsFunc(golden, func(g struct{ name, schema string }) bool { return g.name == name }) {
			t.Errorf("%s is not in taskdef's golden list: add it with its schema", f)
		}
	}
}
