// Package schemas holds AX's contracts: the task definition and its JSON
// Schema, every message that crosses NATS, the instance state machine's
// vocabulary, and the SQL migrations of the store. It imports nothing of AX,
// so every service can speak it.
package schemas
