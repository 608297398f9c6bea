// Package taskdef reads and checks what package schemas defines: task
// definitions in JSON or YAML ([ParseTask]), trigger events and batches of
// them ([ParseTriggerEvent], [SplitTriggerBatch]), payloads against a
// task's payload schema ([ValidatePayload]) and cron schedules
// ([ParseCronSchedule], [NextFireTimes]). Each rejection is a
// *[schemas.ValidationError] whose problems say, in plain words, what is
// wrong and how to fix it: the translator here turns the JSON Schema
// validator's errors into them.
//
// It holds what the vocabulary should not make every program link: the
// JSON Schema validator, the YAML reader and the cron parser. The
// services that accept documents (the API, the dispatcher, the trigger,
// the store) import it; the SDK and the API's client do not.
package taskdef
