package taskdef

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/ax-scheduler/ax/schemas"
)

// The $id of the embedded schemas; a schema under json/ has the id
// schemaBaseURL + "json/<name>.schema.json".
const (
	schemaBaseURL    = "https://github.com/ax-scheduler/ax/schemas/"
	taskSchemaURL    = schemaBaseURL + "task.schema.json"
	triggerSchemaURL = schemaBaseURL + "trigger.schema.json"
	// payloadSchemaURL is where a task's payload_schema is compiled. The
	// .invalid domain never resolves, and no loader is installed anyway.
	payloadSchemaURL = "https://ax.invalid/payload.schema.json"
)

// ourSchemas holds the embedded schemas compiled, by file name
// ("task.schema.json", "json/dispatch.schema.json"), and their documents for
// the x-message annotations.
type ourSchemas struct {
	translator
	task, trigger *jsonschema.Schema
	byName        map[string]*jsonschema.Schema
}

// compiledSchemas compiles the embedded schemas once, on first use.
var compiledSchemas = sync.OnceValues(func() (*ourSchemas, error) {
	names := []string{"task.schema.json", "trigger.schema.json", "trigger-batch.schema.json"}
	more, err := schemas.JSONSchemas.ReadDir("json")
	if err != nil {
		return nil, fmt.Errorf("compile schemas: %w", err)
	}
	for _, e := range more {
		names = append(names, "json/"+e.Name())
	}
	c := newCompiler()
	s := &ourSchemas{translator: translator{docs: make(map[string]any)}, byName: make(map[string]*jsonschema.Schema)}
	for _, name := range names {
		data, err := schemas.JSONSchemas.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("compile schemas: %w", err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("compile schemas: read %s: %w", name, err)
		}
		s.docs[schemaBaseURL+name] = doc
		if err := c.AddResource(schemaBaseURL+name, doc); err != nil {
			return nil, fmt.Errorf("compile schemas: add %s: %w", name, err)
		}
	}
	for _, name := range names {
		if s.byName[name], err = c.Compile(schemaBaseURL + name); err != nil {
			return nil, fmt.Errorf("compile schemas: %s: %w", name, err)
		}
	}
	s.task, s.trigger = s.byName["task.schema.json"], s.byName["trigger.schema.json"]
	return s, nil
})

// newCompiler returns a compiler for draft 2020-12 that asserts formats and
// loads nothing from outside: every $ref must resolve to an added resource.
func newCompiler() *jsonschema.Compiler {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(jsonschema.SchemeURLLoader{})
	return c
}
