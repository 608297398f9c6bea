package schemas

import (
	"embed"
)

// JSONSchemas holds AX's JSON Schemas (draft 2020-12): task.schema.json (the
// task definition), trigger.schema.json (the trigger event),
// trigger-batch.schema.json (a batch of firings in one message) and, under
// "json/", one schema for each of the other wire messages (and the instance
// the API shows). Keywords named "x-message" are AX annotations: the message,
// in plain words, that a [Problem] carries when the schema's "pattern" (or
// the schema a "not" holds) rejects a value.
//
//go:embed task.schema.json trigger.schema.json trigger-batch.schema.json json/*.schema.json
var JSONSchemas embed.FS
