package schemas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// RedactedMarker replaces a redacted value in what the API answers.
const RedactedMarker = "[redacted]"

// Limits of a task's redact list.
const (
	// MaxRedactPaths is the most paths a task's redact may list.
	MaxRedactPaths = 64
	// MaxRedactPathLen is the longest a redact path may be, in bytes.
	MaxRedactPathLen = 256
)

// RedactPath is a parsed redact path: the names of the members (or the
// indexes of the elements) leading to the value to hide; "*" stands for
// every member of an object or element of an array.
type RedactPath []string

// ParseRedactPath parses one entry of a task's redact: a JSON pointer
// ("/card/number", with ~1 for '/' and ~0 for '~' in a name) or a dotted
// path ("card.number"); a segment "*" matches every member or element
// ("items.*.iban"). The empty path, an empty segment and the root ("/")
// are refused: redact the fields, not the whole payload.
func ParseRedactPath(s string) (RedactPath, error) {
	switch {
	case s == "" || s == "/":
		return nil, fmt.Errorf("%q names the whole value; name a field, such as \"card.number\" or \"/card/number\"", s)
	case len(s) > MaxRedactPathLen:
		return nil, fmt.Errorf("is %d bytes long; keep it to %d", len(s), MaxRedactPathLen)
	case strings.ContainsRune(s, 0):
		return nil, fmt.Errorf("%q holds a NUL byte; remove it", s)
	}
	var segs []string
	if strings.HasPrefix(s, "/") {
		for _, seg := range strings.Split(s[1:], "/") {
			if strings.Contains(strings.ReplaceAll(strings.ReplaceAll(seg, "~0", ""), "~1", ""), "~") {
				return nil, fmt.Errorf("%q: a JSON pointer escapes '~' as ~0 and '/' as ~1 only", s)
			}
			segs = append(segs, strings.ReplaceAll(strings.ReplaceAll(seg, "~1", "/"), "~0", "~"))
		}
	} else {
		segs = strings.Split(s, ".")
	}
	for _, seg := range segs {
		if seg == "" {
			return nil, fmt.Errorf("%q has an empty segment; write \"a.b\" or \"/a/b\"", s)
		}
	}
	return segs, nil
}

// RedactPaths parses paths, skipping those that do not parse (a stored
// definition's were checked when it was applied).
func RedactPaths(paths []string) []RedactPath {
	var out []RedactPath
	for _, p := range paths {
		if rp, err := ParseRedactPath(p); err == nil {
			out = append(out, rp)
		}
	}
	return out
}

// Redact returns data with the value at each path replaced by the string
// [RedactedMarker]. A path that leads nowhere in data changes nothing; data
// that holds none of them (or is not JSON, or is an encoded envelope) is
// returned as it is, byte for byte. An object that held a redacted value is
// re-encoded, its members sorted by name.
func Redact(data json.RawMessage, paths []RedactPath) json.RawMessage {
	if len(paths) == 0 || len(bytes.TrimSpace(data)) == 0 {
		return data
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return data
	}
	changed := false
	for _, p := range paths {
		var ok bool
		if doc, ok = redactAt(doc, p); ok {
			changed = true
		}
	}
	if !changed {
		return data
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return json.RawMessage(strconv.Quote(RedactedMarker))
	}
	return out
}

// redactAt replaces what p leads to in v and reports whether it did.
func redactAt(v any, p RedactPath) (any, bool) {
	if len(p) == 0 {
		return RedactedMarker, true
	}
	seg, rest := p[0], p[1:]
	changed := false
	switch x := v.(type) {
	case map[string]any:
		for k, child := range x {
			if seg != "*" && k != seg {
				continue
			}
			if nv, ok := redactAt(child, rest); ok {
				x[k], changed = nv, true
			}
		}
	case []any:
		for i, child := range x {
			if seg != "*" && seg != strconv.Itoa(i) {
				continue
			}
			if nv, ok := redactAt(child, rest); ok {
				x[i], changed = nv, true
			}
		}
	}
	return v, changed
}
