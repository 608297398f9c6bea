// Package schemas is AX's vocabulary: the task definition and its JSON
// Schema, every message that crosses NATS with its plain codecs, the
// instance state machine's vocabulary, the operator models (alerts,
// health, summaries, backfills, bulk queries, dead letters) and the
// problem type ([Problem], [ValidationError]).
// It imports nothing but the standard library, so every service, the SDK
// and the API's client can speak it without linking what they never call.
//
// Reading and checking a document against those contracts — task
// definitions in JSON or YAML, trigger events, payload schemas, cron
// schedules — is package [github.com/ax-scheduler/ax/schemas/taskdef],
// which holds the JSON Schema validator, the YAML reader and the cron
// parser. The schema files stay embedded here ([JSONSchemas]).
package schemas
