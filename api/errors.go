package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	// A failed write means the client went away: nothing left to tell it.
	_ = enc.Encode(v)
}

// writeError answers e as an RFC 9457 problem document (see
// [wire.Problem]).
func writeError(w http.ResponseWriter, e *wire.Error) {
	w.Header().Set("Content-Type", wire.ProblemContentType)
	w.WriteHeader(e.Status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(wire.NewProblem(e))
}

// handlerFunc is an API handler. It writes a successful answer itself and
// returns the error of any other: a *wire.Error, which is the caller's
// fault and says so, or anything else, which answers 500. [Service.handle]
// writes it.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// handle adapts h to net/http: the one place an error becomes an answer.
func (s *Service) handle(h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.writeErr(w, r, err)
		}
	}
}

// writeErr answers err: a *wire.Error as it is; any other error 500,
// logged with the operation that failed (see [internal]) and the request.
func (s *Service) writeErr(w http.ResponseWriter, r *http.Request, err error) {
	ie, isInternal := errors.AsType[*internalError](err)
	if e, ok := errors.AsType[*wire.Error](err); ok && !isInternal {
		writeError(w, e)
		return
	}
	op := "handle the request"
	if isInternal {
		op, err = ie.op, ie.err
	}
	s.opts.Logger.Error().Err(err).Str("method", r.Method).Str("path", r.URL.Path).Msg(op)
	writeError(w, &wire.Error{Status: http.StatusInternalServerError, Code: "internal",
		Message: op + " failed on the server; the API's log has the details"})
}

// internalError is a failure that is not the caller's doing: it answers
// 500, and the API logs err under op.
type internalError struct {
	op  string
	err error
}

func (e *internalError) Error() string { return e.op + ": " + e.err.Error() }
func (e *internalError) Unwrap() error { return e.err }

// internal returns err as a failure of op, e.g. "list tasks", that is not
// the caller's doing.
func internal(op string, err error) error { return &internalError{op: op, err: err} }

func badRequest(code, field, format string, args ...any) *wire.Error {
	return &wire.Error{Status: http.StatusBadRequest, Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

// validationError answers 400 for a document that broke the rules of its
// schema: the message lists every problem, and so does Problems.
func validationError(code string, ve *schemas.ValidationError) *wire.Error {
	e := &wire.Error{Status: http.StatusBadRequest, Code: code, Message: ve.Error(), Problems: ve.Problems}
	if len(ve.Problems) == 1 {
		e.Field = ve.Problems[0].Field
	}
	return e
}

// mediaType is what readBody learned of a body's Content-Type.
type mediaType int

const (
	mediaUnset mediaType = iota
	mediaJSON
	mediaYAML
)

// readBody reads a request body of at most Options.MaxBodyBytes whose
// Content-Type is JSON, or YAML when yamlOK, or unset.
func (s *Service) readBody(w http.ResponseWriter, r *http.Request, yamlOK bool) ([]byte, mediaType, *wire.Error) {
	accepted := "application/json"
	if yamlOK {
		accepted = "application/json or application/yaml"
	}
	mt := mediaUnset
	if ct := r.Header.Get("Content-Type"); ct != "" {
		t, _, err := mime.ParseMediaType(ct)
		switch {
		case err != nil:
			return nil, 0, &wire.Error{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type",
				Message: fmt.Sprintf("cannot parse Content-Type %q: %v; send Content-Type: %s", ct, err, accepted)}
		case t == "application/json" || strings.HasSuffix(t, "+json"):
			mt = mediaJSON
		case yamlOK && (t == "application/yaml" || t == "text/yaml" || t == "application/x-yaml"):
			mt = mediaYAML
		default:
			return nil, 0, &wire.Error{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type",
				Message: fmt.Sprintf("Content-Type %s is not accepted here; send Content-Type: %s", t, accepted)}
		}
	}
	tooLarge := &wire.Error{Status: http.StatusRequestEntityTooLarge, Code: "body_too_large",
		Message: fmt.Sprintf("the request body is larger than the limit of %d bytes; send a smaller body", s.opts.MaxBodyBytes)}
	if r.ContentLength > s.opts.MaxBodyBytes {
		return nil, 0, tooLarge
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, 0, tooLarge
		}
		return nil, 0, badRequest("unreadable_body", "", "cannot read the request body: %v", err)
	}
	// YAML refuses a repeated key; so does JSON here, since JSON parsers
	// disagree on which of the two wins.
	if mt != mediaYAML {
		if path, ok := schemas.DuplicateKey(data); ok {
			return nil, 0, badRequest("duplicate_key", path, "the body holds the key %s twice in one object; keep one", path)
		}
	}
	return data, mt, nil
}

// jsonSyntaxError explains where data stops being JSON.
func jsonSyntaxError(data []byte, err error) *wire.Error {
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		line, col := lineCol(data, se.Offset)
		return badRequest("malformed_json", "", "the body is not valid JSON: line %d, column %d: %v", line, col, se)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return badRequest("malformed_json", "", "the body is not valid JSON: it ends too early; check for a missing closing bracket or quote")
	}
	return badRequest("malformed_json", "", "the body is not valid JSON: %v", err)
}

// lineCol gives the 1-based line and column of the byte a *json.SyntaxError
// stopped at: its Offset counts the bytes read, the bad one included.
func lineCol(data []byte, offset int64) (line, col int) {
	pos := min(max(offset-1, 0), int64(len(data)))
	line, col = 1, 1
	for _, c := range data[:pos] {
		if c == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}

// decodeErrorField names the field a json.Decoder error is about: the
// field of a value of the wrong type, or an unknown field; "" for others.
func decodeErrorField(err error) string {
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		return te.Field
	}
	if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return strings.Trim(field, `"`)
	}
	return ""
}

// decodeOptionalBody decodes an optional JSON object body into v, refusing
// unknown fields. An error names the field and shows example, the shape the
// body should have.
func decodeOptionalBody(data []byte, v any, example string) *wire.Error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		return unstorableText(data)
	}
	if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		field = strings.Trim(field, `"`)
		return badRequest("unknown_field", field, "unknown field %q; the body must be empty or an object like %s", field, example)
	}
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		return badRequest("invalid_request", te.Field, "the body must be empty or an object like %s", example)
	}
	return jsonSyntaxError(data, err)
}
