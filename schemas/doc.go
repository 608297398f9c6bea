// Package schemas holds AX's contracts: the task definition and its JSON
// Schema, every message that crosses NATS, and the instance state machine's
// vocabulary. It imports nothing of AX, so every service can speak it.
package schemas
