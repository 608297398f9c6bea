package schemas

import (
	"strings"
)

// Problem is one thing wrong with a document.
type Problem struct {
	// Field is the dotted path of the offending value from the document's
	// root ("execution.retry.max_attempts", "triggers[0].type"); empty for
	// the root itself.
	Field string `json:"field"`
	// Message says what is wrong and how to fix it, in plain words.
	Message string `json:"message"`
}

// String returns "field: message", or the message alone for the root.
func (p Problem) String() string {
	if p.Field == "" {
		return p.Message
	}
	return p.Field + ": " + p.Message
}

// ValidationError is the error of [github.com/ax-scheduler/ax/schemas/taskdef.ParseTask], [github.com/ax-scheduler/ax/schemas/taskdef.ParseTriggerEvent] and
// [github.com/ax-scheduler/ax/schemas/taskdef.ValidatePayload] when the input is rejected: every problem found, sorted
// by field. A caller that shows errors to users (the API, the CLI) can list
// Problems one by one.
type ValidationError struct {
	// What names the rejected document ("task definition", "trigger event",
	// "payload"); empty reads as "input".
	What string
	// Problems lists what is wrong, at least one.
	Problems []Problem
}

// Error joins the problems: "invalid task definition: execution.handler: is
// required; priority: must be one of urgent, normal, low".
func (e *ValidationError) Error() string {
	what := e.What
	if what == "" {
		what = "input"
	}
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.String()
	}
	return "invalid " + what + ": " + strings.Join(parts, "; ")
}
