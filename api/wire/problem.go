package wire

import (
	"net/http"

	"github.com/ax-scheduler/ax/schemas"
)

// ProblemContentType is the media type of the API's error answers: an RFC
// 9457 problem document.
const ProblemContentType = "application/problem+json"

// ProblemTypePrefix prefixes an error's code to make its problem type URI.
const ProblemTypePrefix = "urn:ax:problem:"

// Problem is the body of every error answer of the API: an RFC 9457
// problem document (type, title, status, detail) whose extension members
// keep what the API answered before it — error, the [Error] object — and
// lift its code, field and problems to the top, so that a client of either
// form reads it.
type Problem struct {
	// Type is ProblemTypePrefix + the error's code.
	Type string `json:"type"`
	// Title is the HTTP status's text.
	Title  string `json:"title"`
	Status int    `json:"status"`
	// Detail is the error's message.
	Detail   string            `json:"detail"`
	Code     string            `json:"code"`
	Field    string            `json:"field,omitempty"`
	Problems []schemas.Problem `json:"problems,omitempty"`
	// Error is the error as the API answered it before problem documents.
	Error *Error `json:"error"`
}

// NewProblem returns the problem document of e.
func NewProblem(e *Error) Problem {
	return Problem{Type: ProblemTypePrefix + e.Code, Title: http.StatusText(e.Status), Status: e.Status,
		Detail: e.Message, Code: e.Code, Field: e.Field, Problems: e.Problems, Error: e}
}
